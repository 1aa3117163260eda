"""Cheap exact certificates for the levels of dpsql.noise.r2t_flow (issue #17: the time of R2T
over two privacy units).

:func:`dpsql.noise.r2t_flow.flow_truncated` computes, per level, OPT: the maximum flow source
-> a (cap T) -> b (capacity s(q) = floor(min(psi(q), tau) / delta)) -> sink (cap T) over the
results q = (a, b) (that module's contract). Most levels of real data need no flow solver: a
*feasible* integral flow whose value meets the capacity of a *cut* is a maximum flow
(feasible <= OPT <= any cut). Each function here returns OPT exactly, or None when its
certificate does not apply (the caller then solves the level in full). Nothing here changes
any level's value; it only finds the same integer faster. Seven certificates:

1. **All light** (:func:`all_light`): if every unit's real load L(u) = sum of its psi is at
   most tau, then every psi <= tau and each unit's floored load sum floor(psi / delta) <=
   floor(L / delta) <= T: x = s is feasible, and OPT = sum s (the cut of every result edge).
   The loads are computed once for all levels (exact integers for counts; for sums float64,
   whose sequential rounding error is bounded by the most results of one unit times 2^-52
   of the load, so the check keeps that margin).
2. **A saturated side on a subset** (:func:`saturated`): every unit of one side (say B,
   ``present_b`` nodes with at least one result) saturated is the value present_b * T, the
   cut of B's sink edges. A feasible flow reaching it on a SUBSET of the results (a prefix of
   the arrays: zero flow elsewhere is feasible) proves OPT = present_b * T. The flow on the
   subset: each A unit spreads at most T over its subset results in proportion to their
   capacities, ``x(q) = floor(s(q) T / max(load_a, T))`` (its x sum to at most T, each x(q)
   <= s(q)); each B unit passes on min(received, T). On TPC-H's low levels one side
   saturates from an eighth of the results.
3. **Closed forms** (:func:`full`): with no heavy A unit (floored load <= T), x = s meets every
   A constraint and each B unit takes min(load_b, T): OPT is the cut sum_b min(load_b, T)
   (and symmetrically).
4. **Proportional spread on all results** (:func:`full`): 2's flow over every result,
   from either side, compared with min(sum_a min(load_a, T), sum_b min(load_b, T)) (the two
   cuts {source} + heavy-side choices: each node's edge to its terminal or all its result
   edges); equal, it is OPT.

5. **Scaling down** (:func:`saturates`, :func:`scaled_down`; counts, ``delta`` 1): if a level
   k's OPT saturates every unit of one side (OPT_k = present * T_k), then so does every level
   j below it: a maximum flow f of level k times lambda = T_j / T_k <= 1 is feasible at level
   j (each unit sends or receives at most lambda T_k = T_j; each result carries lambda f(q)
   <= lambda min(psi, T_k) <= min(psi, T_j)), of value present * T_j, the side's terminal
   cut; the LP optimum is the integral one (module dpsql.noise.r2t_flow: totally
   unimodular), so OPT_j = present * T_j. The levels are solved top down to use it.
6-7. **Certificates from the loads** (:mod:`dpsql.noise.r2t_loads`).

Integer arithmetic throughout: s <= T < 2^31, so s * T < 2^62; per-unit sums are float64
bincounts only when no partial sum can reach 2^53 (the largest value times the most results
of one unit), else :func:`exact_sums`.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np

from dpsql.noise import two_threads

__all__ = ["Pairs", "all_light", "exact_sums", "full", "level_caps", "saturated", "saturates",
           "scaled_down"]

#: below this many results the subset certificate is not worth a pass
_SUBSET_MIN = 1 << 14
#: the subset certificate tries this share of the results (a prefix)
_SUBSET_SHARE = 8


def exact_sums(codes: np.ndarray, values: np.ndarray, n: int, top: float | None = None,
               most: int | None = None) -> np.ndarray:
    """Exact int64 sums of non-negative integer ``values`` (int64, or float64 holding
    integers) per code: bincount's float64 sums when no code's partial sum can reach 2^53 (the
    largest value ``top`` times the most entries ``most`` of one code, each computed when not
    given; every partial sum then exact), values below 2^40 as two such halves (26 low bits,
    the rest), else a sort and reduceat."""
    if not codes.size:
        return np.zeros(n, np.int64)
    top = int(values.max()) if top is None else int(top)
    if top * codes.size < 2**53 or top * (int(np.bincount(codes).max()) if most is None
                                          else most) < 2**53:
        # every partial sum of one code stays below 2^53: float64 adds it exactly
        return np.bincount(codes, weights=values, minlength=n).astype(np.int64)
    values = values.astype(np.int64)
    if top < 2**40 and codes.size < 2**27:
        low = np.bincount(codes, weights=values & (2**26 - 1), minlength=n).astype(np.int64)
        high = np.bincount(codes, weights=values >> 26, minlength=n).astype(np.int64)
        return (high << 26) + low
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    out = np.zeros(n, np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    out[sorted_codes[starts]] = np.add.reduceat(values[order], starts)
    return out


_INT64_MAX = int(np.iinfo(np.int64).max)


def level_caps(values: np.ndarray, tau: float, delta: float, integer: bool,
               out: np.ndarray | None = None, top: float | None = None
               ) -> tuple[np.ndarray, int]:
    """``(s, T)`` of one level (dpsql.noise.r2t_flow's contract): ``s = floor(min(psi, tau) /
    delta)`` (int64 for counts; for sums float64 holding those integers, each below 2^31: no
    conversion pass) and ``T = floor(tau / delta)``. ``out``: a buffer of ``values``' shape
    and dtype to write ``s`` into (no fresh allocation per level). ``top``: a bound on every
    psi, when known (at most tau: the ``min`` is the identity and is skipped)."""
    if integer:
        step = int(delta)
        # a level at or past 2^63 caps no int64 psi (and would not fit the comparison)
        s = np.minimum(values, min(int(tau), _INT64_MAX), out=out)
        if step != 1:
            np.floor_divide(s, step, out=s)
        return s, int(tau) // step
    # a power of two: dividing by it and multiplying by its inverse are both exact
    if top is not None and top <= tau:
        s = np.multiply(values, 1.0 / delta, out=out)
    else:
        s = np.minimum(values, float(tau), out=out)
        s *= 1.0 / delta
    np.floor(s, out=s)
    return s, math.floor(tau / delta)


@dataclass(frozen=True)
class Pairs:
    """The results of one truncation with what every level shares (computed once)."""

    a: np.ndarray
    b: np.ndarray
    values: np.ndarray  #: psi, int64 for counts, float64 (capped at the top level) for sums
    integer: bool
    na: int
    nb: int
    present_a: int  #: A codes with at least one result
    present_b: int
    most_a: int  #: the most results of one A code
    most_b: int
    top_load_a: float  #: the largest real load (exact for counts)
    top_load_b: float
    total: int  #: sum psi (counts only; 0 for sums)
    mass: float  #: sum psi in float64 (within a factor 1 +- 2^-40 of it)
    top: float  #: the largest psi
    load_a: np.ndarray  #: real loads (exact int64 for counts, float64 for sums)
    load_b: np.ndarray
    prefix_mass: float  #: sum psi over the subset certificate's prefix (float64)
    count_a: np.ndarray  #: results per A code
    count_b: np.ndarray
    #: per-level scratch arrays (a level's s, a spread's flow), reused level after level:
    #: nothing outlives its level
    scratch: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    def buffer(self, name: str, dtype: type) -> np.ndarray:
        """The scratch array ``name`` (one entry per result) of the calling thread, allocated
        on first use (levels solved at once, dpsql.noise.two_threads, each write their own)."""
        key = f"{name}@{threading.get_ident()}"
        if key not in self.scratch:
            self.scratch[key] = np.empty(self.values.size, dtype)
        return self.scratch[key]

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray, values: np.ndarray, integer: bool,
           low: float | None = None, top: float | None = None) -> Pairs:
        """``low``, ``top``: ``values.min()`` and ``values.max()`` when the caller has them.
        The two sides' counts and loads are computed at once (dpsql.noise.two_threads)."""
        if top is None:
            top = values.max() if values.size else 0
        if low is None and integer and top == 1 and not _broadcast(values):
            low = values.min()
        (count_a, load_a), (count_b, load_b) = two_threads.both(
            lambda: _side_loads(a, values, integer, low, top),
            lambda: _side_loads(b, values, integer, low, top),
            two_threads.worth_it(a.size))
        na, nb = count_a.size, count_b.size
        m = a.size // _SUBSET_SHARE if a.size >= _SUBSET_MIN else 0
        return cls(a, b, values, integer, na, nb, int(np.count_nonzero(count_a)),
                   int(np.count_nonzero(count_b)), int(count_a.max()) if na else 0,
                   int(count_b.max()) if nb else 0,
                   float(load_a.max()) if na else 0.0, float(load_b.max()) if nb else 0.0,
                   int(load_a.sum()) if integer else 0, float(load_a.sum()), float(top),
                   load_a, load_b, float(values[:m].sum()), count_a, count_b)

    def caps(self, tau: float, delta: float) -> tuple[np.ndarray, int]:
        """:func:`level_caps` of every result; for counts with ``delta`` 1 and every psi at
        most tau, psi itself (no pass)."""
        if self.integer and delta == 1 and self.top <= tau:
            return self.values, int(tau)
        return level_caps(self.values, tau, delta, self.integer,
                          self.buffer("s", self.values.dtype.type), self.top)

    def light(self, side: str, tau: float) -> bool:
        """Whether every unit of ``side`` ("a" or "b") has a real load of at most ``tau``, so
        at most T once floored (sum floor(min(psi, tau) / delta) <= floor(load / delta)).
        Counts' loads are exact; a float64 load, a sequential sum of k non-negative terms, is
        within (k - 1) 2^-53 of its value relatively, so it keeps a margin of 2^-51 (k + 1)."""
        top = self.top_load_a if side == "a" else self.top_load_b
        if self.integer:
            return top <= tau
        most = self.most_a if side == "a" else self.most_b
        return top * (1.0 + (most + 1) * 2.0**-51) <= tau


def _broadcast(values: np.ndarray) -> bool:
    """Whether ``values`` is one psi broadcast to every result (a read-only stride-0 view)."""
    return bool(values.ndim == 1 and values.size and values.strides[0] == 0)


def _side_loads(codes: np.ndarray, values: np.ndarray, integer: bool, low: float | None,
                top: float) -> tuple[np.ndarray, np.ndarray]:
    """One side's results per code and real loads (exact int64 for counts, float64 sums for
    SUM parts), as :class:`Pairs` holds them; bincount sizes both by the largest code."""
    count = np.bincount(codes)
    if not integer:
        return count, np.bincount(codes, weights=values, minlength=count.size)
    if _broadcast(values):
        # one psi broadcast to every result (flat rows, dpsql.units.multi_rewrite: 1, or 2^k
        # at fine levels): the loads are the counts times it
        load = count.astype(np.int64, copy=False)
        return count, (load * int(top) if int(top) != 1 else load)
    if top == 1 and low == 1:
        return count, count.astype(np.int64, copy=False)  # every psi 1: the counts
    most = int(count.max()) if count.size else 0
    return count, exact_sums(codes, values, count.size, int(top), most)


#: results per block of :func:`floored_total`: its scratch (512 KiB) stays in a core's cache
_BLOCK = 1 << 16


def floored_total(p: Pairs, tau: float, delta: float) -> int:
    """A SUM level's capacities summed over every result, exactly: the sum of :func:`level_caps`'
    ``s = floor(min(psi, tau) / delta)``. Block by block (:data:`_BLOCK` results), so ``psi``
    is read once and each block's ``s`` stays in cache (the whole-array passes write and read
    ``s`` three times: on TPC-H Q7 over two units ~6 -> ~3.5 ms a level). Each block's sum is
    exact as :func:`all_light`'s was: float64 when every partial sum of the whole is an
    integer below 2^53, else in int64 (each ``s`` below 2^31); blocks add as Python ints."""
    exact_float = p.mass * 2.0 / delta < 2**53
    scratch = p.buffer("s", np.float64)
    total = 0
    for start in range(0, p.values.size, _BLOCK):
        block = p.values[start:start + _BLOCK]
        s, _ = level_caps(block, tau, delta, False, scratch[:block.size], p.top)
        total += int(s.sum()) if exact_float else int(s.astype(np.int64).sum())
    return total


def all_light(p: Pairs, tau: float, delta: float) -> int | None:
    """OPT when every unit's real load is at most tau (module docstring, 1), else None."""
    if not p.a.size:
        return 0
    if not (p.light("a", tau) and p.light("b", tau)):
        return None
    if p.integer:
        if delta != 1:
            return None
        return p.total  # every psi <= its unit's load <= tau: s = psi
    return floored_total(p, tau, delta)


def _spread_into(x: np.ndarray, y: np.ndarray, s: np.ndarray, cap: int, load_x: np.ndarray,
                 ny: int, most_y: int, out: np.ndarray | None = None) -> np.ndarray:
    """What each y node receives when every x node spreads at most ``cap`` over its results
    in proportion to their capacities: ``f(q) = s(q)`` for a light x (load at most cap), else
    at most ``floor(s(q) cap / load_x)``, computed in float64 as ``floor(s(q) r)`` with ``r``
    the ratio rounded and then lowered by 2^-50 relatively: the three roundings (ratio,
    product, each within 2^-53) cannot lift it above the exact share, so each x sends at most
    cap and each f(q) <= s(q), integers. ``out``: a float64 buffer of ``x``'s length."""
    ratio = np.ones(load_x.size)
    heavy = load_x > cap
    ratio[heavy] = cap / load_x[heavy] * (1.0 - 2.0**-50)
    flow = np.take(ratio, x, out=out)
    np.multiply(flow, s, out=flow)
    np.floor(flow, out=flow)
    return exact_sums(y, flow, ny, cap, most_y)


def _spread_into_known(x: np.ndarray, y: np.ndarray, s: np.ndarray, cap: int,
                       load_x: np.ndarray, load_y: np.ndarray, most_y: int,
                       out: np.ndarray | None = None) -> np.ndarray:
    """:func:`_spread_into`'s integers, given ``load_y`` (each y node's sum of ``s``): a light
    x sends each result its whole ``s``, so y receives ``load_y`` minus what the heavy x
    nodes' results keep back, ``s - floor(s r)``, summed over those results alone (fewer
    passes over all of them when few are a heavy unit's). Exact integers, as there."""
    ratio = np.ones(load_x.size)
    heavy = load_x > cap
    ratio[heavy] = cap / load_x[heavy] * (1.0 - 2.0**-50)
    rows = np.flatnonzero(heavy[x])
    if rows.size * 2 > x.size:  # most results a heavy unit's: the plain spread
        return _spread_into(x, y, s, cap, load_x, load_y.size, most_y, out)
    share = s[rows]
    kept = share - np.floor(share * ratio[x[rows]])  # float64 integers: what stays back
    return load_y - exact_sums(y[rows], kept, load_y.size, cap, most_y)


def saturated(p: Pairs, tau: float, delta: float) -> int | None:
    """OPT when a prefix of the results carries a flow saturating every unit of one side
    (module docstring, 2), else None."""
    n = p.a.size
    if n < _SUBSET_MIN:
        return None
    m = n // _SUBSET_SHARE
    cap = math.floor(tau / delta)
    # what the prefix can carry at most: below a side's target, that side cannot saturate
    reachable = p.prefix_mass / delta
    if reachable < min(p.present_a, p.present_b) * cap:
        return None
    s, cap = level_caps(p.values[:m], tau, delta, p.integer,
                        p.buffer("s", p.values.dtype.type)[:m], p.top)
    flow = p.buffer("flow", np.float64)[:m]
    sides = [(p.a[:m], p.b[:m], p.na, p.nb, p.most_a, p.most_b, p.present_b),
             (p.b[:m], p.a[:m], p.nb, p.na, p.most_b, p.most_a, p.present_a)]
    if p.present_a < p.present_b:  # the smaller side is the likelier to saturate
        sides.reverse()
    for x, y, nx, ny, most_x, most_y, present_y in sides:
        load_x = exact_sums(x, s, nx, cap, most_x)
        into = _spread_into(x, y, s, cap, load_x, ny, most_y, flow)
        value = int(np.minimum(into, cap).sum())
        if value == present_y * cap:
            return value
    return None


def full(p: Pairs, s: np.ndarray, cap: int, tau: float | None = None) -> int | None:
    """OPT by a closed form or a proportional spread over every result (module docstring, 3
    and 4), else None. ``s``: the level's capacities of every result; ``tau``: the level,
    when given a side light by its real loads (:meth:`Pairs.light`) is the closed form
    without summing its floored loads."""
    if s is p.values:  # counts with every psi <= cap: the level's loads are the real ones
        load_a, load_b = p.load_a, p.load_b
    elif tau is not None and p.a.size and p.light("a", tau):  # no heavy A unit: 3
        return int(np.minimum(exact_sums(p.b, s, p.nb, cap, p.most_b), cap).sum())
    elif tau is not None and p.a.size and p.light("b", tau):
        return int(np.minimum(exact_sums(p.a, s, p.na, cap, p.most_a), cap).sum())
    else:
        load_a = exact_sums(p.a, s, p.na, cap, p.most_a)
        load_b = exact_sums(p.b, s, p.nb, cap, p.most_b)
    cut_a = int(np.minimum(load_a, cap).sum())
    cut_b = int(np.minimum(load_b, cap).sum())
    if not p.a.size or load_a.max() <= cap:
        return cut_b
    if load_b.max() <= cap:
        return cut_a
    cut = min(cut_a, cut_b)
    sides = [(p.a, p.b, load_a, load_b, p.most_b), (p.b, p.a, load_b, load_a, p.most_a)]
    if cut_a < cut_b:  # spread from the side that is not the cut's
        sides.reverse()
    flow = p.buffer("flow", np.float64)
    for x, y, load_x, load_y, most_y in sides:
        if int(np.minimum(_spread_into_known(x, y, s, cap, load_x, load_y, most_y, flow),
                          cap).sum()) == cut:
            return cut
    return None


def saturates(p: Pairs, value: int, tau: float, delta: float) -> int | None:
    """For a count level (``delta`` 1) whose OPT ``value`` saturates every unit of one side:
    that side's number of units (module docstring, 5), else None."""
    if not p.integer or delta != 1 or not p.a.size:
        return None
    cap = int(tau)
    for present in (p.present_b, p.present_a):
        if value == present * cap:
            return present
    return None


def scaled_down(p: Pairs, present: int | None, tau: float, delta: float) -> int | None:
    """OPT of a count level below one that saturated a side of ``present`` units (the value
    :func:`saturates` returned; module docstring, 5), else None."""
    if present is None or not p.integer or delta != 1:
        return None
    return present * int(tau)
