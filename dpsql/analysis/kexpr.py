"""Functions of the distance k: the values elastic sensitivity is built from.

Every elastic stability, mf_k and ES(k) of docs/privacy.md section 2 is a combination of
constants and ``c + k`` terms by +, *, max and min, all with non-negative constants. Such a
function f has a *degree* D (the largest number of ``c + k`` factors multiplied together) and
``e^(-beta k) f(k)`` is non-increasing for k >= D / beta: each term ``k^j e^(-beta k)`` decreases
there, and sums, products by non-negative constants, max and min keep that. smooth.py relies on
this to bound its scan.

An *unknown* value (a column with no max frequency) is not representable here: callers keep it as
``None`` so that infinity never enters arithmetic (``inf * 0`` is NaN in Python).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np


class KExpr:
    """A non-negative, non-decreasing function of the distance k >= 0."""

    degree: int

    def at(self, k: int) -> float:
        raise NotImplementedError

    def at_array(self, ks: np.ndarray) -> np.ndarray:
        """``at`` for every k of the float array ``ks`` at once (to within a few ulps of
        ``at``: numpy's sums and products are not correctly rounded like math.fsum). The
        returned array may be shared with the expression's parts: do not write to it."""
        return self._array(ks, {})

    def _array(self, ks: np.ndarray, memo: dict[int, np.ndarray]) -> np.ndarray:
        """:meth:`at_array`; ``memo`` (id -> values) evaluates a part shared by several
        parents (a stability reused by a join's terms) once per call."""
        if type(self).at_array is not KExpr.at_array:  # a subclass that defines at_array
            return self.at_array(ks)
        raise NotImplementedError

    @property
    def depends_on_k(self) -> bool:
        return self.degree > 0

    def __add__(self, other: KExpr) -> KExpr:
        return add(self, other)

    def __mul__(self, other: KExpr) -> KExpr:
        return mul(self, other)


@dataclass(frozen=True)
class Const(KExpr):
    value: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", float(self.value))
        if self.value == math.inf:  # bounds near the largest double, scaled: the metadata's
            from dpsql.errors import NotSupportedError

            raise NotSupportedError(
                "a sensitivity bound passes the largest double (a column's bounds near "
                "1.8e308, times the rows one change or one unit may move): narrow the bounds")
        if not (math.isfinite(self.value) and self.value >= 0):
            raise ValueError(f"a sensitivity constant must be finite and >= 0, got {self.value}")

    @property
    def degree(self) -> int:  # type: ignore[override]
        return 0

    def at(self, k: int) -> float:
        return self.value

    def _array(self, ks: np.ndarray, memo: dict[int, np.ndarray]) -> np.ndarray:
        return np.full(ks.shape, self.value)

    def __str__(self) -> str:
        v = self.value
        return str(int(v)) if v == int(v) else repr(v)


@dataclass(frozen=True)
class PlusK(KExpr):
    """``base + k``: the max frequency of a private column at distance k (mf + k)."""

    base: float

    @property
    def degree(self) -> int:  # type: ignore[override]
        return 1

    def at(self, k: int) -> float:
        return self.base + k

    def _array(self, ks: np.ndarray, memo: dict[int, np.ndarray]) -> np.ndarray:
        return self.base + ks

    def __str__(self) -> str:
        return f"({Const(self.base)}+k)"


@dataclass(frozen=True)
class _Op(KExpr):
    op: str
    args: tuple[KExpr, ...]

    @cached_property
    def degree(self) -> int:  # type: ignore[override]
        # cached: the tree is immutable, and the noise plan asks each node several times
        if self.op == "*":
            return sum(a.degree for a in self.args)
        return max(a.degree for a in self.args)

    def at(self, k: int) -> float:
        if k == 0:  # ES(0) and mf(0): asked several times per noise plan
            return self._at0
        return self._at(k)

    @cached_property
    def _at0(self) -> float:
        # cached like degree: the tree is immutable, so at(0) is one number
        return self._at(0)

    def _at(self, k: int) -> float:
        values = [a.at(k) for a in self.args]
        if self.op == "+":
            try:
                return math.fsum(values)
            except OverflowError:  # finite terms whose sum overflows: reject downstream
                return math.inf
        if self.op == "*":
            return math.prod(values)
        if self.op == "max":
            return max(values)
        return min(values)

    def _array(self, ks: np.ndarray, memo: dict[int, np.ndarray]) -> np.ndarray:
        out = memo.get(id(self))
        if out is not None:
            return out
        # Left to right, one binary ufunc per argument (no stacked copy, never in place): as
        # ``at`` does it, up to the rounding of ``+`` (math.fsum there). NaN propagates
        # through all four.
        ufunc = _UFUNCS[self.op]
        args = iter(self.args)
        out = next(args)._array(ks, memo)
        for a in args:
            out = ufunc(out, a._array(ks, memo))
        memo[id(self)] = out
        return out

    def __str__(self) -> str:
        if self.op in ("+", "*"):
            return "(" + f" {self.op} ".join(map(str, self.args)) + ")"
        return f"{self.op}(" + ", ".join(map(str, self.args)) + ")"


def _op(op: str, args: tuple[KExpr, ...]) -> _Op:
    """``_Op(op, args)``, the same frozen instance, without the dataclass ``__init__``'s
    ``object.__setattr__`` per field (a third of the cost; joins build one per column)."""
    node = object.__new__(_Op)
    # the degree now, from the arguments' (already known): what _Op.degree would cache on
    # first use, without a cached_property lookup per node when the noise plan asks
    node.__dict__.update(op=op, args=args)
    if args:
        node.__dict__["degree"] = (sum(a.degree for a in args) if op == "*"
                                   else max(a.degree for a in args))
    return node


_UFUNCS = {"+": np.add, "*": np.multiply, "max": np.maximum, "min": np.minimum}


def shared_array(expr: KExpr, ks: np.ndarray, memo: dict[int, np.ndarray]) -> np.ndarray:
    """``expr.at_array(ks)`` with a ``memo`` (id of a part -> its values at ``ks``) shared by
    several calls over the same ``ks``, while every expression they evaluate is alive: a part
    common to several expressions (one noise plan's measurements share their stability) is
    evaluated once. The same values as ``at_array``; do not write to the result."""
    return expr._array(ks, memo)

ZERO = Const(0.0)
ONE = Const(1.0)


def is_zero(e: KExpr) -> bool:
    """True only for the constant 0 (a public relation's stability)."""
    return isinstance(e, Const) and e.value == 0


def add(a: KExpr, b: KExpr) -> KExpr:
    if is_zero(a):
        return b
    if is_zero(b):
        return a
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value + b.value)
    return _op("+", (a, b))


def _is_one(e: KExpr) -> bool:
    """``e == ONE`` without the dataclass comparison (only a Const equals a Const)."""
    return isinstance(e, Const) and e.value == 1.0


def mul(a: KExpr, b: KExpr) -> KExpr:
    if is_zero(a) or is_zero(b):
        return ZERO
    if _is_one(a):
        return b
    if _is_one(b):
        return a
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value * b.value)
    return _op("*", (a, b))


def _fold(op: str, args: list[KExpr]) -> KExpr:
    uniq: list[KExpr] = []
    for a in args:
        if a not in uniq:
            uniq.append(a)
    consts = [a.value for a in uniq if isinstance(a, Const)]
    others = [a for a in uniq if not isinstance(a, Const)]
    if consts:
        c = Const(max(consts) if op == "max" else min(consts))
        if not others:
            return c
        if op == "max" and c.value == 0:
            pass  # max(0, f) = f for non-negative f
        else:
            others.append(c)
    if op == "min" and any(is_zero(a) for a in others):
        return ZERO
    if len(others) == 1:
        return others[0]
    return _op(op, tuple(others))


def kmax(*args: KExpr) -> KExpr:
    return _fold("max", list(args))


def kmin(*args: KExpr) -> KExpr:
    return _fold("min", list(args))
