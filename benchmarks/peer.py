"""Part ``peer``: dpsql beside SmartNoise SQL on the PUMS sample and PUMS-shaped 1M/10M tables.

Per dataset (:mod:`benchmarks.synthetic`) and query (:data:`QUERIES`), at the same total
epsilon and delta for both engines (SmartNoise's per-column epsilon is scaled so that its own
``get_privacy_cost`` equals dpsql's epsilon; both are recorded), the same clamping bounds
(PUMS.yaml and schemas/pums.yaml agree) and the same DuckDB database:

* ``raw_ms``, ``dpsql_ms``, ``smartnoise_ms``: medians of ``runs`` interleaved runs after a
  warm-up. Each engine is set up once, as a connection would be: dpsql's Engine with no
  analysis memo (``cache_size=0``: every run parses, analyses and rewrites again), SmartNoise's
  reader (it parses and rewrites on every ``execute``). ``exact_ms``: the SQL each engine
  sends to DuckDB (dpsql's rewritten exact query, SmartNoise's rewritten subquery), timed alone
  in the same rounds: what the rest of each engine's time is spent beside. ``speedup`` is
  ``smartnoise_ms / dpsql_ms`` (target >= 10).
* ``mae``: per output cell (group), the mean over ``draws`` releases of ``|noisy - true|``;
  the query's figure is the mean over the cells that exist in the data (dpsql also releases
  the empty bins of a declared domain, SmartNoise only the groups it sees). The exact query
  of each engine runs once and is replayed for the draws (as in the ``accuracy`` part), so the
  draws cost noise and post-processing only. ``error_met``: dpsql's MAE is below SmartNoise's
  or within 1.96 standard errors of the difference.
* a query an engine refuses records the error class and message instead.

Without ``smartnoise-sql`` installed, dpsql's side still runs and the SmartNoise side is
reported as skipped (printed and in the JSON).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpsql.backends.replay import ReplayBackend
from dpsql.execute.exact import read_exact
from dpsql.session import Session

from . import smartnoise, synthetic
from .common import (
    Handles,
    Settings,
    environment,
    interleaved,
    median_ms,
    rejection,
    uptime,
    write_json,
)

#: (name, SQL with {pums}/{jobs} table placeholders, number of leading group-key columns)
QUERIES: tuple[tuple[str, str, int], ...] = (
    ("count", "SELECT COUNT(*) AS n FROM {pums}", 0),
    ("group_count", "SELECT educ, COUNT(*) AS n FROM {pums} GROUP BY educ", 1),
    ("sum", "SELECT SUM(income) AS total FROM {pums}", 0),
    ("avg", "SELECT AVG(age) AS mean_age FROM {pums}", 0),
    ("filtered_group_count",
     "SELECT race, COUNT(*) AS n FROM {pums} WHERE age > 40 AND married = 1 GROUP BY race", 1),
    ("join_count", "SELECT COUNT(*) AS n FROM {pums} AS p JOIN {jobs} AS j ON p.pid = j.pid", 0),
)
DPSQL_TABLES = {"pums": "pums", "jobs": "jobs"}
SMARTNOISE_TABLES = {"pums": "PUMS.PUMS", "jobs": "PUMS.JOBS"}
SPEEDUP_TARGET = 10.0
FULL_ROWS = (None, 1_000_000, 10_000_000)  # None: the 1,000-row PUMS sample
SMOKE_ROWS = (None, 10_000)


def _cells(rows, n_keys: int) -> dict[tuple[str, ...], float | None]:
    return {tuple(str(v) for v in r[:n_keys]): (None if r[-1] is None else float(r[-1]))
            for r in rows}


def _errors(truth: dict, draws: list[dict]) -> dict[str, Any]:
    """Per-cell mean absolute errors over the draws, for the cells with a true value."""
    keys = [k for k, v in truth.items() if v is not None]
    errs = np.full((len(keys), len(draws)), np.nan)
    for d, cells in enumerate(draws):
        for i, k in enumerate(keys):
            if cells.get(k) is not None:
                errs[i, d] = abs(cells[k] - truth[k])
    flat = errs[~np.isnan(errs)]
    per_cell = np.nanmean(errs, axis=1) if len(keys) else np.array([])
    return {
        "mae": float(per_cell.mean()) if len(keys) else None,
        "mae_se": float(flat.std(ddof=1) / math.sqrt(len(flat))) if len(flat) > 1 else None,
        "cells": len(keys),
        "cells_missing": int(np.isnan(errs).all(axis=1).sum()) if len(keys) else 0,
        "per_cell": [{"key": list(k), "true": truth[k], "mae": float(m)}
                     for k, m in zip(keys, per_cell, strict=True)],
    }


def one_query(name: str, template: str, n_keys: int, handles: Handles, sn_meta, settings,
              draws: int, log) -> dict[str, Any]:
    eps, delta = settings.epsilon, settings.delta
    sql = template.format(**DPSQL_TABLES)
    sn_sql = template.format(**SMARTNOISE_TABLES)
    out: dict[str, Any] = {"name": name, "sql": sql, "smartnoise_sql": sn_sql}
    truth = _cells(handles.raw.execute(sql).fetchall(), n_keys)
    md, backend, raw = handles.metadata, handles.backend, handles.raw
    fns = {"raw": lambda: raw.execute(sql).fetchall()}

    try:
        Session(md, backend).run(sql, epsilon=eps, delta=delta)
    except Exception as err:
        out["dpsql"] = {"status": "rejected", "rejection": rejection(err)}
    else:
        out["dpsql"] = {"status": "ok"}
        # one Session (as a connection keeps one) with no memo: every run analyses again
        engine = Session(md, backend, cache_size=0)
        fns["dpsql"] = lambda: engine.run(sql, epsilon=eps, delta=delta)
        compiled = engine.prepare(sql).compiled  # its exact SQL alone: the part DuckDB runs
        plan = compiled.plan
        fns["dpsql_exact"] = lambda: read_exact(backend, compiled, [])

    if sn_meta is None:
        out["smartnoise"] = {"status": "skipped", "reason": smartnoise.INSTALL_HINT}
    else:
        try:
            sn_conn = smartnoise.DuckDBConnection(raw)
            sn_reader, spent = smartnoise.reader(sn_conn, sn_meta, sn_sql, eps, delta)
            sn_conn.executed.clear()
            sn_reader.execute(sn_sql)
            sn_exact = sn_conn.executed[-1]  # the SQL SmartNoise sent to DuckDB
        except Exception as err:
            out["smartnoise"] = {"status": "rejected", "rejection": rejection(err)}
        else:
            out["smartnoise"] = {"status": "ok", "spent": spent}
            fns["smartnoise"] = lambda: sn_reader.execute(sn_sql)
            fns["smartnoise_exact"] = lambda: raw.execute(sn_exact).fetchall()

    times = interleaved(fns, settings.runs)
    out["raw_ms"] = median_ms(times["raw"])
    if out["dpsql"]["status"] == "ok":
        replay = ReplayBackend(backend)
        engine = Session(md, replay)
        results = [engine.run(sql, epsilon=eps, delta=delta) for _ in range(draws)]
        release = results[0].release
        out["dpsql"].update(
            ms=median_ms(times["dpsql"]), ms_all=[t * 1e3 for t in times["dpsql"]],
            exact_ms=median_ms(times["dpsql_exact"]), exact_sql=plan.exact_sql,
            spent={"epsilon": release.epsilon, "delta": release.delta,
                   "mechanism": release.mechanism},
            exact_executions=replay.executions, exact_queries=1 + (plan.domain_sql is not None),
            bins_released=len(results[0].rows),
            **_errors(truth, [_cells(r.rows, n_keys) for r in results]))
    if out["smartnoise"]["status"] == "ok":
        conn = smartnoise.DuckDBConnection(raw, replay=True)
        sn_draw, _ = smartnoise.reader(conn, sn_meta, sn_sql, eps, delta)
        results = [sn_draw.execute(sn_sql)[1:] for _ in range(draws)]  # row 0: the header
        out["smartnoise"].update(
            ms=median_ms(times["smartnoise"]), ms_all=[t * 1e3 for t in times["smartnoise"]],
            exact_ms=median_ms(times["smartnoise_exact"]), exact_sql=sn_exact,
            exact_executions=len(set(conn.executed)), bins_released=len(results[0]),
            **_errors(truth, [_cells(r, n_keys) for r in results]))
    _compare(out)
    d, s = out["dpsql"], out["smartnoise"]
    log(f"  {name}: raw {out['raw_ms']:.1f} ms, dpsql "
        + (f"{d['ms']:.1f} ms MAE {d['mae']:.4g}" if "ms" in d else d["status"])
        + ", SmartNoise "
        + (f"{s['ms']:.1f} ms MAE {s['mae']:.4g}" if "ms" in s else s["status"])
        + (f" (x{out['speedup']:.1f})" if out.get("speedup") else ""))
    return out


def _compare(out: dict[str, Any]) -> None:
    d, s = out["dpsql"], out["smartnoise"]
    if "ms" not in d or "ms" not in s:
        out.update(speedup=None, speed_met=None, mae_ratio=None, error_met=None)
        return
    out["speedup"] = s["ms"] / d["ms"]
    out["speed_met"] = out["speedup"] >= SPEEDUP_TARGET
    out["mae_ratio"] = d["mae"] / s["mae"] if s["mae"] else None
    se = math.hypot(d["mae_se"] or 0.0, s["mae_se"] or 0.0)
    out["error_met"] = d["mae"] <= s["mae"] + 1.96 * se


def run_dataset(rows: int | None, settings: Settings, data_dir: Path, draws: int,
                log) -> dict[str, Any]:
    dataset = synthetic.ensure(rows, data_dir, log=log)
    n = dataset.rows["pums"]
    sn_meta = synthetic.smartnoise_metadata(n) if smartnoise.available() else None
    log(f"peer: dpsql vs SmartNoise SQL on {synthetic.label(rows)} ({n:,} rows), "
        f"{settings.runs} timed runs, {draws} draws")
    start, load = time.perf_counter(), os.getloadavg()
    handles = Handles.open(dataset)
    try:
        queries = [one_query(name, t, k, handles, sn_meta, settings, draws, log)
                   for name, t, k in QUERIES]
    finally:
        handles.close()
    both = [q for q in queries if q["speedup"] is not None]
    env = environment(settings, dataset)
    del env["scale"]  # no TPC-H scale here: the row count is in the summary
    env.update(part_seconds=round(time.perf_counter() - start, 2),
               load_average_start=[round(x, 2) for x in load],
               load_average_end=[round(x, 2) for x in os.getloadavg()], uptime_end=uptime(),
               smartnoise=_smartnoise_version(), smartnoise_backend="DuckDB (Postgres reader)")
    return {
        "summary": {
            "dataset": synthetic.label(rows), "rows": n, "epsilon": settings.epsilon,
            "delta": settings.delta, "runs": settings.runs, "draws": draws,
            "speedup_target": SPEEDUP_TARGET,
            "median_speedup": statistics.median(q["speedup"] for q in both) if both else None,
            "speed_met": [q["name"] for q in both if q["speed_met"]],
            "error_met": [q["name"] for q in both if q["error_met"]],
            "dpsql_rejects": [q["name"] for q in queries if q["dpsql"]["status"] == "rejected"],
            "smartnoise_rejects": [q["name"] for q in queries
                                   if q["smartnoise"]["status"] == "rejected"],
            "smartnoise_skipped": sn_meta is None,
        },
        "queries": queries,
        "environment": env,
    }


def _smartnoise_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("smartnoise-sql") if smartnoise.available() else None
    except PackageNotFoundError:
        return None


def write(settings: Settings, data_dir: Path, out: Path, log=print) -> list[Path]:
    """Run every dataset and write ``<out>/peer-<dataset>.json``; returns the paths."""
    if synthetic.sample_missing():
        print(f"peer: skipped: {synthetic.sample_missing()}", flush=True)
        return []
    if not smartnoise.available():
        print(f"peer: SmartNoise SQL skipped: {smartnoise.INSTALL_HINT}; dpsql's side runs "
              "alone", flush=True)
    draws = settings.draws
    paths = []
    for rows in (SMOKE_ROWS if settings.smoke else FULL_ROWS):
        data = run_dataset(rows, settings, data_dir, draws, log)
        paths.append(write_json(out / f"peer-{synthetic.label(rows)}.json", data))
    return paths
