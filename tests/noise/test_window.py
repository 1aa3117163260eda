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
