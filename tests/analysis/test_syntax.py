"""dpsql.analysis.syntax: parse errors in dpsql's words, positioned at the offending token."""

from __future__ import annotations

import pytest

from dpsql.analysis.parse import parse_sql
from dpsql.errors import ProgrammingError


@pytest.mark.parametrize(("sql", "message", "position"), [
    ("SELECT COUNT(*) FROM orders WHERE", "WHERE needs a condition after it", (1, 29)),
    ("SELECT COUNT(*) FROM orders WHERE status = ", "'=' needs a value on each side", (1, 42)),
    ("SELEC COUNT(*) FROM orders", "unexpected '('; did you mean SELECT instead of SELEC?",
     (1, 12)),
    ("SELECT COUNT(*) FROM o WHRE o.x = 1", "unexpected 'o'; did you mean WHERE instead of "
     "WHRE?", (1, 29)),
    ("SELECT 1,\n  'abc", "the string starting here is never closed: add the closing '",
     (2, 3)),
    ("SELECT COUNT(*)\n  FRM orders", "unexpected 'orders'; did you mean FROM instead of FRM?",
     (2, 7)),
    ("SELECT COUNT(*) FROM orders GROUP status", "unexpected 'status'; GROUP needs BY: GROUP "
     "BY ...", (1, 35)),
    ("SELECT COUNT(* FROM orders", "expected ) before 'FROM'", (1, 16)),
    ("SELECT COUNT(*) FROM t WHERE s = 'abc", "the string starting here is never closed: add "
     "the closing '", (1, 34)),
])
def test_parse_errors_name_the_construct_and_point_at_it(sql, message, position):
    with pytest.raises(ProgrammingError) as info:
        parse_sql(sql)
    assert info.value.message == f"SQL syntax error: {message}"
    assert info.value.position == position
    assert "sqlglot" not in info.value.message and "<class" not in info.value.message
