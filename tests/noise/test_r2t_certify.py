"""dpsql.noise.r2t_certify: each cheap certificate returns a level's exact maximum flow or
nothing, checked against an independent max-flow (scipy's Dinic on the whole network: no
collapsing, no certificate) on random instances."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.noise import r2t_certify, r2t_flow
from dpsql.noise.r2t_certify import (
    Pairs,
    all_light,
    full,
    level_caps,
    saturated,
    saturates,
    scaled_down,
)
from dpsql.noise.r2t_flow import flow_truncated, level_step
from dpsql.noise.r2t_loads import closed_mostly_light, saturated_by_loads
from tests.flows import full_network_flow


def reference(a: np.ndarray, b: np.ndarray, psi: np.ndarray, tau: float, integer: bool) -> int:
    """OPT of one level by the contract alone: source -> a (T) -> b (floor(min(psi, tau) /
    delta), parallel results added) -> sink (T), Dinic over every unit."""
    if not a.size:
        return 0
    delta = level_step(tau, integer)
    if integer:
        s = np.minimum(psi.astype(np.int64), int(tau)) // int(delta)
        cap = int(tau) // int(delta)
    else:
        s = np.floor(np.minimum(psi, tau) / delta).astype(np.int64)
        cap = math.floor(tau / delta)
    return full_network_flow(a, b, s, cap)


instances = st.tuples(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 6)), max_size=24),
    st.lists(st.integers(1, 12), min_size=1, max_size=4),
    st.booleans())


def _arrays(rows):
    a = np.array([r[0] for r in rows], dtype=np.int64)
    b = np.array([r[1] for r in rows], dtype=np.int64)
    return a, b


@settings(max_examples=150, deadline=None)
@given(instances)
def test_every_certificate_is_the_max_flow_or_silent(instance):
    rows, taus, integer = instance
    a, b = _arrays(rows)
    scale = 1.0 if integer else 0.37  # sums: fractional psi and levels
    psi = np.array([r[2] * scale for r in rows], dtype=np.float64 if not integer else np.int64)
    pairs = Pairs.of(a, b, psi, integer)
    for tau_units in taus:
        tau = tau_units * scale
        want = reference(a, b, psi, tau, integer)
        delta = level_step(tau, integer)
        caps = level_caps(psi, tau, delta, integer)
        # full() with the level: a side light by its real loads is the closed form at once
        for got in (all_light(pairs, tau, delta), full(pairs, *caps),
                    full(pairs, *caps, tau), saturated_by_loads(pairs, tau, delta),
                    closed_mostly_light(pairs, tau, delta)):
            assert got is None or got == want
        # the real loads' test never calls a side light that has a heavy floored unit
        for side, codes in (("a", a), ("b", b)):
            if pairs.light(side, tau):
                loads = np.bincount(codes, weights=caps[0].astype(np.float64))
                assert loads.size == 0 or loads.max() <= caps[1]


@settings(max_examples=150, deadline=None)
@given(instances)
def test_the_subset_certificate_on_small_instances(instance):
    """The subset certificate on any size, over the first half of the results."""
    rows, taus, integer = instance
    a, b = _arrays(rows)
    psi = np.array([r[2] for r in rows], dtype=np.int64 if integer else np.float64)
    pairs = Pairs.of(a, b, psi, integer)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(r2t_certify, "_SUBSET_MIN", 0)
        mp.setattr(r2t_certify, "_SUBSET_SHARE", 2)
        for tau in taus:
            got = saturated(pairs, float(tau), level_step(tau, integer))
            assert got is None or got == reference(a, b, psi, float(tau), integer)


@settings(max_examples=150, deadline=None)
@given(instances)
def test_flow_truncated_equals_the_reference_at_every_level(instance):
    rows, taus, integer = instance
    a, b = _arrays(rows)
    psi = np.array([r[2] for r in rows], dtype=np.int64 if integer else np.float64)
    levels = [float(t) for t in taus]
    got = flow_truncated(a, b, psi, levels, integer=integer)
    want = [reference(a, b, psi, t, integer) * level_step(t, integer) for t in levels]
    assert got.tolist() == want


def test_a_saturated_count_level_scales_down_exactly():
    """Every supplier saturated at tau = 8 is every supplier saturated below it: the levels
    below are present * tau without a pass (and the reference agrees)."""
    rng = np.random.default_rng(3)
    a = rng.integers(0, 60, 400)
    b = rng.integers(0, 4, 400)
    psi = np.ones(400, np.int64)
    pairs = Pairs.of(a, b, psi, True)
    top = reference(a, b, psi, 8.0, True)
    assert top == 4 * 8
    present = saturates(pairs, top, 8.0, 1.0)
    assert present == 4
    for tau in (1.0, 3.0, 5.0):
        assert scaled_down(pairs, present, tau, 1.0) == reference(a, b, psi, tau, True)
    assert saturates(pairs, top - 1, 8.0, 1.0) is None
    assert saturates(Pairs.of(a, b, psi.astype(np.float64), False), top, 8.0, 1.0) is None


def test_large_instances_are_certified_by_the_subset_and_the_spread(monkeypatch):
    """TPC-H's shape (many customers, few suppliers, one row per pair): the low levels are
    certified on an eighth of the results, the higher ones by the spread or closed form, none
    by the solver -- and every value is the reference's."""
    rng = np.random.default_rng(5)
    n = 40_000
    a = rng.integers(0, 2_000, n)
    b = rng.integers(0, 100, n)
    taus = [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0]
    for integer in (True, False):
        psi = (rng.integers(1, 4, n) if integer else rng.random(n) * 3).astype(
            np.int64 if integer else np.float64)
        want = [reference(a, b, psi, t, integer) * level_step(t, integer) for t in taus]

        def refuse(*args):
            raise AssertionError("the exact solver ran")

        monkeypatch.setattr(r2t_flow, "_level", refuse)
        assert flow_truncated(a, b, psi, taus, integer=integer).tolist() == want
        monkeypatch.undo()
        pairs = Pairs.of(a, b, psi, integer)
        assert saturated(pairs, 16.0, level_step(16.0, integer)) == want[2] / level_step(
            16.0, integer)


def test_the_float_spread_never_sends_more_than_the_exact_share():
    """dpsql.noise.r2t_certify._spread_into's flow is at most floor(s cap / load) on every
    result (read with each result its own receiver), so each sender sends at most cap (read
    with each sender its own receiver), also where the ratio rounds up (loads just above cap)."""
    from dpsql.noise.r2t_certify import _spread_into

    rng = np.random.default_rng(7)
    for cap in (7, 2**30 + 12345):
        for _ in range(30):
            n = 200
            x = rng.integers(0, 10, n)
            s = rng.integers(0, cap + 1, n).astype(np.float64)
            load = np.bincount(x, weights=s, minlength=10).astype(np.int64)
            extra = cap + rng.integers(1, 3, 10) - load  # lift each load just above cap
            s[:10] += np.maximum(extra, 0)[x[:10]] * (extra[x[:10]] > 0)
            s = np.minimum(s, cap)
            load = np.bincount(x, weights=s, minlength=10).astype(np.int64)
            flow = _spread_into(x, np.arange(n), s, cap, load, n, 1)
            light = load[x] <= cap
            exact = np.where(light, s.astype(np.int64),
                             (s.astype(np.int64) * cap) // np.maximum(load[x], 1))
            assert (flow <= exact).all()
            sent = _spread_into(x, x, s, cap, load, 10, n)
            assert (sent <= cap).all()


def test_an_over_generous_spread_would_certify_a_wrong_saturation():
    """a0 reaches b0 (100) and b1 (1), a1 reaches b1 (99), tau 100: a0 cannot fill both, so
    OPT is 199, not every supplier's 200. The subset certificate must stay silent."""
    a = np.array([0, 0, 1])
    b = np.array([0, 1, 1])
    psi = np.array([100, 1, 99])
    assert reference(a, b, psi, 100.0, True) == 199
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(r2t_certify, "_SUBSET_MIN", 0)
        mp.setattr(r2t_certify, "_SUBSET_SHARE", 1)
        assert saturated(Pairs.of(a, b, psi, True), 100.0, 1.0) is None
    assert flow_truncated(a, b, psi, [100.0], integer=True).tolist() == [199]


def test_q7s_shape_is_certified_from_the_loads():
    """TPC-H Q7's shape for a SUM (many light customers, few suppliers, fractional values):
    where every supplier is heavy and few customers are, every supplier saturates on the
    light customers' results (saturated_by_loads); where every customer is light and few
    suppliers are heavy, the closed form needs the heavy suppliers' results alone
    (closed_mostly_light). Both give the reference's OPT exactly, and answer nothing where
    their premise fails."""
    rng = np.random.default_rng(8)
    n = 60_000
    a = rng.integers(0, 30_000, n)  # about two results each
    b = rng.integers(0, 40, n)
    psi = np.round(rng.random(n) * 3.0, 6)
    a[:30] = 0  # one customer heavy at tau 8: its results are left out
    pairs = Pairs.of(a, b, psi, False)
    tau = 8.0
    assert not pairs.light("a", tau) and pairs.load_b.min() > 50 * tau
    got = saturated_by_loads(pairs, tau, level_step(tau, False))
    assert got is not None and got == reference(a, b, psi, tau, False)
    assert closed_mostly_light(pairs, tau, level_step(tau, False)) is None  # no light side
    # every customer light, one supplier in 40 heavy
    tau = float(np.sort(pairs.load_b)[-2]) * 0.99
    assert pairs.light("a", tau) and (pairs.load_b > tau).sum() == 2
    got = closed_mostly_light(pairs, tau, level_step(tau, False))
    assert got is not None and got == reference(a, b, psi, tau, False)
    assert saturated_by_loads(pairs, tau, level_step(tau, False)) is None  # none saturates


@pytest.mark.parametrize("huge", [False, True])
def test_floored_total_is_every_capacity_summed_exactly_block_by_block(huge, monkeypatch):
    """floored_total (all_light's and closed_mostly_light's sum of a SUM level's capacities)
    over several blocks, the last one short, equals the capacities summed as Python ints:
    when every partial sum is a float64 integer below 2^53, and (``huge``: some psi of 2^40
    and more, the mass past it) through int64."""
    monkeypatch.setattr(r2t_certify, "_BLOCK", 7)
    rng = np.random.default_rng(11)
    values = np.floor(rng.random(100) * 4096) / 64
    if huge:
        values[::3] *= 2.0**40
    a = rng.integers(0, 5, values.size)
    b = rng.integers(0, 6, values.size)
    p = Pairs.of(a, b, values, False)
    for tau in (0.75, 30.0, 63.5, 70.0):
        delta = level_step(tau, False)
        want = sum(math.floor(min(v, tau) / delta) for v in values.tolist())
        assert (p.mass * 2.0 / delta < 2**53) != huge
        assert r2t_certify.floored_total(p, tau, delta) == want, tau
