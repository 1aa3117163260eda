"""R2T (dpsql.noise.r2t) by brute force over every unit neighbour of tiny databases.

Under a privacy unit a database is, for a self-join-free COUNT or SUM, the multiset of its
units' contributions c_u >= 0 (dpsql.noise.r2t's module docstring); a neighbour adds or removes
one unit with everything it contributes. For every tiny database here (a fixed background of
units plus 0-3 varied ones) and EVERY neighbour (each unit removed; a unit of each contribution
0..GS+2 rows added, beyond GS too):

1. the truncated answers move by at most tau_j * b per level, and their increments ``Q(tau_j) -
   Q(tau_(j-1))`` by at most ``(tau_j - tau_(j-1)) b`` (the sensitivities R2T's two releases
   rely on; "LS <= ES(0)"), both attained. All vectors up to the size bound are enumerated, so
   every neighbour of a neighbour is checked too ("<= ES(1) at distance 1": the bound is the
   same constant, truncation being data-independent);
2. noised increments (the default plan): the EXACT joint law of the released levels. The
   levels are the running sums of independent draws ``D_j + X_j``, a bijection, so the pmf of
   the released vector at y is ``prod_j f_j(y_j - y_(j-1) - D_j)`` and the largest
   ``|log-ratio|`` between neighbours over every output is exactly ``sum_j |D_j - D'_j| /
   scale_j`` (counts; sums in snapped grid steps times ``g_j / scale_j``). It must be at most
   epsilon over every neighbour, attained, and exceed epsilon with the scales halved. The
   value, the chosen level and the interval are functions of that vector;
3. per-level noise (``increments=False``), counts: the EXACT pmf of the released value
   ``max(0, max_j (Q_j + X_j - shift_j))`` is computed from the plan's scales and shifts
   (product of the levels' discrete Laplace CDFs; the pmf as a telescoping sum of non-negative
   terms, so no cancellation), and the largest ``|ln P[V(D) = t] - ln P[V(D') = t]|`` over
   every output t (down to probabilities of 1e-250) must be at most epsilon. The same
   computation with the plan's scales halved must exceed epsilon: the check catches an
   under-noised plan;
4. per-level noise, sums: the snapped value of each level moves by at most an integer number
   of grid steps whose privacy loss at the level's integer-noise scale is at most epsilon / L.

Pure arithmetic over the real plan (dpsql.noise.r2t.plan_r2t) and the real truncation; no
randomness, so no false failures.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpsql.noise.r2t import R2TPlan, levels, plan_r2t, truncated_sums

# A background of units that makes every level's truncated answer exceed its shift, so the
# released value's pmf has outputs where all levels sit in their lower tails (where the loss of
# the max approaches the full epsilon).
BACKGROUND = tuple([1, 2, 3, 4, 5, 6, 7, 8] * 6)


def _databases(gs: int, extra_units: int, background: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Every multiset of 0..extra_units contributions in 0..gs+2, over the background."""
    out = []
    for size in range(extra_units + 1):
        for extra in itertools.combinations_with_replacement(range(gs + 3), size):
            out.append(tuple(sorted(background + extra)))
    return out


def _neighbours(db: tuple[int, ...], gs: int) -> set[tuple[int, ...]]:
    """Each unit removed, and a unit of each contribution 0..gs+2 added."""
    out = {db[:i] + db[i + 1:] for i in range(len(db))}
    out |= {tuple(sorted((*db, c))) for c in range(gs + 3)}
    return out


def _q(db: tuple[int, ...], gs: int, b: int = 1, base: float = 2) -> tuple[int, ...]:
    c = np.array(db, dtype=np.int64) * b
    return tuple(int(v) for v in truncated_sums(c, unit_bound=b, max_contribution=gs,
                                                base=base))


# a non-2 base (the owner's grid, PrivacyUnit.level_base): 3 is whole, 2.5 floors (2, 6, 15)
@pytest.mark.parametrize(("gs", "b", "base"), [(1, 1, 2), (4, 1, 2), (6, 3, 2), (8, 1, 2),
                                               (8, 1, 3), (14, 1, 2.5), (6, 3, 2.5)])
def test_truncated_answers_move_by_at_most_tau_b_per_unit(gs, b, base):
    taus = np.array(levels(gs, base))
    caps = taus * b
    steps = np.diff(taus, prepend=0) * b
    attained = np.zeros(len(caps), dtype=bool)
    attained_steps = np.zeros(len(caps), dtype=bool)
    for db in _databases(gs, 3, ()):
        q = np.array(_q(db, gs, b, base))
        for nb in _neighbours(db, gs):
            q_nb = np.array(_q(nb, gs, b, base))
            moved = np.abs(q_nb - q)
            assert np.all(moved <= caps), (db, nb, moved, caps)
            attained |= moved == caps
            moved_steps = np.abs(np.diff(q_nb, prepend=0) - np.diff(q, prepend=0))
            assert np.all(moved_steps <= steps), (db, nb, moved_steps, steps)
            attained_steps |= moved_steps == steps
    assert attained.all() and attained_steps.all()  # the bounds are tight at every level


@pytest.mark.parametrize(("gs", "b", "epsilon", "base"), [
    (1, 1, 1.0, 2), (4, 1, 1.0, 2), (8, 1, 2.0, 2), (6, 3, 0.5, 2), (9, 1, 1.0, 3),
    (14, 1, 1.5, 2.5), (9, 2, 0.7, 2.2)])
def test_increments_joint_law_is_epsilon_dp_on_every_neighbour(gs, b, epsilon, base):
    plan = plan_r2t(unit_bound=b, max_contribution=gs, epsilon=epsilon, integer=True,
                    base=base)
    assert plan.increments == (len(plan.levels) > 1)
    scales = np.array(plan.scales)
    worst = worst_halved = 0.0
    for db in _databases(gs, 3 if gs <= 9 else 2, ()):
        d = np.diff(_q(db, gs, b, base), prepend=0)
        for nb in _neighbours(db, gs):
            moved = np.abs(np.diff(_q(nb, gs, b, base), prepend=0) - d)
            worst = max(worst, float(np.sum(moved / scales)))
            worst_halved = max(worst_halved, float(np.sum(moved / (scales / 2))))
    assert worst <= epsilon * (1 + 1e-12), worst
    assert worst >= epsilon * (1 - 1e-12), worst  # attained: the plan is not over-noised
    assert worst_halved > 1.9 * epsilon  # a halved plan is caught


@pytest.mark.parametrize(("b", "epsilon", "base"), [(2.5, 1.0, 2), (0.3, 0.7, 2),
                                                    (1000.0, 3.0, 2), (2.5, 1.0, 2.5)])
def test_sum_increments_move_within_their_share(b, epsilon, base):
    gs = 6
    plan = plan_r2t(unit_bound=b, max_contribution=gs, epsilon=epsilon, integer=False,
                    base=base)
    assert plan.increments
    worst = 0.0
    for db, nb in _sum_neighbours(b, gs):
        d = np.diff(truncated_sums(np.array(db), unit_bound=b, max_contribution=gs,
                                   base=base), prepend=0)
        d_nb = np.diff(truncated_sums(np.array(nb), unit_bound=b, max_contribution=gs,
                                      base=base), prepend=0)
        loss = 0.0
        for j, (g, scale) in enumerate(zip(plan.granularities, plan.scales, strict=True)):
            snapped = math.floor(d[j] / g + 0.5)
            snapped_nb = math.floor(d_nb[j] / g + 0.5)
            # the integer noise's scale is scale / g: loss = steps moved * g / scale
            loss += abs(snapped_nb - snapped) * g / scale
        assert loss <= epsilon * (1 + 1e-12), (db, nb, loss)
        worst = max(worst, loss / epsilon)
    assert worst > 0.99  # attained up to the grid's slack


# ---------------------------------------------------------------------------------------------
# The exact law of a count release
# ---------------------------------------------------------------------------------------------


def _dl_cdf(k: np.ndarray, scale: float) -> np.ndarray:
    """P(X <= k) for X discrete Laplace(scale), integer k (vectorised)."""
    p = math.exp(-1.0 / scale)
    k = np.asarray(k, dtype=np.float64)
    below = np.exp(np.minimum(k, 0.0) / scale) / (1.0 + p)          # k < 0: p^-k / (1+p)
    above = 1.0 - np.exp(-(np.maximum(k, 0.0) + 1.0) / scale) / (1.0 + p)
    return np.where(k < 0, below, above)


def _dl_pmf(k: np.ndarray, scale: float) -> np.ndarray:
    p = math.exp(-1.0 / scale)
    return (1.0 - p) / (1.0 + p) * np.exp(-np.abs(np.asarray(k, dtype=np.float64)) / scale)


def _value_pmf(q: tuple[int, ...], scales: tuple[float, ...], shifts: tuple[float, ...],
               top: int) -> np.ndarray:
    """Exact P[V = t] for t = 0..top, V = max(0, max_j (q_j + X_j - shift_j)).

    P[V = 0] = prod_j F_j(shift_j - q_j); for t >= 1, P[V = t] = prod_j F_j(u_j) - prod_j
    F_j(u_j - 1) with u_j = t + shift_j - q_j, written as the telescoping sum
    sum_k (prod_{i<k} F_i(u_i - 1)) f_k(u_k) (prod_{i>k} F_i(u_i)) of non-negative terms.
    """
    t = np.arange(top + 1, dtype=np.float64)
    u = [t + s - qj for qj, s in zip(q, shifts, strict=True)]
    cdf_u = [_dl_cdf(x, b) for x, b in zip(u, scales, strict=True)]
    cdf_before = [_dl_cdf(x - 1, b) for x, b in zip(u, scales, strict=True)]
    pmf = np.zeros_like(t)
    for k, (x, b) in enumerate(zip(u, scales, strict=True)):
        term = _dl_pmf(x, b)
        for i in range(len(u)):
            if i < k:
                term = term * cdf_before[i]
            elif i > k:
                term = term * cdf_u[i]
        pmf += term
    pmf[0] = np.prod([c[0] for c in cdf_u])
    return pmf


def _max_value_loss(plan: R2TPlan, scales: tuple[float, ...], gs: int,
                    databases: list[tuple[int, ...]], base: float = 2) -> float:
    """The largest |log-ratio| of the released value's pmf over every neighbour pair."""
    pairs = {(_q(db, gs, 1, base), _q(nb, gs, 1, base)) for db in databases
             for nb in _neighbours(db, gs)}
    top = int(max(max(q) for pair in pairs for q in pair) + 700 * max(scales))
    cache: dict[tuple[int, ...], np.ndarray] = {}

    def pmf(q: tuple[int, ...]) -> np.ndarray:
        if q not in cache:
            cache[q] = _value_pmf(q, scales, plan.shifts, top)
        return cache[q]

    worst = 0.0
    for q, q_nb in pairs:
        a, c = pmf(q), pmf(q_nb)
        ok = (a > 1e-250) & (c > 1e-250)
        assert ok[0] and ok.sum() > 100  # the comparison is not vacuous
        worst = max(worst, float(np.max(np.abs(np.log(a[ok]) - np.log(c[ok])))))
    return worst


def test_value_pmf_sums_to_one_and_matches_direct_differences():
    plan = plan_r2t(unit_bound=1, max_contribution=4, epsilon=1.0, integer=True,
                    increments=False)
    q = (60, 100)
    pmf = _value_pmf(q, plan.scales, plan.shifts, 3000)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    t = np.arange(1, 200)

    def cdf_of_max(x: np.ndarray) -> np.ndarray:
        return np.prod([_dl_cdf(x + s - qj, b) for qj, s, b in
                        zip(q, plan.shifts, plan.scales, strict=True)], axis=0)
    assert np.allclose(pmf[1:200], cdf_of_max(t) - cdf_of_max(t - 1), rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize(("gs", "epsilon", "base"), [(4, 1.0, 2), (8, 2.0, 2), (2, 0.5, 2),
                                                     (9, 1.0, 3), (6, 1.5, 2.5)])
def test_count_release_is_epsilon_dp_on_every_neighbour(gs, epsilon, base):
    plan = plan_r2t(unit_bound=1, max_contribution=gs, epsilon=epsilon, integer=True, base=base,
                    increments=False)
    dbs = _databases(gs, 1 if gs > 4 else 2, BACKGROUND) + _databases(gs, 2, ())
    loss = _max_value_loss(plan, plan.scales, gs, dbs, base)
    assert loss <= epsilon * (1 + 1e-9), loss
    if len(plan.levels) > 1:
        # not vacuous: with the background, every level sits in its lower tail at t = 0 and the
        # loss there approaches the sum of the levels' losses, epsilon
        assert loss >= 0.9 * epsilon, loss


@pytest.mark.parametrize(("gs", "epsilon", "base"), [(4, 1.0, 2), (8, 2.0, 2), (6, 1.5, 2.5)])
def test_a_halved_scale_is_caught(gs, epsilon, base):
    plan = plan_r2t(unit_bound=1, max_contribution=gs, epsilon=epsilon, integer=True, base=base,
                    increments=False)
    halved = tuple(s / 2 for s in plan.scales)
    loss = _max_value_loss(plan, halved, gs, _databases(gs, 1, BACKGROUND), base)
    assert loss > 1.5 * epsilon, loss


# ---------------------------------------------------------------------------------------------
# Sums: the snapped move per level
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("b", "epsilon", "base"), [(2.5, 1.0, 2), (0.3, 0.7, 2),
                                                    (1000.0, 3.0, 2), (2.5, 1.0, 2.5)])
def test_sum_levels_move_within_their_share(b, epsilon, base):
    gs = 6
    plan = plan_r2t(unit_bound=b, max_contribution=gs, epsilon=epsilon, integer=False,
                    base=base, increments=False)
    worst = 0.0
    for db, nb in _sum_neighbours(b, gs):
        q = truncated_sums(np.array(db), unit_bound=b, max_contribution=gs, base=base)
        q_nb = truncated_sums(np.array(nb), unit_bound=b, max_contribution=gs, base=base)
        for j, (g, scale) in enumerate(zip(plan.granularities, plan.scales, strict=True)):
            snapped = math.floor(q[j] / g + 0.5)
            snapped_nb = math.floor(q_nb[j] / g + 0.5)
            # the integer noise's scale is scale / g: loss = steps moved * g / scale
            loss = abs(snapped_nb - snapped) * g / scale
            assert loss <= plan.epsilon_per_level * (1 + 1e-12), (db, nb, j, loss)
            worst = max(worst, loss / plan.epsilon_per_level)
    assert worst > 0.99  # attained up to the grid's slack


def _sum_neighbours(b: float, gs: int) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
    """Tiny SUM databases in value units (rows of values in {0, 0.1 b, 0.37 b, b}, 0..gs+2
    rows per unit, over a background) with each neighbour: each unit removed, one added."""
    per_row = (0.0, 0.1 * b, 0.37 * b, b)
    every = sorted({round(sum(rows), 12) for n in range(gs + 3)
                    for rows in itertools.combinations_with_replacement(per_row, n)})
    units = [*every[::max(1, len(every) // 24)], every[-1]]  # spread, with the largest
    background = [0.37 * b] * 5
    dbs = [tuple(background + list(extra)) for size in range(3)
           for extra in itertools.combinations_with_replacement(units[:12], size)]
    out = []
    for db in dbs:
        neighbours = [db[:i] + db[i + 1:] for i in range(len(db))]
        neighbours += [(*db, c) for c in units]
        out += [(db, nb) for nb in neighbours]
    return out
