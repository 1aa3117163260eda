"""dpsql.privacy_audit.units and ``audit(..., relation='unit')`` on real DuckDB files: a unit's
neighbour is the database without the unit and its FK cascade (checked against the reference
relation :func:`tests.units.tiny.remove_unit` on random tiny shops, orphans included); the
audit passes the engine's unit mechanisms (R2T COUNT, two-stage GROUP BY) and catches a
sampler with a quarter of the scale.

Confidence 1 - 1e-6 as in test_audit.py. The shop: customers 2..21 with one order and one item
each, customer 1 with three orders and six items; with GS = 2 R2T's one level tau = 2 moves by
2 when customer 1 goes (the full sensitivity): a quarter-scale sampler has a true loss of
4 epsilon; at RUNS = 400 releases per database its lower bound measured at least 2.27 (R2T
COUNT, mean 2.32) and 2.14 (two-stage GROUP BY, loss 4 too: 3 at scale 3/4; mean 2.31) over 8
audits each (sd <= 0.12), far above epsilon: a miss needs a fall of ~10 standard deviations.
The engine's false failure rate is the confidence's at any number of releases.
"""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import numpy as np
import pytest

from dpsql.errors import ProgrammingError
from dpsql.metadata import Metadata
from dpsql.noise.mechanisms import discrete_laplace
from dpsql.privacy_audit import audit
from dpsql.privacy_audit.neighbours import copy_database
from dpsql.privacy_audit.units import UNIT, make_unit_neighbour, unit_candidates, unit_rows_sql
from tests.units import tiny

CONFIDENCE = 1 - 1e-6
RUNS = 400  # releases per database: the power computation above


class QuarterScale:
    """An under-noised mechanism: discrete Laplace at a quarter of the scale asked for."""

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return discrete_laplace(scale / 4, size)


def read(path: Path) -> tiny.Database:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall()) for t in tiny.COLUMNS}
    finally:
        con.close()


def shop() -> tiny.Database:
    customers = [(c, 1 + c % 2) for c in range(1, 22)]
    orders = [(c, c, 1) for c in range(2, 22)] + [(100, 1, 1), (101, 1, 1), (102, 1, 1)]
    items = [(c, 1, 1) for c in range(2, 22)] + [(o, 1, 1) for o in (100, 100, 101, 101, 102,
                                                                     102)]
    return {"customer": customers, "orders": orders, "items": items, "regions": [(1,), (2,)]}


def shop_metadata() -> Metadata:
    return tiny.metadata(max_contribution=2, max_groups=1, max_rows_per_group=3)


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> Path:
    return tiny.write_file(tmp_path_factory.mktemp("audit_units") / "shop.duckdb", shop())


def test_each_row_gets_the_unit_its_path_reaches():
    """Brute force over 80 random tiny shops (orphan orders and items among them, in memory):
    the rows unit_rows_sql gives unit u are exactly those the reference relation removes."""
    rng = random.Random(18)
    md = tiny.metadata()
    for _ in range(80):
        db = tiny.random_database(rng)
        con = tiny.load(db)
        for unit in tiny.units(db):
            want = tiny.remove_unit(db, unit)
            for table in ("customer", "orders", "items"):
                names = ", ".join(tiny.COLUMNS[table])
                kept = con.execute(f"SELECT {names} FROM ({unit_rows_sql(md, table)}) "
                                   f"WHERE {UNIT} IS DISTINCT FROM ?", [unit]).fetchall()
                assert sorted(kept) == sorted(want[table]), (db, unit, table)


def test_a_unit_neighbour_is_the_cascade_removal(tmp_path):
    """On files: a few random shops, every unit (the copy, the deletion, the counts)."""
    rng = random.Random(17)
    md = tiny.metadata()
    for i in range(3):
        db = tiny.random_database(rng)
        base = tiny.write_file(tmp_path / f"b{i}.duckdb", db)
        for unit in tiny.units(db):
            path, removed = make_unit_neighbour(base, tmp_path / f"n{i}-{unit}.duckdb", md, unit)
            want = tiny.remove_unit(db, unit)
            assert read(path) == {t: sorted(r) for t, r in want.items()}, (db, unit)
            gone = {t: len(db[t]) - len(want[t]) for t in db if len(db[t]) != len(want[t])}
            assert dict(removed) == gone
            path.unlink()
        assert read(base) == {t: sorted(r) for t, r in db.items()}  # base untouched


def test_candidates_are_the_heaviest_then_spread_units(database):
    md = shop_metadata()
    assert unit_candidates(database, md, 1) == [1]  # customer 1: 1 + 3 + 6 linked rows
    four = unit_candidates(database, md, 4)
    assert four[:2] == [1, 2] and len(four) == 4 and len(set(four)) == 4
    assert len(unit_candidates(database, md, 100)) == 21


@pytest.mark.parametrize(("sql", "change"), [
    ("SELECT COUNT(*) AS n FROM items", 2.0),  # R2T, GS = 2: customer 1's six items count 2
    # two-stage: customer 1's three orders, clamped at C = 3, leave region 2
    ("SELECT c.region, COUNT(*) AS n FROM customer c JOIN orders o ON o.o_cust = c.c_id "
     "GROUP BY c.region", 3.0),
])
@pytest.mark.parametrize("sampler", [None, QuarterScale()], ids=["engine", "under-noised"])
def test_unit_neighbours_pass_the_engine_and_catch_an_under_noised_one(database, sql, change,
                                                                        sampler):
    report = audit(database, shop_metadata(), sql, epsilon=1.0, neighbours=2, runs=RUNS,
                   confidence=CONFIDENCE, relation="unit", sampler=sampler)
    assert report.neighbour.relation == "unit" and report.neighbour.unit == 1
    assert report.neighbour.removed == (("customer", 1), ("items", 6), ("orders", 3))
    assert "unit 1 removed with every row linked to it" in report.neighbour.describe()
    assert report.exact_change == change and report.neighbours_tried == 2
    assert report.verdict == ("pass" if sampler is None else "fail"), report.bounds


def test_unit_neighbours_need_a_privacy_unit(database):
    md = shop_metadata()
    plain = Metadata({n: t for n, t in md.tables.items() if n == "regions"})
    with pytest.raises(ProgrammingError, match="needs a privacy unit"):
        audit(database, plain, "SELECT COUNT(*) FROM regions", epsilon=1.0, relation="unit")


def test_the_unit_neighbour_is_a_copy(database, tmp_path):
    base = copy_database(database, tmp_path / "base.duckdb")
    path, _ = make_unit_neighbour(base, tmp_path / "n.duckdb", shop_metadata(), 1)
    assert len(read(path)["customer"]) == 20 and len(read(base)["customer"]) == 21
