"""Functions of the distance k (dpsql/analysis/kexpr.py): the vectorised evaluation the
smoothing scan uses agrees with the scalar one, and evaluates a shared part once."""

from __future__ import annotations

import math

import numpy as np

from dpsql.analysis.kexpr import ONE, Const, KExpr, PlusK, add, kmax, kmin, mul


class _Counted(KExpr):
    """(2 + k), counting its vectorised evaluations (a subclass defining at_array itself)."""

    degree = 1

    def __init__(self) -> None:
        self.calls = 0

    def at(self, k: int) -> float:
        return 2.0 + k

    def at_array(self, ks: np.ndarray) -> np.ndarray:
        self.calls += 1
        return 2.0 + ks


def test_at_array_matches_at_on_a_join_shaped_dag():
    s1, s2 = PlusK(7.0), PlusK(694.0)
    shared = mul(s1, s2)  # one stability used by several terms, as joins build them
    es = mul(Const(2.0), kmin(add(kmax(shared, mul(ONE, PlusK(41.0))), shared),
                              mul(shared, PlusK(3.0))))
    ks = np.arange(0, 5000, dtype=np.float64)
    values = es.at_array(ks)
    for k in (0, 1, 17, 999, 4999):
        assert math.isclose(values[k], es.at(k), rel_tol=1e-14)


def test_a_shared_part_is_evaluated_once_per_call():
    leaf = _Counted()
    shared = mul(leaf, PlusK(1.0))
    es = add(mul(shared, PlusK(5.0)), kmax(shared, PlusK(9.0)))
    ks = np.arange(0, 10, dtype=np.float64)
    values = es.at_array(ks)
    assert leaf.calls == 1
    assert [float(v) for v in values] == [es.at(k) for k in range(10)]
    es.at_array(ks)
    assert leaf.calls == 2  # nothing is kept between calls


def _degree(e: KExpr) -> int:
    """The degree by its definition, recomputed (nothing cached)."""
    if isinstance(e, Const):
        return 0
    if isinstance(e, PlusK):
        return 1
    degrees = [_degree(a) for a in e.args]  # type: ignore[attr-defined]
    return sum(degrees) if e.op == "*" else max(degrees)  # type: ignore[attr-defined]


def _at(e: KExpr, k: int) -> float:
    """``e.at(k)`` by its definition, recomputed (nothing cached)."""
    if not hasattr(e, "args"):
        return e.at(k)
    values = [_at(a, k) for a in e.args]
    op = e.op  # type: ignore[attr-defined]
    if op == "+":
        return math.fsum(values)
    return math.prod(values) if op == "*" else max(values) if op == "max" else min(values)


def test_cached_degree_and_value_at_zero_are_the_definitions():
    s1, s2 = PlusK(7.0), PlusK(694.0)
    shared = mul(s1, s2)
    exprs = [shared, add(shared, Const(3.0)), kmax(shared, mul(PlusK(1.0), shared)),
             kmin(mul(shared, PlusK(3.0)), add(kmax(shared, PlusK(41.0)), shared)),
             mul(Const(2.0), kmin(add(kmax(shared, mul(ONE, PlusK(41.0))), shared),
                                  mul(shared, PlusK(3.0))))]
    for e in exprs:
        assert e.degree == _degree(e)
        for _ in range(2):  # the first call caches ES(0), the second reads it
            assert e.at(0) == _at(e, 0)
            assert e.at(0.0) == _at(e, 0)
        for k in (1, 5, 1000):
            assert e.at(k) == _at(e, k)
