"""dpsql/analysis/outputs.py: duplicate output names of subqueries and CTEs get DuckDB's names,
so the analysis reads the column DuckDB binds."""

from __future__ import annotations

import duckdb
import pytest

from dpsql.analysis.elastic import analyze
from dpsql.analysis.outputs import duckdb_names
from dpsql.errors import ProgrammingError
from tests.analysis.test_blocks import MD


@pytest.mark.parametrize("names", [
    ["a", "a", "a"], ["a", "a_1", "a"], ["a", "a", "a_1"], ["a", "A", "a_1", "A_1"], ["x", "y"],
])
def test_names_are_duckdbs(names):
    select = ", ".join(f'{i} AS "{n}"' for i, n in enumerate(names))
    got = duckdb.connect().execute(f"SELECT * FROM (SELECT {select}) j").description
    assert duckdb_names(names) == [d[0] for d in got]


def test_select_star_over_a_join_in_a_cte_reads_the_first_duplicate():
    analysis = analyze(
        "WITH j AS (SELECT * FROM orders o JOIN customers c ON o.customer_id = c.customer_id) "
        "SELECT j.status, COUNT(*) AS n FROM j GROUP BY j.status", MD)
    text = analysis.query.sql()
    assert "c.customer_id AS customer_id_1" in text
    assert [k.name for k in analysis.group_keys] == ["status"]


def test_reading_a_renamed_duplicate_is_refused():
    with pytest.raises(ProgrammingError, match="x_1"):
        analyze("SELECT COUNT(*) FROM (SELECT customer_id AS x, cost AS x FROM orders) t "
                "JOIN customers c ON c.customer_id = t.x_1", MD)
