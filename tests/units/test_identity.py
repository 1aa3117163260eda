"""dpsql.units.identity: unit ids and path keys must have types whose equality never merges
two units (the red team of issue #17: NOCASE and DOUBLE ids merged 'A'/'a' and 0.0/-0.0)."""

from __future__ import annotations

import dataclasses

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.errors import UnsupportedConstructError
from tests.units import tiny


def _with_type(md, table: str, column: str, type_: str | None):
    t = md.tables[table]
    col = dataclasses.replace(t.columns[column], type=type_)
    tables = dict(md.tables)
    tables[table] = dataclasses.replace(t, columns={**t.columns, column: col})
    return dataclasses.replace(md, tables=tables)


@pytest.mark.parametrize("table,column", [
    ("orders", "o_cust"),  # a direct path
    ("customer", "c_id"),  # the unit table's id
    ("orders", "o_id"),  # a key a path points to (and the via column, below)
    ("items", "i_order"),
])
@pytest.mark.parametrize("type_", ["VARCHAR COLLATE nocase", "DOUBLE", "REAL", "INTERVAL",
                                   "INTEGER[]", None])
def test_a_unit_path_column_whose_equality_merges_distinct_values_is_refused(table, column,
                                                                             type_):
    # 'A' and 'a' (or 0.0 and -0.0) are two units, but the executed GROUP BY and lookups
    # compare them equal: one unit's removal then moved a two-stage histogram by 2 kappa C
    md = _with_type(tiny.metadata(), table, column, type_)
    if (table, column) == ("orders", "o_id"):  # keep the via path's two types equal
        md = _with_type(md, "items", "i_order", type_)
    with pytest.raises(UnsupportedConstructError, match="unit path"):
        analyze_request("SELECT COUNT(*) FROM orders", md)


def test_a_collated_unit_id_in_the_database_is_refused_through_the_session(tmp_path):
    import duckdb

    from dpsql.backends.duckdb import DuckDBBackend
    from dpsql.session import Session

    path = tmp_path / "collated.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE orders (o_id INTEGER, o_cust VARCHAR COLLATE NOCASE, "
                "amount INTEGER)")
    con.execute("INSERT INTO orders VALUES (1, 'A', 1), (2, 'a', 1)")
    con.close()
    md = _with_type(tiny.metadata(), "orders", "o_cust", None)  # the database's type
    md = dataclasses.replace(md, tables={"orders": md.tables["orders"]})
    session = Session(md, DuckDBBackend(path, md))
    try:
        with pytest.raises(UnsupportedConstructError, match=r"orders\.o_cust"):
            session.run("SELECT COUNT(*) FROM orders", epsilon=1.0)
    finally:
        session.backend.close()


@pytest.mark.parametrize("type_", ["BIGINT", "HUGEINT", "DECIMAL(12,2)", "VARCHAR", "DATE",
                                   "UUID"])
def test_unit_ids_of_exact_types_are_accepted(type_):
    md = _with_type(tiny.metadata(), "orders", "o_cust", type_)
    md = _with_type(md, "customer", "c_id", type_)
    assert analyze_request("SELECT COUNT(*) FROM orders", md).unit is not None
