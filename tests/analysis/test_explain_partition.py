"""``dpsql explain`` of a GROUP BY over a partition-selected key: tau, the split and the
retention curve at n = 1, 5, 10, 20, 50."""

from __future__ import annotations

import math

import pytest

from dpsql.analysis.explain import explain, explain_text
from dpsql.errors import NotSupportedError
from dpsql.metadata import loads_metadata
from dpsql.noise.partition import keep_probability, threshold

MD = loads_metadata("""
tables:
  pums:
    columns:
      age: {releasable: true, partition_selection: true, type: BIGINT}
      income: {bounds: [0, 500000], type: DOUBLE}
""")


def test_report_shows_tau_split_and_curve():
    report = explain("SELECT age, COUNT(*) FROM pums GROUP BY age", MD, epsilon=1.0, delta=1e-5)
    sel = report["partition_selection"]
    # the COUNT(*) is the selection's noisy count: it has all of epsilon, charged once
    assert (sel["epsilon"], sel["delta"], sel["stability"]) == (1.0, 1e-5, 1)
    assert sel["shares_count_measurement"] == 0
    assert sel["noise_scale"] == 2.0
    assert sel["threshold"] == threshold(1, 1.0, 1e-5) == 25
    assert list(sel["keep_probability"]) == [1, 5, 10, 20, 50]
    for n, p in sel["keep_probability"].items():
        assert p == keep_probability(n, 25, 2.0)
    assert report["epsilon"] == pytest.approx(1.0) and report["delta"] == 1e-5
    assert math.fsum(m["epsilon"] for m in report["measurements"]) == 1.0


def test_report_without_a_count_gives_the_selection_one_more_share():
    report = explain("SELECT age, SUM(income) FROM pums GROUP BY age", MD, epsilon=1.0,
                     delta=1e-5)
    sel = report["partition_selection"]
    assert sel["shares_count_measurement"] is None and sel["epsilon"] == 0.5
    assert sel["threshold"] == threshold(1, 0.5, 1e-5) == 48
    assert report["epsilon"] == pytest.approx(1.0)


def test_text_shows_the_selection():
    text = explain_text("SELECT age, AVG(income) FROM pums GROUP BY age", MD, epsilon=1.0,
                        delta=1e-5)
    assert "partition selection" in text and "threshold tau = " in text
    assert "n=50:" in text and "epsilon 0.333333" in text


def test_delta_zero_refused_in_explain_too():
    with pytest.raises(NotSupportedError, match="delta > 0"):
        explain("SELECT age, COUNT(*) FROM pums GROUP BY age", MD, epsilon=1.0, delta=0.0)
