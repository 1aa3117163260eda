"""The column facts of an inner join, each computed when first read.

An inner join's columns are both sides' columns, each with its mf_k multiplied by the other
side's key factor (:func:`dpsql.analysis.rules.join_column_mf`). A join of wide tables (TPC-H's
lineitem has 16 columns) reads only a few of them afterwards (the next join's keys, the group
keys, the SUM arguments), so :class:`JoinedColumns` computes a column's facts on its first read
instead of all of them at every join (a third of a three-way join's analysis time).

Contract: a ``JoinedColumns(left, lf, right, rf)`` is the read-only mapping
``{k: f.with_mf(join_column_mf(f.mf, lf)) for k, f in left.items()}`` updated with the same
over ``right`` with ``rf``: the same keys in the same order, the same values (each computed
once, then kept), ``right`` winning a key both sides hold. ``left`` and ``right`` must not
change afterwards (the analysis never mutates a relation's columns). Reads are iterative, so a
chain of hundreds of joins stays within Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from dpsql.analysis.kexpr import KExpr
from dpsql.analysis.model import ColumnFacts
from dpsql.analysis.rules import join_column_mf

Key = tuple[str, str]


class JoinedColumns(Mapping[Key, ColumnFacts]):
    """An inner join's column facts, computed on first read (module contract)."""

    __slots__ = ("_done", "_keys", "_left", "_left_factor", "_right", "_right_factor")

    def __init__(self, left: Mapping[Key, ColumnFacts], left_factor: KExpr | None,
                 right: Mapping[Key, ColumnFacts], right_factor: KExpr | None) -> None:
        self._left, self._left_factor = left, left_factor
        self._right, self._right_factor = right, right_factor
        keys = dict.fromkeys(_keys(left))
        keys.update(dict.fromkeys(_keys(right)))
        #: every key, in the eager dict's order
        self._keys: dict[Key, None] = keys
        #: the facts computed so far
        self._done: dict[Key, ColumnFacts] = {}

    def __getitem__(self, key: Key) -> ColumnFacts:
        done = self._done.get(key)
        if done is not None:
            return done
        if key not in self._keys:
            raise KeyError(key)
        # Down to the mapping that holds the facts, then back up, multiplying each level's
        # factor in (innermost first, as the eager joins did) and keeping each level's result.
        chain: list[tuple[JoinedColumns, KExpr | None]] = []
        node: Mapping[Key, ColumnFacts] = self
        while isinstance(node, JoinedColumns):
            done = node._done.get(key)
            if done is not None:
                break
            if key in _keys(node._right):
                chain.append((node, node._right_factor))
                node = node._right
            else:
                chain.append((node, node._left_factor))
                node = node._left
        else:
            done = node[key]
        facts = done
        for joined, factor in reversed(chain):
            facts = facts.with_mf(join_column_mf(facts.mf, factor))
            joined._done[key] = facts
        return facts

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[Key]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"JoinedColumns({dict(self.items())!r})"


def _keys(columns: Mapping[Key, ColumnFacts]) -> Mapping[Key, object]:
    """What answers ``key in columns`` without computing facts."""
    return columns._keys if isinstance(columns, JoinedColumns) else columns
