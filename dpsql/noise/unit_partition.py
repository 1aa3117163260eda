"""DP partition selection under a privacy unit: which groups of a GROUP BY without a declared
domain are released when neighbours add or remove one unit (docs/privacy.md, "Privacy units").

The change-one-row planner (:mod:`dpsql.noise.partition`) is for a relation of constant
stability S; this is the second, separate planner, for dpsql's unit relation: D' = D plus one
unit u with every row linked to it (FK cascade). The executed query is the two-stage GROUP BY
(:mod:`dpsql.units.rewrite`): each unit keeps at most kappa = ``max_groups`` groups, chosen from
its own rows alone, and the groups query's ``__n`` is each group's number of kept (unit, group)
pairs -- the number of distinct units kept in it -- plus its number of rows of no unit
(dpsql.units.rewrite._selection_count). The rows of no unit are in every group they fall in,
and they are the same in both neighbours (docs/privacy.md, "Rows of no unit"), so their term
of ``__n`` is a constant that cancels from every difference below, and a group holding any
of them is non-empty in both. So, with U the groups non-empty in D' and B' those non-empty in
D' only:

* ``__n`` rises by exactly 1 in each of u's kept groups and nowhere else: the count vectors
  over U differ by at most kappa in L1, by at most 1 per group;
* |B'| <= kappa, and every g in B' has ``__n(D') = 1`` (u alone is in it); nothing is non-empty
  in D only (removing u changes no other unit's kept groups).

Mechanism M: keep g iff ``__n_g + Z_g >= tau``, Z_g i.i.d. discrete Laplace of scale
``b = kappa / epsilon``; the kept groups' noisy counts may be released with them.

Guarantee: M is (epsilon, delta)-DP for add/remove-one-unit neighbours iff
``1 - (1 - q)^kappa <= delta`` with ``q = P(1 + Z >= tau) = P(Z >= tau - 1)`` (:func:`threshold`
picks the least such integer tau >= 1); the bound is exact (attained).

Proof. Let m = |B'| and let P_c, P'_c be the laws of M's output restricted to the common
groups U \\ B' on D and D'; their counts differ by at most 1 in at most kappa - m groups, so
(product of discrete Laplace pmf ratios, e^(1/b) each; thresholding and releasing a noisy
count >= tau is post-processing of it) P'_c(o) <= e^(eps (kappa - m)/kappa) P_c(o) and
P_c(o) <= e^(eps (kappa - m)/kappa) P'_c(o) for every outcome o. M(D) never outputs a group of
B'; M(D') outputs none of them with probability (1 - q)^m, independently of the rest.

* D' against D: for any set O, P[M(D') in O] <= P[some g in B' kept] + (1 - q)^m P'_c(O_c)
  <= 1 - (1 - q)^m + e^eps P[M(D) in O], O_c the outcomes of O with no group of B'.
* D against D': P[M(D) in O] = P_c(O_c) <= e^(eps (kappa - m)/kappa) P'_c(O_c)
  = e^(eps (kappa - m)/kappa) (1 - q)^(-m) P[M(D') in O_c]. Where
  e^(eps/kappa) (1 - q) >= 1 this is <= e^eps P[M(D') in O] (delta 0); else the hockey-stick
  is at most 1 - (e^(eps/kappa) (1 - q))^m <= 1 - (1 - q)^m.

So delta = max over m <= kappa of 1 - (1 - q)^m = 1 - (1 - q)^kappa suffices, and it is attained
by D' = D plus a unit alone in kappa groups and O = "some of them kept" (probability
1 - (1 - q)^kappa on D', 0 on D): the condition is exact for this mechanism. It is at most
kappa q, the union bound (Wilson et al., PoPETs 2020, state delta = kappa q's form).

Budget (:func:`plan_with_selection`): as the change-one-row planner -- an even split, the
selection one more share (or the share of a COUNT(*) whose noisy values are the selection's:
with ``max_rows_per_group`` C = 1 a group's two-stage COUNT(*) is sum_u min(c_u, 1) plus its
rows of no unit in full, its ``__n`` exactly, at sensitivity kappa * C = kappa, the
selection's scale), all of delta the selection's. The aggregates of the kept groups are the
two-stage's pure histogram (L1 kappa * C * w), over a set fixed by the selection: adaptive
basic composition.

At kappa = 1 the optimal mechanism of Desfontaines et al. ("Differentially private partition
selection", PoPETs 2022) applies as is: one unit touches one group, add/remove neighbours, the
groups decided independently. It keeps a group of n units with probability
pi(n) = min(e^eps pi(n-1) + delta, 1 + e^-eps (pi(n-1) + delta - 1), 1): at eps 1, delta 1e-5,
50% at n = 12 and 99% at n = 16, against 13 and 17 here. So (:func:`plan_with_selection`):

* kappa = 1 and the selection's noisy counts are NOT released as a COUNT(*) (a key-only
  GROUP BY / SELECT DISTINCT, or aggregates other than the shared COUNT(*)): the selection
  DRAWS from the optimal mechanism (:mod:`dpsql.noise.optimal_partition`, its own proof and
  rounding argument; :func:`plan_optimal`), at the same share of the budget;
* kappa = 1 with the shared COUNT(*) (C = 1): Laplace thresholding stays -- its noisy counts
  ARE the released COUNT(*) (one draw, one share), while the optimal mechanism releases only
  the set, so a histogram would pay a second share of epsilon and more noise on every count;
* kappa > 1: Laplace thresholding (one proof for every kappa; the optimal mechanism is for
  one touched group).

:func:`optimal_keep` is the exact recurrence in floats (benchmarks, tests); the drawn table is
:func:`dpsql.noise.optimal_partition.keep_table`, the same recurrence rounded down on the
Bernoulli's grid. The Laplace sampler's truncation beyond ~53 scales adds a negligible term to
delta, as in :mod:`dpsql.noise.partition`.
"""

from __future__ import annotations

import math

from dpsql.analysis.checks import is_count_star
from dpsql.analysis.elastic import QueryAnalysis
from dpsql.budget import Budget
from dpsql.errors import NotSupportedError
from dpsql.noise import mechanisms, optimal_partition
from dpsql.noise.partition import SelectionPlan, laplace_budget, split, tail
from dpsql.noise.plan import NoisePlan, is_public, plan_noise

__all__ = [
    "UNIT_RELATION",
    "delta_of",
    "optimal_keep",
    "plan_optimal",
    "plan_selection",
    "plan_with_selection",
    "shared_count",
    "threshold",
]

#: SelectionPlan.relation of a selection under a privacy unit
UNIT_RELATION = "add/remove one unit"


def delta_of(groups: int, epsilon: float, tau: int) -> float:
    """The exact delta of thresholding at ``tau`` (module docstring): 1 - (1 - q)^kappa with
    q = P(Z >= tau - 1), Z discrete Laplace of scale kappa / epsilon."""
    q = tail(tau - 1, groups / epsilon)
    return -math.expm1(groups * math.log1p(-q)) if q < 1.0 else 1.0


def threshold(groups: int, epsilon: float, delta: float) -> int:
    """The least integer tau >= 1 with ``1 - (1 - P(Z >= tau - 1))^kappa <= delta``, Z discrete
    Laplace of scale kappa/eps, kappa = ``groups`` (module docstring). Depends on its arguments
    alone.

    Precondition: kappa >= 1, eps > 0, 0 < delta < 1. The start is solved in logarithms
    (P(Z >= k) = p^k / (1 + p) for k >= 1, p = e^(-1/b)), then moved to the least tau."""
    scale = groups / epsilon
    log_p = -1.0 / scale
    q_max = -math.expm1(math.log1p(-delta) / groups)  # 1 - (1 - q)^kappa <= delta iff q <= this

    def meets(tau: int) -> bool:
        k = tau - 1
        if k >= 1:
            return k * log_p - math.log1p(math.exp(log_p)) <= math.log(q_max)
        return tail(k, scale) <= q_max

    tau = max(1, 1 + math.ceil((math.log(q_max) + math.log1p(math.exp(log_p))) / log_p))
    while tau > 1 and meets(tau - 1):  # rounding: the least one
        tau -= 1
    while not meets(tau):
        tau += 1
    return tau


def plan_selection(groups: int, budget: Budget, *, shared: int | None = None) -> SelectionPlan:
    """The selection at ``budget`` (its share) when one unit is in at most ``groups`` = kappa
    groups (``shared``: the COUNT(*) measurement whose noisy values are the selection's).
    Refusals depend on kappa (the metadata) and the budget alone."""
    if groups < 1:
        raise NotSupportedError("max_groups must be at least 1 for partition selection")
    scale = groups / budget.epsilon
    if scale > mechanisms.MAX_DISCRETE_SCALE:
        raise NotSupportedError(
            "the noise the group selection needs is too large to release anything useful: "
            "raise epsilon")
    return SelectionPlan(budget.epsilon, budget.delta, groups, scale,
                         threshold(groups, budget.epsilon, budget.delta), shared,
                         relation=UNIT_RELATION)


def shared_count(analysis: QueryAnalysis) -> int | None:
    """The index of a ``COUNT(*)`` measurement (no FILTER, no DISTINCT) when the unit's
    ``max_rows_per_group`` is 1: its two-stage value in each group is the group's ``__n``
    (sum over kept units of min(rows, 1), plus the rows of no unit in full) and its
    sensitivity kappa, so its noisy release can be the selection's noisy count. None
    otherwise."""
    release = analysis.unit
    assert release is not None
    if release.unit.max_rows_per_group != 1:
        return None
    for m in analysis.measurements:
        if (m.function == "COUNT" and is_count_star(m.node)
                and not m.sensitivity.depends_on_k
                and m.sensitivity.at(0) == release.unit.max_groups):
            return m.index
    return None


def plan_with_selection(analysis: QueryAnalysis, budget: Budget | None, *, distance: int = 0
                        ) -> tuple[tuple[NoisePlan, ...], SelectionPlan]:
    """The noise plans of a query under a privacy unit with a partition-selected key (or a
    key-only GROUP BY) and its selection plan: the selection takes its share (module
    docstring), the measurements the rest. Every refusal (no epsilon, delta = 0, another
    mechanism, too much noise) comes before the charge and depends on the SQL, the metadata
    and the budget alone."""
    release = analysis.unit
    assert release is not None and not release.r2t
    budget = laplace_budget(budget)
    kappa = release.unit.max_groups
    n_private = sum(1 for m in analysis.measurements if not is_public(m))
    share, rest = split(budget, n_private)  # refuses delta = 0
    j = shared_count(analysis)
    if j is not None:
        plans = plan_noise(analysis, Budget(budget.epsilon, 0.0), distance=distance)
        selection = plan_selection(kappa, Budget(plans[j].epsilon, budget.delta), shared=j)
        if selection.scale is not None and math.isclose(selection.scale, plans[j].scale,
                                                        rel_tol=1e-12):
            return plans, selection
    plans = plan_noise(analysis, rest, distance=distance)
    if kappa == 1:  # one unit touches one group: the optimal mechanism, if its table fits
        optimal = plan_optimal(share)
        if optimal is not None:
            return plans, optimal
    return plans, plan_selection(kappa, share)


def plan_optimal(budget: Budget) -> SelectionPlan | None:
    """The optimal selection (:mod:`dpsql.noise.optimal_partition`) at ``budget`` (its share)
    when one unit is in at most kappa = 1 group and no noisy count is released with it; None
    when its table would be too long (:data:`~dpsql.noise.optimal_partition.MAX_TABLE`: tiny
    epsilon). Depends on the budget alone."""
    table = optimal_partition.keep_table(budget.epsilon, budget.delta)
    if table is None:
        return None
    return SelectionPlan(budget.epsilon, budget.delta, 1, None, None,
                         relation=UNIT_RELATION, mechanism=optimal_partition.MECHANISM,
                         keep_table=table)


def optimal_keep(epsilon: float, delta: float, n_max: int) -> list[float]:
    """Desfontaines et al.'s optimal P(kept | n units) for one touched group per unit
    (kappa = 1): pi(0) = 0, pi(n) = min(e^eps pi(n-1) + delta, 1 + e^-eps (pi(n-1) + delta - 1),
    1), in floats (benchmarks, tests). What dpsql draws is its version rounded down on the
    Bernoulli's grid (dpsql.noise.optimal_partition.keep_table), within a relative 1e-9."""
    pi = [0.0]
    for _ in range(n_max):
        prev = pi[-1]
        pi.append(min(math.exp(epsilon) * prev + delta,
                      1 + math.exp(-epsilon) * (prev + delta - 1), 1.0))
    return pi
