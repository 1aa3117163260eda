"""R2T's LP truncation (dpsql.noise.r2t_lp): exact optima, the three properties R2T needs, by
brute force over every unit removal of tiny instances, and why naive truncation is not enough
when a result belongs to two units."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsql.noise.r2t import release_r2t, truncated_sums
from dpsql.noise.r2t_lp import lp_truncated, lp_truncated_bounds, unit_contributions


def _triangle():
    return [(1, ("a", "b")), (1, ("a", "c")), (1, ("b", "c"))]


@pytest.mark.parametrize(("results", "tau", "expected"), [
    (_triangle(), 1, 1.5),                                   # half-integral optimum
    (_triangle(), 2, 3.0),                                   # tau >= every contribution (2)
    ([(3, ("a",)), (5, ("a", "b"))], 4, 4.0),                # a's capacity binds
    ([(1, ("a", f"leaf{i}")) for i in range(5)], 2, 2.0),    # a star: the centre binds
    ([(1, ("a", f"leaf{i}")) for i in range(5)], 0.5, 0.5),
    ([(2.5, ("a", "a"))], 1, 1.0),                           # a unit listed twice counts once
    ([], 3, 0.0),
])
def test_exact_optima(results, tau, expected):
    lower, upper = lp_truncated_bounds(results, tau)
    assert lower <= upper
    assert lp_truncated(results, tau) == pytest.approx(expected, abs=1e-9)
    assert upper == pytest.approx(expected, abs=1e-9)


def test_single_unit_results_reduce_to_naive_truncation():
    rng = np.random.default_rng(3)
    for _ in range(20):
        c = rng.integers(0, 9, size=6)
        results = [(1, (u,)) for u, n in enumerate(c) for _ in range(int(n))]
        naive = truncated_sums(c, unit_bound=1, max_contribution=8)
        for tau, q in zip((2, 4, 8), naive, strict=True):
            assert lp_truncated(results, tau) == pytest.approx(float(q), abs=1e-9)


def test_reaches_the_query_answer_at_the_largest_contribution():
    results = [(1, ("a", "b")), (2, ("a", "c")), (1, ("c", "d")), (0.5, ("d",))]
    contributions = unit_contributions(results)
    assert contributions == {"a": 3.0, "b": 1.0, "c": 3.0, "d": 1.5}
    assert lp_truncated(results, max(contributions.values())) == pytest.approx(4.5, abs=1e-9)
    assert lp_truncated(results, 1) < 4.5


@pytest.mark.parametrize(("results", "tau"), [
    ([(-1, ("a",))], 1), ([(np.nan, ("a",))], 1), ([(1, ())], 1), ([(1, ("a",))], 0),
    ([(1, ("a",))], float("inf")),
])
def test_rejects_malformed_input(results, tau):
    with pytest.raises(ValueError):
        lp_truncated(results, tau)


def _instances():
    """Tiny graphs: 4 units, results on 1 or 2 units with psi in {1, 2}: 25 instances."""
    pairs = [("a",), ("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("d",), ("b", "d")]
    rng = np.random.default_rng(11)
    out = []
    for _ in range(25):
        k = int(rng.integers(1, 8))
        chosen = rng.choice(len(pairs), size=k, replace=True)
        out.append([(int(rng.integers(1, 3)), pairs[i]) for i in chosen])
    return out


def _without(results, unit):
    return [(v, us) for v, us in results if unit not in us]


def test_unit_removal_moves_the_lp_by_at_most_tau_and_never_up():
    # Every unit of every instance removed with its results (the FK cascade), at tau 1..3; the
    # bounds used are the certified ones, so the check is against the true optima.
    worst = 0.0
    for results, tau in itertools.product(_instances(), (1, 2, 3)):
        lower, upper = lp_truncated_bounds(results, tau)
        assert upper - lower < 1e-9
        assert upper <= sum(v for v, _ in results) + 1e-9   # Q(I, tau) <= Q(I)
        for unit in unit_contributions(results):
            lo2, up2 = lp_truncated_bounds(_without(results, unit), tau)
            assert lo2 <= upper + 1e-9                       # removing a unit never raises it
            assert lower - up2 <= tau + 1e-9                 # ... and lowers it by <= tau
            worst = max(worst, (lower - up2) / tau)
    assert worst > 0.999  # attained


def test_naive_truncation_fails_when_results_have_two_units():
    # K hubs, each with tau results of its own; one new unit x joins every hub. Naive
    # truncation (drop the results of every unit above tau) loses all K * tau results when x
    # arrives: far above tau. The LP moves by at most tau.
    tau, k = 3, 4
    base = [(1, (f"hub{h}", f"own{h}_{i}")) for h in range(k) for i in range(tau)]
    with_x = base + [(1, (f"hub{h}", "x")) for h in range(k)]

    def naive(results):
        heavy = {u for u, c in unit_contributions(results).items() if c > tau}
        return sum(v for v, us in results if not heavy & set(us))

    assert naive(base) - naive(with_x) == k * tau > tau
    assert abs(lp_truncated(with_x, tau) - lp_truncated(base, tau)) <= tau + 1e-9


def test_lp_values_feed_the_sum_release():
    results = [*_triangle(), (1, ("c", "d"))]
    q = np.array([lp_truncated(results, tau) for tau in (2, 4)])
    # LP truncation bounds each level's move, not its increments': per-level noise
    rel = release_r2t(q, unit_bound=1, max_contribution=4, epsilon=1.0, integer=False,
                      increments=False)
    assert rel.lower95 <= rel.upper95 and rel.value >= 0
