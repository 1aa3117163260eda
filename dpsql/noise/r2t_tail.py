"""Tail bounds for sums of independent discrete Laplace noises on power-of-two grids (R2T's
noised increments, :mod:`dpsql.noise.r2t`).

Setting. ``N_j = sum_{i <= j} g_i Y_i`` with independent ``Y_i`` discrete Laplace of ``a_i``
(pmf ``(1 - p_i) / (1 + p_i) p_i^|k|`` on the integers, ``p_i = e^(-a_i)``), ``g_i > 0`` the
grid of level i (1 for counts) and ``s_i = g_i / a_i`` its value scale. :func:`tail_steps`
returns the smallest whole number k of level j's grid steps with a proven bound
``P(N_j > k g_j) <= target``; ``N_j`` is symmetric, so ``P(|N_j| > k g_j) <= 2 target``.

Lemma 1 (one discrete Laplace). For every integer m, ``P(Y > m) <= p^(m+1) / (1 + p)``; hence
``P(Y > u) <= e^(-a u) / (1 + p)`` for every real u. Proof: for ``m >= 0`` it is the exact
tail ``sum_{k > m} (1-p)/(1+p) p^k``. For ``m = -n <= -1``, ``P(Y > -n) = 1 - P(Y >= n) = 1 -
p^n / (1+p)``, and the claim ``1 - p^n / (1+p) <= p^(1-n) / (1+p)`` is, with ``x = p^(n-1)``
in (0, 1], ``x + p x (1 - x) <= 1``, true since ``x + p x (1 - x) <= x + x (1 - x) = 1 - (1 -
x)^2``. For real u, ``P(Y > u) = P(Y > floor(u)) <= p^(floor(u) + 1) / (1+p) <= p^u / (1+p)``.
(The bound is not ``e^(-a u) / 2``: a discrete Laplace has ``P(Y >= 0) = 1 / (1 + p) > 1/2``.)

Lemma 2 (moment generating function). For ``|c| < a``, ``E[e^(c Y)] = (1 - p)^2 / ((1 - p
e^c)(1 - p e^(-c)))`` (two geometric series); finite exactly when ``|c| < a``.

Theorem 1 (increasing scales). If ``s_i < s_j`` for every ``i < j``, then for every real t

    P(N_j > t) <= e^(-t / s_j) / (1 + p_j) * M_j,   M_j = prod_{i < j} E[e^(g_i Y_i / s_j)],

each factor finite by Lemma 2 (``g_i / s_j < g_i / s_i = a_i``). If moreover every ``g_i`` is
``g_j`` (counts: all 1), then for every integer k, ``P(N_j > k g_j) <= p_j^(k+1) / (1 + p_j)
M_j``. Proof: ``R = sum_{i<j} g_i Y_i`` is independent of ``Y_j``; conditionally on R,
``P(N_j > t | R) = P(Y_j > (t - R) / g_j) <= e^(-a_j (t - R) / g_j) / (1 + p_j) = e^(-(t -
R) / s_j) / (1 + p_j)`` by Lemma 1 (every real argument, so R's sign does not matter); taking
the expectation, ``E[e^(R / s_j)] = M_j`` by independence. In the integer case ``(k g_j - R) /
g_j`` is an integer m and Lemma 1's integer form gives ``p_j^(m+1)``, i.e. one step more.
For a geometric grid M_j is close to 1: the continuous analogue is ``prod 1 / (1 - (s_i /
s_j)^2)``.

Theorem 2 (two equal levels). If ``j = 2`` and ``(g_1, a_1) = (g_2, a_2)`` (R2T's base-2 grid:
increments 2, 2, 4, ..), the exact law of ``Y_1 + Y_2``: for every integer ``k >= 0``

    P(Y_1 + Y_2 > k) = p^(k+1) [ (k+1)(1-p)/(1+p)^2 + 1/(1+p) - p(1-p)/(1+p)^3 ].

Proof: condition on ``Y_1 = m``: for ``m <= k`` the tail ``p^(k-m+1)/(1+p)`` (Lemma 1, exact
for ``k - m >= 0``), summed against the pmf over ``0 <= m <= k`` gives ``(k+1) c p^(k+1) /
(1+p)`` and over ``m < 0`` gives ``c p^(k+1) p^2 / ((1+p)(1-p^2))``, ``c = (1-p)/(1+p)``; for
``m > k``, ``P(Y_2 > k - m) = 1 - p^(m-k)/(1+p)``, summed: ``c p^(k+1) (1/(1-p) - p / ((1+p)
(1-p^2)))``. Adding and simplifying gives the formula (its continuous limit is ``e^(-T) (2 +
T) / 4``, ``T = k / s``). tests/noise/test_r2t_tail.py checks it against the convolution.

Any other pattern (a lower level as noisy as level j, other than Theorem 2's case) has no bound
here: :func:`tail_steps` returns None and the caller falls back to per-level noise. Logs
throughout (scales up to 2^32 steps); every bound is inflated by the relative margin
``_LOG_MARGIN`` so that float rounding of the logs cannot pick a step too few.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

__all__ = ["log_dlap_mgf", "pair_tail_log", "tail_steps"]

#: Added to every log bound: float rounding of the logs (relative 1e-15 of values below ~50)
#: stays far below it, so a computed step count is never one too few.
_LOG_MARGIN = 1e-9


def log_dlap_mgf(a: float, c: float) -> float:
    """``ln E[e^(c Y)]`` for Y discrete Laplace with ``p = e^(-a)`` and ``|c| < a`` (Lemma 2),
    stable for tiny a (``1 - p`` through expm1)."""
    if not 0.0 <= abs(c) < a:
        raise ValueError("the moment generating function needs |c| < a")
    return (2.0 * math.log(-math.expm1(-a)) - math.log(-math.expm1(c - a))
            - math.log(-math.expm1(-c - a)))


def pair_tail_log(a: float, k: int) -> float:
    """``ln P(Y_1 + Y_2 > k)`` for independent discrete Laplace Y_1, Y_2 with ``p = e^(-a)``
    and an integer ``k >= 0`` (Theorem 2, exact)."""
    p = math.exp(-a)
    q = -math.expm1(-a)  # 1 - p
    bracket = (k + 1) * q / (1.0 + p) ** 2 + 1.0 / (1.0 + p) - p * q / (1.0 + p) ** 3
    return -(k + 1) * a + math.log(bracket)


def _smallest(holds: Callable[[int], bool], guess: int) -> int:
    """The smallest integer ``k >= 0`` with ``holds(k)``, for ``holds`` monotone (False then
    True): bracket from ``guess`` by doubling, then bisect."""
    if holds(0):
        return 0
    lo, hi = 0, max(1, guess)  # holds(lo) is False
    while not holds(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return hi


def tail_steps(scales: Sequence[float], grids: Sequence[float], j: int, target: float, *,
               integer: bool) -> int | None:
    """The smallest integer ``k >= 0`` with a proven ``P(N_j > k g_j) <= target`` (module
    docstring), or None when neither theorem applies.

    ``scales[i]``/``grids[i]`` are ``s_i``/``g_i`` (0-based; ``j`` is 0-based too and only
    levels ``0..j`` are read). ``integer``: every grid is 1 (counts); Theorem 1's integer form
    is used then, or when every lower grid equals ``g_j`` (always for the first level).
    Precondition: positive finite scales and grids, ``0 < target < 1``.
    """
    a_j = grids[j] / scales[j]
    p_j = math.exp(-a_j)
    log_target = math.log(target)
    lower = range(j)
    if j == 1 and scales[0] == scales[1] and grids[0] == grids[1]:
        def pair_holds(k: int) -> bool:
            return pair_tail_log(a_j, k) + _LOG_MARGIN <= log_target
        return _smallest(pair_holds, math.ceil(-log_target / a_j))
    if any(scales[i] >= scales[j] for i in lower):
        return None
    log_m = sum(log_dlap_mgf(grids[i] / scales[i], grids[i] / scales[j]) for i in lower)
    # Theorem 1's integer form (one step more) when every lower level's noise lies on g_j's grid
    extra = 1 if integer or all(grids[i] == grids[j] for i in lower) else 0
    log_c = log_m - math.log1p(p_j) - log_target + _LOG_MARGIN

    def holds(k: int) -> bool:
        return -(k + extra) * a_j + log_c <= 0.0

    return _smallest(holds, max(1, math.ceil(log_c / a_j)))
