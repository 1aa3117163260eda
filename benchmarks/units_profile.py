"""Where the time of a slow R2T exact query goes (``units`` part; issue #17's goal: dpsql's exact
query <= 2x the same SQL on raw DuckDB).

dpsql's exact query (dpsql.units.rewrite) is ``SELECT <20 truncated sums per part> FROM
(SELECT <unit> AS __u, <parts> FROM <the query's join> [LEFT JOIN <path lookups>] GROUP BY
<unit>) AS __c``. Timed side by side with the raw SQL and the exact query (interleaved,
medians, as :func:`benchmarks.common.interleaved`), three cuts of it:

* ``lookup_ms`` (only when the unit is looked up along a path, ``__up<i>`` joins): the join with
  the lookups, counted without grouping: what the lookup joins add to the raw join;
* ``grouped_ms``: the per-unit contributions (lookups and GROUP BY unit), summed once: minus
  ``raw_ms`` (or ``lookup_ms``), what grouping by the unit costs;
* ``exact_ms - grouped_ms``: what the truncation levels cost (20 ``SUM(LEAST(..))`` per part over
  one row per unit).

The cuts are built from the exact query's SQL tree, so they measure what dpsql runs; they read
the same private rows as the exact query and are timed only (their values are not kept).
"""

from __future__ import annotations

from typing import Any

import sqlglot
from sqlglot import exp

from .common import Handles, interleaved, median_ms


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


def breakdown(raw_sql: str, exact_sql: str, handles: Handles, runs: int) -> dict[str, Any]:
    """Medians (ms) of the raw SQL, the cuts and the exact query, interleaved."""
    con = handles.raw
    variants = {"raw": raw_sql, **cuts(exact_sql), "exact": exact_sql}
    times = interleaved({k: (lambda s=s: con.execute(s).fetchall()) for k, s in variants.items()},
                        runs)
    out = {f"{k}_ms": median_ms(v) for k, v in times.items()}
    base = out.get("lookup_ms", out["raw_ms"])
    out["lookup_adds_ms"] = out["lookup_ms"] - out["raw_ms"] if "lookup_ms" in out else 0.0
    out["grouping_adds_ms"] = out["grouped_ms"] - base
    out["levels_add_ms"] = out["exact_ms"] - out["grouped_ms"]
    return out
