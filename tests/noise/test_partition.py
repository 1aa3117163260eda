"""DP partition selection (dpsql.noise.partition): exact thresholds, exact keep probabilities,
and the (epsilon, delta) guarantee checked exactly over every neighbour of tiny group-count
vectors (the hockey-stick divergence summed over every output set, not sampled)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpsql.budget import Budget
from dpsql.errors import NotSupportedError
from dpsql.noise import partition
from dpsql.noise.partition import keep_probability, plan_selection, select, split, tail, threshold


def _pmf(x: int, scale: float) -> float:
    p = math.exp(-1.0 / scale)
    return (1 - p) / (1 + p) * p ** abs(x)


@pytest.mark.parametrize("scale", [0.5, 2.0, 4.0, 17.3])
@pytest.mark.parametrize("k", [-30, -3, -1, 0, 1, 2, 7, 40])
def test_tail_is_the_sum_of_the_pmf(scale, k):
    total = math.fsum(_pmf(x, scale) for x in range(k, k + 4000))
    assert tail(k, scale) == pytest.approx(total, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(("stability", "epsilon", "delta", "tau"), [
    # eps 1, delta 1e-5, S 1: b = 2, p = e^-1/2; p^tau/(1+p) <= 1e-5/(1+e): tau >= 24.7
    (1, 1.0, 1e-5, 25),
    (1, 1.0, 1e-6, 30),
    (1, 0.5, 1e-6, 57),
    # S 2: b = 4, p = e^-1/4; p^tau <= 1e-6 (1+p) / (2 (1+e)) = 2.39e-7: tau >= 60.98
    (2, 1.0, 1e-6, 61),
    # b = 0.2, p = e^-5: p^tau <= 0.5 (1+p) / (1+e^10) = 2.29e-5: tau >= 2.14
    (1, 10.0, 0.5, 3),
])
def test_threshold_exact_values(stability, epsilon, delta, tau):
    assert threshold(stability, epsilon, delta) == tau


@pytest.mark.parametrize("stability", [1, 2, 3])
@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-6, 1e-3])
def test_threshold_is_the_least_that_meets_the_bound(stability, epsilon, delta):
    tau = threshold(stability, epsilon, delta)
    scale = 2.0 * stability / epsilon
    factor = stability * (1 + math.exp(epsilon))
    assert factor * tail(tau, scale) <= delta
    assert tau == 1 or factor * tail(tau - 1, scale) > delta


def test_keep_probability_is_the_tail_at_tau_minus_n():
    plan = plan_selection(1.0, Budget(1.0, 1e-5))
    assert (plan.threshold, plan.scale) == (25, 2.0)
    p = math.exp(-0.5)
    for n in (1, 5, 10, 20, 24, 25, 26, 50):
        k = 25 - n
        expected = p ** k / (1 + p) if k >= 1 else 1 - p ** (1 - k) / (1 + p)
        assert plan.keep_probability(n) == pytest.approx(expected, rel=1e-12)
        assert keep_probability(n, 25, 2.0) == plan.keep_probability(n)
    assert plan.keep_probability(25) == pytest.approx(1 / (1 + p))


def _output_law(counts: dict[str, int], tau: int, scale: float) -> dict[frozenset[str], float]:
    """The exact law of the kept set: independent groups, each kept w.p. P(c + Z >= tau)."""
    groups = [g for g, c in counts.items() if c > 0]
    probs = {g: keep_probability(counts[g], tau, scale) for g in groups}
    law = {}
    for bits in itertools.product((False, True), repeat=len(groups)):
        kept = frozenset(g for g, b in zip(groups, bits, strict=True) if b)
        law[kept] = math.prod(probs[g] if b else 1 - probs[g]
                              for g, b in zip(groups, bits, strict=True))
    return law


def _hockey_stick(law_d, law_e, epsilon: float) -> float:
    """max over output sets O of P_D(O) - e^eps P_D'(O) = sum_K max(0, P_D(K) - e^eps P_D'(K))."""
    return math.fsum(max(0.0, p - math.exp(epsilon) * law_e.get(k, 0.0))
                     for k, p in law_d.items())


def _rows(counts: dict[str, int]) -> list[str]:
    return [g for g, c in sorted(counts.items()) for _ in range(c)]


def _neighbours(rows: list[str], groups: list[str], stability: int):
    """Every relation reachable by changing at most ``stability`` rows' groups (what one change
    of a private row does to a relation of stability S)."""
    for changed in itertools.combinations(range(len(rows)), min(stability, len(rows))):
        for new in itertools.product(groups, repeat=len(changed)):
            out = list(rows)
            for i, g in zip(changed, new, strict=True):
                out[i] = g
            yield out


def _counts(rows: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in rows:
        out[g] = out.get(g, 0) + 1
    return out


@pytest.mark.parametrize(("stability", "epsilon", "delta"), [
    (1, 1.0, 1e-2), (1, 2.0, 0.05), (2, 1.0, 0.05)])
def test_every_neighbour_within_epsilon_delta(stability, epsilon, delta):
    """Exact: for tiny databases whose groups sit around tau, the kept-set laws of D and of
    every neighbour are within (epsilon, delta) in both directions."""
    tau = threshold(stability, epsilon, delta)
    scale = 2.0 * stability / epsilon
    groups = ["a", "b", "c", "d"]
    worst = 0.0
    for base in ([tau - 1, tau], [tau, 1], [1, 1, tau + 1]):
        rows = _rows(dict(zip(groups, base, strict=False)))
        law = _output_law(_counts(rows), tau, scale)
        for other in _neighbours(rows, groups, stability):
            law_e = _output_law(_counts(other), tau, scale)
            worst = max(worst, _hockey_stick(law, law_e, epsilon),
                        _hockey_stick(law_e, law, epsilon))
    assert worst <= delta * (1 + 1e-9)
    assert worst > 0  # a new group can appear: delta is really spent


def test_a_halved_threshold_breaks_delta():
    """The same exact check fails for tau / 2: the test is not vacuous."""
    epsilon, delta = 1.0, 1e-3
    tau = threshold(1, epsilon, delta) // 2
    law = _output_law({"a": 1}, tau, 2.0)
    law_e = _output_law({"b": 1}, tau, 2.0)
    assert _hockey_stick(law, law_e, epsilon) > delta


def test_keep_probability_moves_by_at_most_e_to_the_half_epsilon_per_row():
    """One group's count moves by one per changed row; with b = 2S/eps its keep probability
    (and its complement) moves by at most e^(eps/2S), exactly that in the tails."""
    plan = plan_selection(1.0, Budget(1.0, 1e-6))
    bound = math.exp(1.0 / plan.scale)
    tau = plan.threshold
    for n in range(1, 120):
        q0, q1 = plan.keep_probability(n), plan.keep_probability(n + 1)
        assert q1 <= bound * q0 * (1 + 1e-12)
        # P(dropped) = P(n + Z < tau) = P(Z >= n - tau + 1) (symmetry; no cancellation)
        r0, r1 = tail(n - tau + 1, plan.scale), tail(n + 1 - tau + 1, plan.scale)
        assert r0 <= bound * r1 * (1 + 1e-12)
        if n < tau - 1:
            assert q1 == pytest.approx(bound * q0, rel=1e-9)  # tight in the tail


def test_split_gives_the_selection_one_share_and_all_delta():
    share, rest = split(Budget(1.0, 1e-6), 3)
    assert (share.epsilon, share.delta) == (0.25, 1e-6)
    assert (rest.epsilon, rest.delta) == (0.75, 0.0)


def test_delta_zero_is_refused_with_the_fix():
    with pytest.raises(NotSupportedError, match="delta > 0"):
        split(Budget(1.0, 0.0), 1)


class Constant:
    def __init__(self, value: int) -> None:
        self.value = value

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return np.full(size, self.value, dtype=np.int64)


def test_select_keeps_exactly_the_noisy_counts_at_or_above_tau():
    plan = plan_selection(1.0, Budget(1.0, 1e-5))  # tau 25
    counts = np.array([24, 25, 26, 1, 100])
    assert select(counts, plan, Constant(0)).tolist() == [1, 2, 4]
    assert select(counts, plan, Constant(1)).tolist() == [0, 1, 2, 4]
    assert select(np.array([], dtype=np.int64), plan, Constant(0)).tolist() == []


def test_select_caps_the_kept_groups_by_a_public_limit(monkeypatch):
    monkeypatch.setattr(partition, "MAX_KEPT", 2)
    plan = plan_selection(1.0, Budget(1.0, 1e-5))
    assert select(np.array([30, 90, 26, 60]), plan, Constant(0)).tolist() == [1, 3]


def test_a_huge_scale_is_refused():
    with pytest.raises(NotSupportedError, match="raise epsilon"):
        plan_selection(1.0, Budget(1e-12, 1e-6))


def _released_law(counts: dict[str, int], tau: int, scale: float, width: int = 30):
    """Per group the law of what is released when the COUNT(*) is the selection's noisy
    count: dropped, the noisy value v in [tau, tau + width), or 'beyond' (the rest of the tail,
    one outcome: coarsening only lowers the divergence, and its mass is tiny)."""
    laws = {}
    for g, c in counts.items():
        if c <= 0:
            continue
        law = {"drop": 1.0 - keep_probability(c, tau, scale),
               "beyond": tail(tau + width - c, scale)}
        for v in range(tau, tau + width):
            law[v] = _pmf(v - c, scale)
        laws[g] = law
    return laws


def _joint_hockey_stick(laws_d, laws_e, epsilon: float) -> float:
    """sum over joint outcomes of max(0, P_D - e^eps P_D'), groups independent; a group absent
    on one side is 'drop' there with probability 1."""
    groups = sorted(set(laws_d) | set(laws_e))
    absent = {"drop": 1.0}
    per = [(laws_d.get(g, absent), laws_e.get(g, absent)) for g in groups]
    outcomes = [sorted(set(a) | set(b), key=str) for a, b in per]
    total = []
    for combo in itertools.product(*outcomes):
        p = math.prod(a.get(o, 0.0) for (a, _), o in zip(per, combo, strict=True))
        q = math.prod(b.get(o, 0.0) for (_, b), o in zip(per, combo, strict=True))
        total.append(max(0.0, p - math.exp(epsilon) * q))
    return math.fsum(total)


def test_releasing_the_noisy_counts_of_kept_groups_is_epsilon_delta():
    """The shared COUNT(*) (plan_with_selection): kept groups' noisy counts are released too;
    exact over every one-row change of small databases around tau, both directions."""
    epsilon, delta = 1.0, 1e-2
    tau, scale = threshold(1, epsilon, delta), 2.0
    worst = 0.0
    for base in ({"a": tau - 1, "b": 1}, {"a": tau, "b": tau + 2}):
        rows = _rows(base)
        seen = {tuple(sorted(_counts(o).items())) for o in _neighbours(rows, ["a", "b", "c"], 1)}
        for other in seen:
            d, e = (_released_law(_counts(rows), tau, scale, 15),
                    _released_law(dict(other), tau, scale, 15))
            worst = max(worst, _joint_hockey_stick(d, e, epsilon),
                        _joint_hockey_stick(e, d, epsilon))
    assert 0 < worst <= delta * (1 + 1e-9)


def test_releasing_noisy_counts_at_half_the_threshold_breaks_delta():
    tau = threshold(1, 1.0, 1e-2) // 2
    d, e = _released_law({"a": 1}, tau, 2.0, 15), _released_law({"b": 1}, tau, 2.0, 15)
    assert _joint_hockey_stick(d, e, 1.0) > 1e-2
