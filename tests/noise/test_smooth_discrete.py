"""The sliding and dilation properties of the discrete Laplace law, checked numerically
(docs/privacy.md section 4, "Smooth sensitivity with discrete Laplace noise").

DLap(b) has pmf ``tanh(1/(2b)) e^(-|k|/b)`` on the integers. The smoothed release adds
DLap(2S(x)/epsilon) to an integer value f(x), S a beta-smooth bound on its local sensitivity,
beta = :func:`dpsql.noise.smooth.beta_for`. The proof needs, for every set E of integers:

* **sliding**: P_b(E) <= e^(epsilon/2) P_b(E + s) for integer |s| <= S = epsilon b / 2;
* **dilation**: P_b(E) <= e^(epsilon/2) P_b'(E) + delta for b'/b in [e^-beta, e^beta]
  (the lemma proves the delta term below (1 + tanh(1/(2b))) delta / 2 < delta);

and then the release is (epsilon, delta)-DP. Each is checked as the exact hockey-stick
divergence sup_E (P(E) - e^t Q(E)) = sum_k (P(k) - e^t Q(k))_+, summed term by term in
50-digit decimal arithmetic for scales up to 50 (and by the lemma's closed-form tails beyond),
on a grid of epsilons, deltas, scales, shifts and dilations, and end to end (dilation and
shift together, at e^epsilon). FLEX's beta = epsilon / (2 ln(2/delta)) fails the dilation
bound at large epsilon, and the check catches it.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import pytest

from dpsql.noise.smooth import beta_for

EPSILONS = (0.1, 1.0, 10.0, 30.0)
DELTAS = (1e-9, 1e-3)
SMALL_SCALES = (0.3, 1.0, 2.5, 7.0, 20.0, 50.0)
LARGE_SCALES = (300.0, 3000.0, 1e5)
PREC = 50


#: rounding of 50-digit arithmetic: a hockey-stick divergence this small is 0
ZERO = 1e-40


def _pmf(b: Decimal, n: int) -> list[Decimal]:
    """DLap(b)'s pmf at 0, 1, ..., n (the law is symmetric), ``tanh(1/(2b)) q^j``."""
    q = (-1 / b).exp()
    value = (1 - q) / (1 + q)  # tanh(1/(2b))
    out = []
    for _ in range(n + 1):
        out.append(value)
        value *= q
    return out


def hockey(p_scale: float, q_scale: float, shift: int, log_t: float) -> Decimal:
    """sum_k (P(k) - e^t Q(k))_+ for P = DLap(p_scale), Q = shift + DLap(q_scale), by direct
    summation over |k| <= 80 max(scales) + |shift| + 50 (the rest: below 1e-34)."""
    with localcontext() as ctx:
        ctx.prec = PREC
        t = Decimal(log_t).exp()
        reach = int(80 * max(p_scale, q_scale)) + abs(shift) + 50
        p = _pmf(Decimal(p_scale), reach)
        q = _pmf(Decimal(q_scale), 2 * reach)
        total = Decimal(0)
        for k in range(-reach, reach + 1):
            d = p[abs(k)] - t * q[abs(k - shift)]
            if d > 0:
                total += d
        return total


def dilation_closed_form(b: float, lam: float, epsilon: float) -> float:
    """The lemma's exact delta term for b' = b e^-lam < b: with u = 1/(2b), u' = u e^lam,
    rho = tanh u / tanh u' and m the least integer with rho e^(2(u'-u)m) > e^(epsilon/2),
    (1 + tanh u) e^(-2um) - e^(epsilon/2) (1 + tanh u') e^(-2u'm)."""
    u = 1.0 / (2.0 * b)
    up = u * math.exp(lam)
    t = up - u
    log_rho = math.log(math.tanh(u)) - math.log(math.tanh(up))
    m = max(1, math.floor((epsilon / 2 - log_rho) / (2 * t)) + 1)
    while m > 1 and log_rho + 2 * t * (m - 1) > epsilon / 2:
        m -= 1
    assert log_rho + 2 * t * m > epsilon / 2
    first = math.log1p(math.tanh(u)) - 2 * u * m
    second = epsilon / 2 + math.log1p(math.tanh(up)) - 2 * up * m
    return max(0.0, math.exp(first) - math.exp(second))


def _grid():
    for epsilon in EPSILONS:
        for delta in DELTAS:
            yield epsilon, delta, beta_for(epsilon, delta)


@pytest.mark.parametrize("b", SMALL_SCALES)
def test_sliding_by_any_integer_shift_up_to_s_is_pure(b):
    for epsilon in EPSILONS:
        s_max = epsilon * b / 2  # S: the scale is 2S/epsilon
        for s in sorted({0, 1, math.floor(s_max) // 2, math.floor(s_max)}):
            if s <= s_max:  # pmf ratio e^(|s|/b) <= e^(eps/2)
                assert hockey(b, b, s, epsilon / 2) < ZERO
        # and one more integer step would not be (the property is tight in the shift)
        over = math.floor(s_max) + 1
        assert over / b > epsilon / 2
        assert hockey(b, b, over, epsilon / 2) > 0


@pytest.mark.parametrize("b", SMALL_SCALES)
def test_dilation_within_e_beta_costs_less_than_delta(b):
    for epsilon, delta, beta in _grid():
        for lam in (beta, beta / 2):
            # a larger scale: pointwise ratio tanh(u) / tanh(u') <= e^lam, no delta at all
            assert hockey(b, b * math.exp(lam), 0, epsilon / 2) < ZERO
            # a smaller one: the delta term, summed, is the closed form and below the lemma's
            # (1 + tanh u) delta / 2 < delta
            summed = float(hockey(b, b * math.exp(-lam), 0, epsilon / 2))
            closed = dilation_closed_form(b, lam, epsilon)
            assert summed == pytest.approx(closed, rel=1e-9, abs=1e-40)
            assert summed <= (1 + math.tanh(1 / (2 * b))) * delta / 2


@pytest.mark.parametrize("b", LARGE_SCALES)
def test_dilation_at_large_scales_by_the_closed_form(b):
    for epsilon, delta, beta in _grid():
        for lam in (beta, beta / 2, beta / 10):
            assert dilation_closed_form(b, lam, epsilon) <= (
                1 + math.tanh(1 / (2 * b))) * delta / 2


def test_flex_beta_fails_the_dilation_bound_at_large_epsilon():
    # epsilon 30 per smoothed measurement, delta 1e-6: FLEX's beta lets the delta term exceed
    # delta (by two orders of magnitude), which is why beta_for takes ln(1 + ...)
    epsilon, delta = 30.0, 1e-6
    flex = epsilon / (2 * math.log(2 / delta))
    worst = max(float(hockey(b, b * math.exp(-flex), 0, epsilon / 2)) for b in SMALL_SCALES)
    assert worst > 10 * delta
    ours = beta_for(epsilon, delta)
    assert max(float(hockey(b, b * math.exp(-ours), 0, epsilon / 2))
               for b in SMALL_SCALES) < delta


@pytest.mark.parametrize("b", (0.3, 2.5, 20.0))
def test_the_release_on_neighbours_is_epsilon_delta_dp(b):
    # x with S(x) = epsilon b / 2, x' with S(x') = S(x) e^(+-beta); f moves by an integer shift
    # at most min(S(x), S(x')) (both bound the local sensitivity): the whole release's
    # hockey-stick divergence at e^epsilon stays below delta, in both directions
    for epsilon, delta, beta in _grid():
        for lam in (beta, -beta):
            b2 = b * math.exp(lam)
            s = math.floor(epsilon * min(b, b2) / 2)
            for shift in (s, -s):
                assert hockey(b, b2, shift, epsilon) <= delta
                assert hockey(b2, b, -shift, epsilon) <= delta
