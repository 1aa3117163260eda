"""The vectorised smoothing scan returns exactly what the scalar loop over every k returns."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.analysis.kexpr import Const, PlusK, add, kmax, kmin, mul
from dpsql.noise import smooth as smooth_mod
from dpsql.noise.smooth import beta_for, smooth


def scalar_scan(es, beta, k_scan):
    best, best_k = -1.0, 0
    for k in range(k_scan + 1):
        value = math.exp(-beta * k) * es.at(k)
        if value > best:
            best, best_k = value, k
    return best, best_k


def kexprs(depth: int = 4):
    leaves = st.one_of(
        st.sampled_from([1.0, 2.0, 50.0, 105000.0, 0.5]).map(Const),
        st.sampled_from([0.0, 1.0, 7.0, 250.0, 694.0, 6161.0, 1e6]).map(PlusK),
    )
    if depth == 0:
        return leaves
    sub = kexprs(depth - 1)
    return st.one_of(
        leaves,
        st.tuples(st.sampled_from([add, mul, kmax, kmin]), sub, sub).map(
            lambda t: t[0](t[1], t[2])
        ),
    )


@settings(max_examples=300, deadline=None, derandomize=True)
@given(es=kexprs(), eps=st.sampled_from([0.05, 0.1, 1.0, 3.0]),
       delta=st.sampled_from([1e-5, 1e-8, 2.5e-13]), chunk=st.sampled_from([7, 1000, 1 << 20]))
def test_vectorised_scan_equals_the_scalar_loop_exactly(es, eps, delta, chunk):
    if not es.depends_on_k:
        return
    beta = beta_for(eps, delta)
    k_scan = math.ceil(es.degree / beta)
    if k_scan > 200_000:
        return
    old = smooth_mod._CHUNK
    smooth_mod._CHUNK = chunk
    try:
        sm = smooth(es, eps, delta)
    finally:
        smooth_mod._CHUNK = old
    assert (sm.smooth_sensitivity, sm.k_argmax) == scalar_scan(es, beta, k_scan)


def test_worked_join_example_unchanged():
    # docs/design.md, "Noise": max(250+k, 100+k) at epsilon 0.1, delta 1e-8
    sm = smooth(kmax(PlusK(250.0), PlusK(100.0)), 0.1, 1e-8)
    assert sm.smooth_sensitivity == pytest.approx(270.58156788296145, rel=1e-14)
    assert sm.k_argmax == 133


@settings(max_examples=150, deadline=None, derandomize=True)
@given(stability=kexprs(3), widths=st.lists(st.sampled_from([1.0, 2.0, 50.0, 105000.0]),
                                            min_size=1, max_size=3),
       eps=st.sampled_from([0.05, 0.1, 1.0]), delta=st.sampled_from([1e-8, 2.5e-13]))
def test_a_shared_scan_memo_changes_no_result(stability, widths, eps, delta):
    """One plan's measurements (a COUNT's 2 S(k), SUMs' width * 2 S(k)) smoothed with one
    ScanMemo give exactly what each gives alone."""
    if not stability.depends_on_k:
        return
    count = mul(Const(2.0), stability)
    measurements = [count] + [mul(count, Const(w)) for w in widths] + [kmax(stability, count)]
    memo = smooth_mod.ScanMemo()
    shared = [smooth(es, eps, delta, memo=memo) for es in measurements]
    assert shared == [smooth(es, eps, delta) for es in measurements]


def test_a_shared_part_is_evaluated_once_and_long_scans_keep_nothing(monkeypatch):
    calls = []

    class Counted(PlusK):
        def _array(self, ks, memo):
            calls.append(len(ks))
            return super()._array(ks, memo)

    stability = kmax(mul(Counted(1.0), PlusK(7.0)), Const(3.0))
    memo = smooth_mod.ScanMemo()
    for width in (1.0, 50.0, 2.0):
        smooth(mul(stability, Const(width)), 0.1, 1e-8, memo=memo)
    assert len(calls) == 1 and len(memo._grids) == 1
    # above _SHARED_MAX k, every scan evaluates (and frees) its own arrays
    monkeypatch.setattr(smooth_mod, "_SHARED_MAX", 10)
    memo = smooth_mod.ScanMemo()
    for width in (1.0, 50.0):
        smooth(mul(stability, Const(width)), 0.1, 1e-8, memo=memo)
    assert len(calls) == 3 and not memo._grids


def test_the_decay_grid_is_shared_read_only_and_the_fresh_computation():
    beta = beta_for(0.1, 2.5e-13)
    ks, decay = smooth_mod._decay_grid(beta, 2000)
    assert smooth_mod._decay_grid(beta, 2000)[0] is ks  # kept across noise plans
    assert not ks.flags.writeable and not decay.flags.writeable
    fresh = np.arange(0, 2001, dtype=np.float64)
    assert np.array_equal(ks, fresh) and np.array_equal(decay, np.exp(-beta * fresh))
