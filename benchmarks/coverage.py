"""Part ``coverage``: how much of the SQL analysts write dpsql answers (issue #15).

Two query sets, each run as written (no rewriting by hand):

* **TPC-H's 22 queries** verbatim (:mod:`benchmarks.tpch22`: the specification's text with its
  validation parameters) on the TPC-H database of the run's scale and its metadata
  (``schemas/tpch.yaml`` at SF1). Goal: at least 15 accepted. Q2, Q15 and Q20 answer with rows
  of private tables: they must be refused, and are flagged ``correctly refused`` when they are
  (``WRONGLY ACCEPTED`` otherwise).
* **SmartNoise SQL's own PUMS test queries** (:mod:`benchmarks.coverage_pums`), through dpsql
  and, when ``smartnoise-sql`` is installed, through SmartNoise SQL; goal: dpsql accepts at
  least as many as SmartNoise.

For each query: accepted or refused (the error class, its PEP 249 parent and the message, as
:func:`benchmarks.common.rejection` records them, plus a **reason**: the feature that would
unlock it, :func:`reason`), and for an accepted query the error at epsilon 1, delta 1e-6 over
``draws`` releases. Every release runs ``Session.run`` in full over a backend that replays the
exact query's result (:class:`benchmarks.accuracy.ReplayBackend`): the exact query is
deterministic over a read-only database, so the draws are distributed as separate runs, and
cost only noise and post-processing. The truth is the analyst's SQL run on plain DuckDB; the
cells are matched and the zeros handled as :mod:`benchmarks.cells` says. The query's figure is
the median over its cells of each cell's median relative error over the draws.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from dpsql.session import Session

from . import cells as cellmod
from .accuracy import ReplayBackend
from .common import Handles, Settings, rejection
from .tpch22 import ADJUSTMENTS, RAW_ROWS, SPEC, tpch22

EPSILON = 1.0
DELTA = 1e-6
TPCH_GOAL = 15
#: --smoke: these TPC-H queries only (fast at SF 0.01: accepted and refused ones)
SMOKE_TPCH = ("Q1", "Q2", "Q4", "Q6", "Q13")

#: (reason, pattern over "<error class>: <message>" of dpsql's refusals), first match wins: the
#: issue #15 feature that would unlock the query, or why the refusal is right ("correct")
REASONS: tuple[tuple[str, str], ...] = (
    ("no aggregate: raw values or bare keys (refused by design)",
     r"neither aggregated nor a group by key|releases no aggregate"),
    ("VARIANCE/STDDEV", r"aggregate (variance|stddev|var_pop|var_samp|stddev_pop|stddev_samp) "
                        r"is not supported|function (var|std|variance|stddev)\w*\(\) is not"),
    ("MIN/MAX (no bounded sensitivity)", r"aggregate (min|max) is not supported"),
    ("SUM/AVG over an expression", r"needs bounds, and a computed expression has none"),
    ("computed group key", r"groups by a computed expression|computed in a subquery, so its "
                           r"values are not releasable"),
    ("group key not releasable in the metadata (per-entity output)",
     r"group by .*the column is not releasable"),
    ("scalar aggregate subquery as a constant", r"aggregate subquery in .* feeds a comparison"),
    ("outer join", r"outer join is not supported"),
    ("OR of join conjunctions", r"cross-joined .* an or does not count"),
    ("T-SQL TOP n (not DuckDB SQL)", r"syntax error"),
    ("function not allowed", r"function \w+\(\) is not allowed"),
    ("nested aggregate (not valid SQL)", r"nested aggregate"),
    ("ORDER BY a non-key (not valid SQL)", r"order uses .* neither a group by key"),
    ("catalog-qualified table", r"catalog-qualified table"),
    ("ORDER BY a column named like a table (dpsql bug)", r"names a table, not a column"),
)
#: the tally key of a TPC-H query that answers with rows of private tables (never unlocked)
RAW_ROWS_REASON = "answers with rows of private tables (must stay refused)"


def reason(rej: dict[str, str]) -> str:
    """The tally key of a refusal: the first of :data:`REASONS` whose pattern matches the
    error class and message (case-insensitive), else ``other: <error class>``."""
    text = f"{rej['class']}: {rej['message']}".lower()
    for label, pattern in REASONS:
        if re.search(pattern, text):
            return label
    return f"other: {rej['class']}"


def peer_reason(rej: dict[str, str]) -> str:
    """SmartNoise's refusal, shortened for a tally: its message up to the first colon or
    60 characters (its messages are not dpsql's, so :data:`REASONS` do not apply)."""
    msg = rej["message"].strip().splitlines()[0] if rej["message"].strip() else ""
    return f"{rej['class']}: {re.split(r'[:.]', msg)[0][:60]}"


def tally(queries: list[dict[str, Any]], side: str = "dpsql") -> dict[str, int]:
    """How many refusals each reason accounts for, largest first."""
    counts: dict[str, int] = {}
    for q in queries:
        d = q[side]
        if d["status"] == "refused":
            counts[d["reason"]] = counts.get(d["reason"], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def through_dpsql(sql: str, truth_rows: list | None, handles: Handles,
                  draws: int) -> dict[str, Any]:
    """One query through dpsql: refused (with reason) or the errors of ``draws`` releases.
    ``truth_rows`` is the analyst's SQL on plain DuckDB (None when DuckDB itself fails)."""
    replay = ReplayBackend(handles.backend)
    engine = Session(handles.metadata, replay)
    start = time.perf_counter()
    try:
        first = engine.run(sql, epsilon=EPSILON, delta=DELTA)
    except Exception as err:
        rej = rejection(err)
        return {"status": "refused", "rejection": rej, "reason": reason(rej),
                "refuse_ms": (time.perf_counter() - start) * 1e3}
    prepared = engine.prepare(sql)
    layout = cellmod.Layout.of(prepared.analysis)
    results = [first] + [engine.run(sql, epsilon=EPSILON, delta=DELTA)
                         for _ in range(draws - 1)]
    out: dict[str, Any] = {
        "status": "accepted",
        "spent": {"epsilon": first.release.epsilon, "delta": first.release.delta},
        "mechanism": first.release.mechanism,
        "rows_released": len(first.rows),
        "draws": draws,
        "exact_executions": replay.executions,
        "key_columns": [first.names[i] for i in layout.keys],
        "value_columns": [first.names[i] for i in layout.values],
    }
    if truth_rows is not None and not layout.matchable(truth_rows):
        out["unmatched"] = "no group key in the output: its rows cannot be matched"
    elif truth_rows is not None:
        truth = layout.cells(truth_rows)
        out.update(cellmod.errors(truth, [layout.cells(r.rows) for r in results]))
    out["layout"] = layout
    return out


def truth_of(handles: Handles, sql: str) -> tuple[list | None, str | None]:
    """The analyst's SQL on plain DuckDB: (rows, None) or (None, the error)."""
    try:
        return handles.raw.execute(sql).fetchall(), None
    except Exception as err:  # a query DuckDB cannot run has no truth
        return None, f"{type(err).__name__}: {err}"


def tpch_query(name: str, sql: str, handles: Handles, draws: int, log) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "sql": sql, "adjustment": ADJUSTMENTS.get(name)}
    truth_rows, duck_err = truth_of(handles, sql)
    out["true_rows"] = None if truth_rows is None else len(truth_rows)
    if duck_err:
        out["duckdb_error"] = duck_err
    d = through_dpsql(sql, truth_rows, handles, draws)
    d.pop("layout", None)
    out["dpsql"] = d
    if name in RAW_ROWS and d["status"] == "refused":
        d["reason"] = RAW_ROWS_REASON
    if name in RAW_ROWS:
        out["verdict"] = ("correctly refused" if d["status"] == "refused"
                          else "WRONGLY ACCEPTED: it releases rows of private tables")
    else:
        out["verdict"] = d["status"]
    if d["status"] == "refused":
        log(f"  {name}: refused ({d['rejection']['class']}; {d['reason']})"
            + (" - correct" if name in RAW_ROWS else ""))
    else:
        err = d.get("median_rel_error")
        log(f"  {name}: accepted, median relative error "
            + (f"{err:.3g}" if err is not None else "-") + f" over {d.get('cells', 0)} cells")
    return out


def run_tpch(handles: Handles, settings: Settings, log) -> dict[str, Any]:
    draws = settings.draws
    queries = [(n, s) for n, s in tpch22() if not settings.smoke or n in SMOKE_TPCH]
    log(f"coverage: TPC-H's {len(queries)} queries verbatim at epsilon {EPSILON}, delta {DELTA:g}"
        f", {draws} draws")
    results = [tpch_query(n, s, handles, draws, log) for n, s in queries]
    accepted = [q["name"] for q in results if q["dpsql"]["status"] == "accepted"]
    ok_raw = [q["name"] for q in results if q["name"] in RAW_ROWS
              and q["dpsql"]["status"] == "refused"]
    summary = {
        "spec": SPEC, "epsilon": EPSILON, "delta": DELTA, "draws": draws,
        "queries": len(results), "accepted": accepted,
        "refused": [q["name"] for q in results if q["dpsql"]["status"] == "refused"],
        "correctly_refused": ok_raw,
        "wrongly_accepted": [n for n in RAW_ROWS if n in accepted],
        "goal_accepted": TPCH_GOAL, "goal_met": len(accepted) >= TPCH_GOAL,
        "refusal_reasons": tally(results),
    }
    log(f"coverage: TPC-H accepted {len(accepted)} of {len(results)} (goal >= {TPCH_GOAL}: "
        f"{'met' if summary['goal_met'] else 'missed'}); correctly refused: "
        f"{', '.join(ok_raw) or 'none'}")
    return {"summary": summary, "queries": results}


def run(handles: Handles, settings: Settings, log=print,
        data_dir: Path | None = None) -> dict[str, Any]:
    """Both query sets; the PUMS suite on its own database (made once under ``data_dir``)."""
    from . import coverage_pums

    out: dict[str, Any] = {"tpch": run_tpch(handles, settings, log)}
    out["smartnoise_suite"] = coverage_pums.run(settings, data_dir, log)
    return out
