"""dpsql/analysis/joined_columns.py: a join's column facts, computed on first read, equal the
eager mapping the joins built before (same keys, order and values)."""

from __future__ import annotations

import pytest

from dpsql.analysis import joined_columns, rules
from dpsql.analysis.joined_columns import JoinedColumns
from dpsql.analysis.kexpr import Const, PlusK
from dpsql.analysis.model import ColumnFacts


def _eager(left, lf, right, rf):
    cols = {k: f.with_mf(rules.join_column_mf(f.mf, lf)) for k, f in left.items()}
    cols.update({k: f.with_mf(rules.join_column_mf(f.mf, rf)) for k, f in right.items()})
    return cols


LEFT = {("a", "x"): ColumnFacts(PlusK(3.0), type="INTEGER"),
        ("a", "y"): ColumnFacts(None, bounds=(0.0, 1.0)),
        ("a", "z"): ColumnFacts(Const(1.0), origin=("a", "z"))}
RIGHT = {("b", "x"): ColumnFacts(PlusK(7.0)), ("b", "w"): ColumnFacts(Const(2.0))}


@pytest.mark.parametrize(("lf", "rf"), [(PlusK(7.0), PlusK(3.0)), (None, Const(1.0)),
                                        (Const(2.0), None)])
def test_the_same_mapping_as_the_eager_join(lf, rf):
    lazy = JoinedColumns(LEFT, lf, RIGHT, rf)
    eager = _eager(LEFT, lf, RIGHT, rf)
    assert list(lazy) == list(eager) and len(lazy) == len(eager)
    assert list(lazy.items()) == list(eager.items())
    assert lazy == eager
    assert lazy.get(("a", "q")) is None and ("a", "q") not in lazy
    with pytest.raises(KeyError):
        lazy[("a", "q")]


def test_the_right_side_wins_a_key_both_sides_hold():
    right = {("a", "y"): ColumnFacts(PlusK(1.0))}
    lazy = JoinedColumns(LEFT, Const(2.0), right, Const(5.0))
    eager = _eager(LEFT, Const(2.0), right, Const(5.0))
    assert list(lazy.items()) == list(eager.items())
    assert str(lazy[("a", "y")].mf) == str(eager[("a", "y")].mf) == "((1+k) * 5)"


def test_facts_are_computed_once_and_only_when_read(monkeypatch):
    calls = []
    real = joined_columns.join_column_mf

    def counting(mf, factor):
        calls.append(mf)
        return real(mf, factor)

    monkeypatch.setattr(joined_columns, "join_column_mf", counting)
    lazy = JoinedColumns(LEFT, PlusK(7.0), RIGHT, PlusK(3.0))
    assert ("a", "x") in lazy and len(lazy) == 5 and not calls  # membership computes nothing
    first = lazy[("a", "x")]
    assert lazy[("a", "x")] is first and len(calls) == 1


def test_a_chain_of_joins_multiplies_every_factor_without_deep_recursion():
    columns = {("t0", "c"): ColumnFacts(PlusK(1.0))}
    expected = PlusK(1.0)
    for i in range(1, 1500):  # beyond Python's recursion limit of 1000
        factor = Const(2.0) if i % 500 == 0 else Const(1.0)
        expected = rules.join_column_mf(expected, factor)
        columns = JoinedColumns(columns, factor, {(f"t{i}", "c"): ColumnFacts(Const(1.0))},
                                PlusK(0.0))
    assert str(columns[("t0", "c")].mf) == str(expected)
    assert columns[("t0", "c")].mf.at(0) == 4.0  # (1 + k) * 2 * 2 at k = 0 (joins 500, 1000)
    assert list(columns)[-1] == ("t1499", "c") and len(columns) == 1500
