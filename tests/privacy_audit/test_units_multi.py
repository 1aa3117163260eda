"""``audit(..., relation='unit')`` under two unit tables (dpsql.units.multi): the candidates are
each unit table's units, each neighbour that unit's cascade (on the unit's view of the
metadata); the audit catches a quarter-scale sampler on the engine's flow-truncated R2T.

The shop: customers 1..20 with one order and one item each, all sold by supplier 1, and 40
more customers with one item each from a supplier of their own; GS = 2 (one level, tau = 2).
The flow caps supplier 1 at 2, so removing it moves Q(2) from 42 to 40 (tau, the full
sensitivity) while removing a customer moves it by at most 1; the audit keeps supplier 1.
Powers as in tests/privacy_audit/test_units.py (the same change of 2 at GS 2).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsql.privacy_audit import audit
from tests.db_files import writing
from tests.privacy_audit.test_units import CONFIDENCE, RUNS, QuarterScale
from tests.units import tiny_multi


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> Path:
    # customers 21..60 buy one item each from their own supplier 2..41: Q(2) = 2 + 40
    db: tiny_multi.Database = {
        "customer": [(c, 1) for c in range(1, 61)], "supplier": [(s, 1) for s in range(1, 42)],
        "orders": [(c, c) for c in range(1, 61)],
        "items": [(c, 1 if c <= 20 else c - 19, 1) for c in range(1, 61)],
        "stock": [(2, 1)], "nations": [(1,), (2,)]}
    path = tmp_path_factory.mktemp("audit_two_units") / "two.duckdb"
    with writing(path) as con:
        tiny_multi.load(db, con)
    return path


def test_two_unit_neighbours_find_the_supplier_and_catch_an_under_noised_release(database):
    """(The engine's own pass at this power costs ~2 CPU-s more per audit and proves little
    beyond the brute force, tests/bruteforce/test_r2t_multi.py: left to `dpsql audit`.)"""
    report = audit(database, tiny_multi.metadata(max_contribution=2),
                   "SELECT COUNT(*) AS n FROM items", epsilon=1.0, neighbours=2, runs=RUNS,
                   confidence=CONFIDENCE, relation="unit", sampler=QuarterScale())
    assert report.neighbour.table == "supplier" and report.neighbour.unit == 1
    assert report.neighbour.removed == (("items", 20), ("supplier", 1))
    assert report.exact_change == 2.0 and report.neighbours_tried == 4  # 2 per unit table
    assert report.verdict == "fail", report.bounds
