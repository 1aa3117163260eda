"""Smoothing and noise scales (docs/design.md, "Noise")."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.analysis.elastic import analyze
from dpsql.analysis.kexpr import ONE, ZERO, Const, KExpr, PlusK, add, kmax, kmin, mul
from dpsql.budget import Budget
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.metadata import Column, Metadata, Table, load_metadata
from dpsql.noise.mechanisms import MAX_DISCRETE_SCALE
from dpsql.noise.plan import count_window, plan_noise
from dpsql.noise.smooth import beta_for, smooth
from tests.typed_metadata import typed

ROOT = Path(__file__).resolve().parents[2]
# FLEX's schema declares no types (its format has none); a real database would say INTEGER.
FLEX = typed(load_metadata(ROOT / "schemas" / "flex_test.yaml"))
JOIN = ("SELECT COUNT(*) AS n FROM orders JOIN recommendations "
        "ON orders.customer_id = recommendations.customer_id")
SELF_JOIN = "SELECT COUNT(*) FROM orders o1 JOIN orders o2 ON o1.customer_id = o2.customer_id"


def brute_smooth(es: KExpr, beta: float, k_end: int) -> tuple[float, int]:
    """max over k = 0..k_end of e^(-beta k) ES(k), and its argmax: no bound, no early stop."""
    best, best_k = -1.0, -1
    for k in range(k_end + 1):
        v = math.exp(-beta * k) * es.at(k)
        if v > best:
            best, best_k = v, k
    return best, best_k


def first_decrease(es: KExpr, beta: float) -> float:
    """FLEX's scan: stop at the first k whose smoothed value decreases."""
    k, prev = 0, es.at(0)
    while True:
        v = math.exp(-beta * (k + 1)) * es.at(k + 1)
        if v < prev:
            return prev
        k, prev = k + 1, v


# ----------------------------------------------------------------------------- beta


def test_beta_formula():
    # beta = ln(1 + epsilon / (2 ln(2/delta))): e^beta - 1 is FLEX's beta exactly, the
    # condition of the discrete dilation lemma (docs/privacy.md section 4)
    for eps, delta in ((0.1, 1e-8), (1.0, 1e-6), (30.0, 1e-3)):
        flex = eps / (2 * math.log(2 / delta))
        assert beta_for(eps, delta) == pytest.approx(math.log1p(flex), rel=1e-15)
        assert math.expm1(beta_for(eps, delta)) <= flex * (1 + 1e-15)
        assert beta_for(eps, delta) < flex
    # 2 ln(2e8) = 38.2276...: FLEX's beta = 0.0026159..., ours ln(1.0026159...) = 0.0026125
    assert beta_for(0.1, 1e-8) == pytest.approx(0.00261249, rel=1e-5)
    # more epsilon, more beta; less delta, less beta
    assert beta_for(0.2, 1e-8) > beta_for(0.1, 1e-8)
    assert beta_for(0.1, 1e-10) < beta_for(0.1, 1e-8)


# ----------------------------------------------------------------------------- the worked join


def test_worked_join_smooth_sensitivity():
    # ES(k) = 250+k; e^(-beta k)(250+k) peaks at k = 1/beta - 250 = 382.78 - 250 = 132.78
    es = analyze(JOIN, FLEX).measurements[0].sensitivity
    sm = smooth(es, 0.1, 1e-8)
    assert sm.smooth_sensitivity == pytest.approx(270.581567882961, rel=1e-9)
    assert sm.k_argmax == 133
    assert sm.k_scan == math.ceil(1 / beta_for(0.1, 1e-8)) == 383  # D / beta, D = 1
    assert sm.beta == beta_for(0.1, 1e-8)
    assert sm.smooth_sensitivity == pytest.approx(math.exp(-sm.beta * 133) * 383, rel=1e-12)


def test_worked_join_noise_scale():
    (plan,) = plan_noise(analyze(JOIN, FLEX), Budget(0.1, 1e-8))
    # Laplace scale 2S/epsilon = 2 * 270.581567882961 / 0.1
    assert plan.scale == pytest.approx(5411.63135765923, rel=1e-9)
    assert (plan.epsilon, plan.delta) == (0.1, 1e-8)
    assert not plan.pure
    assert plan.elastic_sensitivity == 250.0
    assert plan.smoothed is not None and plan.smoothed.k_argmax == 133


def test_smoothed_self_join():
    # ES(k) = 201 + 2k = 2 (100.5 + k): peak at k = 1/beta - 100.5 = 281.78 -> 282;
    # agrees with a scan far past the bound
    es = analyze(SELF_JOIN, FLEX).measurements[0].sensitivity
    sm = smooth(es, 0.1, 1e-8)
    best, best_k = brute_smooth(es, sm.beta, 5000)
    assert sm.smooth_sensitivity == pytest.approx(best, rel=1e-12)
    assert sm.k_argmax == best_k == 282


def test_smooth_is_at_least_es0_and_es_at_the_argmax_discounted():
    es = analyze(SELF_JOIN, FLEX).measurements[0].sensitivity
    for eps, delta in ((0.01, 1e-9), (0.1, 1e-8), (1.0, 1e-6), (10.0, 1e-3)):
        sm = smooth(es, eps, delta)
        assert sm.smooth_sensitivity >= es.at(0)
        assert sm.smooth_sensitivity == pytest.approx(
            math.exp(-sm.beta * sm.k_argmax) * es.at(sm.k_argmax), rel=1e-12)


# ----------------------------------------------------------------------------- no early stop


def cube() -> KExpr:
    return mul(mul(PlusK(0.0), PlusK(0.0)), PlusK(0.0))


@pytest.mark.parametrize("es", [
    # max of a constant and a steep polynomial: e^(-beta k) max(1000, k^3) falls from 1000,
    # then k^3 takes over and peaks at k = 3/beta
    kmax(Const(1000.0), cube()),
    # a sum behaves the same way
    add(Const(1000.0), cube()),
    # and a constant times a max of a constant and a product of three (c+k) terms
    mul(Const(2.0), kmax(Const(500.0), mul(PlusK(0.0), mul(PlusK(5.0), PlusK(10.0))))),
])
def test_stopping_at_the_first_decrease_would_be_wrong(es):
    eps, delta = 1.0, 1e-6
    beta = beta_for(eps, delta)  # 0.0345: the late peak is at k = D/beta
    # the smoothed curve first decreases ...
    assert math.exp(-beta) * es.at(1) < es.at(0)
    sm = smooth(es, eps, delta)
    best, best_k = brute_smooth(es, beta, 20 * sm.k_scan + 1000)
    # ... yet smooth() finds the true maximum, far away from k = 0
    assert sm.smooth_sensitivity == pytest.approx(best, rel=1e-12)
    assert sm.k_argmax == best_k > 0
    assert first_decrease(es, beta) < 0.5 * best  # FLEX's early stop: far too small


def test_late_peak_exact_value():
    # max(1000, k^3) at beta = 0.05: peak of e^(-beta k) k^3 is at k = 3/beta = 60:
    # e^-3 * 216000 = 10753.9... > 1000
    beta = 0.05
    # chosen so that beta_for(eps, delta) = ln(1 + eps / (2 ln(2e6))) = beta
    eps, delta = math.expm1(beta) * 2 * math.log(2e6), 1e-6
    sm = smooth(kmax(Const(1000.0), cube()), eps, delta)
    assert sm.k_argmax == 60
    assert sm.smooth_sensitivity == pytest.approx(math.exp(-3) * 216000, rel=1e-9)
    assert sm.k_scan == 60  # ceil(3 / 0.05)


def kexprs(depth: int = 3):
    leaves = st.one_of(
        st.integers(0, 300).map(lambda c: Const(float(c))),
        st.integers(0, 300).map(lambda c: PlusK(float(c))),
    )
    if depth == 0:
        return leaves
    sub = kexprs(depth - 1)
    return st.one_of(
        leaves,
        st.tuples(st.sampled_from([add, mul, kmax, kmin]), sub, sub).map(lambda t: t[0](t[1],
                                                                                          t[2])),
    )


@settings(max_examples=150, deadline=None, derandomize=True)
@given(es=kexprs(), eps=st.sampled_from([0.5, 1.0, 2.0, 5.0]),
       delta=st.sampled_from([1e-3, 1e-5, 1e-8]))
def test_bounded_scan_equals_a_much_longer_scan(es, eps, delta):
    """kexpr's claim: e^(-beta k) ES(k) is non-increasing past k = D/beta, so the scan to
    ceil(D/beta) is the max over all k."""
    if es.degree == 0:
        assert not es.depends_on_k
        return
    sm = smooth(es, eps, delta)
    best, _ = brute_smooth(es, sm.beta, 4 * sm.k_scan + 200)
    assert sm.smooth_sensitivity == pytest.approx(best, rel=1e-12)
    assert sm.smooth_sensitivity >= es.at(0)


# ----------------------------------------------------------------------------- pure releases


def test_pure_count_scale_is_es_over_epsilon():
    # no join between private tables: ES = 1 at every k, global sensitivity
    (plan,) = plan_noise(analyze("SELECT COUNT(*) FROM orders WHERE quantity > 1", FLEX),
                         Budget(0.1, 1e-8))
    assert plan.pure and plan.smoothed is None
    assert plan.scale == pytest.approx(1 / 0.1, rel=1e-15)  # half of FLEX's 2*ES/epsilon
    assert plan.delta == 0.0 and plan.epsilon == 0.1
    # delta = 0 is fine for a pure release
    (plan,) = plan_noise(analyze("SELECT COUNT(*) FROM orders", FLEX), Budget(0.5, 0.0))
    assert plan.scale == pytest.approx(2.0, rel=1e-15) and plan.delta == 0.0


def test_pure_histogram_scale():
    # histogram: ES = 2 * 1 = 2; scale 2 / 0.25 = 8
    (plan,) = plan_noise(
        analyze("SELECT product_id, COUNT(*) FROM orders GROUP BY product_id", FLEX),
        Budget(0.25, 0.0))
    assert plan.pure and plan.scale == pytest.approx(8.0, rel=1e-15)


def test_pure_public_join_scale():
    # orders ⋈ products on product_id: ES = mf(products.product_id) * 1 = 300, constant
    (plan,) = plan_noise(analyze("SELECT COUNT(*) FROM orders o JOIN products p "
                                 "ON o.product_id = p.product_id", FLEX), Budget(1.0, 0.0))
    assert plan.pure and plan.elastic_sensitivity == 300.0
    assert plan.scale == pytest.approx(300.0, rel=1e-15)


SUM_MD = typed(Metadata(tables={
    "t": Table("t", {"x": Column("x", None, bounds=(-5.0, 20.0)), "k": Column("k", 3)}),
    "p": Table("p", {"price": Column("price", None, bounds=(0.0, 100.0)),
                     "k": Column("k", 2)}, public=True),
}))


def test_pure_sum_scale():
    # ES = 1 * (20 - (-5)) = 25; scale 25/epsilon plus the sum's snapping grid, which is a
    # power of two at most 2^-19 of the scale
    (plan,) = plan_noise(analyze("SELECT SUM(x) FROM t", SUM_MD), Budget(0.5, 0.0))
    assert plan.pure and plan.delta == 0.0 and plan.elastic_sensitivity == 25.0
    assert 50.0 <= plan.scale <= 50.0 * (1 + 2.0**-18)


def test_smoothed_sum_scale_is_at_least_2s_over_epsilon():
    # t ⋈ t on k: ES = ((3+k) + (3+k) + 1) * 25; S from the scan; scale >= 2S/epsilon
    a = analyze("SELECT SUM(t.x) FROM t JOIN t t2 ON t.k = t2.k", SUM_MD)
    (plan,) = plan_noise(a, Budget(1.0, 1e-6))
    assert not plan.pure and plan.elastic_sensitivity == 7 * 25
    assert plan.smoothed is not None
    s = plan.smoothed.smooth_sensitivity
    assert s == pytest.approx(brute_smooth(a.measurements[0].sensitivity, plan.smoothed.beta,
                                           5000)[0], rel=1e-12)
    assert plan.scale >= 2 * s / 1.0
    assert plan.scale <= 2 * s / 1.0 * 1.01


def test_sum_over_a_public_table_is_planned():
    (plan,) = plan_noise(analyze("SELECT SUM(price) FROM p", SUM_MD), Budget(1.0, 0.0))
    assert plan.pure and plan.scale == 0.0


# ----------------------------------------------------------------------------- rejections


def test_delta_zero_with_a_private_join_is_rejected():
    with pytest.raises(NotSupportedError, match="delta"):
        plan_noise(analyze(JOIN, FLEX), Budget(0.1, 0.0))


@pytest.mark.parametrize(("eps", "delta"), [
    (0.0, 1e-8), (-1.0, 1e-8), (math.inf, 1e-8), (math.nan, 1e-8),
    (0.1, -1e-8), (0.1, 1.0), (0.1, math.nan), (0.1, math.inf),
])
def test_bad_budget_parameters(eps, delta):
    with pytest.raises(ProgrammingError):
        plan_noise(analyze(JOIN, FLEX), Budget(eps, delta))


def test_scan_too_long_is_rejected():
    # beta = 1e-9 / (2 ln 2e8) ~ 2.6e-11: the scan would need ~4e10 steps
    with pytest.raises(NotSupportedError, match="epsilon"):
        plan_noise(analyze(JOIN, FLEX), Budget(1e-9, 1e-8))


# ----------------------------------------------------------------------------- inf and NaN


def test_kexpr_constants_refuse_inf_and_nan():
    for bad in (-math.inf, math.nan, -1.0):
        with pytest.raises(ValueError):
            Const(bad)
    # +inf is bounds near the largest double, scaled: a refusal naming the fix
    from dpsql.errors import NotSupportedError

    with pytest.raises(NotSupportedError, match="narrow the bounds"):
        Const(math.inf)


def test_zero_times_anything_is_zero_without_evaluating():
    # inf * 0 is NaN in Python: a public side's 0 must short-circuit
    huge = mul(PlusK(1e308), PlusK(1e308))
    assert math.isinf(huge.at(0))
    assert mul(ZERO, huge) is ZERO and mul(huge, ZERO) is ZERO
    assert mul(ONE, huge) is huge
    assert kmin(ZERO, huge) == ZERO


def _with_sensitivity(es: KExpr):
    a = analyze(JOIN, FLEX)
    m = dataclasses.replace(a.measurements[0], sensitivity=es)
    return dataclasses.replace(a, measurements=(m,))


class _NaN(KExpr):
    """An ES that evaluates to NaN (no kexpr built by the analysis does; a guard test)."""

    degree = 1

    def at(self, k: int) -> float:
        return math.nan

    def at_array(self, ks):
        return ks * math.nan


@pytest.mark.parametrize("es", [
    mul(PlusK(1e308), PlusK(1e308)),  # overflows to inf at every k
    mul(Const(1e300), mul(PlusK(1e10), PlusK(1e10))),
    add(PlusK(1e308), PlusK(1e308)),
    _NaN(),
])
def test_inf_and_nan_never_reach_a_scale(es):
    # S depends on max frequencies, so a non-finite S must not refuse (that would reveal them):
    # the public window caps it, and the scale is the window's
    (plan,) = plan_noise(_with_sensitivity(es), Budget(0.1, 1e-8))
    width = count_window(0.1)
    assert plan.window == (0.0, width)
    assert plan.scale == 2.0 * width / 0.1 <= MAX_DISCRETE_SCALE
    smooth(es, 0.1, 1e-8)  # reports S as it is (owner-only), never raises


@pytest.mark.parametrize("function", ["COUNT", "SUM"])
@pytest.mark.parametrize("mf", [1, 10, 10**4, 10**8, 10**12])
@pytest.mark.parametrize("epsilon", [1e-4, 1e-2, 0.1, 1.0])
def test_smoothed_plans_never_refuse_and_use_min_of_s_and_window(function, mf, epsilon):
    """Issue #12 class 6: whether a smoothed query is released may depend on the SQL, public
    metadata and epsilon/delta only. Before, a scale above 2^32 raised "too noisy", so varying
    epsilon binary-searched a max frequency for free. Exact values: the scale is
    2 min(S, V)/epsilon (+ the grid for sums) for the window's width V."""
    es = mul(PlusK(mf), PlusK(mf))
    analysis = _with_sensitivity(es)
    if function == "SUM":
        m = dataclasses.replace(analysis.measurements[0], function="SUM", bounds=(0.0, 10.0))
        analysis = dataclasses.replace(analysis, measurements=(m,))
    (plan,) = plan_noise(analysis, Budget(epsilon, 1e-8))
    s = smooth(es, epsilon, 1e-8).smooth_sensitivity
    lo, hi = plan.window
    width = hi - lo
    if function == "COUNT":
        assert (lo, width) == (0.0, count_window(epsilon))
        assert plan.scale == pytest.approx(2.0 * min(s, width) / epsilon, rel=1e-12)
        assert plan.scale <= MAX_DISCRETE_SCALE
    else:
        g0 = plan.granularity
        assert lo == -hi
        assert plan.scale == pytest.approx(2.0 * (min(s, width) + g0) / epsilon, rel=1e-12)
        assert plan.scale / g0 <= MAX_DISCRETE_SCALE * (1 + 1e-12)


def test_window_is_public():
    # the same window for any sensitivity: it depends on epsilon (and a SUM's bounds) alone
    windows = {plan_noise(_with_sensitivity(mul(PlusK(mf), PlusK(mf))), Budget(0.3, 1e-8))[0].window
               for mf in (1, 1000, 10**9)}
    assert windows == {(0.0, count_window(0.3))}
    assert count_window(0.1) == math.floor(0.1 * 2**31)


def test_tiny_epsilon_never_gives_an_infinite_scale():
    # pure: ES / 5e-324 overflows; the plan refuses instead of returning inf
    with pytest.raises(NotSupportedError):
        plan_noise(analyze("SELECT COUNT(*) FROM orders", FLEX), Budget(5e-324, 0.0))


def test_every_planned_scale_is_finite_and_positive():
    for sql in (JOIN, SELF_JOIN, "SELECT COUNT(*) FROM orders",
                "SELECT product_id, COUNT(*) FROM orders GROUP BY product_id"):
        for plan in plan_noise(analyze(sql, FLEX), Budget(0.1, 1e-8)):
            assert math.isfinite(plan.scale) and plan.scale > 0
