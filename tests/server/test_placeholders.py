"""$n markers to ? markers (dpsql/server/placeholders.py)."""

from __future__ import annotations

import pytest

from dpsql.errors import ProgrammingError
from dpsql.server.placeholders import count_markers, to_qmark


def test_markers_become_qmarks_in_text_order_with_values_reordered_and_repeated() -> None:
    sql, values = to_qmark("SELECT COUNT(*) FROM t WHERE a = $2 AND b = $1 OR c = $2", ["x", 7])
    assert sql == "SELECT COUNT(*) FROM t WHERE a = ? AND b = ? OR c = ?"
    assert values == [7, "x", 7]


def test_markers_inside_strings_names_comments_and_dollar_quotes_are_left_alone() -> None:
    text = "SELECT '$1', \"$1\", $$ $1 $$, $tag$ $1 $tag$ -- $1\n/* $1 */ FROM t WHERE a = $1"
    sql, values = to_qmark(text, [5])
    assert sql.count("?") == 1 and sql.endswith("a = ?")
    assert values == [5]
    assert count_markers(text) == 1


def test_unbound_and_unused_parameters_are_errors() -> None:
    with pytest.raises(ProgrammingError, match=r"\$2"):
        to_qmark("SELECT $2", [1])
    with pytest.raises(ProgrammingError, match="not used"):
        to_qmark("SELECT $1", [1, 2])
