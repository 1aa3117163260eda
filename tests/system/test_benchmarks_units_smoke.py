"""``python -m benchmarks --smoke --parts units`` (issue #17's benchmark) runs end to end and
writes well-formed results; the unit metadata it derives is schemas/tpch-units.yaml's.

Errors and timings are reported by the benchmark, never asserted here (at SF 0.01 R2T's
shifts dwarf the answers): only the shape and sanity of the numbers, and the facts that do not
depend on the noise (which queries are public, refused, replayed).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
R2T_NAMES = ["Q3", "Q5", "Q7", "Q8", "Q10", "Q11", "Q12", "Q18", "Q20", "Q21"]

pytestmark = pytest.mark.xdist_group("benchmarks-units-smoke")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    from benchmarks.__main__ import main

    tmp = tmp_path_factory.mktemp("units")
    out = tmp / "results"
    assert main(["--smoke", "--quiet", "--parts", "units", "--out", str(out),
                 "--data-dir", str(tmp / "data")]) == 0
    return {"json": json.loads((out / "units-sf0.01.json").read_text()),
            "md": (out / "units-sf0.01.md").read_text(),
            "summary": (out / "summary.md").read_text(),
            "db": tmp / "data" / "sf0.01-builtin" / "tpch.duckdb"}


def _ratio(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x >= 0


def test_r2t_queries(results):
    data = results["json"]
    rows = data["r2t"]
    # every query under customer, then R2T's own units where they are not customer alone
    # (two unit tables: dpsql.units.multi)
    assert [(q["name"], q["unit"]) for q in rows] == (
        [(n, "customer") for n in R2T_NAMES]
        + [("Q5", "customer and supplier"), ("Q7", "customer and supplier"),
           ("Q8", "customer and supplier"), ("Q11", "supplier"), ("Q12", "orders"),
           ("Q20", "supplier"), ("Q21", "orders and supplier")])
    for q in rows:
        assert q["status"] == "ok", q.get("rejection")
        assert q["draws"] == 5 and q["exact_executions"] == 1  # replayed, not re-run
        assert q["r2t_figure"] > 0 and q["exact_answer"] > 0
        assert _ratio(q["median_rel_error"]) and _ratio(q["r2t_statistic_rel_error"])
        assert 0 <= q["interval_95_covered"] <= 1
        assert q["same_private_relations"] == (tuple(q["unit"].split(" and "))
                                               == tuple(q["r2t_private"]))
        if q["mechanism"] == "exact":
            assert q["time"] is None and q["median_rel_error"] < 1e-9  # float sums
            continue
        assert q["mechanism"] == "r2t"
        # R2T's value never exceeds the truth by more than its shift allows: biased low
        assert q["median_signed_rel_error"] <= 0.5
        t = q["time"]
        assert t["raw_ms"] > 0 and t["exact_ms"] > 0 and t["runs"] == 2
        assert t["ratio"] == pytest.approx(t["exact_ms"] / t["raw_ms"])
        if " and " in q["unit"]:  # two units: the per-pair query, then the flow in Python
            assert t["pairs_query_ms"] > 0 and "breakdown" not in t
        elif not t["met"]:  # over 2x: where the time goes
            b = t["breakdown"]
            assert b["exact_ms"] > 0 and b["grouped_ms"] > 0 and b["raw_ms"] > 0
            assert ("lookup_ms" in b) == ("__up0" in q["exact_sql"])
    by = {(q["name"], q["unit"]): q for q in rows}
    # Q11 reads supplier, partsupp and nation only: public when customer is the unit
    assert by[("Q11", "customer")]["mechanism"] == "exact"
    assert by[("Q11", "supplier")]["mechanism"] == "r2t"
    s = data["summary"]["r2t"]
    assert s["epsilon"] == 0.8 and s["beta"] == 0.1 and s["max_contribution"] == 837339
    # R2T's code's grid: 8 levels of 5.5^i, floored
    assert s["level_base"] == 5.5 and s["levels"] == [5, 30, 166, 915, 5032, 27680, 152243,
                                                      837339]
    assert data["environment"]["epsilon"] == 0.8 and data["environment"]["smoke"] is True


def test_flex_queries(results):
    data = results["json"]
    flex = {q["name"]: q for q in data["flex"]}
    assert list(flex) == ["Q1", "Q4", "Q13", "Q16", "Q21"]
    # Q13 aggregates in a derived table grouped by the unit (dpsql.units.derived): one row per
    # customer, its count's groups selected from the data (delta spent)
    q13 = flex["Q13"]
    assert q13["status"] == "ok", q13.get("rejection")
    assert q13["mechanism"] == "discrete_laplace+partition_selection"
    assert q13["spent"] == [0.1, 1e-8] and q13["exact_executions"] == 1
    # Q16 reads partsupp, part and supplier: public under customer as the unit
    assert flex["Q16"]["mechanism"] == "exact" and flex["Q16"]["median_rel_error"] == 0
    for name in ("Q1", "Q4"):
        q = flex[name]
        assert q["mechanism"] == "discrete_laplace"  # two-stage: pure, no delta
        assert q["spent"] == [0.1, 0.0]
        assert q["exact_executions"] in (1, 2)  # the exact query (and its domain query), once
        assert q["draws"] == 5 and q["cells"] >= 1
        assert _ratio(q["median_rel_error"]) and q["sweep"] == []  # no sweep in smoke
    assert (flex["Q1"]["max_groups"], flex["Q1"]["max_rows_per_group"]) == (4, 64)
    assert data["summary"]["flex"]["rejected"] == []


def test_profile_cuts(results):
    """The cuts of an exact query: the per-unit contributions, and the lookup joins alone
    where the unit is looked up along a path (Q20 reads lineitem without orders)."""
    from benchmarks.units_profile import cuts

    by = {(q["name"], q["unit"]): q["exact_sql"] for q in results["json"]["r2t"]}
    q20, q3 = cuts(by[("Q20", "customer")]), cuts(by[("Q3", "customer")])
    assert set(q20) == {"grouped", "lookup"} and set(q3) == {"grouped"}
    assert "GROUP BY" in q20["grouped"] and "GROUP BY" not in q20["lookup"]
    assert "LEFT JOIN orders AS __up0" in q20["lookup"] and "LEAST" not in q20["grouped"]


def test_two_unit_profile(results):
    """A two-unit query's breakdown (benchmarks.units_profile): the pair query as executed
    (Q8's plain count: flat rows), the levels, the whole read, and how each level was solved."""
    from benchmarks.common import Handles
    from benchmarks.tpch_data import Dataset
    from benchmarks.units_profile import two_unit_breakdown
    from benchmarks.units_queries import R2T, units_metadata, with_r2t_grid
    from dpsql.session import Session

    handles = Handles.open(Dataset(0.01, str(results["db"]), str(ROOT / "schemas/tpch.yaml"),
                                   "given", 0.0, 0.0, {}))
    try:
        q8 = next(q for q in R2T if q.name == "Q8")
        md = with_r2t_grid(units_metadata(handles.metadata, ("customer", "supplier")))
        prepared = Session(md, handles.backend).prepare(q8.sql)
        b = two_unit_breakdown(q8.sql, prepared, handles, 1)
    finally:
        handles.close()
    assert b["flat"] and b["rows"] > 0 and len(b["how"]) == 8
    assert all(_ratio(b[f"{k}_ms"]) for k in ("raw", "query", "levels", "exact"))


def test_markdown(results):
    md = results["md"]
    assert md.startswith("# Privacy units (issue #17): TPC-H SF 0.01")
    assert "#### R2T's TPC-H queries" in md and "#### FLEX's TPC-H queries" in md
    assert "| Q11 | customer (R2T: supplier) |" in md and "public: exact, free" in md
    assert "| Q12 | orders (as R2T) |" in md
    assert "| Q5 | customer and supplier (as R2T) |" in md
    assert "| Q13 | 1, 1 | " in md and "| Q13 | 1, 1 | rejected" not in md
    assert "### Privacy units (issue #17)" in results["summary"]


def test_unit_metadata_is_the_schema_file():
    """From the row-level SF1 metadata, customer as the unit gives schemas/tpch-units.yaml;
    the other units make exactly their path's tables private."""
    from benchmarks.units_queries import unit_metadata
    from dpsql.metadata import load_metadata

    base = load_metadata(ROOT / "schemas" / "tpch.yaml")
    assert unit_metadata(base, "customer") == load_metadata(ROOT / "schemas" / "tpch-units.yaml")
    for table, private in (("orders", {"orders", "lineitem"}),
                           ("supplier", {"supplier", "partsupp", "lineitem"})):
        md = unit_metadata(base, table, max_groups=3)
        assert md.privacy_unit is not None and md.privacy_unit.table == table
        assert md.privacy_unit.max_groups == 3 and md.privacy_unit.max_contribution == 2**20
        assert {n for n, t in md.tables.items() if not t.public} == private
    # R2T's two private relations: several unit tables, each private table's path to each
    from benchmarks.units_queries import units_metadata
    from dpsql.metadata import UnitPath

    two = units_metadata(base, ("customer", "supplier"))
    assert [u.table for u in (two.privacy_unit, *two.extra_units)] == ["customer", "supplier"]
    assert two.tables["lineitem"].unit_paths == {
        "customer": UnitPath("l_orderkey", "orders", "o_orderkey"),
        "supplier": UnitPath("l_suppkey")}
    q21 = units_metadata(base, ("orders", "supplier"))
    assert q21.tables["customer"].public and not q21.tables["partsupp"].public


def test_level_grid_simulation(results):
    """benchmarks.units_levels: dpsql's grid is dpsql.noise.r2t's levels; R2T's code has 8
    levels of 5.5^j; the simulation runs on the smoke database."""
    from benchmarks.units_levels import SINGLE, declared_grid, grid, r2t_code_grid, run
    from dpsql.noise.r2t import levels

    taus, scales, shifts = grid(2.0, 1.0)
    assert list(taus) == list(levels(2**20)) and scales[0] == pytest.approx(20 * 2 / 0.8)
    assert shifts[0] == pytest.approx(scales[0] * math.log(21 / (2 * 0.1)))  # (L + 1) / 2 beta
    code_taus, _, _ = r2t_code_grid()
    assert len(code_taus) == 8 and code_taus[-1] < 1e6
    # the grid the units part declares: R2T's code's, floored to whole rows (times b)
    declared, _, _ = declared_grid(50.0)
    assert list(declared) == [50.0 * math.floor(t) for t in code_taus]
    data = run(results["db"], draws=20)
    assert [q["name"] for q in data["queries"]] == list(SINGLE)
    for q in data["queries"]:
        for key in ("dpsql", "base 4", "base 5.5", "dpsql_r2t_grid", "dpsql_rows_grid",
                    "increments", "r2t_code"):
            assert _ratio(q[key]), (q["name"], key)
