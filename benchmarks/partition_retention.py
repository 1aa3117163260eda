"""Partition selection's retention curve (issue #16): P(a group of n rows is kept) at
epsilon 1, delta 1e-5, exactly (dpsql.noise.partition.keep_probability) and sampled through
dpsql.noise.partition.select with the production sampler.

    python -m benchmarks.partition_retention [--draws 100000] [--out benchmarks/results]

Rows: dpsql's selection with the whole epsilon (a key-only release, or GROUP BY ... COUNT(*),
whose COUNT is the selection's own noisy count) and with the share one other aggregate leaves
it (epsilon/2, e.g. GROUP BY ... SUM(x)); and, as the issue's reference, the
optimal mechanism of Desfontaines et al. (PoPETs 2022) for one touched group per change
(add/remove-one-user neighbours, C = 1), which dpsql's change-one-row neighbours (C = 2: a row
leaves one group and joins another) cannot use as is. Under a privacy unit (issue #17,
dpsql.noise.unit_partition: add/remove one unit, kappa = max_groups groups per unit) the same
curves at kappa = 1 (one person, one group: the optimal mechanism's setting) and kappa = 2,
n counting units. Writes partition-retention.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from dpsql.budget import Budget
from dpsql.noise import unit_partition
from dpsql.noise.partition import plan_selection, select

EPSILON, DELTA = 1.0, 1e-5
SIZES = tuple(range(1, 81))
HERE = Path(__file__).resolve().parent


def _first(curve: dict[int, float], level: float) -> int | None:
    return next((n for n, p in curve.items() if p >= level), None)


def run(draws: int) -> dict:
    rows = {}
    curves = (
        ("dpsql, GROUP BY + COUNT(*) or key-only (selection eps 1)", EPSILON, None),
        ("dpsql, GROUP BY + one other aggregate (selection eps 0.5)", EPSILON / 2, None),
        ("dpsql under a unit, kappa 1: GROUP BY + COUNT(*) (C = 1) or key-only (eps 1)",
         EPSILON, 1),
        ("dpsql under a unit, kappa 1: GROUP BY + one other aggregate (eps 0.5)",
         EPSILON / 2, 1),
        ("dpsql under a unit, kappa 2: GROUP BY + COUNT(*) (C = 1) or key-only (eps 1)",
         EPSILON, 2),
    )
    for label, share, kappa in curves:
        plan = (plan_selection(1.0, Budget(share, DELTA)) if kappa is None
                else unit_partition.plan_selection(kappa, Budget(share, DELTA)))
        exact = {n: plan.keep_probability(n) for n in SIZES}
        sampled = {}
        for n in (plan.threshold - 5, plan.threshold, plan.threshold + 5):
            kept = select(np.full(draws, n, dtype=np.int64), plan)
            sampled[n] = len(kept) / draws
        rows[label] = {
            "neighbours": plan.relation, "kappa": kappa,
            "epsilon_selection": share, "delta": DELTA, "threshold": plan.threshold,
            "noise_scale": plan.scale, "n_at_50pct": _first(exact, 0.5),
            "n_at_99pct": _first(exact, 0.99), "keep_probability": exact,
            "sampled": sampled, "draws": draws,
        }
    pi = unit_partition.optimal_keep(EPSILON, DELTA, max(SIZES))
    optimal = {n: pi[n] for n in SIZES}
    rows["optimal, one touched group (Desfontaines et al.; not dpsql's neighbours)"] = {
        "epsilon_selection": EPSILON, "delta": DELTA, "n_at_50pct": _first(optimal, 0.5),
        "n_at_99pct": _first(optimal, 0.99), "keep_probability": optimal,
    }
    return {"epsilon": EPSILON, "delta": DELTA, "curves": rows,
            "goal": ">= 50% kept at n <= 12, >= 99% at n <= 16 (the optimal mechanism, C = 1)"}


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
    print(path)


if __name__ == "__main__":
    main()
