"""Part ``accuracy``: median relative error of FLEX's five TPC-H queries, beside FLEX's figures.

Setting (FLEX's): epsilon 0.1, delta = 1/n^2 with n = 2,000,000. For each query and output cell
(a group's aggregate), ``draws`` independent releases; the cell's error is the median over the
draws of ``|noisy - true| / |true|``; the query's figure is the median over its cells.
Cells whose true value is 0 (bins of the declared domain the data leaves empty) have no
relative error; their count and median absolute error are reported separately.

Equivalence: the exact query is executed once and its result replayed to ``Engine.run`` for
every draw (a backend wrapper that caches by SQL text and parameters). The exact query is
deterministic and runs on an unchanging read-only database, so every execution would return
the same rows; everything after the execution - the noise plans from ``plan_noise``, the
secure samplers of ``dpsql.noise.mechanisms``, the post-processing - runs as in production, once per
draw. The draws are therefore distributed exactly as ``draws`` separate ``Engine.run`` calls.

The analytic floor is the median error of the best possible pure count, sensitivity 1:
``b ln 2 / |true|`` with ``b = 1/epsilon`` (the median of |Laplace(b)| is ``b ln 2``);
``expected`` uses dpsql's own noise scale instead (so it should match the measured figure).
Noise scales of smoothed releases are data-dependent: this report is for the data owner.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from dpsql.backends.replay import ReplayBackend
from dpsql.budget import Budget
from dpsql.noise.plan import plan_noise
from dpsql.noise.smooth import smooth
from dpsql.session import Session

from .common import Handles, Settings, rejection
from .queries import flex_corpus

#: FLEX's corrected published median relative errors (epsilon 0.1, delta 1/n^2, n = 2e6).
FLEX_FIGURES = {"Q1": 2.5e-5, "Q4": 4.141e-3, "Q13": 1.504, "Q16": 706.58, "Q21": 11551.0}


def _key(values) -> tuple[str, ...]:
    return tuple("NULL" if v is None else str(v) for v in values)


def one_query(name: str, sql: str, handles: Handles, settings: Settings, log) -> dict[str, Any]:
    eps, delta = settings.epsilon, settings.delta
    out: dict[str, Any] = {"name": name, "sql": sql, "flex": FLEX_FIGURES.get(name)}
    cur = handles.raw.execute(sql)
    truth_rows = cur.fetchall()
    truth_names = [d[0] for d in cur.description]
    out["true_rows"] = len(truth_rows)
    replay = ReplayBackend(handles.backend)
    engine = Session(handles.metadata, replay)
    try:
        prepared = engine.prepare(sql)
    except Exception as err:
        out.update(status="rejected", rejection=rejection(err))
        log(f"  {name}: rejected ({err.__class__.__name__})")
        return out
    analysis = prepared.analysis
    key_cols = [c.name for c in analysis.columns if c.kind == "group_key"]
    val_cols = [c for c in analysis.columns if c.kind == "aggregate"]
    t_index = {n: i for i, n in enumerate(truth_names)}
    truth = {
        _key(r[t_index[k]] for k in key_cols): [r[t_index[c.name]] for c in val_cols]
        for r in truth_rows
    }
    try:
        plans = plan_noise(analysis, Budget(eps, delta))
    except Exception as err:
        out.update(status="rejected", rejection=rejection(err))
        out["would_need"] = _would_need(analysis, eps, delta, truth, val_cols)
        log(f"  {name}: rejected ({err.__class__.__name__}): {err}")
        return out
    scale_of = {}
    for j, c in enumerate(val_cols):
        if len(c.measurements) == 1:
            scale_of[j] = plans[c.measurements[0]].scale

    cells = [(k, j) for k, vals in truth.items() for j in range(len(val_cols))
             if vals[j] is not None and float(vals[j]) != 0.0]
    cell_index = {cell: i for i, cell in enumerate(cells)}
    errors = np.full((len(cells), settings.draws), np.nan)
    zero_abs: list[float] = []
    bins = 0
    for d in range(settings.draws):
        result = engine.run(sql, epsilon=eps, delta=delta)
        r_index = {n: i for i, n in enumerate(result.names)}
        bins = len(result.rows)
        for row in result.rows:
            k = _key(row[r_index[c]] for c in key_cols)
            true_vals = truth.get(k)
            for j, c in enumerate(val_cols):
                noisy = row[r_index[c.name]]
                true = None if true_vals is None else true_vals[j]
                if true is None or float(true) == 0.0:
                    if d == 0 and noisy is not None:
                        zero_abs.append(abs(float(noisy)))
                    continue
                i = cell_index[(k, j)]
                errors[i, d] = abs(float(noisy) - float(true)) / abs(float(true))
    missing = int(np.isnan(errors).all(axis=1).sum()) if len(cells) else 0
    per_cell = np.nanmedian(errors, axis=1) if len(cells) else np.array([])
    floor = [math.log(2) / eps / abs(float(truth[k][j])) for k, j in cells]
    expected = [scale_of[j] * math.log(2) / abs(float(truth[k][j])) for k, j in cells
                if j in scale_of]
    out.update({
        "status": "ok",
        "draws": settings.draws,
        "exact_executions": replay.executions,  # per query the plan sends, once
        "exact_queries": 1 + (prepared.plan.domain_sql is not None),
        "bins_released": bins,
        "cells": len(cells),
        "cells_missing_from_release": missing,
        "median_rel_error": float(np.median(per_cell)) if len(cells) else None,
        "mean_rel_error": float(np.mean(per_cell)) if len(cells) else None,
        "min_cell_rel_error": float(np.min(per_cell)) if len(cells) else None,
        "max_cell_rel_error": float(np.max(per_cell)) if len(cells) else None,
        "floor_pure_count": statistics.median(floor) if floor else None,
        "expected_from_scale": statistics.median(expected) if expected else None,
        "empty_bins": len(zero_abs),
        "empty_bins_median_abs_error": statistics.median(zero_abs) if zero_abs else None,
        "mechanism": result.release.mechanism,
        "noise_scales": [p.scale for p in plans],
        "pure": [p.pure for p in plans],
    })
    if cells:
        log(f"  {name}: median relative error {out['median_rel_error']:.3g} over {len(cells)} "
            f"cells (FLEX {out['flex']}), floor {out['floor_pure_count']:.3g}")
    else:
        log(f"  {name}: no cell with a non-zero true value at this scale (FLEX {out['flex']})")
    return out


def _would_need(analysis, eps, delta, truth, val_cols) -> dict[str, Any]:
    """For a query refused as too noisy: the scale it would need and the error that implies."""
    ms = analysis.measurements
    n = len(ms)
    smoothed = [m for m in ms if m.sensitivity.depends_on_k]
    eps_each = eps / n
    delta_each = delta / len(smoothed) if smoothed else 0.0
    scales = []
    for m in ms:
        if m.sensitivity.depends_on_k:
            s = smooth(m.sensitivity, eps_each, delta_each).smooth_sensitivity
            scales.append(2.0 * s / eps_each)
        else:
            scales.append(m.sensitivity.at(0) / eps_each)
    expected = []
    for j, c in enumerate(val_cols):
        if len(c.measurements) != 1:
            continue
        b = scales[c.measurements[0]]
        expected += [b * math.log(2) / abs(float(v[j])) for v in truth.values()
                     if v[j] is not None and float(v[j]) != 0.0]
    return {
        "noise_scales": scales,
        "expected_median_rel_error": statistics.median(expected) if expected else None,
        "floor_pure_count": statistics.median(
            math.log(2) / eps / abs(float(v[j])) for v in truth.values()
            for j in range(len(val_cols)) if v[j] is not None and float(v[j]) != 0.0
        ) if truth else None,
    }


def run(handles: Handles, settings: Settings, log=print) -> dict[str, Any]:
    log(f"accuracy: {settings.draws} draws per cell at epsilon {settings.epsilon}, "
        f"delta {settings.delta:.3g}")
    queries = [one_query(n, s, handles, settings, log) for n, s in flex_corpus()]
    return {
        "summary": {
            "epsilon": settings.epsilon,
            "delta": settings.delta,
            "draws": settings.draws,
            "flex_figures": FLEX_FIGURES,
            "rejected": [q["name"] for q in queries if q["status"] == "rejected"],
        },
        "queries": queries,
    }
