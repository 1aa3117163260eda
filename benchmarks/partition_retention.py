"""Partition selection's retention curve (issue #16): P(a group of n rows (units) is kept) at
epsilon 1, delta 1e-5, exactly (``SelectionPlan.keep_probability``) and sampled through
dpsql.noise.partition.select with the production randomness.

    python -m benchmarks.partition_retention [--draws 100000] [--out benchmarks/results]

Rows: dpsql's selection with the whole epsilon (a key-only release, or GROUP BY ... COUNT(*),
whose COUNT is the selection's own noisy count) and with the share one other aggregate leaves
it (epsilon/2, e.g. GROUP BY ... SUM(x)), under dpsql's change-one-row neighbours (C = 2: a row
leaves one group and joins another: Laplace thresholding). Under a privacy unit (issue #17:
add/remove one unit, kappa = max_groups groups per unit, n counting units): at kappa = 1 the
mechanism dpsql DRAWS -- the optimal mechanism of Desfontaines et al. (PoPETs 2022,
dpsql.noise.optimal_partition) for a key-only release or one with other aggregates, Laplace
thresholding when the COUNT(*) (C = 1) is the selection's noisy count -- and kappa = 2
(thresholding). The float recurrence of the optimal mechanism is the reference. Writes
partition-retention.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from dpsql.budget import Budget
from dpsql.noise import unit_partition
from dpsql.noise.partition import SelectionPlan, plan_selection, select

EPSILON, DELTA = 1.0, 1e-5
SIZES = tuple(range(1, 81))
HERE = Path(__file__).resolve().parent
GOAL_50, GOAL_99 = 12, 16


def _first(curve: dict[int, float], level: float) -> int | None:
    return next((n for n, p in curve.items() if p >= level), None)


def _plan(share: float, kappa: int | None, optimal: bool) -> SelectionPlan:
    if kappa is None:
        return plan_selection(1.0, Budget(share, DELTA))
    if optimal:  # what unit_partition.plan_with_selection draws at kappa 1 (no shared COUNT)
        plan = unit_partition.plan_optimal(Budget(share, DELTA))
        assert plan is not None
        return plan
    return unit_partition.plan_selection(kappa, Budget(share, DELTA))


def run(draws: int) -> dict:
    rows = {}
    curves = (
        ("dpsql, GROUP BY + COUNT(*) or key-only (selection eps 1)", EPSILON, None, False),
        ("dpsql, GROUP BY + one other aggregate (selection eps 0.5)", EPSILON / 2, None, False),
        ("dpsql under a unit, kappa 1: key-only (eps 1), optimal mechanism",
         EPSILON, 1, True),
        ("dpsql under a unit, kappa 1: GROUP BY + one other aggregate (eps 0.5), optimal "
         "mechanism", EPSILON / 2, 1, True),
        ("dpsql under a unit, kappa 1: GROUP BY + COUNT(*) with C = 1 (eps 1; the COUNT is "
         "the noisy count), Laplace thresholding", EPSILON, 1, False),
        ("dpsql under a unit, kappa 2: GROUP BY + COUNT(*) (C = 1) or key-only (eps 1)",
         EPSILON, 2, False),
    )
    for label, share, kappa, optimal in curves:
        plan = _plan(share, kappa, optimal)
        exact = {n: plan.keep_probability(n) for n in SIZES}
        n50 = _first(exact, 0.5)
        assert n50 is not None
        sampled = {}
        for n in (n50 - 5, n50, n50 + 5):
            kept = select(np.full(draws, n, dtype=np.int64), plan)
            sampled[n] = len(kept) / draws
        rows[label] = {
            "neighbours": plan.relation, "kappa": kappa, "mechanism": plan.mechanism,
            "epsilon_selection": share, "delta": DELTA, "threshold": plan.threshold,
            "noise_scale": plan.scale, "n_at_50pct": n50,
            "n_at_99pct": _first(exact, 0.99), "keep_probability": exact,
            "sampled": sampled, "draws": draws,
        }
    pi = unit_partition.optimal_keep(EPSILON, DELTA, max(SIZES))
    optimal_curve = {n: pi[n] for n in SIZES}
    rows["optimal mechanism, float recurrence (Desfontaines et al.; the reference)"] = {
        "epsilon_selection": EPSILON, "delta": DELTA,
        "n_at_50pct": _first(optimal_curve, 0.5), "n_at_99pct": _first(optimal_curve, 0.99),
        "keep_probability": optimal_curve,
    }
    drawn = rows["dpsql under a unit, kappa 1: key-only (eps 1), optimal mechanism"]
    return {"epsilon": EPSILON, "delta": DELTA, "curves": rows,
            "goal": f">= 50% kept at n <= {GOAL_50}, >= 99% at n <= {GOAL_99} (the optimal "
                    "mechanism, one touched group)",
            "goal_met_under_a_unit_kappa_1": (drawn["n_at_50pct"] <= GOAL_50
                                              and drawn["n_at_99pct"] <= GOAL_99)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.partition_retention")
    p.add_argument("--draws", type=int, default=100_000)
    p.add_argument("--out", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    result = run(args.draws)
    path = args.out / "partition-retention.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for label, row in result["curves"].items():
        print(f"{label}: tau {row.get('threshold', '-')}, 50% at n = {row['n_at_50pct']}, "
              f"99% at n = {row['n_at_99pct']}")
    print("goal met under a unit, kappa 1:", result["goal_met_under_a_unit_kappa_1"])
    print(path)


if __name__ == "__main__":
    main()
