"""The owner's report (``dpsql explain``) of a SAMPLE_AGGREGATE query: the table, its blocks,
each output's bounds, share of epsilon, sensitivity and noise scale, and the one-pass SQL.
Everything in it is public (it depends on the SQL, the metadata and epsilon only)."""

from __future__ import annotations

from typing import Any

from dpsql.budget import Budget
from dpsql.metadata import Metadata
from dpsql.sample_aggregate.analysis import analyze_sample_aggregate
from dpsql.sample_aggregate.release import MECHANISM, plan_release
from dpsql.sample_aggregate.rewrite import plan_sample_aggregate


def explain_sample_aggregate(sql: str, md: Metadata, epsilon: float) -> dict[str, Any]:
    """One entry per output column, in SELECT order, and the exact SQL."""
    query = analyze_sample_aggregate(sql, md)
    plan = plan_sample_aggregate(query, md)
    outputs, record = plan_release(plan, Budget(epsilon), "explain")
    return {
        "mechanism": MECHANISM,
        "table": query.table,
        "blocks": query.blocks,
        "by": query.setting.by,
        "epsilon": record.epsilon,
        "delta": record.delta,
        "columns": [{
            "name": o.name, "lower": o.lower, "upper": o.upper, "epsilon": o.epsilon,
            "sensitivity_of_sum": o.sensitivity, "sensitivity_of_mean": o.sensitivity / o.blocks,
            "scale_of_mean": o.scale / o.blocks, "half_width_95": o.half_width_95,
        } for o in outputs],
        "exact_sql": plan.exact_sql,
    }


def explain_sample_aggregate_text(sql: str, md: Metadata, epsilon: float) -> str:
    report = explain_sample_aggregate(sql, md, epsilon)
    by = report["by"] or "every declared column"
    lines = [f"sample-and-aggregate over table {report['table']!r}: {report['blocks']} blocks "
             f"by a keyed hash of {by} (a fresh key per release); each block's answer is "
             "clamped to [lo, hi] (an empty block counts as lo) and their mean released with "
             "Laplace noise; one changed row moves at most two blocks", ""]
    for c in report["columns"]:
        lines.append(f"{c['name']}: bounds [{c['lower']:g}, {c['upper']:g}], epsilon "
                     f"{c['epsilon']:g}, sensitivity of the mean 2*(hi-lo)/m = "
                     f"{c['sensitivity_of_mean']:g}, Laplace scale {c['scale_of_mean']:g}, "
                     f"95% half-width {c['half_width_95']:g}")
    lines += ["", "exact query (one pass, the key bound as $__dpsql_sa_key):",
              "  " + report["exact_sql"]]
    return "\n".join(lines)
