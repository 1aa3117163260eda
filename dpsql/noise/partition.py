"""DP partition selection: which groups of a GROUP BY without a declared domain are released.

A key column the owner marked ``partition_selection: true`` has no public list of values, so
the groups come from the data; a group is released iff its noisy row count passes a threshold
tau (Laplace thresholding, Korolova et al. 2009; Wilson et al., "Differentially private SQL
with bounded user contribution", PoPETs 2020), with the discrete Laplace noise of
:mod:`dpsql.noise.mechanisms`. This module plans the mechanism (tau, scale, the budget split)
and draws it; nothing else decides which data-derived groups exist.

Mechanism M (precondition: the relation the query groups has constant stability S, so one
change of a private row removes at most S of its rows and adds at most S): for each group g
with count c_g > 0, keep g iff ``c_g + Z_g >= tau`` with Z_g i.i.d. discrete Laplace of scale
``b = 2S / epsilon``.

Guarantee: M is (epsilon, delta)-DP for dpsql's change-one-row neighbours whenever
``S (1 + e^epsilon) P(Z >= tau) <= delta`` (:func:`threshold` picks the least such integer
tau >= 1). Proof: fix neighbours D, D' and let U be the groups non-empty in either, B those
non-empty in D only, B' in D' only; one change empties at most S groups and creates at most S,
so |B|, |B'| <= S, and the count vectors over U differ by at most 2S in L1. Let N(D) keep
every g in U with ``c_g(D) + Z_g >= tau`` (empty groups included). N is epsilon-DP: each
coordinate's pmf ratio is at most e^(|c_g(D) - c_g(D')| / b), their product at most e^epsilon,
and thresholding is post-processing. M(D) = N(D) minus B', and they differ only if some g in
B' (count 0 in D) passes: probability <= |B'| P(Z >= tau). Likewise M(D') and N(D') differ
with probability <= |B| P(Z >= tau). So for every set O of outcomes,
P[M(D) in O] <= P[N(D) in O] + S P(Z >= tau) <= e^eps (P[M(D') in O] + S P(Z >= tau))
+ S P(Z >= tau). The noisy counts themselves are never released; the aggregates of the kept
groups are noised afterwards with the rest of the budget (adaptive basic composition: over a
fixed set of groups they are the usual histogram release).

Budget (:func:`plan_with_selection`): a ``COUNT(*)`` measurement of the same groups
(:func:`shared_count`) is released as the selection's own noisy counts, which the proof above
covers (N releases them too), so the selection takes that COUNT's share of the even split and
is charged once; without one, the selection is one more share (:func:`split`). All of delta
is the selection's.

Why not the optimal mechanism of Desfontaines et al. (PoPETs 2022): it is optimal when one
change touches one group; here one change touches 2S groups (one row leaves a group and joins
another), where it is applied per group at (epsilon/2S, delta') and composed, and at S = 1 its
threshold comes out within a few rows of this one (eps 1, delta 1e-5: about 23 against 25),
while this form has one short proof for every S. The sampler's truncation beyond ~53 scales
(< 2^-75 of mass, mechanisms module docstring) adds a negligible term to delta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsql.analysis.checks import is_count_star
from dpsql.analysis.elastic import QueryAnalysis
from dpsql.budget import Budget, missing_epsilon
from dpsql.errors import NotSupportedError
from dpsql.noise import mechanisms, optimal_partition
from dpsql.noise.plan import NoisePlan, is_public, plan_noise

__all__ = [
    "EXPLAIN_SIZES",
    "LAPLACE_THRESHOLDING",
    "MAX_KEPT",
    "SelectionPlan",
    "describe",
    "keep_probability",
    "plan_selection",
    "plan_with_selection",
    "select",
    "select_noisy",
    "shared_count",
    "split",
    "threshold",
]

#: group sizes whose probability of being kept ``dpsql explain`` shows
EXPLAIN_SIZES = (1, 5, 10, 20, 50)

#: SelectionPlan.mechanism of noisy-count thresholding (this module, dpsql.noise.unit_partition)
LAPLACE_THRESHOLDING = "laplace_thresholding"

#: most groups one selection releases (a public number: kept groups beyond it are dropped,
#: keeping those of largest noisy count, which is post-processing of the noisy counts)
MAX_KEPT = 1_000_000


@dataclass(frozen=True)
class SelectionPlan:
    """The selection's share of the budget and its public parameters (no data in them)."""

    epsilon: float
    delta: float
    stability: int  # S: the most rows of the grouped relation one change of a row moves
    scale: float | None  # b = 2S / epsilon (None: the optimal selection draws no noise)
    threshold: int | None  # tau (None: the optimal selection has no threshold)
    #: the index of the COUNT(*) measurement whose noisy values ARE the selection's noisy
    #: counts (:func:`shared_count`): its epsilon is the selection's, charged once
    shared: int | None = None
    #: the neighbouring relation the threshold is for (dpsql.noise.unit_partition: a unit's)
    relation: str = "change one row"
    #: LAPLACE_THRESHOLDING, or dpsql.noise.optimal_partition.MECHANISM (kappa = 1 units)
    mechanism: str = LAPLACE_THRESHOLDING
    #: the optimal selection's keep probabilities pi(0..N) (dpsql.noise.optimal_partition)
    keep_table: tuple[float, ...] | None = None

    def keep_probability(self, n: int) -> float:
        """P(a group of ``n`` rows (units) is kept): P(n + Z >= tau), or pi(n)."""
        if self.keep_table is not None:
            return optimal_partition.keep_probability(self.keep_table, n)
        assert self.threshold is not None and self.scale is not None
        return keep_probability(n, self.threshold, self.scale)


def tail(k: int, scale: float) -> float:
    """P(Z >= k) for Z discrete Laplace of ``scale``: p^k / (1 + p) for k >= 1 and
    1 - p^(1-k) / (1 + p) for k <= 0, with p = e^(-1/scale)."""
    p = math.exp(-1.0 / scale)
    # p^k as e^(-k/b): no log(p), which fails once p underflows to 0 (eps past ~745)
    if k >= 1:
        return math.exp(-k / scale) / (1.0 + p)
    return 1.0 - math.exp(-(1 - k) / scale) / (1.0 + p)


def keep_probability(n: int, tau: int, scale: float) -> float:
    """P(n + Z >= tau)."""
    return tail(tau - n, scale)


def threshold(stability: int, epsilon: float, delta: float) -> int:
    """The least integer tau >= 1 with ``S (1 + e^eps) P(Z >= tau) <= delta``, Z discrete
    Laplace of scale 2S/eps (module docstring). Depends on its arguments alone.

    Precondition: S >= 1, eps > 0, 0 < delta < 1. In logarithms (no overflow at any eps):
    for tau >= 1, ln P(Z >= tau) = -tau/b - ln(1 + p)."""
    scale = 2.0 * stability / epsilon
    log_p = -1.0 / scale
    log_factor = math.log(stability) + epsilon + math.log1p(math.exp(-epsilon))
    log_delta = math.log(delta)

    def meets(tau: int) -> bool:
        return log_factor + tau * log_p - math.log1p(math.exp(log_p)) <= log_delta

    tau = max(1, math.ceil((log_factor - math.log1p(math.exp(log_p)) - log_delta) * scale))
    while tau > 1 and meets(tau - 1):  # rounding: the least one
        tau -= 1
    while not meets(tau):
        tau += 1
    return tau


def describe(plan: SelectionPlan) -> dict[str, object]:
    """The selection's public parameters and its retention curve (``dpsql explain``)."""
    return {
        "mechanism": plan.mechanism,
        "neighbours": plan.relation,
        "shares_count_measurement": plan.shared,
        "epsilon": plan.epsilon,
        "delta": plan.delta,
        "stability": plan.stability,
        "noise_scale": plan.scale,
        "threshold": plan.threshold,
        "keep_probability": {n: plan.keep_probability(n) for n in EXPLAIN_SIZES},
    }


def split(budget: Budget, n_private: int) -> tuple[Budget, Budget]:
    """(the selection's share, the aggregates' share) of ``budget``: the selection counts as
    one more measurement in the even split of epsilon (eps / (1 + n) to it), and takes all of
    delta (the aggregates of a constant-stability relation are pure).

    With no private measurement (a key-only release) the selection gets all of epsilon and
    the second share is unused (no measurement draws on it; the record charges the plans'
    epsilons only). Refuses delta = 0 (no threshold makes a data-derived group set
    epsilon-DP)."""
    if budget.delta <= 0:
        raise NotSupportedError(
            "this query's released groups come from the data (a GROUP BY column without a "
            "declared domain, or a GROUP BY / DISTINCT with no aggregate, which asks which "
            "keys occur) and need delta > 0: pass a delta such as 1e-6 (or add COUNT(*) over "
            "a key with a declared domain)"
        )
    share = budget.epsilon / (1 + n_private)
    rest = budget.epsilon - share if n_private else 0.0
    return Budget(share, budget.delta), Budget(rest if rest > 0 else share, 0.0)


def plan_selection(stability: float, budget: Budget, *, shared: int | None = None
                   ) -> SelectionPlan:
    """The selection at ``budget`` (its share) for a relation of constant stability S
    (``shared``: the COUNT(*) measurement it shares its noisy counts with).

    Refusals depend on S (the SQL and public metadata) and the budget alone."""
    s = math.ceil(stability)
    if not math.isfinite(stability) or s < 1:
        raise NotSupportedError(
            "the relation this query groups has no finite stability, so no threshold can "
            "protect its groups: group by a column with a declared domain")
    scale = 2.0 * s / budget.epsilon
    if scale > mechanisms.MAX_DISCRETE_SCALE:
        raise NotSupportedError(
            "the noise the group selection needs is too large to release anything useful: "
            "raise epsilon")
    return SelectionPlan(budget.epsilon, budget.delta, s, scale,
                         threshold(s, budget.epsilon, budget.delta), shared)


def select(counts: np.ndarray, plan: SelectionPlan,
           sampler: mechanisms.Sampler | None = None) -> np.ndarray:
    """Indices of the kept groups (:func:`select_noisy`)."""
    return select_noisy(counts, plan, sampler)[0]


def select_noisy(counts: np.ndarray, plan: SelectionPlan,
                 sampler: mechanisms.Sampler | None = None
                 ) -> tuple[np.ndarray, np.ndarray | None]:
    """(indices of the kept groups, their noisy counts), given each non-empty group's exact
    row count (the groups in a fixed order that does not depend on the noise).

    Guarantee: a group is kept iff ``count + Z >= tau`` (fresh noise per group, the secure
    sampler unless a test passes ``sampler``); at most MAX_KEPT indices, those of largest
    noisy count, in ascending order. The noisy counts of kept groups are what the module's
    proof releases (N outputs them too), so a COUNT(*) of the same groups may be released as
    them (``plan.shared``). With the optimal selection's table (``plan.keep_table``, kappa = 1
    units) each group is kept with probability pi(count) instead
    (:func:`dpsql.noise.optimal_partition.select`) and there are no noisy counts (None)."""
    if plan.keep_table is not None:
        return optimal_partition.select(counts, plan.keep_table, MAX_KEPT, sampler), None
    assert plan.threshold is not None and plan.scale is not None
    counts = np.asarray(counts, dtype=np.int64)
    if not len(counts):
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.int64)
    noisy = mechanisms.release_counts(counts, plan.scale, sampler=sampler)
    kept = np.flatnonzero(noisy >= plan.threshold)
    if len(kept) > MAX_KEPT:
        top = np.argsort(-noisy[kept], kind="stable")[:MAX_KEPT]
        kept = np.sort(kept[top])
    return kept, noisy[kept]


def laplace_budget(budget: Budget | None) -> Budget:
    """``budget``, refused when missing or not for Laplace noise: a selection threshold's proof
    (and a shared COUNT(*)'s draw) is for discrete Laplace noise, and planning the aggregates
    with another mechanism would silently not be what was asked. Reads the budget alone."""
    if budget is None:
        raise missing_epsilon()
    if budget.mechanism != "laplace":
        raise NotSupportedError(
            "this query's groups are selected from the data (partition selection), with "
            "Laplace noise: use mechanism='laplace' for it")
    return budget


def plan_with_selection(analysis: QueryAnalysis, budget: Budget | None, *, distance: int = 0
                        ) -> tuple[tuple[NoisePlan, ...], SelectionPlan]:
    """The noise plans of ``analysis``'s measurements and its selection plan, for a query with
    a partition-selected key: the selection takes its :func:`split` share, the measurements
    split the rest as :func:`dpsql.noise.plan.plan_noise` does. The shares sum to ``budget``
    (what the ledger charges). Every refusal (no epsilon, delta = 0, too much noise) comes
    before the charge and depends on the SQL, the public metadata and the budget alone.
    Under a privacy unit, the unit relation's planner (dpsql.noise.unit_partition) answers."""
    assert analysis.selection_stability is not None
    if analysis.unit is not None:
        from dpsql.noise import unit_partition  # it builds on this module

        return unit_partition.plan_with_selection(analysis, budget, distance=distance)
    budget = laplace_budget(budget)
    n_private = sum(1 for m in analysis.measurements if not is_public(m))
    share, rest = split(budget, n_private)
    j = shared_count(analysis)
    if j is not None:
        # the COUNT(*)'s noisy values are the selection's: the even split over the
        # measurements alone, the selection taking the COUNT(*)'s share (and all of delta)
        plans = plan_noise(analysis, Budget(budget.epsilon, 0.0), distance=distance)
        selection = plan_selection(analysis.selection_stability,
                                   Budget(plans[j].epsilon, budget.delta), shared=j)
        if selection.scale is not None and math.isclose(selection.scale, plans[j].scale,
                                                        rel_tol=1e-12):
            return plans, selection
    return (plan_noise(analysis, rest, distance=distance),
            plan_selection(analysis.selection_stability, share))


def shared_count(analysis: QueryAnalysis) -> int | None:
    """The index of a ``COUNT(*)`` measurement (no FILTER, no DISTINCT) of ES(k) = 2S at every
    k: its exact value in each group is the group's row count, the selection's count, so its
    noisy release can be the selection's noisy count (one draw, one epsilon). None if none."""
    s = analysis.selection_stability
    for m in analysis.measurements:
        if (m.function == "COUNT" and is_count_star(m.node)
                and not m.sensitivity.depends_on_k and s is not None
                and m.sensitivity.at(0) == 2 * math.ceil(s)):
            return m.index
    return None
