"""Red team: R2T's shifts at beta / (L + 1) (commit cb1bf10, dpsql.noise.r2t "Accuracy",
docs/privacy.md "Accuracy").

The claims attacked:

* (joint) with probability >= 1 - beta, ``Q(I) - 2 shift_j* <= value <= Q(I)`` (j* the first
  level covering the largest unit; beyond the top level j* = L and the lower end is
  ``Q(tau_L) - 2 shift_L``);
* (upper) ``P(value > Q(I)) <= beta L / (L + 1)``.

How. Counts: the EXACT probabilities of both miss events (no sampling): the two events are
disjoint (a level above Q(I) puts the value above the lower end), ``P(over) = 1 - P(every
N_j <= Q(I) - Q(tau_j) + shift_j)`` and ``P(under) = P(every N_j < lower - Q(tau_j) +
shift_j)`` (when the lower end is > 0); per-level noise is a product of closed-form discrete
Laplace CDFs, noised increments a dynamic programme over the running sum ``N_j = X_1 + .. +
X_j`` (convolve, cut the mass above the bound, convolve the next draw). Sums: the closed form
with the worst-case snapping (the data chosen so that the top level rounds up by exactly half
a grid step) and the real secure sampler through ``release_r2t_many`` (one-sided binomial
tests at ALPHA = 1e-6, as tests/statistical/test_r2t_accuracy.py).

What held (sweeps run while writing this file, kept here in small form):

* counts, exact, 11,418 (parameters, contributions) cases: GS 1..1000, base 2 / 2.2 / 3 / 5.5 /
  7, epsilon 0.05..1e6, beta 1e-8..0.999, increments on and off, j* at the first, a middle and
  the top level and a unit above GS: worst joint miss 0.990 beta (L = 1, beta 0.999), worst
  P(value > Q(I)) 0.9996 of beta L / (L + 1) (per-level, GS 1000 on base 5.5, beta 1e-8: the
  L upper tails are nearly disjoint and each nearly at its share). No violation; the union
  bound and the per-level tail ``p^(ceil(s)+1) / (1+p) < p^s / 2`` are tight, not loose.
* sums, real sampler, 100,000 draws each over b in {1e-300, 1e-9, 0.3, 1, 2.5, 3.7, 1e9,
  1e290}, worst-case snapping: worst joint 1.000 beta (L = 1, beta 0.99: exactly the
  bound, see the closed form below), no significant excess anywhere.
* the proof's logic (L upper tails + j*'s lower tail, union bound, j* fixed by the data,
  symmetric noise, snapping within the shifts' allowance) is sound.

What broke, and what was done (the tests at the end):

* Sums beyond ``release_sums``' saturation limit ``V = min(2^1020, g 2^1000)``: the value is
  clipped and the joint claim fails on every draw (values near 1e307, or epsilon ~1e300).
  Unreachable through the engine; dpsql.noise.r2t's contract now states the range ("Range
  (sums)"), and the tests pin both that these parameters are beyond it and that the engine's
  extremes stay far inside it.
* The proof text's "at most the paper's bound" was false for GS not a power of two and for a
  fractional tau*; the text now states the comparison that holds.
* beta = 1e-323 crashed plan_r2t (ZeroDivisionError: beta / (L + 1) underflowed); beta now
  has a floor, MIN_BETA = 1e-300.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy import stats

from dpsql.errors import NotSupportedError
from dpsql.noise.r2t import plan_r2t, release_r2t_many, truncated_sums

ALPHA = 1e-6


def _not_more_frequent(failures: int, n: int, rate: float) -> bool:
    return failures == 0 or float(stats.binom.sf(failures - 1, n, rate)) >= ALPHA


# ---------------------------------------------------------------------------------------------
# Exact law of the counts' misses
# ---------------------------------------------------------------------------------------------


def _cdf_le(scale: float, x: int) -> float:
    """P(X <= x) for X discrete Laplace(scale), x an integer."""
    a = 1.0 / scale
    p = math.exp(-a)
    if x >= 0:
        return 1.0 - math.exp(-a * (x + 1)) / (1.0 + p)
    return math.exp(a * x) / (1.0 + p)


def _pmf(scale: float, k: int) -> np.ndarray:
    a = 1.0 / scale
    p = math.exp(-a)
    return -math.expm1(-a) / (1.0 + p) * np.exp(-a * np.abs(np.arange(-k, k + 1)))


def _all_at_most(scales, bounds, increments: bool) -> float:
    """P(N_j <= bounds[j] for every j): N_j = X_j (per level) or X_1 + .. + X_j."""
    if not increments:
        return math.prod(_cdf_le(s, b) for s, b in zip(scales, bounds, strict=True))
    half = int(sum(40 * s for s in scales)) + 10  # mass beyond 40 scales: < e^-40 per draw
    law = np.zeros(2 * half + 1)
    law[half] = 1.0
    for s, b in zip(scales, bounds, strict=True):
        k = int(40 * s) + 5
        law = np.convolve(law, _pmf(s, k))[k:k + 2 * half + 1]
        cut = b + half
        if cut < 0:
            return 0.0
        law[cut + 1:] = 0.0
    return float(law.sum())


def _exact_misses(plan, q: np.ndarray, total: int, jstar: int) -> tuple[float, float]:
    """(P(value > Q(I)), P(value < lower end)) exactly, for a count plan."""
    shifts = [int(s) for s in plan.shifts]
    n = len(shifts)
    lower = int(q[jstar]) - 2 * shifts[jstar]
    over = 1.0 - _all_at_most(plan.scales, [total - int(q[j]) + shifts[j] for j in range(n)],
                              plan.increments)
    under = 0.0
    if lower > 0:  # value >= 0 always; N_j < u  <=>  N_j <= u - 1
        under = _all_at_most(plan.scales, [lower - int(q[j]) + shifts[j] - 1 for j in range(n)],
                             plan.increments)
    return over, under


def _jstar(c: np.ndarray, taus: tuple[int, ...], b: float = 1.0) -> int:
    top = float(np.max(c)) / b
    return next((j for j, t in enumerate(taus) if t >= top), len(taus) - 1)


def _patterns(taus: tuple[int, ...]) -> list[np.ndarray]:
    """j* at every level (two units there, three of one row), a unit far above GS, one-row
    units only (j* = 1 with every level equal to Q(I): every level can overshoot)."""
    out = [np.array([t, t, 1, 1, 1]) for t in taus]
    out.append(np.array([5 * taus[-1], 1, 1]))
    out.append(np.array([1, 1]))
    return out


CASES = [  # (GS, base, epsilon, beta, increments): small scales, so the exact law is cheap
    (2, 2, 1.0, 0.999, True),     # L = 1, beta near 1 (joint 0.990 beta measured)
    (2, 2, 4.0, 1e-8, True),      # L = 1, tiny beta
    (4, 2, 2.0, 0.3, True),       # base 2: equal first two increments (Theorem 2)
    (64, 2, 4.0, 0.1, True),      # L = 6, Theorem 1 above level 2
    (9, 2.2, 3.0, 0.5, True),     # base 2.2: levels 2, 4, 10
    (30, 5.5, 10.0, 1e-4, True),  # base 5.5, L = 2 (joint 0.980 beta, upper 0.973: tightest)
    (1000, 5.5, 20.0, 1e-8, False),  # per-level (LP-style), L = 5 (upper 0.9996 of its bound)
    (27, 3, 1e6, 0.1, True),      # epsilon huge: scales ~1e-5, every shift 1 step
    (16, 3, 1.0, 1e-4, True),     # L = 3, the upper bound at 0.978
]


@pytest.mark.parametrize(("gs", "base", "epsilon", "beta", "increments"), CASES)
def test_exact_joint_and_upper_miss_rates_for_counts(gs, base, epsilon, beta, increments):
    """Exact: no contribution pattern (j* first, middle, top, above GS) makes the joint miss
    exceed beta or the overshoot exceed beta L / (L + 1). Held (worst ratios in CASES)."""
    plan = plan_r2t(unit_bound=1, max_contribution=gs, epsilon=epsilon, beta=beta,
                    integer=True, base=base, increments=increments)
    n = len(plan.levels)
    for c in _patterns(plan.levels):
        q = truncated_sums(c, unit_bound=1, max_contribution=gs, base=base)
        over, under = _exact_misses(plan, q, int(c.sum()), _jstar(c, plan.levels))
        assert over + under <= beta * (1 + 1e-9), (c.tolist(), over, under)
        assert over <= beta * n / (n + 1) * (1 + 1e-9), (c.tolist(), over)


def test_exact_harness_catches_a_shift_one_step_short():
    """Power of the exact harness: on the tightest case found (GS 30, base 5.5, epsilon 10,
    beta 1e-4, j* = 1: joint 0.980 beta) shifts one step smaller already miss more than
    beta, so the exact checks above could fail on a shift too small by a single step."""
    plan = plan_r2t(unit_bound=1, max_contribution=30, epsilon=10.0, beta=1e-4, integer=True,
                    base=5.5)
    assert plan.increments and plan.levels == (5, 30)
    c = np.array([5, 5, 5, 1, 1, 1, 1, 1])  # Q(I) 20: the lower end 20 - 2 shift_1 > 0
    q = truncated_sums(c, unit_bound=1, max_contribution=30, base=5.5)
    over, under = _exact_misses(plan, q, int(c.sum()), 0)
    assert 0.97e-4 < over + under <= 1e-4  # measured 0.980e-4
    short = dataclasses.replace(plan, shifts=tuple(s - 1 for s in plan.shifts))
    over, under = _exact_misses(short, q, int(c.sum()), 0)
    assert over + under > 1e-4


# ---------------------------------------------------------------------------------------------
# Sums: the grid's snapping at its worst
# ---------------------------------------------------------------------------------------------


def test_sum_worst_case_snap_single_level_beta_near_one_exact():
    """L = 1, beta 0.99 (each share beta / 2 = 0.495), the data chosen so Q(I) / g sits on a
    half step (snapping rounds up by exactly g / 2, the whole allowance). The value exceeds
    Q(I) iff Y > k, k the shift's steps: P = p^(k+1) / (1+p) = 0.4949988 against the share 0.495
    (0.999998 of it: tight, held); Q(I) - 2 shift < 0, so that is the whole joint miss. Also
    sampled with the real sampler."""
    beta, gs, eps, b = 0.99, 2, 1.0, 1.0
    plan = plan_r2t(unit_bound=b, max_contribution=gs, epsilon=eps, beta=beta, integer=False)
    g, steps = plan.granularities[0], plan.scales[0] / plan.granularities[0]
    k = round(plan.shifts[0] / g - 0.5)
    assert plan.shifts[0] == g * (k + 0.5)
    p = math.exp(-1.0 / steps)
    upper = p ** (k + 1) / (1 + p)
    assert upper <= beta / 2
    assert upper > 0.9999 * beta / 2  # tight: no room at all
    # sampled: Q(I) = 3.5 g (a half step), one unit
    total = 3.5 * g
    c = np.array([total])
    q = truncated_sums(c, unit_bound=b, max_contribution=gs)
    n = 100_000
    rel = release_r2t_many(np.tile(q, (n, 1)), unit_bound=b, max_contribution=gs, epsilon=eps,
                           beta=beta, integer=False)
    over = int(np.count_nonzero(rel.value > total))
    assert _not_more_frequent(over, n, beta / 2), over
    under = int(np.count_nonzero(rel.value < total - 2 * plan.shifts[0]))
    assert under == 0  # Q(I) - 2 shift < 0 here: the lower end cannot be missed


@pytest.mark.parametrize(("b", "gs", "epsilon", "beta", "base", "increments"), [
    (1e-9, 4, 1.0, 0.3, 2, True),      # tiny bound, base 2 (Theorem 2 on the grid)
    (1e290, 8, 1.0, 0.3, 2, True),     # huge bound (far from saturation: Q(I) ~ 1e292)
    (0.3, 64, 2.0, 0.5, 2, False),     # per-level sums, L = 6
    (1.0, 100, 50.0, 0.05, 2.2, True),  # base 2.2, L = 6 (worst sampled joint: 0.88 beta)
    (3.7, 30, 1.0, 0.9, 5.5, True),    # base 5.5, beta near 1
])
def test_sum_release_sampled_with_worst_case_snapping(b, gs, epsilon, beta, base, increments):
    """Real sampler, 50,000 draws per pattern: j* at every level and a unit above GS, plus a
    tiny unit making Q(tau_L) / g_L a half step (top level rounds up by its whole allowance).
    Held: joint <= beta and P(value > Q(I)) <= beta L / (L + 1), no significant excess (worst
    measured while writing: 0.88 beta joint, 0.93 of the upper bound)."""
    plan = plan_r2t(unit_bound=b, max_contribution=gs, epsilon=epsilon, beta=beta,
                    integer=False, base=base, increments=increments)
    taus, g_top, n_lv = plan.levels, plan.granularities[-1], len(plan.levels)
    n = 50_000
    for js in range(n_lv + 1):
        units = [taus[js] * b] * 2 + [0.3 * b] * 3 if js < n_lv else [4 * taus[-1] * b, 0.3 * b]
        top = float(truncated_sums(np.array(units), unit_bound=b, max_contribution=gs,
                                   base=base)[-1])
        units.append(((0.5 - (top / g_top) % 1.0) % 1.0) * g_top)
        c = np.array(units, dtype=np.float64)
        q = truncated_sums(c, unit_bound=b, max_contribution=gs, base=base)
        total = float(c.sum())
        jstar = _jstar(c, taus, b)
        rel = release_r2t_many(np.tile(q, (n, 1)), unit_bound=b, max_contribution=gs,
                               epsilon=epsilon, beta=beta, integer=False, base=base,
                               increments=increments)
        over = int(np.count_nonzero(rel.value > total))
        under = int(np.count_nonzero(rel.value < q[jstar] - 2 * plan.shifts[jstar]))
        assert _not_more_frequent(over + under, n, beta), (js, over, under)
        assert _not_more_frequent(over, n, beta * n_lv / (n_lv + 1)), (js, over)


# ---------------------------------------------------------------------------------------------
# The claims' range (found here; now in dpsql.noise.r2t's contract)
# ---------------------------------------------------------------------------------------------


def _saturation_limit(g: float) -> float:
    """release_sums' clip: ``min(2^1020, g 2^1000)`` (dpsql.noise.mechanisms)."""
    return 2.0**1020 if g >= 2.0**20 else math.ldexp(g, 1000)


def test_a_huge_epsilon_sum_is_refused_before_it_saturates():
    """The second case below was (b) b = 1, epsilon 1e300: every value 2^-15 against 2. Every
    sum's epsilon per draw is now at most 2^900 (dpsql.noise.mechanisms.MAX_SUM_EPSILON, the
    extremes red team: the engine released SUM = 145 as 2^-13 there), so R2T refuses it."""
    with pytest.raises(NotSupportedError, match="at most 2"):
        plan_r2t(unit_bound=1.0, max_contribution=2, epsilon=1e300, beta=0.1, integer=False)


@pytest.mark.parametrize(("b", "epsilon", "units"), [
    pytest.param(2.0**998, 1.0, 2**22, id="huge-bound-Q-2^1021"),
])
def test_sum_beyond_the_saturation_limit_is_outside_the_claim(b, epsilon, units):
    """Found at 8c51aa6: release_sums (each sum level's draw) saturates a value into [-V, V],
    V = min(2^1020, g 2^1000), and R2T's snapping argument assumed no clip, so with absurd
    magnitudes every release missed "Q(I) - 2 shift_j* <= value <= Q(I)" (GS 2, L = 1, beta
    0.1): (a) b = 2^998, epsilon 1, 2^22 units of 2 rows, Q(I) = 2^1021 and every value ~2^1020;
    (b) b = 1, epsilon 1e300 (V = 2^-16), one unit of 2 rows, every value 2^-15 against 2.
    Neither is reachable through the engine (SUM parts have b = 1 and levels below 2^62; the
    ledger caps epsilon at 10^6), and r2t.py's contract now states the range ("Range (sums)").
    This test pins both halves: these parameters are beyond the stated limit, and beyond it the
    claim does fail (the range is needed, not decorative)."""
    gs, beta, n = 2, 0.1, 200
    plan = plan_r2t(unit_bound=b, max_contribution=gs, epsilon=epsilon, beta=beta,
                    integer=False)
    c = np.full(units, 2 * b)
    q = truncated_sums(c, unit_bound=b, max_contribution=gs)
    total = float(q[-1])
    assert np.isfinite(total) and total == 2 * b * units
    assert total > _saturation_limit(plan.granularities[0])  # outside the stated range
    rel = release_r2t_many(np.tile(q, (n, 1)), unit_bound=b, max_contribution=gs,
                           epsilon=epsilon, beta=beta, integer=False)
    misses = int(np.count_nonzero((rel.value > total)
                                  | (rel.value < total - 2 * plan.shifts[0])))
    assert misses == n  # every draw: the clip, not the noise


def test_the_engines_range_stays_far_inside_the_saturation_limit():
    """The contract's reach argument, at its extremes: a SUM part's levels in value units
    (b = 1) up to just below 2^62, the ledger's largest epsilon (10^6), and 2^63 units each at
    the top level: every level's (or increment's) largest value is at most 2^83 of its own
    noise scales (g 2^1000 is at least 2^980 of them) and below 2^125 (against 2^1020)."""
    units = 2.0**63
    for epsilon in (1e-3, 1.0, 1e6):
        for increments in (True, False):
            plan = plan_r2t(unit_bound=1.0, max_contribution=2**61, epsilon=epsilon,
                            integer=False, increments=increments)
            previous = 0
            for tau, scale, g in zip(plan.levels, plan.scales, plan.granularities,
                                     strict=True):
                reach = units * ((tau - previous) if plan.increments else tau)
                previous = tau
                assert reach <= 2.0**83 * scale and reach < 2.0**125
                assert math.log2(g) + 1000 >= 980 + math.log2(scale)  # g 2^1000 >= 2^980 scales
                assert reach < _saturation_limit(g)


def test_proof_text_bias_bound_against_the_papers():
    """Found at 8c51aa6 in the proof text (not the probability guarantee): r2t.py said dpsql's
    bias bound ``2 B L ln((L + 1) / (2 beta)) max(ceil(tau*), 1) b / epsilon`` is, for B = 2,
    "at most the paper's 4 log2(GS) ln(log2(GS) / beta) tau* b / epsilon". False for GS not a
    power of two (GS 3, beta 0.1, tau* 1: 21.66 > 17.52; the plan's own 2 shift_1 is 22) and,
    in docs/privacy.md's form, for a fractional tau* (a SUM part). The text now compares with
    ``4 L ln(L / beta) max(ceil(tau*), 1) b / epsilon`` (L = ceil(log2 GS)), which holds; the
    paper's own expression only when GS is a power of two and tau* whole."""
    beta, eps = 0.1, 1.0
    for gs, tau_star in ((3, 1), (3, 1.5), (5, 2.5), (2, 1.5), (1000, 7), (2**10, 3)):
        plan = plan_r2t(unit_bound=1, max_contribution=gs, epsilon=eps, beta=beta, integer=True)
        n_lv = len(plan.levels)
        ours = 2 * 2 * n_lv * math.log((n_lv + 1) / (2 * beta)) * max(math.ceil(tau_star), 1)
        stated = 4 * n_lv * math.log(n_lv / beta) * max(math.ceil(tau_star), 1)
        assert ours <= stated, (gs, tau_star)
        first = next(j for j, t in enumerate(plan.levels) if t >= tau_star)
        assert 2 * plan.shifts[first] <= ours + 2  # the bound covers the plan (+ rounding)
    # the old sentence's counterexample: the paper's expression is below dpsql's bound at GS 3
    plan = plan_r2t(unit_bound=1, max_contribution=3, epsilon=eps, beta=beta, integer=True)
    papers = 4 * math.log2(3) * math.log(math.log2(3) / beta) * 1 / eps
    assert 2 * plan.shifts[0] > papers


def test_tiny_beta_is_refused_by_name_not_a_crash():
    """Found on the way: beta = 1e-323 made beta / (L + 1) underflow to 0 and plan_r2t raise
    ZeroDivisionError inside its allowed range; beta now has a floor (MIN_BETA)."""
    from dpsql.noise.r2t import MIN_BETA
    for beta in (1e-323, 5e-324, MIN_BETA / 2):
        with pytest.raises(ValueError, match="beta must lie in"):
            plan_r2t(unit_bound=1, max_contribution=8, epsilon=1.0, beta=beta, integer=True)
    assert plan_r2t(unit_bound=1, max_contribution=8, epsilon=1.0, beta=MIN_BETA,
                    integer=True).shifts[0] > 0
