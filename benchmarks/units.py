"""Part ``units``: queries under a privacy unit (issue #17's "Measured"), asked for by name.

1. **R2T's TPC-H queries** (:mod:`benchmarks.units_queries`) at epsilon 0.8, beta 0.1, on the
   level grid R2T's code races (``levels: {base: 5.5}``, GS floor(5.5^8) = 837,339: 8 levels,
   rows for a COUNT and value units for a SUM (``max_sum`` the same 837,339, as R2T's GS);
   :data:`benchmarks.units_queries.R2T_CODE_BASE`), customer as the unit
   (``schemas/tpch-units.yaml`` with that grid; supplier and partsupp public there), and
   Q11, Q12, Q20 again under R2T's own single private relation (supplier, orders, supplier),
   and Q5, Q7, Q8 (customer AND supplier) and Q21 (orders AND supplier) again under R2T's own
   two private relations (dpsql.units.multi: the max-flow truncation; their time counts the
   per-pair query and the flow of every level, ``pairs_query_ms`` the query alone).
   Per query: the exact answer (the SQL on plain DuckDB), dpsql's release over ``draws``
   releases -- the median relative error ``|value - truth| / truth``, R2T's statistic (the
   mean of the middle 60% of the sorted absolute errors: theirs drops 2 of 10 at each end),
   the median signed error (R2T's value is biased low), how often the published 95% interval
   held the truth -- beside R2T's published figure; and the time of dpsql's exact query (the
   unit looked up along its path, grouped by unit, each unit's contribution read and its 8
   truncated sums added in Python; for counts the histogram
   of contributions, evaluated in Python) against the same SQL on
   raw DuckDB, interleaved after a warm-up, medians of ``runs`` (goal <= 2x).
2. **FLEX's five** at epsilon 0.1, delta 1e-8 with customer as the unit and the owner's
   kappa / C per query (:data:`benchmarks.units_queries.FLEX_UNIT`, from the TPC-H
   specification), the relative error per cell (median over draws, then over cells, as the
   accuracy part), against answering 0 (relative error 1); a few other (kappa, C) beside it in
   hindsight; and the row-level figure of ``accuracy-sf<scale>.json`` when that file is in the
   results folder.

Releases: the exact query runs once and its result is replayed to ``Session.run`` for every
draw (:class:`dpsql.backends.replay.ReplayBackend`), as in the accuracy part: every draw's noise,
level choice and post-processing run as in production. A refused query records the error
class and message. This file is for the data owner (exact answers, errors).
"""

from __future__ import annotations

import contextlib
import json
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dpsql.backends.replay import ReplayBackend
from dpsql.metadata import Metadata, load_metadata
from dpsql.noise.r2t import levels
from dpsql.session import Session
from dpsql.units import multi_execute
from dpsql.units.execute import read_truncated

from . import cells as cellmod
from .accuracy import FLEX_FIGURES
from .common import Handles, Settings, interleaved, median_ms, rejection
from .queries import flex_corpus
from .units_profile import breakdown, cpu_counted
from .units_queries import (
    FLEX_UNIT,
    R2T,
    R2T_BETA,
    R2T_CODE_BASE,
    R2T_CODE_GS,
    R2T_EPSILON,
    R2T_FIGURES,
    R2TQuery,
    unit_metadata,
    units_metadata,
    with_bounds,
    with_r2t_grid,
)

ROOT = Path(__file__).resolve().parents[1]
UNITS_YAML = ROOT / "schemas" / "tpch-units.yaml"
FLEX_EPSILON = 0.1
FLEX_DELTA = 1e-8
TIME_RATIO_TARGET = 2.0
#: R2T's statistic: drop this share of the sorted absolute errors at each end (2 of 10)
TRIM = 0.2

Log = Callable[[str], None]


def _trimmed_mean(values: list[float]) -> float:
    v = sorted(values)
    cut = int(len(v) * TRIM)
    middle = v[cut:len(v) - cut] or v
    return float(np.mean(middle))


def _two_units(prepared: Any) -> bool:
    """Whether the release reaches two unit tables (dpsql.units.multi: flow truncation)."""
    unit = prepared.analysis.unit
    return unit is not None and bool(unit.more)


def _exact_runner(backend: Any, prepared: Any) -> Callable[[], Any]:
    """The exact side of one release as the session reads it: the executed query and, for
    R2T, the truncated sums read from its rows (dpsql.units.execute.read_truncated: over two
    units also the per-pair rows' max-flow of every level, which runs in Python; for counts
    over one unit, the levels evaluated from the histogram of contributions the query
    returns)."""
    compiled = prepared.compiled
    release = prepared.analysis.unit
    if release is not None and release.r2t:  # as Session.run dispatches
        return lambda: read_truncated(backend, compiled, [], release)
    params = compiled.plan.exact_bindings([])
    return lambda: backend.execute(compiled.exact, params)


@contextlib.contextmanager
def _truncation_once() -> Iterator[None]:
    """Within it, a two-unit release's truncation (dpsql.units.multi_execute) runs once per
    exact query and is replayed to the later draws, as the exact query itself is
    (ReplayBackend): the draws' noise, level choice and post-processing still run each time.
    Benchmark only: production truncates once per release anyway."""
    original = multi_execute.read_pair_truncated
    memo: dict[str, Any] = {}

    def once(backend: Any, compiled: Any, params: Any, release: Any) -> Any:
        if compiled.exact not in memo:
            memo[compiled.exact] = original(backend, compiled, params, release)
        return memo[compiled.exact]

    multi_execute.read_pair_truncated = once  # type: ignore[assignment]
    try:
        yield
    finally:
        multi_execute.read_pair_truncated = original  # type: ignore[assignment]


def r2t_query(q: R2TQuery, unit: str, metadata: Metadata, handles: Handles,
              settings: Settings, log: Log) -> dict[str, Any]:
    """One R2T query under ``unit`` (module docstring, 1)."""
    out: dict[str, Any] = {"name": q.name, "unit": unit, "r2t_private": list(q.r2t_private),
                           "same_private_relations": tuple(unit.split(" and ")) ==
                           q.r2t_private,
                           "r2t_figure": R2T_FIGURES[q.name], "sql": q.sql}
    truth_row = handles.raw.execute(q.sql).fetchone()
    truth = float(truth_row[0]) if truth_row and truth_row[0] is not None else 0.0
    out["exact_answer"] = truth
    replay = ReplayBackend(handles.backend)
    session = Session(metadata, replay)
    try:
        prepared = session.prepare(q.sql)
    except Exception as err:
        out.update(status="rejected", rejection=rejection(err))
        log(f"  {q.name} ({unit}): rejected ({type(err).__name__}): {err}")
        return out
    values: list[float] = []
    covered, mechanism, last_interval = 0, None, None
    with _truncation_once():
        for _ in range(settings.draws):
            result = session.run(q.sql, epsilon=R2T_EPSILON, delta=0.0)
            mechanism = result.release.mechanism
            values.append(float(result.rows[0][0]))
            interval = result.release.columns[0].interval_95
            if interval is None or interval[0] <= truth <= interval[1]:
                covered += 1
            last_interval = interval
    abs_err = [abs(v - truth) for v in values]
    rel = [e / abs(truth) for e in abs_err] if truth else []
    out.update({
        "status": "ok",
        "mechanism": mechanism,
        "draws": len(values),
        "exact_executions": replay.executions,
        "median_rel_error": statistics.median(rel) if rel else None,
        "r2t_statistic_rel_error": _trimmed_mean(abs_err) / abs(truth) if truth else None,
        "median_signed_rel_error": (statistics.median((v - truth) / abs(truth) for v in values)
                                    if truth else None),
        "interval_95_covered": covered / len(values),
        "interval_95_last": list(last_interval) if last_interval else None,
        "exact_sql": prepared.compiled.exact,
    })
    if mechanism == "exact":  # public tables only: nothing private is read, nothing to time
        out["time"] = None
    else:
        out["time"] = _times(q.sql, prepared, handles, settings)
        if not out["time"]["met"] and not _two_units(prepared):  # benchmarks.units_profile
            out["time"]["breakdown"] = breakdown(
                q.sql, prepared.compiled.exact, handles, settings.runs,
                _exact_runner(handles.backend, prepared))
    t = out["time"]
    log(f"  {q.name} ({unit}): median relative error {out['median_rel_error']:.3g} "
        f"(R2T {R2T_FIGURES[q.name]:.3g})"
        + (f"; exact {t['exact_ms']:.0f} ms vs raw {t['raw_ms']:.0f} ms (x{t['ratio']:.2f})"
           if t else "; public: exact"))
    return out


def _times(sql: str, prepared: Any, handles: Handles, settings: Settings) -> dict[str, Any]:
    """Wall and CPU time of the raw SQL and dpsql's exact query, interleaved. On a loaded
    machine the wall ratio mixes in waiting for a core; the CPU ratio is the work each does."""
    raw = handles.raw
    cpu: dict[str, list[float]] = {}
    variants = {"raw": cpu_counted(cpu, "raw", lambda: raw.execute(sql).fetchall()),
                "exact": cpu_counted(cpu, "exact", _exact_runner(handles.backend, prepared))}
    if _two_units(prepared):  # the per-pair query alone: the rest of "exact" is the flow
        compiled = prepared.compiled
        params = compiled.plan.exact_bindings([])
        variants["pairs"] = lambda: handles.backend.execute_flat_columns(compiled.exact, params)
    # at least a second of rounds: Q10 and Q11 take ~6 ms raw, where 7 runs' medians moved
    # their ratio between 1.76 and 2.05 from run to run
    times = interleaved(variants, settings.runs, min_seconds=0 if settings.smoke else 1.0)
    raw_ms, exact_ms = median_ms(times["raw"]), median_ms(times["exact"])
    raw_cpu, exact_cpu = median_ms(cpu["raw"][1:]), median_ms(cpu["exact"][1:])  # no warm-up
    return {"raw_ms": raw_ms, "exact_ms": exact_ms, "ratio": exact_ms / raw_ms,
            "met": exact_ms / raw_ms <= TIME_RATIO_TARGET, "runs": len(times["raw"]),
            "raw_cpu_ms": raw_cpu, "exact_cpu_ms": exact_cpu,
            "cpu_ratio": exact_cpu / raw_cpu if raw_cpu > 0 else None,
            **({"pairs_query_ms": median_ms(times["pairs"])} if "pairs" in times else {}),
            "raw_ms_all": [t * 1e3 for t in times["raw"]],
            "exact_ms_all": [t * 1e3 for t in times["exact"]]}


def flex_query(name: str, sql: str, base: Metadata, handles: Handles, settings: Settings,
               log: Log, row_level: dict[str, Any]) -> dict[str, Any]:
    """One FLEX query under customer as the unit (module docstring, 2)."""
    choice = FLEX_UNIT[name]
    out: dict[str, Any] = {"name": name, "sql": sql, "flex": FLEX_FIGURES.get(name),
                           "row_level": row_level.get(name), "max_groups": choice.max_groups,
                           "max_rows_per_group": choice.max_rows_per_group, "why": choice.why}
    truth_rows = handles.raw.execute(sql).fetchall()
    out["true_rows"] = len(truth_rows)
    first = _grouped_errors(sql, with_bounds(base, choice.max_groups, choice.max_rows_per_group),
                            truth_rows, handles, settings)
    out.update(first)
    if out["status"] != "ok":
        log(f"  {name}: rejected ({out['rejection']['class']}): {out['rejection']['message']}")
        return out
    sweep = () if settings.smoke or out["mechanism"] == "exact" else choice.sweep
    out["sweep"] = []
    for kappa, c in sweep:
        other = _grouped_errors(sql, with_bounds(base, kappa, c), truth_rows, handles, settings)
        out["sweep"].append({"max_groups": kappa, "max_rows_per_group": c,
                             "median_rel_error": other.get("median_rel_error")})
    out["better_than_zero"] = (out["median_rel_error"] is not None
                               and out["median_rel_error"] < 1.0)
    log(f"  {name}: kappa {choice.max_groups}, C {choice.max_rows_per_group}: median relative "
        f"error {out['median_rel_error']} over {out['cells']} cells ({out['mechanism']})")
    return out


def _grouped_errors(sql: str, metadata: Metadata, truth_rows: list, handles: Handles,
                    settings: Settings) -> dict[str, Any]:
    replay = ReplayBackend(handles.backend)
    session = Session(metadata, replay)
    try:
        prepared = session.prepare(sql)
    except Exception as err:
        return {"status": "rejected", "rejection": rejection(err)}
    layout = cellmod.Layout.of(prepared.analysis)
    draws, mechanism, bins = [], None, 0
    for _ in range(settings.draws):
        result = session.run(sql, epsilon=FLEX_EPSILON, delta=FLEX_DELTA)
        mechanism, bins = result.release.mechanism, len(result.rows)
        spent = (result.release.epsilon, result.release.delta)
        draws.append(layout.cells(result.rows))
    out = {"status": "ok", "mechanism": mechanism, "spent": list(spent), "bins_released": bins,
           "draws": len(draws), "exact_executions": replay.executions}
    out.update(cellmod.errors(layout.cells(truth_rows), draws))
    return out


def _row_level(out_dir: Path | None, scale: float) -> dict[str, Any]:
    """The accuracy part's row-level figures at this scale, if its file is there."""
    if out_dir is None:
        return {}
    path = out_dir / f"accuracy-sf{scale:g}.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {q["name"]: {"median_rel_error": q.get("median_rel_error"),
                        "status": q["status"], "epsilon": data["summary"]["epsilon"],
                        "delta": data["summary"]["delta"]} for q in data["queries"]}


def run(handles: Handles, settings: Settings, log: Log = print,
        out_dir: Path | None = None) -> dict[str, Any]:
    customer = load_metadata(UNITS_YAML)
    log(f"units: R2T's TPC-H queries at epsilon {R2T_EPSILON} (customer as the unit), "
        f"{settings.draws} releases each")
    on_grid = with_r2t_grid(customer)
    r2t = [r2t_query(q, "customer", on_grid, handles, settings, log) for q in R2T]
    own = {}
    for q in R2T:
        if len(q.r2t_private) == 1 and q.r2t_private[0] != "customer":
            table = q.r2t_private[0]
            if table not in own:
                own[table] = with_r2t_grid(unit_metadata(handles.metadata, table))
            r2t.append(r2t_query(q, table, own[table], handles, settings, log))
        elif len(q.r2t_private) == 2:  # R2T's two private relations (dpsql.units.multi)
            key = " and ".join(q.r2t_private)
            if key not in own:
                own[key] = with_r2t_grid(units_metadata(handles.metadata, q.r2t_private))
            r2t.append(r2t_query(q, key, own[key], handles, settings, log))
    log(f"units: FLEX's queries at epsilon {FLEX_EPSILON}, delta {FLEX_DELTA:g}")
    row_level = _row_level(out_dir, settings.scale)
    flex = [flex_query(n, s, customer, handles, settings, log, row_level)
            for n, s in flex_corpus()]
    timed = [q["time"] for q in r2t if q["status"] == "ok" and q["time"]]
    return {
        "summary": {
            "r2t": {"epsilon": R2T_EPSILON, "beta": R2T_BETA, "max_contribution": R2T_CODE_GS,
                    "max_sum": R2T_CODE_GS, "level_base": R2T_CODE_BASE,
                    "levels": list(levels(R2T_CODE_GS, R2T_CODE_BASE)),
                    "unit_metadata": "schemas/tpch-units.yaml", "draws": settings.draws,
                    "time_ratio_target": TIME_RATIO_TARGET,
                    "time_ratio_missed": [f"{q['name']} ({q['unit']})" for q in r2t
                                          if q["status"] == "ok" and q["time"]
                                          and not q["time"]["met"]],
                    "median_time_ratio": (statistics.median(t["ratio"] for t in timed)
                                          if timed else None),
                    "rejected": [q["name"] for q in r2t if q["status"] != "ok"]},
            "flex": {"epsilon": FLEX_EPSILON, "delta": FLEX_DELTA, "draws": settings.draws,
                     "better_than_zero": [q["name"] for q in flex if q.get("better_than_zero")],
                     "rejected": [q["name"] for q in flex if q["status"] != "ok"]},
        },
        "r2t": r2t,
        "flex": flex,
    }
