"""The optimal DP partition selection when one change touches one group: Desfontaines, Voss,
Gipson and Mandayam, "Differentially private partition selection", PoPETs 2022 (Thm. 1),
drawn under a privacy unit with kappa = ``max_groups`` = 1 (docs/privacy.md, "Partition
selection" and "Privacy units"; :mod:`dpsql.noise.unit_partition` decides when).

Precondition (the unit relation at kappa = 1, :mod:`dpsql.noise.unit_partition`): neighbours
D, D' = D plus one unit u; each group's ``__n`` (its number of kept units) is the same in both
except in at most ONE group, where it rises by exactly 1 (from 0 when u alone is in it).

Mechanism: keep each group of ``__n = n`` independently with probability pi(n) (a Bernoulli
draw, :mod:`dpsql.noise.bernoulli`); pi(0) = 0 (an empty group is never a candidate) and
pi(n) = 1 for n at or beyond the table's end. Only the set is released: no noisy count.

Guarantee: (epsilon, delta)-DP for add/remove-one-unit neighbours if for every n >= 0

  (a) pi(n+1) <= e^eps pi(n) + delta   and   (b) 1 - pi(n) <= e^eps (1 - pi(n+1)) + delta

(with pi non-decreasing, the two reverse inequalities hold trivially). Proof: the output is a
product of independent per-group decisions; all factors but the one of the changed group have
the same law in D and D', and that one is a Bernoulli of pi(n) against pi(n+1), whose
hockey-stick divergence of order e^eps is at most delta in both directions by (a), (b) (its
only events are keep and drop). For any outcome set O, conditioning on the other groups'
decisions, P[M(D') in O] = E[P_g(O_rest)] <= E[e^eps P'_g(O_rest) + delta]
= e^eps P[M(D) in O] + delta, and symmetrically. A new group of u alone is n = 0 -> 1: (a)
at n = 0 is pi(1) <= delta.

The optimal pi (the paper's Thm. 1: the largest pi(n) for every n subject to (a) and (b)) is
the recurrence pi(n+1) = min(e^eps pi(n) + delta, 1 + e^-eps (pi(n) + delta - 1), 1), whose
closed form is pi(n) = delta (e^(n eps) - 1)/(e^eps - 1) up to a crossover n1 and then
1 - (1 - pi(n1) + delta/(e^eps - 1)) (1 - e^(-(n - n1) eps)) ... up to 1
(:func:`dpsql.noise.unit_partition.optimal_keep` computes it in floats, tests compare).

Rounding (why the drawn table is private, not merely close): :func:`keep_table` builds the
table on the Bernoulli's grid, pi(n) = k(n) / 2^53 with integers k(n), by the same recurrence
with every step rounded DOWN: k(n+1) = min(2^53, floor(A-), 2^53 - ceil(X+)), A- a float
lower bound of e^eps k(n) + delta 2^53 and X+ a float upper bound of
e^-eps (2^53 - k(n) - delta 2^53) (or no such term when that is <= 0). Each float bound is the
float value moved by a relative 2^-40 in the safe direction, beyond the few 2^-53 roundings of
``exp``, one product and one sum (exp is within 1 ulp). So (a) and (b) hold for k(n)/2^53 in
exact arithmetic, and the Bernoulli realises k(n)/2^53 exactly: no rounding term is added to
delta, and none needs shrinking it. The table is within a relative ~n 2^-40 + 2^-53/delta of
the exact optimum (tests). It ends at the first n with k(n) = 2^53 (pi = 1 from there on,
consistent with (a), (b)); when that takes more than :data:`MAX_TABLE` steps (tiny epsilon),
:func:`keep_table` returns None and the planner keeps Laplace thresholding (a decision on
epsilon and delta alone).

At eps 1, delta 1e-5: 50% kept at n = 12, 99% at n = 16 (Laplace thresholding: 13 and 17).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from dpsql.noise import bernoulli

__all__ = [
    "MAX_TABLE",
    "MECHANISM",
    "keep_probability",
    "keep_table",
    "select",
]

#: SelectionPlan.mechanism of this selection (the record, explain)
MECHANISM = "optimal (Desfontaines et al. 2022)"

#: the longest table (n up to it) :func:`keep_table` builds before giving up (epsilon below
#: about 2 ln(1/delta) / MAX_TABLE; the planner then keeps Laplace thresholding)
MAX_TABLE = 1 << 16

_ONE = 1 << bernoulli.WORD_BITS
_DOWN = 1.0 - 2.0**-40
_UP = 1.0 + 2.0**-40


@functools.lru_cache(maxsize=64)
def keep_table(epsilon: float, delta: float) -> tuple[float, ...] | None:
    """(pi(0), ..., pi(N)) with pi(0) = 0 and pi(N) = 1 the first 1: the optimal keep
    probabilities on the 2^-53 grid, rounded down at every step (module docstring), so that
    (a) and (b) hold exactly. None if N would exceed :data:`MAX_TABLE`. Depends on its
    arguments alone.

    Precondition: epsilon finite > 0, 0 < delta < 1."""
    if not (math.isfinite(epsilon) and epsilon > 0 and 0 < delta < 1):
        raise ValueError("epsilon must be finite > 0 and delta in (0, 1)")
    # e^eps overflows past ~709 (and e^-eps underflows to 0, which would drop the second
    # bound): build the table of epsilon 700 then, a mechanism that is (700, delta)-DP, hence
    # (epsilon, delta)-DP for every larger epsilon
    eps = min(epsilon, 700.0)
    grow, shrink = math.exp(eps), math.exp(-eps)
    d = delta * float(_ONE)  # exact: a power-of-two scaling
    ks = [0]
    while ks[-1] < _ONE:
        if len(ks) > MAX_TABLE:
            return None
        k = ks[-1]
        up = (grow * float(k) + d) * _DOWN  # <= e^eps k + delta 2^53
        nxt = _ONE if up >= _ONE else math.floor(up)
        rest = float(_ONE - k) - d  # one rounding of 2^53 - k - delta 2^53
        if rest > 0:
            nxt = min(nxt, _ONE - math.ceil(shrink * rest * _UP))
        if nxt <= k:  # cannot happen for delta > 2^-53 (each step adds at least delta)
            return None
        ks.append(nxt)
    return tuple(k / float(_ONE) for k in ks)  # exact: k <= 2^53


def keep_probability(table: tuple[float, ...], n: int) -> float:
    """P(a group of ``n`` units is kept) = table[n], 1 beyond the table, 0 for n <= 0."""
    if n <= 0:
        return 0.0
    return table[n] if n < len(table) else 1.0


def select(counts: np.ndarray, table: tuple[float, ...], max_kept: int,
           source: object | None = None) -> np.ndarray:
    """Indices (ascending) of the kept groups, given each non-empty group's ``__n`` (in a fixed
    order that does not depend on the draws): group i is kept with probability
    ``keep_probability(table, counts[i])``, independently (:func:`dpsql.noise.bernoulli`).

    At most ``max_kept`` (a public number): beyond it a uniformly random subset of the kept
    ones (secure words), which depends on the kept set alone: post-processing."""
    n = np.asarray(counts, dtype=np.int64)
    if not len(n):
        return np.zeros(0, dtype=np.intp)
    probs = np.asarray(table, dtype=np.float64)[np.clip(n, 0, len(table) - 1)]
    probs[n <= 0] = 0.0
    kept = np.flatnonzero(bernoulli.bernoulli(probs, source))
    if len(kept) > max_kept:
        order = np.argsort(bernoulli.secure_words(len(kept)), kind="stable")[:max_kept]
        kept = np.sort(kept[order])
    return kept
