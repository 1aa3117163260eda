"""Comparisons the rewrite leaves without TRY cannot raise on DuckDB, whatever the rows.

dpsql.rewrite.safe_compare decides which comparisons need no TRY. The proof obligation is "no stored
value makes DuckDB raise", so it is checked by brute force: a table holding each type's extreme
values (minimum, maximum, zero, NULL, infinities, odd strings), every comparison operator
between every pair of its columns and a set of constants, and every comparison the module
accepts is run on DuckDB and must not raise. The rejections that matter are shown to really
fail (so the brute force bites), and the engine-level effect is checked on two databases that
differ in one extreme row: same answer, no TRY in the executed SQL, and still TRY where a cast
can fail.
"""

from __future__ import annotations

import itertools
import re
from decimal import Decimal

import duckdb
import numpy as np
import pytest
import sqlglot
from sqlglot import exp

from dpsql.analysis.elastic import analyze
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.execute.exact import read_exact
from dpsql.metadata import loads_metadata
from dpsql.rewrite.clamps import _native_bounds
from dpsql.rewrite.plan import plan_execution
from dpsql.rewrite.safe_compare import (
    column_kinds,
    comparison_is_total,
    constant_kind,
    declared_kind,
    enclosing_select,
    fold_date_intervals,
)
from dpsql.session import Session
from tests.db_files import writing
from tests.shop_fixture import ZeroNoise

#: column -> (declared type, extreme values as SQL literals)
COLUMNS = {
    "ti": ("TINYINT", ["-128", "127"]),
    "si": ("SMALLINT", ["-32768", "32767"]),
    "i": ("INTEGER", ["-2147483648", "2147483647"]),
    "bi": ("BIGINT", ["-9223372036854775808", "9223372036854775807"]),
    "ut": ("UTINYINT", ["255", "0"]),
    "ui": ("UINTEGER", ["4294967295", "0"]),
    "ub": ("UBIGINT", ["18446744073709551615", "0"]),
    "hi": ("HUGEINT", ["-170141183460469231731687303715884105727",
                       "170141183460469231731687303715884105727"]),
    "d42": ("DECIMAL(4,2)", ["-99.99", "99.99"]),
    "d152": ("DECIMAL(15,2)", ["-9999999999999.99", "9999999999999.99"]),
    "d180": ("DECIMAL(18,0)", ["-999999999999999999", "999999999999999999"]),
    "d380": ("DECIMAL(38,0)", ["-" + "9" * 38, "9" * 38]),
    "d3810": ("DECIMAL(38,10)", ["-" + "9" * 28 + ".9999999999", "9" * 28 + ".9999999999"]),
    "f": ("FLOAT", ["'-inf'", "'nan'"]),
    "dbl": ("DOUBLE", ["'inf'", "-1.7976931348623157e308"]),
    "v": ("VARCHAR", ["'abc'", "'1e999'"]),
    "dt": ("DATE", ["'5881580-07-10'", "'-infinity'"]),
    "ts": ("TIMESTAMP", ["'294247-01-10 04:00:54'", "'infinity'"]),
    "b": ("BOOLEAN", ["true", "false"]),
}
CONSTANTS = [
    "0", "-5", "2147483648", "999999999999999", "0.5", "-0.05", "123456789.123456", "1.5e3",
    "'abc'", "'2024-02-29'", "'x%'", "DATE '2024-02-29'", "DATE '1998-12-01' - INTERVAL '90' DAY",
    "CAST(DATE '1998-12-01' - INTERVAL '90' DAY AS DATE)", "TRUE", "NULL", "CAST('x' AS DATE)",
]
OPERATORS = ["{a} = {b}", "{a} <> {b}", "{a} < {b}", "{a} >= {b}", "{a} IS NOT DISTINCT FROM {b}",
             "{a} BETWEEN {b} AND {b}", "{a} IN ({b}, {b})", "{a} LIKE {b}", "{a} ILIKE {b}"]

METADATA = loads_metadata(
    "tables:\n  x:\n    columns:\n"
    + "".join(f"      {c}: {{type: '{t}'}}\n" for c, (t, _) in COLUMNS.items())
)


@pytest.fixture(scope="module")
def extremes():
    con = duckdb.connect()
    con.execute("CREATE TABLE x (" + ", ".join(f"{c} {t}" for c, (t, _) in COLUMNS.items())
                + ")")
    for row in range(2):
        values = [f"CAST({v[row]} AS {t})" for t, v in COLUMNS.values()]
        con.execute(f"INSERT INTO x VALUES ({', '.join(values)})")
    con.execute("INSERT INTO x VALUES (" + ", ".join(["NULL"] * len(COLUMNS)) + ")")
    yield con
    con.close()


def _where(sql: str) -> tuple[exp.Expression, exp.Select]:
    select = sqlglot.parse_one(f"SELECT COUNT(*) FROM x WHERE {sql}", dialect="duckdb")
    for col in select.find_all(exp.Column):
        col.set("table", exp.to_identifier("x"))
    return select.args["where"].this, select


def _accepted(sql: str) -> bool:
    cond, select = _where(sql)
    kind = column_kinds(select, METADATA, frozenset())
    fold_date_intervals(cond, kind)
    return comparison_is_total(cond, kind)


def _all_comparisons():
    operands = [*COLUMNS, *CONSTANTS]
    for op, a, b in itertools.product(OPERATORS, operands, operands):
        if a in COLUMNS or b in COLUMNS:
            yield op.format(a=a, b=b)


def _failures(con: duckdb.DuckDBPyConnection, conditions: list[tuple[str, str]]
              ) -> list[tuple[str, str]]:
    """(comparison, DuckDB's error) for each condition that raises on some row of ``x``.
    Conditions run as ``COUNT(*) FILTER (WHERE c)`` columns of one query per batch (each is
    still evaluated on every row, and no scan statistics can skip one, unlike a WHERE); a
    batch that raises is rerun one condition at a time to name the culprits."""
    out: list[tuple[str, str]] = []
    for start in range(0, len(conditions), 250):
        batch = conditions[start:start + 250]
        columns = ", ".join(f"COUNT(*) FILTER (WHERE {cond})" for _, cond in batch)
        try:
            con.execute(f"SELECT {columns} FROM x").fetchall()
            continue
        except duckdb.Error:
            pass
        for sql, cond in batch:
            try:
                con.execute(f"SELECT COUNT(*) FILTER (WHERE {cond}) FROM x").fetchall()
            except duckdb.Error as err:
                out.append((sql, str(err).splitlines()[0]))
    return out


def test_every_accepted_comparison_runs_on_extreme_values(extremes):
    accepted = [sql for sql in _all_comparisons() if _accepted(sql)]
    conditions = []
    for sql in accepted:
        cond, select = _where(sql)
        fold_date_intervals(cond, column_kinds(select, METADATA, frozenset()))
        conditions.append((sql, cond.sql(dialect="duckdb")))
    failures = _failures(extremes, conditions)
    assert failures == [], (len(failures), sorted({f[1][:60] for f in failures}), failures[:20])
    # not vacuous: numbers, strings, dates and booleans are all accepted in many forms
    assert len(accepted) > 1500
    for sql in ("i < 0.5", "d152 BETWEEN 0.05 AND 0.07", "dt <= DATE '1998-12-01' - "
                "INTERVAL '90' DAY", "v LIKE 'x%'", "b = TRUE", "ub = bi", "f < dbl",
                "dt < dt", "dt = '2024-02-29'", "d380 < f"):
        assert sql in accepted or _accepted(sql), sql


REJECTED_AND_FAILING = [
    "v = 5",  # VARCHAR cast to INTEGER
    "hi < 0.5",  # HUGEINT to DECIMAL(38,1)
    "d380 < 0.5",  # DECIMAL(38,0) to DECIMAL(38,1)
    "d380 = d3810",
    "dt = ts",  # DATE to TIMESTAMP after 294247 AD
    "i > CAST('x' AS DATE)",
    "dt <= CAST('garbage' AS DATE)",  # a failing constant: fails once a row reaches it
    "v LIKE 'x' ESCAPE 'ab'",
    "i = 'abc'",
]


@pytest.mark.parametrize("sql", REJECTED_AND_FAILING)
def test_comparisons_that_can_fail_are_not_accepted(extremes, sql):
    assert not _accepted(sql)
    with pytest.raises(duckdb.Error):
        extremes.execute(f"SELECT COUNT(*) FROM x WHERE {sql}").fetchall()


@pytest.mark.parametrize("sql", ["i > ?", "v = i + 1", "UPPER(v) = 'A'", "i IN (SELECT 1)"])
def test_parameters_functions_and_subqueries_stay_risky(sql):
    assert not _accepted(sql)


def test_unknown_types_stay_risky():
    metadata = loads_metadata("tables:\n  x:\n    columns:\n      i: {max_freq: 1}\n")
    cond, select = _where("i = 5")
    assert not comparison_is_total(cond, column_kinds(select, metadata, frozenset()))
    cond, select = _where("i = 5")
    assert not comparison_is_total(cond, column_kinds(select, METADATA, frozenset({"x"})))
    assert not comparison_is_total(cond, column_kinds(select, None, frozenset()))


@pytest.mark.parametrize(("text", "valid"), [
    ("DATE '2024-02-29'", True), ("DATE '2023-02-29'", False), ("DATE '1998-1-1'", False),
    ("'abc'", True), ("1e3", False), ("1234567890123456", False), ("-0.5", True),
])
def test_constants_are_validated(text, valid):
    node = sqlglot.parse_one(text, dialect="duckdb")
    assert (constant_kind(node) is not None) == valid


# --------------------------------------------------------------------------- date folding


def test_folding_date_intervals_keeps_every_answer(extremes):
    con = duckdb.connect()
    con.execute("CREATE TABLE x (dt DATE)")
    days = [f"DATE '2019-12-01' + INTERVAL '{n}' DAY" for n in range(0, 800, 3)]
    con.execute("INSERT INTO x VALUES " + ", ".join(f"({d})" for d in days) + ", (NULL)")
    shifts = ["DATE '2020-01-31' + INTERVAL '1' MONTH", "DATE '2020-03-31' - INTERVAL '1' MONTH",
              "DATE '2020-02-29' + INTERVAL '1' YEAR", "DATE '2020-06-15' - INTERVAL '90' DAY",
              "DATE '2020-06-15' + INTERVAL '2' WEEK", "DATE '2020-05-31' + INTERVAL '1' QUARTER"]
    for shift, op in itertools.product(shifts, ["=", "<>", "<", "<=", ">", ">="]):
        sql = f"SELECT COUNT(*) FROM x WHERE x.dt {op} {shift}"
        select = sqlglot.parse_one(sql, dialect="duckdb")
        fold_date_intervals(select.args["where"].this,
                            column_kinds(select, loads_metadata(
                                "tables:\n  x:\n    columns:\n      dt: {type: DATE}\n"),
                                frozenset()))
        folded = select.sql(dialect="duckdb")
        assert "AS DATE)" in folded and folded.count("CAST") == 2, folded
        assert con.execute(folded).fetchall() == con.execute(sql).fetchall(), sql
    con.close()


def test_hour_intervals_and_non_date_columns_are_not_folded():
    metadata = loads_metadata("tables:\n  x:\n    columns:\n      dt: {type: DATE}\n"
                              "      ts: {type: TIMESTAMP}\n")
    for sql in ("dt <= DATE '2020-01-01' - INTERVAL '3' HOUR",
                "ts <= DATE '2020-01-01' - INTERVAL '3' DAY"):
        cond, select = _where(sql)
        before = cond.sql()
        fold_date_intervals(cond, column_kinds(select, metadata, frozenset()))
        assert cond.sql() == before
        assert not comparison_is_total(cond, column_kinds(select, metadata, frozenset()))


# --------------------------------------------------------------------------- native clamping


@pytest.mark.parametrize(("type_text", "bounds", "native"), [
    ("DECIMAL(15,2)", (0.0, 105000.0), True),
    ("DECIMAL(15,2)", (-0.25, 0.5), True),
    ("DECIMAL(15,2)", (0.0, 0.1), False),  # the double 0.1 is not exactly 0.10
    ("DECIMAL(15,2)", (0.0, 1e14), False),  # more integer digits than the column
    ("DECIMAL(38,2)", (0.0, 10.0), False),  # SUM could overflow DECIMAL(38, 2)
    ("INTEGER", (0.0, 100.0), True),
    ("INTEGER", (0.0, 0.5), False),
    ("TINYINT", (0.0, 1000.0), False),
    ("DOUBLE", (0.0, 1.0), False),
    ("HUGEINT", (0.0, 1.0), False),
    ("VARCHAR", (0.0, 1.0), False),
])
def test_native_clamp_only_when_exact_and_safe(type_text, bounds, native):
    assert (_native_bounds(bounds, declared_kind(type_text)) is not None) == native


CLAMP_METADATA = loads_metadata("""
tables:
  s:
    columns:
      id: {max_freq: 1, type: INTEGER}
      price: {bounds: [0, 100], type: 'DECIMAL(15,2)'}
      neg: {bounds: [-2.5, 2.5], type: 'DECIMAL(6,2)'}
      n: {bounds: [-10, 10], type: BIGINT}
      disc: {bounds: [0, 0.1], type: 'DECIMAL(15,2)'}
      g: {releasable: true, type: VARCHAR, domain: {values: [a, b]}}
""")



@pytest.fixture(scope="module")
def clamp_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("clamp") / "s.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE s (id INTEGER, price DECIMAL(15,2), neg DECIMAL(6,2), n BIGINT, "
                    "disc DECIMAL(15,2), g VARCHAR)")
        rng = np.random.default_rng(7)
        rows = []
        for i in range(400):
            price = Decimal(int(rng.integers(-5000, 15000))) / 100  # some outside [0, 100]
            neg = Decimal(int(rng.integers(-400, 400))) / 100
            n = int(rng.integers(-40, 40))
            disc = Decimal(int(rng.integers(0, 20))) / 100
            rows.append(f"({i}, {price}, {neg}, {n}, {disc}, '{'ab'[i % 2]}')")
        rows.append("(1000, NULL, NULL, NULL, NULL, 'a')")
        rows.append("(1001, 9999999999999.99, 9999.99, 9223372036854775807, 0.5, 'b')")
        con.execute("INSERT INTO s VALUES " + ", ".join(rows))
    return path


def _double_clamped(sql: str) -> set[str]:
    """The columns the exact SQL clamps in DOUBLE (see rewrite._clamp)."""
    return set(re.findall(r"TRY_CAST\((s\.\w+) AS DOUBLE\)", sql))


def test_native_clamp_gives_the_double_clamp_answers(clamp_db):
    backend = DuckDBBackend(clamp_db, CLAMP_METADATA)
    engine = Session(CLAMP_METADATA, backend, sampler=ZeroNoise())
    sql = ("SELECT s.g, SUM(s.price) AS p, SUM(s.neg) AS q, SUM(s.n) AS r, AVG(s.n) AS m, "
           "SUM(s.disc) AS d FROM s GROUP BY s.g")
    plan = plan_execution(analyze(sql, CLAMP_METADATA), CLAMP_METADATA)
    assert _double_clamped(plan.exact_sql) == {"s.disc"}  # only disc: its bound 0.1 is inexact
    conservative = plan_execution(analyze(sql, CLAMP_METADATA))
    assert _double_clamped(conservative.exact_sql) == {"s.price", "s.neg", "s.n", "s.disc"}
    native = read_exact(backend, plan, [])
    double = read_exact(backend, conservative, [])
    assert native.keys[0].tolist() == double.keys[0].tolist() == ["a", "b"]
    for got, want in zip(native.exact, double.exact, strict=True):
        assert got.tolist() == pytest.approx(want.tolist(), rel=1e-12, abs=1e-9)
    # and the released values (zero noise) are the clamped sums
    con = duckdb.connect(str(clamp_db), read_only=True)
    try:
        want = con.execute("SELECT g, SUM(LEAST(GREATEST(price, 0), 100)) FROM s "
                           "GROUP BY g ORDER BY g").fetchall()
    finally:
        con.close()
    rows = engine.run("SELECT s.g, SUM(s.price) AS p FROM s GROUP BY s.g", epsilon=1e6).rows
    # (a DECIMAL column's sum is released as a Decimal at its scale: dpsql.execute.typed)
    assert [(g, round(float(p), 2)) for g, p in rows] == [(g, float(p)) for g, p in want]
    backend.close()


# --------------------------------------------------------------------------- through the rewrite

TYPED = loads_metadata("""
tables:
  t:
    columns:
      id: {max_freq: 1, type: INTEGER}
      code: {max_freq: 1, type: VARCHAR}
      day: {type: DATE}
      price: {bounds: [0, 100], type: 'DECIMAL(15,2)'}
""")


@pytest.mark.parametrize(("where", "wrapped"), [
    ("t.day <= DATE '1998-12-01' - INTERVAL '90' DAY AND t.code <> 'x' AND t.id IN (1, 2)",
     False),
    ("t.price BETWEEN 0.05 AND 0.07 AND t.code NOT LIKE 'a%' AND NOT t.id = 3", False),
    ("t.code = 5", True),
    ("COALESCE(t.code = 5, FALSE)", True),  # a comparison inside a function
    ("t.id > ?", True),
    ("t.id > 1 // 0", True),  # a failing constant fails once a row reaches it
])
def test_exact_query_wraps_only_what_can_fail(where, wrapped):
    sql = f"SELECT COUNT(*) AS n FROM t WHERE {where}"
    exact = plan_execution(analyze(sql, TYPED), TYPED).exact_sql
    assert ("TRY(" in exact) == wrapped, exact
    # without types everything with a column is wrapped, as before
    assert "TRY(" in plan_execution(analyze(sql, TYPED)).exact_sql


def test_comparison_inside_coalesce_is_total_on_duckdb(tmp_path):
    path = tmp_path / "t.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t (id INTEGER, code VARCHAR, day DATE, price DECIMAL(15,2))")
        con.execute("INSERT INTO t VALUES (1, '5', DATE '2000-01-01', 1), (2, 'SECRET', NULL, 2)")
        with pytest.raises(duckdb.Error):
            con.execute("SELECT COUNT(*) FROM t WHERE COALESCE(t.code = 5, FALSE)").fetchall()
    backend = DuckDBBackend(path, TYPED)
    try:
        engine = Session(TYPED, backend, sampler=ZeroNoise())
        rows = engine.run("SELECT COUNT(*) AS n FROM t WHERE COALESCE(t.code = 5, FALSE)",
                          epsilon=1.0).rows
    finally:
        backend.close()
    assert rows == [(1,)]  # the '5' row counts; on 'SECRET' TRY makes the COALESCE NULL


SCOPES = loads_metadata(
    "tables:\n  x:\n    columns:\n      bi: {type: BIGINT}\n      v: {type: VARCHAR}\n"
    "  y:\n    columns:\n      bi: {type: BIGINT}\n      v: {type: VARCHAR}\n")


def _innermost(sql: str) -> tuple[exp.Expression, exp.Select]:
    """The condition of the innermost SELECT's WHERE, and that SELECT (already qualified)."""
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    inner = [s for s in tree.find_all(exp.Select) if s.args.get("where") is not None][-1]
    return inner.args["where"].this, inner


@pytest.mark.parametrize(("sql", "total"), [
    # a correlated comparison of two declared BIGINTs cannot fail: no TRY (TPC-H Q21's
    # `l2.l_suppkey <> l1.l_suppkey`; TRY there kept DuckDB from decorrelating it)
    ("SELECT COUNT(*) FROM x AS a WHERE EXISTS (SELECT 1 FROM y AS b WHERE b.bi <> a.bi)", True),
    ("SELECT COUNT(*) FROM x AS a WHERE a.bi IN (SELECT b.bi FROM y AS b WHERE b.bi < a.bi)",
     True),
    # two levels up, through a set operation
    ("SELECT COUNT(*) FROM x AS a WHERE EXISTS (SELECT 1 FROM y AS c UNION ALL "
     "SELECT 1 FROM y AS b WHERE b.bi = a.bi)", True),
    # VARCHAR against BIGINT can fail (a cast): still risky when correlated
    ("SELECT COUNT(*) FROM x AS a WHERE EXISTS (SELECT 1 FROM y AS b WHERE b.bi = a.v)", False),
    # an inner alias hides the outer one: here `a` is a derived table of unknown types
    ("SELECT COUNT(*) FROM x AS a WHERE EXISTS (SELECT 1 FROM (SELECT v AS bi FROM y) AS a "
     "WHERE a.bi = 1)", False),
])
def test_correlated_columns_take_the_enclosing_scopes_types(sql, total):
    cond, select = _innermost(sql)
    assert comparison_is_total(cond, column_kinds(select, SCOPES, frozenset())) is total


@pytest.mark.parametrize("sql", [
    # a CTE body, a derived table and a LATERAL source do not see the outer query's aliases
    "WITH c AS (SELECT 1 FROM y AS b WHERE b.bi = a.bi) SELECT COUNT(*) FROM x AS a, c",
    "SELECT COUNT(*) FROM x AS a, (SELECT 1 FROM y AS b WHERE b.bi = a.bi) AS d",
    "SELECT COUNT(*) FROM x AS a, LATERAL (SELECT 1 FROM y AS b WHERE b.bi = a.bi) AS d",
])
def test_outer_aliases_are_unknown_outside_expression_subqueries(sql):
    cond, select = _innermost(sql)
    assert enclosing_select(select) is None
    assert not comparison_is_total(cond, column_kinds(select, SCOPES, frozenset()))


def test_the_batched_run_names_each_failing_comparison(extremes):
    # a failing comparison among passing ones is found and named (the batch is rerun alone)
    conditions = [("i < 0.5", "x.i < 0.5"), ("v = 5", "x.v = 5"), ("b = TRUE", "x.b = TRUE")]
    assert [sql for sql, _ in _failures(extremes, conditions)] == ["v = 5"]
