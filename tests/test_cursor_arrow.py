"""cursor.fetch_arrow_table(), cursor.fetchdf() and polars.read_database over a dpsql
connection (dpsql/cursor.py, dpsql/arrow.py): typed like ``description``, the remaining rows
only, no warning, and a missing pyarrow named with the extra that brings it."""

from __future__ import annotations

import sys
import warnings
from decimal import Decimal

import pytest

import dpsql
from dpsql.errors import ProgrammingError
from tests.analyst_world import EXACT, build

BY_G = ("SELECT g, COUNT(*) AS n, SUM(i) AS si, SUM(d) AS sd, AVG(x) AS ax FROM t "
        "GROUP BY g ORDER BY g")


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    db, md = build(tmp_path_factory.mktemp("arrow"))
    with dpsql.connect(db, md, analyst="alice", ledger=None, epsilon=EXACT) as conn:
        yield conn


def test_fetch_arrow_table_has_the_description_types(conn):
    pa = pytest.importorskip("pyarrow")
    cur = conn.execute(BY_G)
    table = cur.fetch_arrow_table()
    assert table.schema.names == ["g", "n", "si", "sd", "ax"]
    assert table.schema.types == [pa.string(), pa.int64(), pa.int64(), pa.decimal128(38, 2),
                                  pa.float64()]
    assert table.column("g").to_pylist() == ["a", "b", "empty"]
    assert table.column("n").to_pylist() == [2, 1, 0]
    assert table.column("ax").to_pylist()[2] is None  # AVG over a noisy count of 0
    assert all(isinstance(v, Decimal) for v in table.column("sd").to_pylist())


def test_fetch_arrow_table_takes_the_remaining_rows(conn):
    pa = pytest.importorskip("pyarrow")
    cur = conn.execute(BY_G)
    assert cur.fetchone()[0] == "a"
    assert cur.fetch_arrow_table().column("g").to_pylist() == ["b", "empty"]
    empty = cur.fetch_arrow_table()  # exhausted: no rows, the same schema
    assert empty.num_rows == 0 and empty.schema.field("sd").type == pa.decimal128(38, 2)


def test_fetch_arrow_table_without_pyarrow_names_the_extra(conn, monkeypatch):
    cur = conn.execute(BY_G)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    with pytest.raises(ProgrammingError, match=r"dpsql\[arrow\]"):
        cur.fetch_arrow_table()


def test_fetchdf_dtypes(conn):
    pytest.importorskip("pandas")
    frame = conn.execute(BY_G).fetchdf()
    assert [str(t) for t in frame.dtypes[1:]] == ["int64", "int64", "object", "float64"]
    assert frame["n"].tolist() == [2, 1, 0]
    assert isinstance(frame["sd"][0], Decimal)


def test_polars_read_database_without_warning(conn):
    pl = pytest.importorskip("polars", reason="polars is not installed (the test extra has it)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = pl.read_database(BY_G, conn)
    assert frame.columns == ["g", "n", "si", "sd", "ax"]
    assert frame["n"].to_list() == [2, 1, 0]
    assert frame.schema["n"] == pl.Int64 and frame.schema["ax"] == pl.Float64
    assert frame.schema["sd"] == pl.Decimal(38, 2)
