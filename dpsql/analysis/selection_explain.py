"""``dpsql explain`` for selection queries (dpsql.analysis.selection_aggregates): the mechanism
(exponential mechanism, Report Noisy Max), its epsilon share, sensitivity and public grid.

Owner-facing like the rest of explain; the quantities shown here (S, the grid, the shares)
depend on the SQL, the metadata and epsilon only.
"""

from __future__ import annotations

from typing import Any

from dpsql.analysis.parse import DIALECT
from dpsql.analysis.selection_aggregates import (
    QuantileQuery,
    TopKQuery,
    epsilon_shares,
)
from dpsql.budget import Budget
from dpsql.noise.plan import plan_noise

__all__ = ["selection_lines", "selection_report"]


def selection_report(query: QuantileQuery | TopKQuery, epsilon: float) -> dict[str, Any]:
    """The JSON report (the shape of dpsql.analysis.explain.explain_report's: one entry per
    output column, then the totals); delta is 0 (pure mechanisms)."""
    shares = epsilon_shares(query, epsilon)
    columns: list[dict[str, Any]] = []
    if isinstance(query, QuantileQuery):
        grid = query.grid
        grid_json = {"lower": grid.lower, "upper": grid.upper, "cells": grid.cells,
                     "step": grid.step, "integer": grid.integer}
        for col in query.outputs.columns:
            if col.kind != "aggregate":
                columns.append({"name": col.name, "kind": col.kind})
                continue
            parts = [{"function": query.aggregates[j].function,
                      "quantile": query.aggregates[j].quantile,
                      "argument": query.argument, "epsilon": shares[j]}
                     for j in col.measurements]
            columns.append({"name": col.name, "kind": "aggregate", "mechanism": "exponential",
                            "utility": "-|rank - target rank|",
                            "sensitivity": query.sensitivity,
                            "epsilon": sum(p["epsilon"] for p in parts), "delta": 0.0,
                            "grid": grid_json, "components": parts})
        mechanism = "exponential"
    else:
        for i, col in enumerate(query.analysis.columns):
            if i == query.key_column:
                columns.append({"name": col.name, "kind": "group_key",
                                "mechanism": "report_noisy_max", "k": query.k,
                                "sensitivity": query.sensitivity, "epsilon": shares[0],
                                "delta": 0.0})
            elif i == query.count_column:
                plan = plan_noise(query.analysis, Budget(shares[1], 0.0))[0]
                columns.append({"name": col.name, "kind": "aggregate", "function": "COUNT",
                                "mechanism": "laplace",
                                "elastic_sensitivity": plan.elastic_sensitivity,
                                "noise_scale": plan.scale, "epsilon": shares[1], "delta": 0.0})
        mechanism = "report_noisy_max" + ("+laplace" if query.count_column is not None else "")
    return {"columns": columns, "mechanism": mechanism, "epsilon": sum(shares), "delta": 0.0,
            "distance": 0, "unchecked_key_types": []}


def selection_lines(query: QuantileQuery | TopKQuery, epsilon: float) -> list[str]:
    """The readable derivation (dpsql.analysis.explain.explain_text's)."""
    shares = epsilon_shares(query, epsilon)
    if isinstance(query, QuantileQuery):
        grid = query.grid
        analysis = query.histogram
        kind = ("one cell per integer of the bounds" if grid.integer else
                f"{grid.cells} cells of width {grid.step:g}, each released as its midpoint")
        lines = ["selection query: MIN / MAX / quantiles by the exponential mechanism "
                 "(dpsql/noise/selection.py), utility -|rank - target rank| over a public grid",
                 f"  argument {query.argument}: grid [{grid.lower:g}, {grid.upper:g}], {kind}",
                 f"  utility sensitivity {query.sensitivity:g} ("
                 + ("2 S per bin: a changed row touches two bins" if analysis.group_keys[:-1]
                    else "S") + ")"]
        for j, aggregate in enumerate(query.aggregates):
            lines.append(f"  measurement {j}: {aggregate.function} (quantile "
                         f"{aggregate.quantile:g}): epsilon {shares[j]:g}, delta 0")
    else:
        analysis = query.analysis
        lines = [f"selection query: top {query.k} keys by COUNT(*), Report Noisy Max with "
                 f"peeling ({query.k} rounds of epsilon/{query.k}; dpsql/noise/selection.py)",
                 f"  count sensitivity S = {query.sensitivity:g}; selection epsilon "
                 f"{shares[0]:g}, delta 0"]
        if query.count_column is not None:
            plan = plan_noise(query.analysis, Budget(shares[1], 0.0))[0]
            lines.append(f"  the chosen keys' COUNT(*): discrete Laplace scale ES/epsilon = "
                         f"{plan.scale:.12g} (ES = {plan.elastic_sensitivity:g}, epsilon "
                         f"{shares[1]:g})")
    lines += ["", "exact query reads (qualified):", "  " + analysis.query.sql(dialect=DIALECT)]
    return lines
