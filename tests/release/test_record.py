"""dpsql/release/record.py: the release record says what was spent, and never a data-dependent
scale."""

import dataclasses
from pathlib import Path

import pytest

from dpsql.analysis.elastic import analyze
from dpsql.budget import Budget
from dpsql.metadata import load_metadata, loads_metadata
from dpsql.noise import mechanisms
from dpsql.noise.plan import plan_noise
from dpsql.release.record import CONFIDENCE, ColumnSource, release_record
from tests.typed_metadata import typed

ROOT = Path(__file__).resolve().parents[2]
FLEX = typed(load_metadata(ROOT / "schemas" / "flex_test.yaml"))
JOIN = ("SELECT COUNT(*) AS n FROM orders JOIN recommendations "
        "ON orders.customer_id = recommendations.customer_id")
BOTH = loads_metadata("""
tables:
  p:
    public: true
    columns:
      x: {type: INTEGER, bounds: [0, 10]}
  t:
    columns:
      v: {type: INTEGER, bounds: [-2, 5]}
""")


def _record(sql, metadata, budget, n_bins=1):
    analysis = analyze(sql, metadata)
    plans = plan_noise(analysis, budget)
    columns = tuple(ColumnSource(c.name, c.measurements, c.bare_aggregate)
                    for c in analysis.columns)
    return release_record(columns, plans, "fp", n_bins), plans


def test_a_pure_count_has_its_exact_half_width_over_every_bin():
    record, (plan,) = _record("SELECT COUNT(*) AS n FROM orders", FLEX, Budget(0.5), n_bins=7)
    (column,) = record.columns
    assert (record.epsilon, record.delta, record.mechanism) == (0.5, 0.0, "discrete_laplace")
    want = mechanisms.laplace_half_width(plan.scale, CONFIDENCE, cells=7) + 0.5
    assert column.half_width_95 == want and column.epsilon == 0.5
    assert column.noise_scale == plan.scale == 2.0  # public: ES / epsilon
    assert not record.free


def test_a_smoothed_release_shows_no_half_width():
    record, _ = _record(JOIN, FLEX, Budget(0.1, 1e-8))
    assert record.mechanism == "smoothed_discrete_laplace"
    assert record.columns[0].half_width_95 is None  # it would reveal the smoothed scale
    assert record.columns[0].noise_scale is None  # so would this
    # ... and the record says so in words
    assert record.columns[0].accuracy_note == "accuracy not publishable: data-dependent noise"
    assert (record.epsilon, record.delta) == (0.1, 1e-8)


def test_only_a_smoothed_column_carries_the_not_publishable_note():
    pure, _ = _record("SELECT COUNT(*) AS n, AVG(v) AS m FROM t", BOTH, Budget(0.5))
    assert [c.accuracy_note for c in pure.columns] == [None, None]
    public, _ = _record("SELECT COUNT(*) AS n FROM p", BOTH, None)
    assert public.columns[0].accuracy_note is None


def test_the_footer_says_accuracy_is_not_publishable_for_a_smoothed_column():
    from dpsql.cli.output import release_line

    record, _ = _record(JOIN, FLEX, Budget(0.1, 1e-8))
    line = release_line(record)
    assert "n: accuracy not publishable (data-dependent noise)" in line
    assert "±" not in line and "scale" not in line  # the smoothed scale is the owner's


def test_the_footer_shows_a_pure_columns_public_scale():
    from dpsql.cli.output import release_line

    record, (plan,) = _record("SELECT COUNT(*) AS n FROM orders", FLEX, Budget(0.5))
    assert f"noise scale: n discrete_laplace {plan.scale:.4g}" in release_line(record)


def test_a_public_release_is_exact_and_free():
    record, _ = _record("SELECT COUNT(*) AS n, SUM(x) AS s FROM p", BOTH, None)
    assert record.free and record.mechanism == "exact"
    assert (record.epsilon, record.delta) == (0.0, 0.0)
    assert [c.half_width_95 for c in record.columns] == [0.0, 0.0]
    # the footer says so, rather than "n ±0, s ±0" (QA round 6)
    from dpsql.cli.output import release_line

    assert release_line(record) == "public tables only: exact, spent nothing"


def test_the_footer_names_a_partition_selections_public_threshold():
    from dpsql.cli.output import release_line

    record, _ = _record("SELECT COUNT(*) AS n FROM orders", FLEX, Budget(0.5))
    selected = dataclasses.replace(record, selection_threshold=13)
    assert release_line(selected).endswith("groups kept past threshold 13 (partition selection)")
    assert "threshold" not in release_line(record)
    # and its public noise scale when it draws one (the acceptance audit of #17: a key-only
    # SELECT DISTINCT showed the threshold alone)
    scaled = dataclasses.replace(selected, selection_scale=2.5)
    assert release_line(scaled).endswith(
        "groups kept past threshold 13 (partition selection, Laplace scale 2.5)")


def test_columns_split_the_budget_and_it_sums_back():
    record, _ = _record("SELECT COUNT(*) AS n, SUM(v) AS s FROM t", BOTH, Budget(0.3))
    assert [c.epsilon for c in record.columns] == pytest.approx([0.15, 0.15])
    assert record.epsilon == pytest.approx(0.3)


def test_a_variance_column_states_its_post_processing():
    record, plans = _record("SELECT VAR_POP(t.v) AS var, AVG(t.v) AS a, COUNT(*) AS n FROM t",
                            BOTH, Budget(1.0, 0.0))
    var, avg, n = record.columns
    assert var.post_processing is not None and "S2/n - (S1/n)^2" in var.post_processing
    assert avg.post_processing is None and n.post_processing is None
    # the variance's three measurements (COUNT(v) shared with AVG) and AVG's SUM, COUNT(*):
    # the even split gives each 1/5
    assert len(plans) == 5 and var.epsilon == pytest.approx(3 / 5)
    assert var.half_width_95 is None  # not one measurement


def test_combined_record_sums_the_parts_and_prefixes_their_columns():
    from dpsql.release.record import combined_record

    a = analyze("SELECT COUNT(*) AS n FROM t", BOTH)
    b = analyze("SELECT AVG(v) AS m FROM t", BOTH)
    pa = plan_noise(a, Budget(0.25))
    pb = plan_noise(b, Budget(0.5))
    record = combined_record([
        ("a", (ColumnSource("n", (0,), True),), pa, 1),
        ("", (ColumnSource("m", (0, 1), False),), pb, 1),
    ], "f")
    assert [c.name for c in record.columns] == ["a.n", "m"]
    assert record.epsilon == pytest.approx(0.75) and record.delta == 0.0
    assert [c.epsilon for c in record.columns] == pytest.approx([0.25, 0.5])
    assert record.columns[0].half_width_95 is not None  # one pure bare COUNT
    assert record.columns[1].half_width_95 is None  # AVG: two measurements
    assert record.mechanism == "discrete_laplace+snapped_laplace"


def test_a_filtered_count_has_the_half_width_of_a_count():
    plain, _ = _record("SELECT COUNT(*) AS n FROM t", BOTH, Budget(1.0, 0.0))
    filtered, _ = _record("SELECT COUNT(*) FILTER (WHERE t.v > 0) AS n FROM t", BOTH,
                          Budget(1.0, 0.0))
    assert filtered.columns[0].half_width_95 == plain.columns[0].half_width_95 is not None


def test_a_gaussian_column_records_calibration_sigma_and_accuracy():
    from dpsql.noise.gaussian import gaussian_half_width

    sql = "SELECT COUNT(*) AS n, SUM(v) AS s, AVG(v) AS a, COUNT(*) * 2 AS d FROM t"
    record, plans = _record(sql, BOTH, Budget(1.0, 1e-6, "gaussian", "classical"), n_bins=3)
    count, total = plans[0], plans[1]
    n, s, a, d = record.columns
    assert record.mechanism == "discrete_gaussian+snapped_gaussian"
    assert (n.mechanism, n.calibration, n.sigma) == ("discrete_gaussian", "classical",
                                                     count.sigma)
    assert n.accuracy_alpha == gaussian_half_width(count.sigma) and n.accuracy_beta == 0.05
    assert n.half_width_95 == gaussian_half_width(count.sigma, CONFIDENCE, cells=3)
    # a sum: sigma in value units, plus half a grid step of snapping
    assert total.granularity is not None and s.sigma == total.sigma * total.granularity
    assert s.accuracy_alpha == gaussian_half_width(s.sigma) + total.granularity / 2
    # AVG and arithmetic: the calibration, but no sigma or accuracy that is not the column's
    for col in (a, d):
        assert col.calibration == "classical"
        assert col.sigma is col.accuracy_alpha is col.half_width_95 is None
    assert (record.epsilon, record.delta) == (1.0, 1e-6)
