"""The owner-facing report (``dpsql explain``) of a release under a privacy unit
(dpsql.units): the lines :func:`dpsql.analysis.explain.explain_text` shows for it, for the
data owner like the rest of explain."""

from __future__ import annotations

from collections.abc import Sequence

from dpsql.analysis.model import QueryAnalysis
from dpsql.analysis.parse import DIALECT
from dpsql.noise.partition import EXPLAIN_SIZES, SelectionPlan
from dpsql.noise.plan import NoisePlan
from dpsql.noise.r2t import levels as r2t_levels
from dpsql.noise.r2t_levels import fine_levels
from dpsql.release.record import r2t_note
from dpsql.units.noise import BETA as R2T_BETA


def unit_lines(analysis: QueryAnalysis, plans: Sequence[NoisePlan],
               selection: SelectionPlan | None, epsilon: float) -> list[str]:
    """The derivation of a release under a privacy unit (dpsql.units) with its noise plans
    and partition selection at ``epsilon``: where each row's unit comes from, the bounds, and
    each measurement's public noise scales."""
    release = analysis.unit
    assert release is not None
    unit = release.unit
    src = release.source
    path = "".join(f" -> {h.table}[{h.key}].{h.column}" for h in src.hops)
    lines = ["query (qualified):", "  " + analysis.query.sql(dialect=DIALECT), "",
             f"privacy unit: {release.label} (neighbours add or remove one unit with every row "
             "linked to it)",
             f"  unit of each aggregated row: {src.description}{path}"]
    if not release.more and release.derived is None:  # dpsql.units.rewrite: in full
        lines += ["  rows of no unit (a NULL path, or a via key matching no row): the same in "
                  "both neighbours, counted in full (never truncated, clamped or limited to "
                  "max_groups); an id missing from the unit table, on a direct path or a via "
                  "to the unit's id, is still that unit, bounded like any other"]
    for other, osrc in release.more:  # two units (dpsql.units.multi)
        opath = "".join(f" -> {h.table}[{h.key}].{h.column}" for h in osrc.hops)
        lines += [f"  its {other.table} unit: {osrc.description}{opath}",
                  "  each level truncates the (unit, unit) pairs by R2T's LP, solved exactly "
                  "as a max-flow (either unit's removal moves it by at most tau)"]
    if release.r2t and release.more:  # R2T's own levels B^j (dpsql.units.grid, fine)
        fine = fine_levels(unit.max_contribution, unit.level_base)
        lines += [f"  R2T: {len(fine)} truncation levels {unit.level_base:g}^j = "
                  f"{fine[0]:g}..{fine[-1]:.10g} rows for a COUNT (max_contribution "
                  f"{unit.max_contribution}; a SUM's in value units, below), beta "
                  f"{R2T_BETA:g}"]
    elif release.r2t:
        taus = r2t_levels(unit.max_contribution, unit.level_base)
        lines += [f"  R2T: {len(taus)} truncation levels floor({unit.level_base:g}^j) = "
                  f"{taus[0]}..{taus[-1]} rows for a COUNT (max_contribution "
                  f"{unit.max_contribution}; a SUM's in value units, below), beta "
                  f"{R2T_BETA:g}"]
    elif release.derived is not None:  # dpsql.units.derived
        lines += [f"  {release.derived}: each unit is at most one row there, so at most one "
                  "group, once (kappa = C = 1, by the SQL)"]
    elif release.alone is not None:  # dpsql.units.analysis.unit_table_alone
        lines += [f"  {release.alone}: each unit is one row there, so at most one group, once "
                  "(kappa = C = 1; run as the two-stage at those bounds)"]
    else:
        lines += [f"  two-stage: each unit keeps {unit.max_groups} group(s) (max_groups), at most "
                  f"{unit.max_rows_per_group} row(s) each (max_rows_per_group)"]
    if selection is not None:
        lines += _selection_lines(selection)
    lines += ["", f"measurements (epsilon {epsilon:g} split evenly"
              + (", after the selection's share" if selection is not None else "") + "):"]
    for p in plans:
        lines.append(f"  {p.measurement.label}")
        if p.r2t is not None:
            for pp in p.r2t:
                part = "non-negative part" if pp.part.sign > 0 else "non-positive part"
                scales = ", ".join(f"{x:.6g}" for x in pp.scales)
                grid = ("" if pp.part.integer else
                        f", levels in value units up to {pp.max_contribution}")
                lines.append(f"    R2T {part} (row bound {pp.part.bound:g}{grid}, epsilon "
                             f"{pp.epsilon:g}): level scales {scales}")
        else:
            lines.append(f"    sensitivity {p.elastic_sensitivity:g} (public): Laplace scale "
                         f"{p.scale:.6g}  (epsilon {p.epsilon:g})")
    for col in analysis.columns:  # under R2T: what an AVG's interval is, or why none
        note = r2t_note(col.function, col.bare_aggregate, [plans[i] for i in col.measurements])
        lines += [f"  column {col.name}: {note}"] if note is not None else []
    return lines


def _selection_lines(plan: SelectionPlan) -> list[str]:
    """Partition selection under a privacy unit (dpsql.noise.unit_partition): Laplace
    thresholding, or at kappa = 1 without a shared COUNT(*) the optimal mechanism
    (dpsql.noise.optimal_partition)."""
    curve = ", ".join(f"n={n}: {plan.keep_probability(n):.3g}" for n in EXPLAIN_SIZES)
    share = (f"  share: epsilon {plan.epsilon:g}, delta {plan.delta:g} "
             + ("(the COUNT(*)'s share: its noisy counts are the selection's; and all of delta)"
                if plan.shared is not None else "(one share of the even split, and all of delta)"))
    if plan.keep_table is not None:
        table = plan.keep_table
        return [
            "", f"partition selection, {plan.mechanism}: one unit is in at most kappa = 1 "
            "group, so each group of n units is kept independently with the largest "
            "probability pi(n) that (epsilon, delta)-DP allows; only the set is released "
            "(dpsql/noise/optimal_partition.py):",
            share,
            "  pi(n) = min(e^eps pi(n-1) + delta, 1 + e^-eps (pi(n-1) + delta - 1), 1), "
            f"pi(n) = 1 from n = {len(table) - 1}",
            f"  P(a group of n units is kept): {curve}",
        ]
    return [
        "", "partition selection, Laplace thresholding (a group is released iff its number "
        "of kept units + discrete Laplace noise >= tau; dpsql/noise/unit_partition.py):",
        share,
        f"  one unit is in at most kappa = {plan.stability} group(s): noise scale "
        f"kappa/epsilon = {plan.scale:.6g}, threshold tau = {plan.threshold}",
        f"  P(a group of n units is kept): {curve}",
    ]
