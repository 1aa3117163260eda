"""Why dpsql's R2T errors differ from R2T's published ones on the same unit: the level grid.

    python -m benchmarks.units_levels [--db PATH] [--draws N] [--out FILE]

For R2T's single-relation TPC-H queries (Q3, Q10, Q18 under customer; Q11, Q20 under supplier;
Q12 under orders) this reads each unit's contribution c_u once (the query grouped by the unit:
owner-side, exact) and **simulates** R2T's release ``max(0, max_j (Q(tau_j) + X_j - shift_j))``
with continuous Laplace noise (numpy; a simulation of the accuracy, never a release) under:

* ``dpsql``: dpsql.noise.r2t's scheme: ``tau_j = 2^j`` rows times the per-row bound b,
  ``j = 1..ceil(log2 GS)`` (20 levels for GS = 2^20), scale ``L tau_j b / epsilon``, shift
  ``scale ln((L + 1) / (2 beta))`` (dpsql.noise.r2t_plans.shift_tail). It should reproduce
  the ``units`` part's measured errors (a check on the simulation).
* ``base <k>``: the same with ``tau_j = k^j`` rows (L = ceil(log_k GS)): any public grid keeps
  the privacy argument (each level epsilon / L, a unit moves level j by at most ``tau_j b``).
* ``dpsql_r2t_grid``: what the ``units`` part now releases: dpsql's scheme on R2T's code's grid
  as declared in the unit metadata (``levels: {base: 5.5}``, GS floor(5.5^8) = 837,339 and
  ``max_sum`` the same: ``tau_j = floor(5.5^j)`` rows for a COUNT and value units for a SUM,
  dpsql.units.grid; 8 levels, dpsql's ``ln`` shift).
* ``dpsql_rows_grid``: the same grid in rows times the per-row bound b for a SUM (dpsql's rule
  before value units; equal to ``dpsql_r2t_grid`` for counts).
* ``increments``: what dpsql releases for one unit (dpsql.noise.r2t's noised increments,
  here with continuous noise and the simpler bound below): on the declared grid, Laplace noise
  on the increments ``Q(tau_j) - Q(tau_(j-1))`` (sensitivity ``d_j = tau_j - tau_(j-1)``,
  scale ``s_j = L d_j / epsilon``: epsilon / L each, pure DP by basic composition), the noisy
  levels their running sums, and each level shifted by a proven bound on its (beta / (L +
  1))-quantile: ``s_j (ln((L + 1) / (2 beta)) + sum_(i<j) -ln(1 - (s_i / s_j)^2))`` (``P(S_j >
  t) <= 1/2 e^(-t / s_j) prod_(i<j) E[e^(X_i / s_j)]``, conditioning on the lower increments;
  the scales must increase strictly).
* ``r2t_code``: hkustDB/Race-to-the-Top's ``Code/R2TSJF.py``: ``tau_j = 5.5^j`` in value units,
  ``j = 1..floor(log_5.5 GS)`` with GS = 10^6 (8 levels; the top one, 5.5^8 ~ 837,000, is below
  GS), scale ``L tau_j / epsilon``, shift ``scale log_2.9718(L / beta)`` (0.918 of the paper's
  ``ln``, larger than dpsql's ``ln((L + 1) / (2 beta))`` for 8 levels). This should reproduce
  the published figures.

Median over ``draws`` of ``|value - truth| / truth``; epsilon 0.8, beta 0.1 (the units part's).
Writes JSON (default ``benchmarks/results/units-levels-sf1.json``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from dpsql.noise.r2t import levels

from .units_queries import (
    GS,
    R2T,
    R2T_BETA,
    R2T_CODE_BASE,
    R2T_CODE_GS,
    R2T_EPSILON,
    R2T_FIGURES,
    UNITS,
)

HERE = Path(__file__).resolve().parent
DB = HERE / "data" / "sf1-tpchgen" / "tpch.duckdb"
#: query -> (unit table, per-row bound b of dpsql's levels: l_quantity's 50 for Q18's SUM; Q11's
#: SUM(ps_supplycost * ps_availqty / 1e6) lies in [1e-6, 9.999])
SINGLE: dict[str, tuple[str, float]] = {"Q3": ("customer", 1.0), "Q10": ("customer", 1.0),
                                        "Q18": ("customer", 50.0), "Q11": ("supplier", 9.999),
                                        "Q20": ("supplier", 1.0), "Q12": ("orders", 1.0)}
BASES = (4.0, 5.5)


def contributions(con: duckdb.DuckDBPyConnection, sql: str, unit: str) -> np.ndarray:
    """Each unit's contribution c_u: the query (a join containing the unit table) grouped by
    the unit's id."""
    column = UNITS[unit][0]
    rows = con.execute(f"{sql} GROUP BY {unit}.{column}").fetchall()
    return np.array([float(r[0]) for r in rows])


def simulate(c: np.ndarray, taus: np.ndarray, scales: np.ndarray, shifts: np.ndarray,
             draws: int, rng: np.random.Generator) -> float:
    truth = float(c.sum())
    q = np.array([np.minimum(c, t).sum() for t in taus])
    noisy = q + rng.laplace(size=(draws, len(taus))) * scales - shifts
    value = np.maximum(0.0, noisy.max(axis=1))
    return float(np.median(np.abs(value - truth)) / truth)


def _shift_log(n: int) -> float:
    """dpsql's per-level shift in noise scales: each level's one-sided tail at beta / (L + 1)
    (dpsql.noise.r2t_plans.shift_tail), continuous Laplace."""
    return math.log((n + 1) / (2 * R2T_BETA))


def grid(base: float, b: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = max(1, math.ceil(math.log(GS, base) - 1e-12))
    taus = np.array([base**j for j in range(1, n + 1)]) * b
    scales = n * taus / R2T_EPSILON
    return taus, scales, scales * _shift_log(n)


def declared_grid(b: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """dpsql's levels on the grid the units part declares (R2T's code's, floored), times b
    (b = 1: a COUNT's rows or a SUM's value units)."""
    taus = np.array(levels(R2T_CODE_GS, R2T_CODE_BASE), dtype=np.float64) * b
    n = len(taus)
    scales = n * taus / R2T_EPSILON
    return taus, scales, scales * _shift_log(n)


def simulate_increments(c: np.ndarray, draws: int, rng: np.random.Generator) -> float:
    """The ``increments`` candidate of the module docstring on the declared grid (value units
    for a SUM): noise on the level increments, proven per-level shifts."""
    taus = np.array(levels(R2T_CODE_GS, R2T_CODE_BASE), dtype=np.float64)
    n = len(taus)
    scales = n * np.diff(np.concatenate([[0.0], taus])) / R2T_EPSILON
    assert np.all(np.diff(scales) > 0)
    shifts = np.array([scales[j] * (_shift_log(n) - sum(
        math.log1p(-(scales[i] / scales[j]) ** 2) for i in range(j))) for j in range(n)])
    truth = float(c.sum())
    q = np.array([np.minimum(c, t).sum() for t in taus])
    noisy = q + np.cumsum(rng.laplace(size=(draws, n)) * scales, axis=1) - shifts
    value = np.maximum(0.0, noisy.max(axis=1))
    return float(np.median(np.abs(value - truth)) / truth)


def r2t_code_grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = int(math.log(1e6, 5.5))
    taus = np.array([5.5**j for j in range(1, n + 1)])
    scales = n * taus / R2T_EPSILON
    return taus, scales, scales * math.log(n / R2T_BETA, 2.9718)


def run(db: Path, draws: int, seed: int = 1) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    con = duckdb.connect(str(db), read_only=True)
    by_name = {q.name: q for q in R2T}
    out = []
    for name, (unit, b) in SINGLE.items():
        c = contributions(con, by_name[name].sql, unit)
        row: dict[str, Any] = {"name": name, "unit": unit, "units": len(c),
                               "largest_contribution": float(c.max()), "b": b,
                               "r2t_published": R2T_FIGURES[name]}
        row["dpsql"] = simulate(c, *grid(2.0, b), draws, rng)
        for base in BASES:
            row[f"base {base:g}"] = simulate(c, *grid(base, b), draws, rng)
        row["dpsql_r2t_grid"] = simulate(c, *declared_grid(1.0), draws, rng)
        row["dpsql_rows_grid"] = simulate(c, *declared_grid(b), draws, rng)
        row["increments"] = simulate_increments(c, draws, rng)
        row["r2t_code"] = simulate(c, *r2t_code_grid(), draws, rng)
        out.append(row)
    con.close()
    return {"epsilon": R2T_EPSILON, "beta": R2T_BETA, "max_contribution": GS, "draws": draws,
            "seed": seed, "simulated_with": "numpy continuous Laplace (not a release)",
            "queries": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.units_levels")
    p.add_argument("--db", type=Path, default=DB)
    p.add_argument("--draws", type=int, default=2000)
    p.add_argument("--out", type=Path, default=HERE / "results" / "units-levels-sf1.json")
    args = p.parse_args(argv)
    data = run(args.db, args.draws)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    for q in data["queries"]:
        print(q["name"], q["unit"], {k: f"{v:.3%}" for k, v in q.items()
                                    if k in ("dpsql", "dpsql_r2t_grid", "dpsql_rows_grid",
                                             "increments", "r2t_code", "r2t_published")
                                    or k.startswith("base")})
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
