"""Issue #18's accounting scenario: 100 counts (sensitivity 1) under a total (epsilon 1, delta
1e-6), and the per-query noise each budget filter allows (pure arithmetic, no data).

Run from the repository root: ``python -m benchmarks.composition`` (writes
``benchmarks/results/composition.json`` and prints the table). The standard deviations are
exact for the noise dpsql samples (discrete Laplace: sqrt(2p)/(1-p), p = exp(-1/b); discrete
Gaussian: below sigma, taken as sigma).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from dpsql.accounting.curves import _laplace_curve
from dpsql.accounting.renyi import best_laplace_scale, zcdp_budget
from dpsql.noise.gaussian import analytic_sigma

QUERIES, EPSILON, DELTA = 100, 1.0, 1e-6


def laplace_std(scale: float) -> float:
    p = math.exp(-1.0 / scale)
    return math.sqrt(2.0 * p) / (1.0 - p)


def ledger_laplace_epsilon() -> tuple[float, float, int]:
    """Through the real ledger (a temporary file): the largest per-query epsilon (to 1e-9
    relative) at which QUERIES unit counts fit a budget (EPSILON, DELTA) under the Rényi filter
    at its default order, the order, and how many such charges the ledger then accepted."""
    import tempfile

    from dpsql.accounting import Ledger
    from dpsql.errors import BudgetExhaustedError

    with tempfile.TemporaryDirectory() as tmp, Ledger(Path(tmp) / "l.sqlite") as book:
        book.set_budget("db", "a", EPSILON, DELTA, filter="renyi")
        status = book.status("db", "a")
        assert status.alpha is not None
        alpha, total = status.alpha, status.filter_total
        lo, hi = 0.0, EPSILON
        while hi - lo > 1e-9 * hi:
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if QUERIES * _laplace_curve([mid]).at(alpha) <= total else (lo, mid)
        accepted = 0
        try:
            for _ in range(QUERIES + 1):
                book.charge("db", "a", fingerprint="q", epsilon=lo, delta=0.0,
                            mechanism="discrete_laplace", curve=_laplace_curve([lo]))
                accepted += 1
        except BudgetExhaustedError:
            pass
    return lo, alpha, accepted


def run() -> dict:
    basic_scale = QUERIES / EPSILON  # basic composition: epsilon / 100 each, pure
    renyi_scale, alpha = best_laplace_scale(QUERIES, EPSILON, DELTA)
    rho = zcdp_budget(EPSILON, DELTA)
    zcdp_sigma = 1.0 / math.sqrt(2.0 * rho / QUERIES)
    # for comparison only: continuous Gaussians composed exactly (GDP), not dpsql's sampler
    gdp_sigma = analytic_sigma(1.0, EPSILON, DELTA) * math.sqrt(QUERIES)
    ledger_eps, ledger_alpha, accepted = ledger_laplace_epsilon()
    rows = [
        {"filter": "basic composition (the ledger's default filter), discrete Laplace",
         "per_query_std": laplace_std(basic_scale), "scale": basic_scale},
        {"filter": f"Rényi filter at alpha = {alpha:g}, discrete Laplace",
         "per_query_std": laplace_std(renyi_scale), "scale": renyi_scale, "alpha": alpha},
        {"filter": f"the ledger's Rényi filter (default alpha = {ledger_alpha:g}), discrete "
                   "Laplace", "per_query_std": laplace_std(1.0 / ledger_eps),
         "scale": 1.0 / ledger_eps, "epsilon_per_query": ledger_eps,
         "charges_accepted": accepted},
        {"filter": "zCDP filter (CKS conversion), discrete Gaussian",
         "per_query_std": zcdp_sigma, "sigma": zcdp_sigma, "rho_total": rho},
        {"filter": "exact Gaussian composition (GDP), continuous Gaussian: reference only",
         "per_query_std": gdp_sigma, "sigma": gdp_sigma},
    ]
    return {"queries": QUERIES, "epsilon": EPSILON, "delta": DELTA, "rows": rows,
            "targets": {"renyi_laplace_std": 63.0, "zcdp_gaussian_std": 42.0}}


def main() -> None:
    result = run()
    out = Path(__file__).parent / "results" / "composition.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for row in result["rows"]:
        print(f"{row['per_query_std']:8.2f}  {row['filter']}")
    print(out)


if __name__ == "__main__":
    main()
