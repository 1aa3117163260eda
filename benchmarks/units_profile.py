"""Where the time of a slow R2T exact query goes (``units`` part; issue #17's goal: dpsql's exact
query <= 2x the same SQL on raw DuckDB).

dpsql's exact query (dpsql.units.rewrite) is ``SELECT <levels> FROM (SELECT <unit> AS __u,
<parts> FROM <the query's join> [LEFT JOIN <path lookups>] GROUP BY <unit>) AS __c`` -- for
counts, ``SELECT __c.__p0 AS __h0, COUNT(__c.__u) AS __n, COUNT(*) - COUNT(__c.__u) AS __z
FROM (..) AS __c GROUP BY __c.__p0``, the histogram of the units' contributions (``__z``: the
rows of no unit's, added in full), whose levels dpsql.units.execute evaluates in Python.
Timed side by side with the raw SQL and the exact query (interleaved, medians of wall and CPU
time, as :func:`benchmarks.common.interleaved`), cuts of it:

* ``lookup`` (only when the unit is looked up along a path, ``__up<i>`` joins): the join with
  the lookups, counted without grouping: what the lookup joins add to the raw join;
* ``grouped``: the per-unit contributions (lookups and GROUP BY unit), summed once: minus
  ``raw`` (or ``lookup``), what grouping by the unit costs;
* ``exact - grouped``: what the truncation levels cost (the histogram, or each unit's row
  read and its levels summed in Python).

The raw SQL runs on the plain connection; the cuts and the exact query on dpsql's backend, with
the settings dpsql runs under (dpsql.backends.duckdb: ``perfect_ht_threshold``), so the cuts add
up to what the units part times. The cuts are built from the exact query's SQL tree, so they
measure what dpsql runs; they read the same private rows as the exact query and are timed only
(their values are not kept).

Over TWO units (``NAME:unit+unit``, e.g. ``Q7:customer+supplier``; dpsql.units.multi) the
exact side is one query and the flow truncation in Python, so :func:`two_unit_breakdown` cuts
it as the run does: ``query`` (the pair query as executed -- for plain counts the flat rows
behind dpsql's row guard, dpsql.units.multi_rewrite -- fetched as numpy), ``levels`` (coding
the unit ids and every level's flow, on one fetched result), and ``exact`` (both, as
:func:`dpsql.units.multi_execute.read_pair_truncated` runs them), with how each level was
solved (dpsql.noise.r2t_certify's certificates, or the exact flow).

``python -m benchmarks.units_profile [--db ..] [--runs N] [Q10:customer ..]`` prints the
breakdown of R2T's queries (default: the issue #17 names over the goal, one unit and two) on a
TPC-H database, without the rest of the part (no releases).
"""

from __future__ import annotations

import argparse
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from .common import Handles, interleaved, median_ms

ROOT = Path(__file__).resolve().parents[1]
#: the queries over the goal in benchmarks/results/units-sf1.md (issue #17)
SLOW = ("Q10:customer", "Q12:orders", "Q20:customer", "Q7:customer+supplier",
        "Q8:customer+supplier", "Q21:orders+supplier")


def cuts(exact_sql: str) -> dict[str, str]:
    """The cuts of an R2T exact query (module docstring): ``grouped`` and, with lookups,
    ``lookup``."""
    tree = sqlglot.parse_one(exact_sql, read="duckdb")
    sub = next(s for s in tree.find_all(exp.Subquery) if s.alias == "__c")
    inner = sub.this
    assert isinstance(inner, exp.Select)
    parts = [e.alias for e in inner.expressions if isinstance(e, exp.Alias)
             and e.alias.startswith("__p")]
    sums = ", ".join(f"SUM(__c.{p})" for p in parts)
    out = {"grouped": f"SELECT {sums} FROM ({inner.sql('duckdb')}) AS __c"}
    if any(isinstance(j.this, exp.Table) and j.this.alias.startswith("__up")
           for j in inner.args.get("joins") or []):
        unit = next(e.this for e in inner.expressions
                    if isinstance(e, exp.Alias) and e.alias == "__u")
        flat = inner.copy()
        flat.set("group", None)
        flat.set("expressions", [exp.Count(this=unit.copy())])
        out["lookup"] = flat.sql("duckdb")
    return out


def _cpu_seconds() -> float:
    """This process's CPU time, DuckDB's worker threads included (they run in-process)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def cpu_counted(cpu: dict[str, list[float]], name: str,
                fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` that also appends the CPU seconds of each call to ``cpu[name]``."""
    cpu.setdefault(name, [])

    def run() -> Any:
        start = _cpu_seconds()
        out = fn()
        cpu[name].append(_cpu_seconds() - start)
        return out
    return run


def breakdown(raw_sql: str, exact_sql: str, handles: Handles, runs: int,
              exact: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Medians (ms, wall and ``<cut>_cpu_ms``) of the raw SQL, the cuts and the exact query
    (``exact``: how dpsql reads it, default the SQL alone), interleaved."""
    backend = handles.backend
    cpu: dict[str, list[float]] = {}
    fns = {"raw": cpu_counted(cpu, "raw", lambda: handles.raw.execute(raw_sql).fetchall())}
    for name, sql in cuts(exact_sql).items():
        fns[name] = cpu_counted(cpu, name, lambda s=sql: backend.execute(s, {}))
    fns["exact"] = cpu_counted(cpu, "exact",
                               exact or (lambda: backend.execute(exact_sql, {})))
    times = interleaved(fns, runs)
    out: dict[str, Any] = {f"{k}_ms": median_ms(v) for k, v in times.items()}
    out.update({f"{k}_cpu_ms": median_ms(v[1:]) for k, v in cpu.items()})  # no warm-up
    base = out.get("lookup_ms", out["raw_ms"])
    out["lookup_adds_ms"] = out["lookup_ms"] - out["raw_ms"] if "lookup_ms" in out else 0.0
    out["grouping_adds_ms"] = out["grouped_ms"] - base
    out["levels_add_ms"] = out["exact_ms"] - out["grouped_ms"]
    return out


def two_unit_breakdown(raw_sql: str, prepared: Any, handles: Handles, runs: int
                       ) -> dict[str, Any]:
    """Medians (ms, wall and ``<cut>_cpu_ms``) of the raw SQL and a two-unit release's cuts
    (module docstring), interleaved; ``rows`` fetched, ``flat``, and ``how``: per level
    (descending tau), how the flow truncation solved it."""
    from dpsql.units import multi_execute

    backend = handles.backend
    compiled = prepared.compiled
    release = prepared.analysis.unit
    params = compiled.plan.exact_bindings([])
    flat = compiled.fallback is not None
    sql = compiled.exact
    columns, _ = backend.execute_flat_columns(sql, params)
    trace: list[tuple[float, str]] = []
    multi_execute.pair_levels(columns, release, trace)
    cpu: dict[str, list[float]] = {}
    fns = {"raw": cpu_counted(cpu, "raw", lambda: handles.raw.execute(raw_sql).fetchall()),
           "query": cpu_counted(cpu, "query", lambda: backend.execute_flat_columns(sql, params)),
           "levels": cpu_counted(cpu, "levels",
                                 lambda: multi_execute.pair_levels(columns, release)),
           "exact": cpu_counted(cpu, "exact", lambda: multi_execute.read_pair_truncated(
               backend, compiled, [], release))}
    times = interleaved(fns, runs)
    out: dict[str, Any] = {f"{k}_ms": median_ms(v) for k, v in times.items()}
    out.update({f"{k}_cpu_ms": median_ms(v[1:]) for k, v in cpu.items()})  # no warm-up
    out.update(rows=int(columns[0].shape[0]), flat=flat,
               how=[f"{tau:g}: {how}" for tau, how in trace])
    return out


def _default_db() -> Path:
    """The SF1 database the benchmarks generated: tpchgen's (what the units part measures)
    when present, else the built-in generator's."""
    data = ROOT / "benchmarks" / "data"
    for label in ("sf1-tpchgen", "sf1-builtin"):
        if (data / label / "tpch.duckdb").exists():
            return data / label / "tpch.duckdb"
    return data / "sf1-tpchgen" / "tpch.duckdb"


def main(argv: list[str] | None = None) -> None:
    from dpsql.metadata import load_metadata
    from dpsql.session import Session

    from .tpch_data import Dataset
    from .units import UNITS_YAML, _exact_runner
    from .units_queries import R2T, unit_metadata, units_metadata, with_r2t_grid

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("queries", nargs="*", default=list(SLOW),
                   help="NAME:UNIT, e.g. Q10:customer or Q7:customer+supplier")
    p.add_argument("--db", default=str(_default_db()),
                   help="a TPC-H DuckDB file (default: the SF1 one `python -m benchmarks` made, "
                   "tpchgen's first)")
    p.add_argument("--metadata", default=str(ROOT / "schemas/tpch.yaml"))
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args(argv)
    handles = Handles.open(Dataset(1.0, args.db, args.metadata, "given", 0.0, 0.0, {}))
    by_name = {q.name: q for q in R2T}
    try:
        for item in args.queries:
            name, unit = item.split(":")
            q = by_name[name]
            if "+" in unit:
                md = with_r2t_grid(units_metadata(handles.metadata, tuple(unit.split("+"))))
                prepared = Session(md, handles.backend).prepare(q.sql)
                b = two_unit_breakdown(q.sql, prepared, handles, args.runs)
                order = ["raw", "query", "levels", "exact"]
                print(f"{item} ({b['rows']:,} {'flat rows' if b['flat'] else 'pairs'}): "
                      + ", ".join(f"{k} {b[k + '_ms']:.1f}/{b[k + '_cpu_ms']:.1f}"
                                  for k in order)
                      + f" ms (wall/CPU); exact/raw {b['exact_ms'] / b['raw_ms']:.2f} wall, "
                      f"{b['exact_cpu_ms'] / b['raw_cpu_ms']:.2f} CPU; levels: "
                      + "; ".join(b["how"]), flush=True)
                continue
            md = load_metadata(UNITS_YAML) if unit == "customer" else unit_metadata(
                handles.metadata, unit)
            prepared = Session(with_r2t_grid(md), handles.backend).prepare(q.sql)
            b = breakdown(q.sql, prepared.compiled.exact, handles, args.runs,
                          _exact_runner(handles.backend, prepared))
            order = ["raw", "lookup", "grouped", "exact"]
            cells = [f"{k} {b[k + '_ms']:.1f}/{b[k + '_cpu_ms']:.1f}" for k in order
                     if k + "_ms" in b]
            print(f"{item}: " + ", ".join(cells) + " ms (wall/CPU); exact/raw "
                  f"{b['exact_ms'] / b['raw_ms']:.2f} wall, "
                  f"{b['exact_cpu_ms'] / b['raw_cpu_ms']:.2f} CPU", flush=True)
    finally:
        handles.close()


if __name__ == "__main__":
    main()
