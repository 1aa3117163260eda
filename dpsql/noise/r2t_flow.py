"""R2T's LP truncation for results of TWO privacy units, solved exactly as a maximum flow
(issue #17; dpsql.units.multi; docs/privacy.md "Several privacy units").

Each result q (a pair of unit ids (a, b), one per unit table; a NULL id is a node no unit
owns, never removed: dpsql.units.multi_execute.pair_codes) carries psi(q) >= 0: its row count
(COUNT) or its sum of clamped non-negative values (a SUM part). The truncation at level tau
is R2T's LP (dpsql.noise.r2t_lp)

    Q(I, tau) = max sum_q x_q   s.t.  0 <= x_q <= psi(q),  sum_{q containing u} x_q <= tau  (all u)

Each result has exactly one unit of each side, so the constraint matrix is the incidence
matrix of a bipartite graph (totally unimodular) and the LP is the maximum flow source -> a
(capacity tau) -> b (capacity psi(a, b)) -> sink (capacity tau): with integer capacities its
optimum is an integer, found exactly (scipy.sparse.csgraph.maximum_flow, Dinic; capacities
int32, so every capacity here is below 2^31).

Contract of :func:`flow_truncated`. Level j uses the public step ``delta_j`` (a power of two:
1 for counts while tau_j < 2^31, else the power of two putting tau_j / delta_j in [2^30, 2^31))
and computes, exactly in integers, the LP optimum OPT_j of the instance with
``psi'(q) = floor(min(psi(q), tau_j) / delta_j)`` and unit cap ``T_j = floor(tau_j / delta_j)``;
it returns ``Q_j = delta_j * OPT_j`` (int64 for counts, float64 for sums: an integer times a
power of two, exact while below 2^53).

Guarantee (R2T's precondition for :func:`dpsql.noise.r2t.release_r2t`): ``0 <= Q_j``; and if
I' is I without the results containing one unit u (removing u with its cascade, as
dpsql.units.multi proves), ``Q_j(I') <= Q_j(I) <= Q_j(I') + delta_j T_j <= Q_j(I') + tau_j``.
Proof: psi' of every remaining result is unchanged (a function of psi(q) and public numbers);
an optimum of I' (x = 0 on u's results) is feasible for I, so OPT(I') <= OPT(I); an optimum
of I restricted to I's other results is feasible for I' and loses only u's results, whose x
sum to at most T (u's constraint), so OPT(I') >= OPT(I) - T. Adding a unit is the same
inequality read the other way. Also ``Q_j <= sum_q psi(q)`` (x <= psi'), with equality for
counts (delta_j = 1) once tau_j is at least every unit's load (x = psi' is feasible); for sums
the flooring loses less than delta_j (about tau_j 2^-30) per result.

Speed (exact, not approximations): the levels are solved top down, each by the first of
dpsql.noise.r2t_certify's certificates that applies (every unit light: the plain sum; one side
saturated by a flow on a prefix of the results; a closed form; a proportional spread meeting a
cut; for counts, scaling down a level that saturated a side), each a feasible flow meeting a
cut, so the same exact OPT in a few linear passes (on TPC-H every level). Otherwise
:func:`_level`: a unit whose load sum psi' is at most T never binds
(x <= psi' implies its constraint), so its results are fixed by the other side alone: results
of two such units are constants, those with one heavy unit collapse into one edge per heavy
unit, and only the heavy-heavy results are flow edges; a level with no heavy unit on one side
is closed form, with none at all it is the plain sum. Before the flow, a cheap feasible
integral flow (each heavy unit of one side spreads its cap over its results in proportion,
the other side's units pass on at most cap) is compared with two cuts' capacities: when it
meets one, it is a maximum flow (feasible <= OPT <= any cut) and Dinic is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dpsql.noise import two_threads
from dpsql.noise.r2t_certify import (
    Pairs,
    all_light,
    full,
    saturated,
    saturates,
    scaled_down,
)
from dpsql.noise.r2t_certify import exact_sums as _sums
from dpsql.noise.r2t_loads import closed_mostly_light, saturated_by_loads

__all__ = ["flow_truncated", "level_step"]

#: every capacity stays below 2^31 (scipy's csgraph capacities are int32)
_CAP_BITS = 30
#: a SUM's levels are solved two at once up to this many results: past it (TPC-H SF10's 60M)
#: a second thread's scratch arrays (two float64 per result) cost more memory than the wall
#: time is worth
_PARALLEL_MAX = 1 << 25


def level_step(tau: float, integer: bool) -> float:
    """``delta`` for a level of ``tau`` value units (module contract): a power of two with
    ``tau / delta < 2^31``; 1 for counts below 2^31."""
    if not math.isfinite(tau) or tau <= 0:
        raise ValueError("a truncation level must be finite and > 0")
    exponent = math.frexp(tau)[1] - 1 - _CAP_BITS  # 2^(e+30) <= tau < 2^(e+31)
    if integer:
        exponent = max(exponent, 0)
    return math.ldexp(1.0, exponent)


def _max_flow(a: np.ndarray, b: np.ndarray, s: np.ndarray, cap: int,
              from_source: np.ndarray, to_sink: np.ndarray) -> int:
    """The maximum flow source -> a (cap) -> b (s) -> sink (cap), plus source -> b
    (``from_source[b]``) and a -> sink (``to_sink[a]``); a, b dense codes of the heavy
    units. Exact integers."""
    from scipy import sparse  # lazy: loaded only when a two-unit truncation runs
    from scipy.sparse.csgraph import maximum_flow

    na = int(to_sink.size)
    nb = int(from_source.size)
    sink = 1 + na + nb
    node_a = 1 + np.arange(na)
    node_b = 1 + na + np.arange(nb)
    rows = np.concatenate([np.zeros(na, np.int64), 1 + a, np.zeros(nb, np.int64), node_a,
                           node_b])
    cols = np.concatenate([node_a, 1 + na + b, node_b, np.full(na, sink), np.full(nb, sink)])
    caps = np.concatenate([np.full(na, cap, np.int64), s, from_source, to_sink,
                           np.full(nb, cap, np.int64)])
    keep = caps > 0
    graph = sparse.coo_matrix((caps[keep], (rows[keep], cols[keep])),
                              shape=(sink + 1, sink + 1)).tocsr()
    graph.sum_duplicates()
    graph.data = np.minimum(graph.data, cap).astype(np.int32)  # parallel edges: one, <= cap
    result = maximum_flow(graph, 0, sink, method="dinic")
    out = result.flow[[0], :].toarray().astype(np.int64)
    return int(out[out > 0].sum())


def _level(a: np.ndarray, b: np.ndarray, s: np.ndarray, cap: int, na: int, nb: int) -> int:
    """OPT of the floored instance at one level (module docstring: exact)."""
    load_a = _sums(a, s, na)
    load_b = _sums(b, s, nb)
    heavy_a = load_a > cap
    heavy_b = load_b > cap
    if not heavy_a.any() and not heavy_b.any():
        return int(s.sum())
    ha, hb = heavy_a[a], heavy_b[b]
    light = ~ha & ~hb
    const = int(s[light].sum())
    if not heavy_a.any():  # every result's A-unit is light: each heavy B takes min(load, cap)
        return const + int(np.minimum(load_b[heavy_b], cap).sum())
    if not heavy_b.any():
        return const + int(np.minimum(load_a[heavy_a], cap).sum())
    code_a = np.cumsum(heavy_a) - 1
    code_b = np.cumsum(heavy_b) - 1
    both = ha & hb
    only_b = ~ha & hb
    only_a = ha & ~hb
    from_source = np.minimum(_sums(code_b[b[only_b]], s[only_b], int(heavy_b.sum())), cap)
    to_sink = np.minimum(_sums(code_a[a[only_a]], s[only_a], int(heavy_a.sum())), cap)
    pa, pb, ps = code_a[a[both]], code_b[b[both]], np.minimum(s[both], cap)
    # a feasible flow that meets a cut's capacity is a maximum flow: try the cheap one first.
    # The cuts {source, every a-node whose out-capacity is below cap} and its mirror: each
    # node of the cut side gives min(cap, its capacity on the far side), the other side's
    # nodes their source (sink) edges.
    out_a = _sums(pa, ps, to_sink.size) + to_sink
    into_b = _sums(pb, ps, from_source.size) + from_source
    bound = min(int(np.minimum(out_a, cap).sum() + from_source.sum()),
                int(np.minimum(into_b, cap).sum() + to_sink.sum()))
    for x, y, src, snk, out in ((pa, pb, from_source, to_sink, out_a),
                                (pb, pa, to_sink, from_source, into_b)):
        if _spread(x, y, ps, cap, src, snk, out) == bound:
            return const + bound
    return const + _max_flow(pa, pb, ps, cap, from_source, to_sink)


def _spread(a: np.ndarray, b: np.ndarray, s: np.ndarray, cap: int, from_source: np.ndarray,
            to_sink: np.ndarray, out: np.ndarray) -> int:
    """The value of a feasible integral flow of :func:`_max_flow`'s network (``out``: each
    a-node's out-capacity, its edges' and its sink edge's): each a-node
    sends at most cap, split over its out-edges in proportion to their capacities (floors,
    then one more unit on its first edges with room while its share lasts), each b-node
    passes on at most cap of what it receives (plus its source edge). Feasible, so at most
    the maximum flow; the caller returns it only when it meets a cut's capacity."""
    na = to_sink.size
    scale = np.where(out > cap, out, cap)  # out <= cap: every edge at its capacity
    base = (s * cap) // scale[a]
    sink_part = (to_sink * cap) // scale
    left = np.maximum(cap - _sums(a, base, na) - sink_part, 0)
    left = np.where(out > cap, left, 0)
    if left.any():
        base = base + ((_rank(a) < left[a]) & (base < s))
    into = _sums(b, base, from_source.size) + from_source
    return int(sink_part.sum() + np.minimum(into, cap).sum())


def _rank(codes: np.ndarray) -> np.ndarray:
    """Each entry's position among the entries of its code (in array order)."""
    index = np.arange(codes.size)
    if codes.size and np.all(codes[1:] >= codes[:-1]):  # sorted: no sort needed
        starts = np.r_[True, codes[1:] != codes[:-1]]
        return index - np.maximum.accumulate(np.where(starts, index, 0))
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    rank = np.empty_like(order)
    rank[order] = index - np.searchsorted(ordered, ordered)
    return rank


def flow_truncated(a: np.ndarray, b: np.ndarray, psi: np.ndarray, taus: Sequence[float], *,
                   integer: bool, trace: list[tuple[float, str]] | None = None) -> np.ndarray:
    """``Q_j`` for every level ``taus[j]`` (value units) of the results ``(a[q], b[q],
    psi[q])`` (module contract). Precondition: ``a``, ``b`` dense int codes (>= 0) of each
    result's unit on either side, every pair at most once or not (parallel results add);
    ``psi`` finite >= 0 (integers when ``integer``); codes need not be dense (unused codes
    are units of no result). Guarantee: int64 for counts, float64 for
    sums, shape ``(len(taus),)``. ``trace`` (benchmarks): gets (tau, how it was solved) per
    level (dpsql.noise.r2t_certify's certificates, or "exact": the collapsed flow)."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    values = np.asarray(psi, dtype=np.int64 if integer else np.float64)
    if values.ndim == 1 and values.size and values.strides[0] == 0:
        top = values[0]  # a broadcast scalar (flat COUNT(*) rows: psi 1): every entry is it
    else:
        top = values.max() if values.size else 0
    if not integer and values.size and len(taus) and not top <= float(max(taus)):
        # Every level reads min(psi, tau_j) only, so capping psi at the top level changes no
        # level; and a sum the database overflowed to +inf (the red team's error oracle:
        # raising here on one unit's data) is just a value above every level. (NaN stays.)
        values = np.minimum(values, float(max(taus)))
        top = values.max()
    # NaN fails ">= 0" too, and +inf was capped above (every tau is finite)
    low = (values[0] if values.ndim == 1 and values.size and values.strides[0] == 0
           else values.min() if values.size else 0)
    if not low >= 0:
        raise ValueError("every result's psi must be finite and >= 0")
    pairs = Pairs.of(a, b, values, integer, low, top)
    out = np.zeros(len(taus), dtype=np.int64 if integer else np.float64)
    order = sorted(range(len(taus)), key=lambda i: -float(taus[i]))  # top down
    if integer:
        # a count level that saturated a side settles every level below it (certificate 5):
        # one after the other
        scaled = None  # (side's present units): a count level saturated that whole side
        solved = []
        for j in order:
            how, value = _solve(pairs, float(taus[j]), True, scaled)
            if scaled is None:
                scaled = saturates(pairs, value, float(taus[j]), level_step(float(taus[j]),
                                                                              True))
            solved.append((how, value))
    else:
        # a SUM's levels are independent: two at once (each thread its own scratch arrays,
        # hence the bound on the results)
        solved = two_threads.ordered_map(
            lambda j: _solve(pairs, float(taus[j]), False, None), order,
            two_threads.worth_it(a.size) and a.size <= _PARALLEL_MAX)
    for j, (how, value) in zip(order, solved, strict=True):
        tau = float(taus[j])
        delta = level_step(tau, integer)
        if trace is not None:
            trace.append((tau, how))
        out[j] = int(delta) * value if integer else delta * value
    return out


def _solve(pairs: Pairs, tau: float, integer: bool, scaled: int | None) -> tuple[str, int]:
    """How one level's exact OPT was found, and OPT: the first certificate that applies
    (dpsql.noise.r2t_certify), else the collapsed flow (:func:`_level`). ``scaled``: the
    present units of the side a higher count level saturated (or None)."""
    delta = level_step(tau, integer)
    for how, certificate in (
            ("scaled down", lambda: scaled_down(pairs, scaled, tau, delta)),
            ("all light", lambda: all_light(pairs, tau, delta)),
            ("saturated by loads", lambda: saturated_by_loads(pairs, tau, delta)),
            ("closed form, mostly light", lambda: closed_mostly_light(pairs, tau, delta)),
            ("saturated subset", lambda: saturated(pairs, tau, delta))):
        value = certificate()
        if value is not None:
            return how, value
    s, cap = pairs.caps(tau, delta)
    value = full(pairs, s, cap, tau)
    if value is not None:
        return "closed form or spread", value
    return "exact", _level(pairs.a, pairs.b, s.astype(np.int64), cap, pairs.na, pairs.nb)
