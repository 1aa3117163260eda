"""Issue #18's accounting scenario: 100 counts (sensitivity 1) under a total (epsilon 1, delta
1e-6), and the per-query noise each budget filter allows (pure arithmetic, no data).

Run from the repository root: ``python -m benchmarks.composition`` (writes
``benchmarks/results/composition.json`` and prints the table). The standard deviations are
exact for the noise dpsql samples (discrete Laplace: sqrt(2p)/(1-p), p = exp(-1/b); discrete
Gaussian: below sigma, taken as sigma). The Rényi-filter and GDP-filter rows are measured
through the real ledger: the charges are made and ``charges_accepted`` counts them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from dpsql.accounting.curves import _laplace_curve
from dpsql.accounting.renyi import best_laplace_scale, zcdp_budget
from dpsql.noise.gaussian import analytic_sigma
from dpsql.noise.gdp import gdp_budget

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


def ledger_gdp_sigma() -> tuple[float, float, int]:
    """Through the real ledger (a temporary file) under the GDP filter: the smallest sigma (to
    2^-30 relative) at which QUERIES unit counts of discrete Gaussian noise N_Z(0, sigma^2),
    each charged the mu its curve certifies (dpsql.noise.gdp), fit (EPSILON, DELTA); that mu;
    and how many such charges the ledger then accepted."""
    import tempfile
    from fractions import Fraction

    from dpsql.accounting import Ledger
    from dpsql.accounting.curves import ALPHAS, PrivacyCurve
    from dpsql.accounting.filters import BudgetFilter
    from dpsql.errors import BudgetExhaustedError
    from dpsql.noise.gdp import gaussian_mu

    def curve(sigma: float) -> PrivacyCurve:
        mu = gaussian_mu(sigma, 1)
        assert mu is not None
        rho = 1.0 / (2.0 * sigma * sigma)
        return PrivacyCurve(tuple(rho * a for a in ALPHAS), rho, mu=mu)

    with tempfile.TemporaryDirectory() as tmp, Ledger(Path(tmp) / "l.sqlite") as book:
        book.set_budget("db", "a", EPSILON, DELTA, filter="gdp")
        status = book.status("db", "a")
        rule = BudgetFilter("gdp", None, EPSILON, DELTA)

        def fits(sigma: float) -> bool:
            cost = rule.cost(curve(sigma))
            assert cost is not None
            return QUERIES * Fraction(cost) <= Fraction(status.filter_total)

        lo, hi = 40.0, 50.0
        while hi - lo > 2.0**-30 * hi:
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if fits(mid) else (mid, hi)
        accepted = 0
        try:
            for _ in range(QUERIES + 1):
                book.charge("db", "a", fingerprint="q", epsilon=0.0, delta=0.0,
                            mechanism="discrete_gaussian", curve=curve(hi))
                accepted += 1
        except BudgetExhaustedError:
            pass
        mu = curve(hi).mu
        assert mu is not None
    return hi, mu, accepted


def run() -> dict:
    basic_scale = QUERIES / EPSILON  # basic composition: epsilon / 100 each, pure
    renyi_scale, alpha = best_laplace_scale(QUERIES, EPSILON, DELTA)
    rho = zcdp_budget(EPSILON, DELTA)
    zcdp_sigma = 1.0 / math.sqrt(2.0 * rho / QUERIES)
    # for comparison only: continuous Gaussians composed exactly (GDP), not dpsql's sampler
    gdp_sigma = analytic_sigma(1.0, EPSILON, DELTA) * math.sqrt(QUERIES)
    ledger_eps, ledger_alpha, accepted = ledger_laplace_epsilon()
    gdp_sigma_ledger, gdp_mu, gdp_accepted = ledger_gdp_sigma()
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
        {"filter": "GDP filter (Smith-Thakurta), discrete Gaussian",
         "per_query_std": gdp_sigma_ledger, "sigma": gdp_sigma_ledger,
         "mu_per_query": gdp_mu, "mu_total": gdp_budget(EPSILON, DELTA),
         "charges_accepted": gdp_accepted},
    ]
    return {"queries": QUERIES, "epsilon": EPSILON, "delta": DELTA, "rows": rows,
            "targets": {"renyi_laplace_std": 63.0, "zcdp_gaussian_std": 42.0},
            "notes": {"zcdp_gaussian_std": (
                "42 is infeasible for any Gaussian mechanism at sensitivity 1: 100 Gaussians of "
                "sigma s compose to exactly (10/s)-GDP, which is (1, 1e-6)-DP iff 10/s <= "
                f"{gdp_budget(EPSILON, DELTA):.5f}, i.e. s >= {gdp_sigma:.4f}; dpsql's GDP "
                f"filter reaches {gdp_sigma_ledger:.4f} with the discrete Gaussian (its "
                "certified mu is a relative ~2.3e-5 above 1/s)")}}


def main() -> None:
    result = run()
    out = Path(__file__).parent / "results" / "composition.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for row in result["rows"]:
        print(f"{row['per_query_std']:8.2f}  {row['filter']}")
    print(out)


if __name__ == "__main__":
    main()
