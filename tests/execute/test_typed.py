"""dpsql/execute/typed.py: released values typed like their columns, counts clamped at 0, AVG
NULL over a noisy count <= 0, and the release record saying so.

Exact values with noise off (ZeroNoise, a large epsilon so the sums' grid is finer than a
cent) on a tiny DuckDB file, through both post-processing paths (numpy, and the SQL one that
HAVING / LIMIT force); negative counts with a sampler that draws a fixed noise; and the rules
on their own.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal

import numpy as np
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.analysis.output_types import AS_IS, OutputRule, output_rules
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.execute.typed import AVG_NULL, CLAMPED_COUNT, finish, finish_columns, plain_values
from dpsql.metadata import loads_metadata
from dpsql.session import Session
from tests.db_files import writing
from tests.shop_fixture import ZeroNoise

METADATA = """\
tables:
  t:
    columns:
      g: {max_freq: 10, releasable: true, type: VARCHAR, domain: {values: [a, b, empty]}}
      k: {max_freq: 10, releasable: true, type: 'DECIMAL(15,2)', domain: {values: [1.5, 2.25]}}
      i: {bounds: [0, 100], type: INTEGER}
      big: {bounds: [0, 100], type: BIGINT}
      d: {bounds: [0, 1000], type: 'DECIMAL(15,2)'}
      x: {bounds: [0, 10], type: DOUBLE}
"""

ROWS = [("a", "1.50", 3, 7, "10.25", 0.5), ("a", "2.25", 4, 8, "20.50", 1.5),
        ("b", "1.50", 5, 9, "0.01", 2.0)]
EXACT = 1e6  # epsilon: the sums' grid is far finer than their scale (0.01)


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("typed") / "t.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t (g VARCHAR, k DECIMAL(15,2), i INTEGER, big BIGINT, "
                    "d DECIMAL(15,2), x DOUBLE)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", ROWS)
    return path


class FixedNoise(ZeroNoise):
    """Every count drawn with noise ``-shift`` (a count's noise is discrete Laplace)."""

    def __init__(self, shift: int) -> None:
        super().__init__()
        self.shift = shift

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        super().discrete_laplace(scale, size)
        return np.full(size, -self.shift, dtype=np.int64)


@pytest.fixture
def session(database):
    md = loads_metadata(METADATA)
    backend = DuckDBBackend(str(database), md)
    s = Session(md, backend, sampler=ZeroNoise())
    yield s
    s.close()
    backend.close()


TYPED = ("SELECT g, COUNT(*) AS n, SUM(i) AS si, SUM(big) AS sb, SUM(d) AS sd, SUM(x) AS sx, "
         "AVG(x) AS ax FROM t GROUP BY g")


@pytest.mark.parametrize("tail", ["", " HAVING COUNT(*) >= 0 ORDER BY g LIMIT 10"],
                         ids=["numpy-path", "sql-path"])
def test_sums_are_typed_like_their_columns_on_both_paths(session, tail):
    result = session.run(TYPED + tail, epsilon=EXACT)
    assert result.types == ("VARCHAR", "BIGINT", "BIGINT", "BIGINT", "DECIMAL(38,2)", "DOUBLE",
                            "DOUBLE")
    rows = {r[0]: r for r in result.rows}
    assert rows["a"][1:5] == (2, 7, 15, Decimal("30.75"))
    assert rows["b"][1:5] == (1, 5, 9, Decimal("0.01"))
    assert all(type(v) is int for r in result.rows for v in r[1:4])
    assert all(isinstance(r[4], Decimal) and r[4].as_tuple().exponent == -2
               for r in result.rows)
    assert rows["a"][5] == pytest.approx(2.0) and rows["a"][6] == pytest.approx(1.0)
    # the empty bin: count 0, sums 0, and AVG NULL (its noisy count is 0), as SQL's AVG
    assert rows["empty"][1:5] == (0, 0, 0, Decimal("0.00"))
    assert rows["empty"][6] is None


def test_a_decimal_group_key_is_described_with_its_declared_type(session):
    result = session.run("SELECT k, COUNT(*) AS n FROM t GROUP BY k", epsilon=EXACT)
    assert result.types == ("DECIMAL(15,2)", "BIGINT")
    assert sorted(result.rows) == [(Decimal("1.50"), 2), (Decimal("2.25"), 1)]


def test_sum_with_filter_and_through_an_alias_is_typed(session):
    result = session.run("SELECT SUM(u.i) FILTER (WHERE u.x > 1) AS s, COUNT(*) "
                         "FILTER (WHERE u.x > 1) AS n FROM t AS u", epsilon=EXACT)
    assert result.types == ("BIGINT", "BIGINT")
    assert result.rows == [(9, 2)]


def test_expressions_over_aggregates_keep_the_post_processing_type(session):
    result = session.run("SELECT SUM(i) + 1 AS s1, COUNT(*) * 2 AS n2 FROM t", epsilon=EXACT)
    assert result.rows == [(13.0, 6)]
    assert result.types[0] == "DOUBLE"


def test_negative_noisy_counts_are_clamped_unless_raw(database):
    md = loads_metadata(METADATA)
    backend = DuckDBBackend(str(database), md)
    s = Session(md, backend, sampler=FixedNoise(5))
    sql = "SELECT g, COUNT(*) AS n, AVG(x) AS ax FROM t GROUP BY g ORDER BY g"
    try:
        clamped = s.run(sql, epsilon=1.0)
        raw = s.run(sql, epsilon=1.0, raw_counts=True)
    finally:
        s.close()
        backend.close()
    # true counts a=2, b=1, empty=0, minus 5; every AVG's noisy count is <= 0: NULL
    assert clamped.rows == [("a", 0, None), ("b", 0, None), ("empty", 0, None)]
    assert raw.rows == [("a", -3, None), ("b", -4, None), ("empty", -5, None)]
    notes = {c.name: c.post_processing for c in clamped.release.columns}
    assert notes == {"g": None, "n": CLAMPED_COUNT, "ax": AVG_NULL}
    assert {c.name: c.post_processing for c in raw.release.columns}["n"] is None


def test_the_record_names_each_columns_post_processing(session):
    release = session.run(TYPED, epsilon=EXACT).release
    notes = {c.name: c.post_processing for c in release.columns}
    assert notes["n"] == CLAMPED_COUNT
    assert "rounded to an integer" in notes["si"] and "rounded to an integer" in notes["sb"]
    assert "2 decimal places" in notes["sd"]
    assert notes["sx"] is None and notes["ax"] == AVG_NULL and notes["g"] is None


def test_rules_come_from_the_sql_and_metadata_only():
    md = loads_metadata(METADATA)
    analysis = analyze_request(TYPED, md)
    rules = output_rules(analysis, md)
    assert [r.kind for r in rules] == ["key", "count", "integer_sum", "integer_sum",
                                       "decimal_sum", "as_is", "as_is"]
    assert rules[4] == OutputRule("decimal_sum", "DECIMAL(38,2)", 2)


def test_finish_rounds_half_to_even_saturates_and_nulls_non_finite():
    rules = (OutputRule("count", "BIGINT"), OutputRule("integer_sum", "BIGINT"),
             OutputRule("decimal_sum", "DECIMAL(38,2)", 2), AS_IS)
    rows = [(-3, 2.5, 1.005, 7.0), (None, 3.5, -0.004999, None),
            (4, 1e300, -1e300, 1.0), (0, math.nan, math.inf, 2.0)]
    _, types, out = finish((("n", "s", "d", "x"), ("BIGINT", "DOUBLE", "DOUBLE", "DOUBLE"),
                                rows), rules)
    assert types == ("BIGINT", "BIGINT", "DECIMAL(38,2)", "DOUBLE")
    assert out[0] == (0, 2, Decimal("1.00"), 7.0)  # 1.005 is 1.00499999... as a float
    assert out[1] == (None, 4, Decimal("-0.00"), None)
    top = Decimal(10) ** 36 - Decimal("0.01")
    assert out[2] == (4, 2**63 - 1, -top, 1.0)
    assert out[3] == (0, None, None, 2.0)
    raw = finish((("n",), ("BIGINT",), [(-3,)]), rules[:1], raw_counts=True)
    assert raw[2] == [(-3,)]


@pytest.mark.parametrize("raw_counts", [False, True])
def test_finish_columns_gives_the_rows_finish_gives(raw_counts):
    """The fast path finishes columns before building rows: the same rows and types as
    :func:`finish` over the rows, for numpy and Python columns, NaN standing for NULL."""
    rules = (OutputRule("count", "BIGINT"), OutputRule("count", "BIGINT"),
             OutputRule("integer_sum", "BIGINT"), OutputRule("decimal_sum", "DECIMAL(38,2)", 2),
             AS_IS, AS_IS)
    columns = [np.array([-3, 0, 5, -1]), np.array([-0.5, math.nan, 2.0, -0.0]),
               np.array([2.5, 3.5, 1e300, math.nan]), np.array([1.005, -0.004999, -1e300, 2.0]),
               np.array([7.0, math.nan, 1.0, 2.0]), ["a", None, "c", "d"]]
    types = ("BIGINT", "DOUBLE", "DOUBLE", "DOUBLE", "DOUBLE", "VARCHAR")
    names = tuple("abcdef")
    rows = list(zip(*(plain_values(c) for c in columns), strict=True))
    want = finish((names, types, rows), rules, raw_counts=raw_counts)
    got_types, got = finish_columns(types, columns, rules, raw_counts=raw_counts)
    got_rows = list(zip(*(plain_values(c) for c in got), strict=True))
    assert got_types == want[1]
    assert repr(got_rows) == repr(want[2])  # -0.0 and 0, 0.0 and 0 told apart
    assert finish_columns(types, columns, ()) == (types, columns)


def test_finish_leaves_rows_alone_when_the_columns_do_not_match():
    rows = (("a", "b"), ("DOUBLE", "DOUBLE"), [(1.5, 2.5)])
    assert finish(rows, (OutputRule("integer_sum", "BIGINT"),)) is rows


def test_decimal_values_pass_through_quantized():
    rules = (OutputRule("decimal_sum", "DECIMAL(38,3)", 3),)
    out = finish((("d",), ("DECIMAL(38,3)",), [(Decimal("2.34567"),)]), rules)[2]
    assert out == [(Decimal("2.346"),)]
    with decimal.localcontext() as ctx:  # the caller's context does not matter
        ctx.prec = 3
        out = finish((("d",), ("DOUBLE",), [(123456.789,)]), rules)[2]
    assert out == [(Decimal("123456.789"),)]


def test_a_raw_request_is_cached_apart_from_a_clamped_one(database, tmp_path):
    """The answer cache holds the finished rows, so a request for raw counts is not served
    the clamped answer of the same query (nor the reverse): it is a new release, charged;
    each is a free repeat of itself."""
    import dpsql
    from dpsql.accounting import Ledger
    from dpsql.backends import ledger_identity
    from dpsql.metadata import load_metadata

    md = tmp_path / "t.yaml"
    md.write_text(METADATA)
    ledger_path = tmp_path / "ledger.sqlite"
    with Ledger(ledger_path, create=True) as ledger:
        ledger.set_budget(ledger_identity("duckdb", database, load_metadata(md)), "alice",
                          10.0, 0.0)
    sql = "SELECT g, COUNT(*) AS n, SUM(d) AS sd FROM t GROUP BY g"
    spent, rows = [], []
    for raw in (False, True, False, True):
        with dpsql.connect(database, md, analyst="alice", ledger=ledger_path, epsilon=0.5,
                           raw_counts=raw) as conn:
            cur = conn.execute(sql)
            spent.append((cur.release.cached, conn.budget.epsilon_spent))
            rows.append(cur.fetchall())
            assert cur.description[2][1] == "DECIMAL(38,2)"
    assert spent == [(False, 0.5), (False, 1.0), (True, 1.0), (True, 1.0)]
    # a cached repeat is the stored answer, typed as it was released
    assert rows[2] == rows[0] and rows[3] == rows[1]
    assert all(isinstance(r[2], Decimal) for r in rows[2])


def test_the_final_query_of_two_phases_is_typed_too(session):
    result = session.run("SELECT g, COUNT(*) AS n, SUM(i) AS si, SUM(d) AS sd FROM t "
                         "WHERE x > (SELECT AVG(x) FROM t) GROUP BY g ORDER BY g",
                         epsilon=EXACT)
    assert result.types == ("VARCHAR", "BIGINT", "BIGINT", "DECIMAL(38,2)")
    assert result.rows == [("a", 1, 4, Decimal("20.50")), ("b", 1, 5, Decimal("0.01")),
                           ("empty", 0, 0, Decimal("0.00"))]
    notes = {c.name: c.post_processing for c in result.release.columns}
    assert notes["n"] == CLAMPED_COUNT and "2 decimal places" in notes["sd"]
    assert notes["g"] is None


def test_a_query_over_block_tables_is_left_as_post_processed(session):
    result = session.run("WITH c AS (SELECT g, COUNT(*) AS n, SUM(i) AS s FROM t GROUP BY g) "
                         "SELECT g, n, s FROM c ORDER BY g", epsilon=EXACT)
    assert [r[1:] for r in result.rows] == [(2, 7.0), (1, 5.0), (0, 0.0)]
    notes = {c.name: c.post_processing for c in result.release.columns}
    assert notes == {"c.g": None, "c.n": CLAMPED_COUNT, "c.s": None}


def test_a_block_tables_counts_are_clamped_unless_raw(database):
    md = loads_metadata(METADATA)
    backend = DuckDBBackend(str(database), md)
    s = Session(md, backend, sampler=FixedNoise(5))
    sql = ("WITH c AS (SELECT g, COUNT(*) AS n, AVG(x) AS ax FROM t GROUP BY g) "
           "SELECT g, n, n - 1 AS m, ax FROM c ORDER BY g")
    try:
        clamped = s.run(sql, epsilon=1.0)
        raw = s.run(sql, epsilon=1.0, raw_counts=True)
    finally:
        s.close()
        backend.close()
    # the outer query computes from the clamped counts (n - 1 is -1, not -4)
    assert clamped.rows == [("a", 0, -1, None), ("b", 0, -1, None), ("empty", 0, -1, None)]
    assert raw.rows == [("a", -3, -4, None), ("b", -4, -5, None), ("empty", -5, -6, None)]
    assert {c.name: c.post_processing for c in raw.release.columns}["c.n"] is None


def test_rules_read_any_spelling_of_the_declared_type():
    md = loads_metadata("""\
tables:
  u:
    columns:
      g: {max_freq: 10, releasable: true, type: varchar, domain: {values: [a]}}
      i: {bounds: [0, 1], type: int4}
      h: {bounds: [0, 1], type: hugeint}
      n: {bounds: [0, 1], type: 'numeric(10,3)'}
      f: {bounds: [0, 1], type: real}
""")
    analysis = analyze_request("SELECT g, SUM(i) AS a, SUM(h) AS b, SUM(n) AS c, SUM(f) AS d "
                               "FROM u GROUP BY g", md)
    assert output_rules(analysis, md) == (
        OutputRule("key", "VARCHAR"), OutputRule("integer_sum", "BIGINT"),
        OutputRule("integer_sum", "BIGINT"), OutputRule("decimal_sum", "DECIMAL(38,3)", 3),
        AS_IS)


def test_annotate_replaces_as_dataclasses_replace_does():
    import dataclasses

    from dpsql.execute.typed import _replaced, annotate
    from dpsql.release.record import ColumnRelease, Release

    for cls in (ColumnRelease, Release):  # what _replaced relies on
        assert not hasattr(cls, "__post_init__")
        assert all(f.init for f in dataclasses.fields(cls))
    col = ColumnRelease("n", "laplace", 0.5, 0.0, 3.5, post_processing="earlier",
                        noise_scale=2.0)
    record = Release(0.5, 0.0, "laplace", (col, ColumnRelease("k", None, 0.0, 0.0, None)),
                     "abc", rho=0.125)
    assert _replaced(col, post_processing="x") == dataclasses.replace(col, post_processing="x")
    assert _replaced(record, columns=()) == dataclasses.replace(record, columns=())
    noted = annotate(record, [CLAMPED_COUNT, None])
    assert noted == dataclasses.replace(record, columns=(
        dataclasses.replace(col, post_processing=f"earlier; {CLAMPED_COUNT}"),
        record.columns[1]))
    assert record.columns[0].post_processing == "earlier"  # the original is unchanged
