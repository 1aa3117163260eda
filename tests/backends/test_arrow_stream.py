"""dpsql.backends.arrow_stream through DuckDBBackend.execute_flat_columns: the same rows and
values as execute_columns (fetchnumpy), NULLs masked, equal ids equal, on every unit id type the
analysis accepts, over several record batches and none; errors mapped as execute's."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dpsql.backends import arrow_stream
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import OperationalError, QueryCancelledError
from dpsql.units.multi_execute import unit_codes
from tests.db_files import writing

#: id types of dpsql.units.identity.EXACT_ID_TYPES, as DuckDB spells them, with a value maker
IDS = {
    "TINYINT": "(i % 7)::TINYINT",
    "INTEGER": "(i % 97)::INTEGER",
    "BIGINT": "(i % 97)::BIGINT * 1000000007",
    "UBIGINT": "(i % 97)::UBIGINT + 18446744073709551000",
    "HUGEINT": "(i % 97)::HUGEINT * 170141183460469231731687303715884105",
    "DECIMAL(18,3)": "((i % 97) / 8)::DECIMAL(18,3)",
    "VARCHAR": "'id-' || (i % 97)::VARCHAR",
    "DATE": "DATE '2020-01-01' + (i % 97)::INTEGER",
    "UUID": "('00000000-0000-0000-0000-' || lpad((i % 97)::VARCHAR, 12, '0'))::UUID",
}


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    path = tmp_path_factory.mktemp("arrow") / "ids.duckdb"
    columns = ", ".join(f"CASE WHEN i % 11 = 0 THEN NULL ELSE {make} END AS c{k}"
                        for k, make in enumerate(IDS.values()))
    with writing(path) as con:
        con.execute(f"CREATE TABLE t AS SELECT i, {columns}, "
                    "CASE WHEN i % 13 = 0 THEN NULL ELSE i / 7.0 END AS v FROM range(5000) r(i)")
    b = DuckDBBackend(path)
    yield b
    b.close()


def _partition(column) -> list[tuple[int, ...]]:
    """The classes of equal entries (NULL one class), as row-index tuples."""
    codes = unit_codes(column)
    classes: dict[int, list[int]] = {}
    for row, code in enumerate(codes.tolist()):
        classes.setdefault(code, []).append(row)
    return sorted(tuple(v) for v in classes.values())


@pytest.mark.parametrize("batch_rows", [64, arrow_stream.BATCH_ROWS])
@pytest.mark.parametrize("k", range(len(IDS)), ids=list(IDS))
def test_ids_keep_their_partition_and_values_their_nulls(backend, monkeypatch, k, batch_rows):
    monkeypatch.setattr("dpsql.backends.duckdb.BATCH_ROWS", batch_rows)
    sql = f"SELECT c{k} AS __u0, v AS __v0, i FROM t ORDER BY i"
    want, want_types = backend.execute_columns(sql)
    got, types = backend.execute_flat_columns(sql)
    assert types == want_types and len(got) == 3
    assert np.array_equal(np.ma.getdata(got[2]), np.ma.getdata(want[2]))  # the same order
    assert _partition(got[0]) == _partition(want[0])
    assert np.ma.getmaskarray(got[0]).sum() == 455  # i % 11 == 0: NULL, masked
    # the values: equal where present, masked where NULL, zeros under the mask
    assert np.array_equal(np.ma.getmaskarray(got[1]), np.ma.getmaskarray(want[1]))
    assert np.array_equal(np.ma.filled(got[1], 0.0), np.ma.filled(want[1], 0.0))
    assert got[1].dtype == np.float64


def test_numbers_keep_their_width_and_need_no_mask(backend):
    sql = "SELECT (i % 97)::INTEGER AS a, i::UBIGINT AS b, i / 3.0 AS v FROM t"
    got, _ = backend.execute_flat_columns(sql)
    assert [c.dtype for c in got] == [np.int32, np.uint64, np.float64]
    assert not any(isinstance(c, np.ma.MaskedArray) for c in got)
    assert sorted(got[1].tolist()) == list(range(5000))


def test_an_empty_result_has_typed_empty_columns(backend):
    got, types = backend.execute_flat_columns(
        "SELECT c1 AS __u0, c6 AS __u1, v FROM t WHERE i < 0")
    assert [len(c) for c in got] == [0, 0, 0] and types == ["INTEGER", "VARCHAR", "DOUBLE"]
    assert got[0].dtype == np.int32 and got[2].dtype == np.float64


def test_parameters_bind_as_in_execute(backend):
    sql = "SELECT i FROM t WHERE i < $n"
    assert sorted(backend.execute_flat_columns(sql, {"n": 10})[0][0].tolist()) == list(range(10))


def test_a_failing_query_is_an_operational_error_naming_only_its_class(backend):
    with pytest.raises(OperationalError, match=r"could not run the query \(\w+\)") as info:
        backend.execute_flat_columns("SELECT CAST('id-' || i::VARCHAR AS INTEGER) FROM t")
    assert "id-" not in str(info.value)  # no value of the data in the message


def test_a_one_row_read_left_open_does_not_block_the_stream(backend):
    # value_range reads one row with fetchone(), leaving DuckDB's result open
    assert backend.value_range("t", "i") == (0, 4999)
    got, _ = backend.execute_flat_columns("SELECT i FROM t WHERE i < 3")
    assert sorted(got[0].tolist()) == [0, 1, 2]


# -- errors while the batches stream (fourth units QA) -----------------------------------------
# DuckDB reports an error met after the reader was made (a cancel, a failing row) through
# pyarrow's batch iteration as a plain OSError carrying DuckDB's text, not as a duckdb.Error:
# it escaped the mapping above, so a psql Ctrl-C / pg_cancel during a two-unit release's flat
# read was "internal error in the dpsql server" (the connection closed), not 57014.

#: ~1 s of streamed batches on one core (3M rows with an md5 each)
_LONG = "SELECT i % 1000 AS a, i % 77 AS b, md5(i::VARCHAR) AS h FROM range(3000000) r(i)"


def test_an_interrupt_while_streaming_is_a_cancellation(backend):
    stop = threading.Event()

    def keep_interrupting() -> None:  # until the read has started and been stopped
        while not stop.wait(0.02):
            backend.interrupt()

    worker = threading.Thread(target=keep_interrupting)
    worker.start()
    try:
        with pytest.raises(QueryCancelledError):
            backend.execute_flat_columns(_LONG)
    finally:
        stop.set()
        worker.join()
    got, _ = backend.execute_flat_columns("SELECT i FROM t WHERE i < 2")  # still usable
    assert sorted(got[0].tolist()) == [0, 1]


def test_a_row_failing_mid_stream_is_an_operational_error_naming_only_its_class(backend,
                                                                                monkeypatch):
    monkeypatch.setattr("dpsql.backends.duckdb.BATCH_ROWS", 64)
    sql = ("SELECT i, CAST(CASE WHEN i > 2500000 THEN 'id-' || i::VARCHAR ELSE '1' END "
           "AS INTEGER) AS c FROM range(3000000) r(i)")
    with pytest.raises(OperationalError, match=r"could not run the query \(\w+\)") as info:
        backend.execute_flat_columns(sql)
    assert "id-" not in str(info.value) and "25000" not in str(info.value)


# -- the flat reads' row guard (dpsql.units.multi_execute: max_rows, no LIMIT in the SQL) -------


def test_a_read_past_max_rows_stops_with_more_rows_than_it(backend, monkeypatch):
    """The stream stops at the batch that passes ``max_rows``: longer than the guard (so the
    caller's ``<= guard`` check sends it to the fallback), yet not the whole result; and the
    connection serves the next query."""
    monkeypatch.setattr("dpsql.backends.duckdb.BATCH_ROWS", 1000)
    got, _ = backend.execute_flat_columns("SELECT i FROM range(1000000) r(i)", max_rows=2500)
    assert 2500 < got[0].shape[0] < 1_000_000
    assert np.unique(got[0]).size == got[0].shape[0]  # rows of the result, each once
    whole, _ = backend.execute_flat_columns("SELECT i FROM range(3000) r(i)", max_rows=3000)
    assert sorted(whole[0].tolist()) == list(range(3000))  # at the guard: every row
    got, _ = backend.execute_flat_columns("SELECT i FROM t WHERE i < 2")  # still usable
    assert sorted(got[0].tolist()) == [0, 1]
