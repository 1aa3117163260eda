"""Smoothed releases never refuse on their data-dependent scale (dpsql/noise/plan.py
``_smoothed_plan``, dpsql/engine.py ``Engine._noise``; issue #12 class 6).

Before, a join whose smoothed scale exceeded the sampler's 2^32 was refused before any charge,
so an analyst could binary-search a max frequency for free by varying epsilon. Now the exact
value is clamped into a public window and the noise uses min(S, window width).
"""

from __future__ import annotations

import pytest

from dpsql.metadata import loads_metadata
from dpsql.noise.plan import count_window
from tests.neighbours import outcome, write_database

SCHEMA = ["CREATE TABLE a (k INTEGER)", "CREATE TABLE b (k INTEGER)"]
ROWS = {"a": [(i % 3,) for i in range(300)], "b": [(i % 3,) for i in range(300)]}
JOIN = "SELECT COUNT(*) FROM a JOIN b ON a.k = b.k"  # 30,000 pairs


def _metadata(mf: int):
    return loads_metadata(f"""
tables:
  a:
    columns:
      k: {{max_freq: {mf}, type: INTEGER}}
  b:
    columns:
      k: {{max_freq: {mf}, type: INTEGER}}
""")


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    return write_database(tmp_path_factory.mktemp("window") / "w.duckdb", SCHEMA, ROWS)


@pytest.mark.parametrize("epsilon", [1e-3, 0.1])
def test_the_outcome_does_not_depend_on_a_max_frequency(database, epsilon):
    # Both max frequencies are true upper bounds; at epsilon 1e-3 the second one's scale
    # (~2e10) used to be refused while the first one's was released.
    outcomes = {mf: outcome(database, _metadata(mf), JOIN, epsilon=epsilon, delta=1e-6)
                for mf in (10, 10**4, 10**7, 10**12)}
    assert {o[0] for o in outcomes.values()} == {"ok"}, outcomes


def test_the_window_clamps_the_exact_count(database):
    # with zero noise the release is the exact count clamped into [0, W]
    epsilon = 2.0**-17  # W = floor(2^-17 * 2^31) = 16384 < 30,000
    assert count_window(epsilon) == 16384.0
    kind, rows = outcome(database, _metadata(100), JOIN, epsilon=epsilon, delta=1e-6)
    assert (kind, rows) == ("ok", [(16384,)])
    kind, rows = outcome(database, _metadata(100), JOIN, epsilon=1.0, delta=1e-6)
    assert (kind, rows) == ("ok", [(30000,)])  # far inside the window: untouched


# ------------------------------------------------- refusals near the largest double (row level)

BIG_SCHEMA = ["CREATE TABLE a (k INTEGER, v DOUBLE)", "CREATE TABLE b (k INTEGER)",
              "CREATE TABLE p (k INTEGER, w DOUBLE)"]
BIG_ROWS = {"a": [(i % 3, 1.0) for i in range(30)], "b": [(i % 3,) for i in range(30)],
            "p": [(i % 3, 2.0) for i in range(30)]}
BIG_QUERIES = ["SELECT SUM(a.v) FROM a", "SELECT k, SUM(v) FROM a GROUP BY k",
               "SELECT SUM(a.v) FROM a JOIN b ON a.k = b.k",
               "SELECT b.k, SUM(a.v) FROM a JOIN b ON a.k = b.k GROUP BY b.k",
               "SELECT SUM(a.v) FROM a JOIN p ON a.k = p.k",
               "SELECT COUNT(*) FROM a JOIN b ON a.k = b.k JOIN b AS c ON b.k = c.k"]


def _big_metadata(mf: int, upper: float):
    return loads_metadata(f"""
tables:
  a:
    columns:
      k: {{max_freq: {mf}, type: INTEGER, releasable: true, domain: {{values: [0, 1, 2]}}}}
      v: {{type: DOUBLE, bounds: [0, {upper:.1e}]}}
  b:
    columns:
      k: {{max_freq: {mf}, type: INTEGER, releasable: true, domain: {{values: [0, 1, 2]}}}}
  p:
    public: true
    columns:
      k: {{max_freq: 10, type: INTEGER}}
      w: {{type: DOUBLE, bounds: [0, {upper:.1e}]}}
""")


@pytest.fixture(scope="module")
def big_database(tmp_path_factory):
    return write_database(tmp_path_factory.mktemp("big") / "b.duckdb", BIG_SCHEMA, BIG_ROWS)


@pytest.mark.parametrize("upper", [1e3, 1e307, 1.7e308])
@pytest.mark.parametrize("sql", BIG_QUERIES)
def test_a_refusal_near_the_largest_double_reads_no_private_max_frequency(
        big_database, sql, upper):
    # A private max frequency enters ES(k) as mf + k, never as a constant, so the constant
    # bounds that pass the largest double (a refusal naming the bounds: kexpr.Const) are
    # built from the bounds, epsilon and public tables alone; an infinite smoothed S is
    # clamped by the public window. The same outcome for every declarable max frequency
    # (up to 2^63, metadata's cap), and at 1.7e308 the widths themselves overflow.
    outcomes = {mf: outcome(big_database, _big_metadata(mf, upper), sql, epsilon=1.0,
                            delta=1e-6) for mf in (1, 10**12, 2**63)}
    kinds = {(o[0], None if o[0] == "ok" else o[1]) for o in outcomes.values()}
    assert len(kinds) == 1, outcomes
    if upper == 1.7e308 and "GROUP BY" in sql:  # 2 x width per bin: past the largest double
        assert next(iter(kinds))[0] in ("NotSupportedError", "ScaleOutOfRange"), outcomes
