"""A release over two privacy units with noise off, on DuckDB and on Spark (``make_backend``
runs this module once per backend): the flow-truncated levels the engine reads equal the LP
truncation (HiGHS) of the (customer, supplier) pairs computed in Python from the raw rows."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.execute.exact import compile_plan
from dpsql.noise.r2t import levels
from dpsql.noise.r2t_lp import lp_truncated
from dpsql.rewrite.plan import plan_execution
from dpsql.units.execute import read_truncated
from tests.db_files import writing
from tests.units import tiny_multi

DB: tiny_multi.Database = {
    "customer": [(c, 1 + c % 2) for c in range(1, 7)],
    "supplier": [(s, 1 + s % 2) for s in range(1, 4)],
    "orders": [(o, 1 + o % 6 if o < 12 else 9) for o in range(1, 15)],  # customer 9: no row
    # orders 15..17: orphans (no customer); supplier 8: no row; supplier 1 sells the most
    "items": [(1 + i % 17, 1 if i % 3 else 2 + i % 2 * 6, i % 6 - 2) for i in range(40)]
    + [(16, None, 3), (17, None, 4)],  # of neither unit: an orphan order, no supplier
    "stock": [(1, 2)],
    "nations": [(1,), (2,)],
}


@pytest.fixture(scope="module")
def backend(tmp_path_factory, make_backend):
    path = tmp_path_factory.mktemp("multi_backends") / "two.duckdb"
    with writing(path) as con:
        tiny_multi.load(DB, con)
    b = make_backend(path, tiny_multi.metadata())
    yield b
    b.close()


def test_flow_levels_equal_the_lp_of_the_pairs(backend):
    md = tiny_multi.metadata()
    analysis = analyze_request("SELECT COUNT(*), SUM(qty) FROM items", md)
    plan = compile_plan(backend, plan_execution(analysis, md))
    got = read_truncated(backend, plan, [], analysis.unit)
    owner = dict(DB["orders"])
    counts: dict[tuple[object, int], int] = {}
    sums: dict[tuple[object, int], float] = {}
    for order, supp, qty in DB["items"]:
        key = (owner.get(order), supp)  # None: an orphan, no customer
        counts[key] = counts.get(key, 0) + 1
        sums[key] = sums.get(key, 0.0) + max(min(qty, 4), 0)

    def lp(values: dict[tuple[object, int], float], tau: float) -> float:
        """The LP over the pairs of some unit; the rows of neither unit in full."""
        return lp_truncated([(v, (("c", c), ("s", s))) for (c, s), v in values.items()
                             if (c, s) != (None, None)], tau) + values[None, None]

    assert list(got[0]) == [round(lp(counts, t)) for t in levels(8)]
    value_taus = levels(32)  # a SUM part's levels: value units up to GS * 4
    assert np.allclose(got[1], [lp(sums, t) for t in value_taus], atol=1e-6)
    assert len(got) == 3  # COUNT, and the SUM's two parts


def test_plain_counts_read_flat_rows_with_the_same_levels(backend):
    """COUNT(*) alone: the rows' unit ids ungrouped (dpsql.units.multi_rewrite's flat form,
    behind dpsql's row guard), the same levels as the pairs' LP."""
    md = tiny_multi.metadata()
    analysis = analyze_request("SELECT COUNT(*) FROM items WHERE qty > -2", md)
    plan = compile_plan(backend, plan_execution(analysis, md))
    assert "GROUP BY" not in plan.plan.exact_sql.upper()
    (got,) = read_truncated(backend, plan, [], analysis.unit)
    owner = dict(DB["orders"])
    counts: dict[tuple[object, int], int] = {}
    for order, supp, qty in DB["items"]:
        if qty > -2:
            key = (owner.get(order), supp)
            counts[key] = counts.get(key, 0) + 1
    want = [round(lp_truncated([(v, (("c", c), ("s", s))) for (c, s), v in counts.items()], t))
            for t in levels(8)]
    assert list(got) == want


def test_the_guards_fallback_gives_the_flat_levels(backend, monkeypatch):
    """Past the row guard the pairs are grouped in the database (dpsql.units.multi_rewrite's
    fallback: a SUM part's floored capacities per level, summed per pair), on every backend:
    exactly the levels of the same rows read flat, fractional values included."""
    from dpsql.units import multi_execute, multi_rewrite

    # few levels (64^j: Spark compiles each fallback query in about a second), the top one
    # 2^30 value units: a step of 1
    md = tiny_multi.metadata(max_contribution=2**27, level_base=64.0)
    analysis = analyze_request("SELECT COUNT(*), SUM(qty * 0.37) FROM items", md)
    plan = compile_plan(backend, plan_execution(analysis, md))
    assert plan.fallback is not None
    flat = read_truncated(backend, plan, [], analysis.unit)  # Spark: the fallback already
    if backend.columnar:
        monkeypatch.setattr(multi_execute, "FLAT_ROWS", 0)
        grouped = read_truncated(backend, plan, [], analysis.unit)
        assert [g.tolist() for g in grouped] == [f.tolist() for f in flat]
    # the top level floors 0.37-multiples at steps of 1: below the exact sum, not above
    exact = sum(max(min(q, 4), 0) * 0.37 for _, _, q in DB["items"])
    assert 0 < flat[1][-1] < exact
    assert multi_rewrite.FLAT_ROWS > 0


def test_a_backend_without_columnar_fetch_runs_the_fallback_at_once(backend, monkeypatch):
    """Spark collects rows as Python tuples (``columnar`` False): a flat plan reads the
    grouped fallback directly, one query; DuckDB reads the flat rows. The same levels."""
    md = tiny_multi.metadata()
    analysis = analyze_request("SELECT COUNT(*), SUM(qty) FROM items", md)
    plan = compile_plan(backend, plan_execution(analysis, md))
    ran = tiny_multi.recorded(backend, monkeypatch)
    got = read_truncated(backend, plan, [], analysis.unit)
    assert plan.fallback is not None
    assert ran == (list(plan.fallback) if not backend.columnar else [plan.exact])
    assert backend.columnar == (backend.dialect == "duckdb")
    monkeypatch.setattr(type(backend), "columnar", not backend.columnar)
    again = read_truncated(backend, plan, [], analysis.unit)
    assert [g.tolist() for g in again] == [g.tolist() for g in got]
