"""dpsql/sample_aggregate/explain.py through ``dpsql.analysis.explain``: the owner's report of
a SAMPLE_AGGREGATE query, exact values."""

from __future__ import annotations

import math

import pytest

from dpsql.analysis.explain import explain, explain_text
from dpsql.errors import UnsupportedConstructError
from tests.sample_aggregate.world import metadata

SQL = ("SELECT SAMPLE_AGGREGATE(MEDIAN(x), 0, 100) AS med, "
       "SAMPLE_AGGREGATE(COUNT(*), 0, 10) AS n FROM t")


def test_report_values():
    report = explain(SQL, metadata(), epsilon=2.0, delta=1e-6)
    assert (report["table"], report["blocks"], report["by"]) == ("t", 4, "cid")
    assert (report["epsilon"], report["delta"]) == (2.0, 0.0)
    med, n = report["columns"]
    assert (med["name"], med["lower"], med["upper"], med["epsilon"]) == ("med", 0.0, 100.0, 1.0)
    assert med["sensitivity_of_sum"] == 200.0 and med["sensitivity_of_mean"] == 50.0
    assert med["scale_of_mean"] == 50.0  # 2 (hi - lo) / (m epsilon_j)
    assert med["half_width_95"] > 50.0 * math.log(20)
    assert n["sensitivity_of_mean"] == 5.0
    assert "GROUP BY" in report["exact_sql"] and "HASH(HASH(" in report["exact_sql"]


def test_text_report_and_refusals():
    text = explain_text(SQL, metadata(), epsilon=2.0, delta=0.0)
    assert "4 blocks by a keyed hash of cid" in text
    assert "med: bounds [0, 100], epsilon 1" in text
    with pytest.raises(UnsupportedConstructError, match="has not enabled"):
        explain("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 1) FROM q", metadata(), epsilon=1.0,
                delta=0.0)
