"""dpsql.server.sqlstates on the analysis's own errors: a table reference that is not visible
where it is used is PostgreSQL's 42P01 (missing FROM-clause entry), an unknown column 42703."""

from __future__ import annotations

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.errors import ProgrammingError
from dpsql.server.sqlstates import sqlstate
from tests.units import tiny


@pytest.mark.parametrize(("sql", "code"), [
    # a join's ON reading a table joined later (QA round 3: was 42000)
    ("SELECT COUNT(*) FROM orders o JOIN customer c ON c.c_id = i.i_order "
     "JOIN items i ON i.i_order = o.o_id", "42P01"),
    # an alias no FROM declares (QA round 3: was 42703)
    ("SELECT COUNT(*) FROM orders o WHERE zz.o_id = 1", "42P01"),
    ("SELECT COUNT(*) FROM orders o WHERE o.no_such_column = 1", "42703"),
])
def test_scope_errors_carry_postgres_codes(sql, code):
    with pytest.raises(ProgrammingError) as info:
        analyze_request(sql, tiny.metadata())
    assert sqlstate(info.value) == code, str(info.value)
