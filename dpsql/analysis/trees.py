"""Helpers over sqlglot trees shared by the analysis and the rewrite."""

from __future__ import annotations

from typing import TypeVar

from sqlglot import exp

E = TypeVar("E", bound=exp.Expression)


def copy_tree(node: E) -> E:
    """A deep copy of ``node``: exactly ``node.copy()``, whose result is sqlglot's own
    ``__deepcopy__`` (a fresh tree; meta, comments and types copied; the ``memo`` is not
    used), without the ``copy.deepcopy`` dispatch ``copy()`` goes through, which costs more
    than copying a small tree (~7 us of ~11 for a DataType; the rewrite copies dozens of
    small trees per query, and one per value of a declared domain)."""
    return node.__deepcopy__({})  # type: ignore[return-value]
