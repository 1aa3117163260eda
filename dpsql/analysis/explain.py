"""The owner-facing privacy report of a query (``dpsql explain``; docs/design.md, "Interfaces").

It shows data-dependent quantities (max frequencies, elastic and smooth sensitivities, noise
scales), so it is for the data owner only: analyst-facing code never calls it.

Explain runs nothing and releases nothing, and it often reads metadata without a database
(FLEX's format declares no types). So it analyses join / IN / EXISTS keys of unknown type
instead of rejecting them, and lists them under ``unchecked_key_types``: the numbers hold only
if the database compares those keys without a lossy cast. The Engine, which does release,
fills types from the database and rejects any key still untyped.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sqlglot import exp

from dpsql.analysis.blocks import BlockQuery, analyze_request
from dpsql.analysis.elastic import analyze
from dpsql.analysis.model import Derivation, QueryAnalysis
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.public_only import public_query
from dpsql.analysis.selection_aggregates import analyze_selection
from dpsql.analysis.selection_explain import selection_lines, selection_report
from dpsql.analysis.unit_explain import unit_lines
from dpsql.budget import Budget
from dpsql.errors import Error
from dpsql.metadata import Metadata
from dpsql.noise.partition import EXPLAIN_SIZES, SelectionPlan, describe, plan_with_selection
from dpsql.noise.plan import NoisePlan, plan_noise, split_budget
from dpsql.release.avg_rows import MEASUREMENT_CONFIDENCE
from dpsql.release.record import measurement_half_width, r2t_note
from dpsql.rewrite.post import avg_intervals
from dpsql.sample_aggregate.analysis import mentions_wrapper
from dpsql.sample_aggregate.explain import (
    explain_sample_aggregate,
    explain_sample_aggregate_text,
)


def _load(metadata: Metadata | str | os.PathLike) -> Metadata:
    if isinstance(metadata, Metadata):
        return metadata
    from dpsql.metadata import load_metadata

    return load_metadata(metadata)


def _plan_json(plan: NoisePlan) -> dict[str, Any]:
    if plan.r2t is not None:  # a privacy unit without GROUP BY (dpsql.units.noise)
        return {
            "function": plan.measurement.function,
            "expression": plan.measurement.label,
            "mechanism": "r2t",
            "epsilon": plan.epsilon,
            "delta": plan.delta,
            "noise_scale": plan.scale,
            "parts": [{"sign": pp.part.sign, "row_bound": pp.part.bound,
                       "level_unit": "rows" if pp.part.integer else "value",
                       "level_top": pp.max_contribution,
                       "epsilon": pp.epsilon, "level_scales": list(pp.scales)}
                      for pp in plan.r2t],
        }
    sm = plan.smoothed
    return {
        "function": plan.measurement.function,
        "expression": plan.measurement.label,
        "elastic_sensitivity": plan.elastic_sensitivity,
        "smooth_sensitivity": sm.smooth_sensitivity if sm else None,
        "k_max": sm.k_argmax if sm else None,
        "mechanism": "laplace",
        "noise_scale": plan.scale,
        "epsilon": plan.epsilon,
        "delta": plan.delta,
    }


def explain_report(
    analysis: QueryAnalysis, epsilon: float, delta: float, distance: int = 0
) -> dict[str, Any]:
    """The JSON report of an analysed query (see :func:`explain`)."""
    plans, selection = _plans(analysis, Budget(epsilon, delta), distance)
    columns: list[dict[str, Any]] = []
    for col in analysis.columns:
        if col.kind != "aggregate":
            columns.append({"name": col.name, "kind": col.kind})
            continue
        entry: dict[str, Any] = {"name": col.name, "kind": "aggregate"}
        parts = [plans[i] for i in col.measurements]
        if len(col.measurements) == 1:
            entry.update(_plan_json(parts[0]))
            entry.pop("expression")
        else:
            entry.update({
                "function": col.function,
                "elastic_sensitivity": None,
                "smooth_sensitivity": None,
                "k_max": None,
                "mechanism": "r2t" if parts[0].r2t is not None else "laplace",
                "noise_scale": None,
                "epsilon": sum(p.epsilon for p in parts),
                "delta": sum(p.delta for p in parts),
                "components": [_plan_json(p) for p in parts],
            })
        if (note := r2t_note(col.function, col.bare_aggregate, parts)) is not None:
            entry["accuracy_note"] = note  # under R2T: an AVG's interval, or why none
        columns.append(entry)
    report: dict[str, Any] = {
        "columns": columns,
        "measurements": [_plan_json(p) for p in plans],
        "epsilon": sum(p.epsilon for p in plans),
        "delta": sum(p.delta for p in plans),
        "distance": distance,
        "unchecked_key_types": list(analysis.unchecked_key_types),
    }
    if analysis.unit is not None:
        unit = analysis.unit.unit
        report["privacy_unit"] = {
            "unit": analysis.unit.label, "unit_of_each_row": analysis.unit.source.description,
            "lookups": [f"{h.table}.{h.key} -> {h.column}" for h in analysis.unit.source.hops],
            "mechanism": ("r2t" if analysis.unit.r2t else "two-stage"
                          if analysis.unit.derived is None and analysis.unit.alone is None
                          else "one row per unit"),
            "max_contribution": unit.max_contribution, "level_base": unit.level_base,
            "max_sum": unit.max_sum,
            "max_groups": unit.max_groups, "max_rows_per_group": unit.max_rows_per_group}
        if analysis.unit.more:  # two units (dpsql.units.multi): the flow truncation
            report["privacy_unit"]["truncation"] = "max-flow over (unit, unit) pairs"
            report["privacy_unit"]["other_units"] = [
                {"unit": f"{u.table}.{u.column}", "unit_of_each_row": s.description,
                 "lookups": [f"{h.table}.{h.key} -> {h.column}" for h in s.hops]}
                for u, s in analysis.unit.more]
    if selection is not None:
        report["partition_selection"] = describe(selection)
        if selection.shared is None:  # else its epsilon is the shared COUNT(*)'s
            report["epsilon"] += selection.epsilon
        report["delta"] += selection.delta
    return report


def _plans(analysis: QueryAnalysis, budget: Budget, distance: int
           ) -> tuple[tuple[NoisePlan, ...], SelectionPlan | None]:
    """The noise plans, and the partition selection's plan when a key has no domain."""
    if analysis.partition_selection:
        return plan_with_selection(analysis, budget, distance=distance)
    return plan_noise(analysis, budget, distance=distance), None


#: what explain says of a query the private rules refuse but that reads public tables only
#: (dpsql.execute.public runs it as written)
PUBLIC_NOTE = ("public tables only: the private rules refuse this query, so it runs as "
               "written, exact and free (no noise, no budget)")


def explain(
    sql: str,
    metadata: Metadata | str | os.PathLike,
    *,
    epsilon: float,
    delta: float,
    distance: int = 0,
) -> dict[str, Any]:
    """Owner-only privacy report: one entry per output column, in SELECT order.

    ``elastic_sensitivity`` is ES at ``distance``. A pure release has
    ``smooth_sensitivity`` None and ``delta`` 0. Errors raise the dpsql exception classes.
    """
    md = _load(metadata)
    try:
        return _report(sql, md, epsilon, delta, distance)
    except Error:
        if public_query(sql, md) is None:
            raise
        return {"public": True, "epsilon": 0.0, "delta": 0.0, "note": PUBLIC_NOTE}


def _report(sql: str, md: Metadata, epsilon: float, delta: float, distance: int
            ) -> dict[str, Any]:
    """:func:`explain` through the private pipeline (raises its refusal)."""
    if mentions_wrapper(sql):  # dpsql.sample_aggregate
        return explain_sample_aggregate(sql, md, epsilon)
    chosen = analyze_selection(sql, md)
    if chosen is not None:  # MIN / MAX / quantiles, top-k (dpsql.analysis.selection_explain)
        return selection_report(chosen, Budget(epsilon, delta).epsilon)
    request = _request(sql, md)
    if isinstance(request, QueryAnalysis):
        return explain_report(request, epsilon, delta, distance)
    releases = []
    for name, analysis, share in _releases(request, Budget(epsilon, delta)):
        part = (explain_report(analysis, share.epsilon, share.delta, distance)
                if share is not None else {"public": True})
        releases.append({"release": name, **part})
    return {
        "releases": releases,
        "epsilon": sum(r.get("epsilon", 0.0) for r in releases),
        "delta": sum(r.get("delta", 0.0) for r in releases),
        "distance": distance,
        "post_processing": request.post.sql(dialect=DIALECT) if request.post is not None
        else None,
    }


def _request(sql: str, md: Metadata) -> QueryAnalysis | BlockQuery:
    """One release (analysed with unknown key types allowed, see the module docstring), or,
    when that refuses, a query of several releases (dpsql.analysis.blocks) if it is one.
    Under a privacy unit, the unit's analysis (dpsql.units), which reads no max frequency."""
    if md.privacy_unit is not None:
        return analyze_request(sql, md)
    try:
        return analyze(sql, md, allow_unknown_key_types=True)
    except Error as single:
        try:
            request = analyze_request(sql, md)
        except Error:
            raise single from None
        if isinstance(request, BlockQuery):
            return request
        raise


def _releases(request: BlockQuery, budget: Budget
              ) -> list[tuple[str, QueryAnalysis, Budget | None]]:
    """(name, analysis, its share of ``budget``) of every release, in the order they run."""
    names = [b.name for b in request.blocks] + (["final query"] if request.final else [])
    analyses = request.analyses
    return list(zip(names, analyses, split_budget(list(analyses), budget), strict=True))


def explain_text(
    sql: str,
    metadata: Metadata | str | os.PathLike,
    *,
    epsilon: float,
    delta: float,
    distance: int = 0,
) -> str:
    """A readable derivation: the relational tree with stabilities and max frequencies, then
    each measurement's ES, smoothing scan, S and noise scale."""
    md = _load(metadata)
    try:
        return _text(sql, md, epsilon, delta, distance)
    except Error:
        if public_query(sql, md) is None:
            raise
        return PUBLIC_NOTE


def _text(sql: str, md: Metadata, epsilon: float, delta: float, distance: int) -> str:
    """:func:`explain_text` through the private pipeline (raises its refusal)."""
    if mentions_wrapper(sql):  # dpsql.sample_aggregate
        return explain_sample_aggregate_text(sql, md, epsilon)
    chosen = analyze_selection(sql, md)
    if chosen is not None:
        return "\n".join(selection_lines(chosen, Budget(epsilon, delta).epsilon))
    request = _request(sql, md)
    if isinstance(request, QueryAnalysis):
        return "\n".join(_analysis_lines(request, epsilon, delta, distance))
    n = len(request.analyses)
    lines = [f"a query of {n} release{'' if n == 1 else 's'} (release blocks, "
             "dpsql/analysis/blocks.py): each is analysed and noised as a query of its own, "
             f"epsilon {epsilon:g} and delta {delta:g} split over them (basic composition)"]
    for name, analysis, share in _releases(request, Budget(epsilon, delta)):
        lines += ["", f"== release {name}"]
        if share is None:
            lines.append("  public tables only: exact, free")
            continue
        lines += ["  " + line for line in _analysis_lines(analysis, share.epsilon, share.delta,
                                                          distance)]
    if request.post is not None:
        lines += ["", "post-processing over the releases' noisy rows (no private table):",
                  "  " + request.post.sql(dialect=DIALECT)]
    return "\n".join(lines)


def _avg_lines(analysis: QueryAnalysis, plans: Sequence[NoisePlan]) -> list[str]:
    """Which output columns get a 95% interval per row (a bare AVG of pure measurements:
    dpsql.release.avg_rows), from the SQL and the plans' public parameters."""
    if not isinstance(analysis.query, exp.Select):
        return []
    out = []
    for spec in avg_intervals(analysis, analysis.query):
        if any(measurement_half_width(plans[i], MEASUREMENT_CONFIDENCE, 1) is None
               for i in (spec.total, spec.count)):
            continue
        low, high = spec.bounds
        out.append(f"  {analysis.columns[spec.position].name}: noisy SUM / noisy COUNT per "
                   f"row, within [{low:g}, {high:g}]; a 95% interval per row, the ratio's "
                   "range over their 97.5% half-widths (post-processing of the release)")
    return ["", "output intervals:", *out] if out else []


def _analysis_lines(analysis: QueryAnalysis, epsilon: float, delta: float,
                    distance: int) -> list[str]:
    """The derivation of one release (see :func:`explain_text`)."""
    if analysis.unit is not None:
        plans, selection = _plans(analysis, Budget(epsilon, delta), 0)
        return unit_lines(analysis, plans, selection, epsilon) + _avg_lines(analysis, plans)
    plans, selection = _plans(analysis, Budget(epsilon, delta), distance)
    lines = ["query (qualified):", "  " + analysis.query.sql(dialect=DIALECT), "",
             "relational tree (S(k): stability at distance k):"]
    _tree_lines(analysis.tree, 1, distance, lines)
    if analysis.max_frequencies_used:
        lines += ["", "max frequencies used (mf_k):"]
        lines += [f"  {m}" for m in analysis.max_frequencies_used]
    if analysis.unchecked_key_types:
        lines += ["", "key types NOT checked (no type declared, no database given): the numbers "
                  "assume each key equality compares stored values without a lossy cast; a run "
                  "takes the types from the database and rejects mismatched keys (declare "
                  "type: or pass --database to check them here):"]
        lines += [f"  {pair}" for pair in analysis.unchecked_key_types]
    if analysis.group_keys:
        lines += ["", "group keys (every domain value is released, empty bins too, except values "
                  "a WHERE/ON condition on the key column alone excludes):"]
        for key in analysis.group_keys:
            d = key.domain
            src = f"{d.table}.{d.column}" if d.table else f"{len(d.values or ())} listed values"
            if key.derived_domain is not None:
                src = f"derived: {key.derived_domain.label}"
            if key.partition:
                src = "none: groups from the data, by partition selection (below)"
            lines.append(f"  {key.node.sql(dialect=DIALECT)}: domain {src}")
    if selection is not None:
        lines += _selection_lines(selection)
    lines += ["", f"measurements (epsilon {epsilon:g}, delta {delta:g} split evenly"
              + (", after the selection's share" if selection is not None else "") + "):"]
    for p in plans:
        m = p.measurement
        lines.append(f"  {m.label}")
        lines.append(f"    ES(k) = {m.sensitivity};  ES({distance}) = {p.elastic_sensitivity:g}")
        if p.smoothed:
            sm = p.smoothed
            lines.append(
                f"    smoothed: beta = {sm.beta:.6g}, scanned k = 0..{sm.k_scan}, "
                f"S = {sm.smooth_sensitivity:.12g} at k = {sm.k_argmax}"
            )
            lines.append(
                f"    Laplace scale 2S/epsilon = {p.scale:.12g}  "
                f"(epsilon {p.epsilon:g}, delta {p.delta:g})"
            )
        else:
            lines.append(
                f"    pure (ES does not depend on k): Laplace scale ES/epsilon = {p.scale:.12g}  "
                f"(epsilon {p.epsilon:g}, delta 0)"
            )
    return lines + _avg_lines(analysis, plans)


def _selection_lines(plan: SelectionPlan) -> list[str]:
    curve = ", ".join(f"n={n}: {plan.keep_probability(n):.3g}" for n in EXPLAIN_SIZES)
    return [
        "", "partition selection (a group is released iff its row count + discrete Laplace "
        "noise >= tau; dpsql/noise/partition.py):",
        f"  share: epsilon {plan.epsilon:g}, delta {plan.delta:g} "
        + ("(the COUNT(*)'s share: its noisy counts are the selection's; and all of delta)"
           if plan.shared is not None else "(one share of the even split, and all of delta)"),
        f"  stability S = {plan.stability}: one change moves at most {plan.stability} row(s), "
        f"touching at most {2 * plan.stability} groups",
        f"  noise scale 2S/epsilon = {plan.scale:.6g}, threshold tau = {plan.threshold}",
        f"  P(a group of n rows is kept): {curve}",
    ]


def _tree_lines(node: Derivation, depth: int, k: int, out: list[str]) -> None:
    pad = "  " * depth
    out.append(f"{pad}{node.label}: S(k) = {node.stability}  [S({k}) = {node.stability.at(k):g}]")
    out.extend(f"{pad}    {d}" for d in node.details)
    for child in node.children:
        _tree_lines(child, depth + 1, k, out)
