"""Computed group keys and their derived bins (dpsql/analysis/derived_keys.py), and the
OR-factoring of conjuncts (dpsql/analysis/checks.py factor_or; TPC-H Q19).

The bins are checked exactly: the domain relation the rewrite builds for each derived key
(dpsql.rewrite.domains.derived_domain_relation) is run on an empty DuckDB (it reads no private
table) and its values compared with the expected list.
"""

from __future__ import annotations

import datetime

import duckdb
import pytest
from sqlglot import exp, parse_one

from dpsql.analysis.checks import conjuncts, factor_or
from dpsql.analysis.derived_keys import MAX_DAYS
from dpsql.analysis.elastic import analyze
from dpsql.analysis.parse import DIALECT
from dpsql.errors import ProtectedBinError, UnsupportedConstructError
from dpsql.metadata import loads_metadata
from dpsql.rewrite.domains import derived_domain_relation

MD = loads_metadata("""
tables:
  e:
    columns:
      id: {max_freq: 1, type: INTEGER}
      d: {max_freq: 3, bounds: ['2020-01-01', '2021-12-31'], type: DATE}
      ts: {max_freq: 2, bounds: ['2020-01-01', '2020-01-03'], type: TIMESTAMP}
      x: {max_freq: 4, releasable: true, domain: {values: [1, 2, 3]}, type: INTEGER}
      s: {max_freq: 4, releasable: true, domain: {values: [air, Air, ship]}, type: VARCHAR}
      z: {max_freq: 4, domain: {values: [1, 2]}, type: INTEGER}
      w: {max_freq: 4, type: INTEGER}
      v: {max_freq: 4, bounds: [0, 10], type: INTEGER}
      pid: {max_freq: 4, releasable: true, domain: {table: p, column: pid}, type: INTEGER}
      nd: {max_freq: 4, bounds: ['2020-01-01', '2020-01-02']}
  f:
    columns:
      id: {max_freq: 2, type: INTEGER}
  p:
    public: true
    columns:
      pid: {max_freq: 1, type: INTEGER}
      g: {max_freq: 2, type: VARCHAR}
""")

_CON = duckdb.connect()
_CON.execute("CREATE TABLE p AS SELECT * FROM (VALUES (1, 'x'), (2, 'y'), (3, 'x')) t(pid, g)")


def bins(sql: str, key: int = 0) -> list:
    """The bins (in order) the engine derives for group key ``key`` of ``sql``."""
    analysis = analyze(sql, MD)
    derived = analysis.group_keys[key].derived_domain
    assert derived is not None
    relation = derived_domain_relation(derived).sql(dialect=DIALECT)
    rows = _CON.execute(f"SELECT __v, __o FROM ({relation}) ORDER BY __o").fetchall()
    assert [o for _, o in rows] == list(range(len(rows)))
    return [v for v, _ in rows]


def _days(first: str, last: str) -> list[datetime.date]:
    day, end = datetime.date.fromisoformat(first), datetime.date.fromisoformat(last)
    out = []
    while day <= end:
        out.append(day)
        day += datetime.timedelta(days=1)
    return out


# --------------------------------------------------------------------------- date parts


@pytest.mark.parametrize(("key", "expected"), [
    ("EXTRACT(year FROM d)", [2020, 2021]),
    ("YEAR(d)", [2020, 2021]),
    ("EXTRACT(month FROM d)", list(range(1, 13))),
    ("MONTH(d)", list(range(1, 13))),
    ("QUARTER(d)", [1, 2, 3, 4]),
    ("EXTRACT(dow FROM d)", list(range(7))),
    ("DAY(d)", list(range(1, 32))),
    ("EXTRACT(doy FROM d)", list(range(1, 367))),  # 2020 is a leap year
    ("EXTRACT(year FROM d) * 100 + EXTRACT(month FROM d)",
     [y * 100 + m for y in (2020, 2021) for m in range(1, 13)]),
    ("date_trunc('year', d)", [datetime.datetime(2020, 1, 1), datetime.datetime(2021, 1, 1)]),
    ("CAST(d AS DATE)", _days("2020-01-01", "2021-12-31")),
    ("d", _days("2020-01-01", "2021-12-31")),  # a plain date column with day bounds
    ("EXTRACT(year FROM ts)", [2020]),
    ("CAST(ts AS DATE)", _days("2020-01-01", "2020-01-03")),
    ("date_trunc('day', ts)", [datetime.datetime(2020, 1, d) for d in (1, 2, 3)]),
    # QA round 7's functions: names and ISO parts of a day, of a DATE or a TIMESTAMP
    ("isodow(d)", list(range(1, 8))),
    ("week(d)", list(range(1, 54))),
    ("dayname(ts)", ["Friday", "Thursday", "Wednesday"]),
    ("monthname(d)", sorted(["January", "February", "March", "April", "May", "June", "July",
                             "August", "September", "October", "November", "December"])),
    ("last_day(ts)", [datetime.date(2020, 1, 31)]),
])
def test_date_parts_range_over_the_days_in_the_bounds(key, expected):
    assert bins(f"SELECT {key} AS k, COUNT(*) AS n FROM e GROUP BY k") == expected


def test_month_truncation_gives_every_month_of_the_bounds():
    got = bins("SELECT date_trunc('month', d) AS m, COUNT(*) FROM e GROUP BY 1")
    assert got == [datetime.datetime(y, m, 1) for y in (2020, 2021) for m in range(1, 13)]


# --------------------------------------------------------------------------- CASE buckets


def test_case_buckets_are_their_constants_and_null_without_else():
    sql = ("SELECT CASE WHEN w < 18 THEN 'minor' WHEN w < 65 THEN 'adult' END AS b, "
           "COUNT(*) FROM e GROUP BY b")
    assert bins(sql) == ["adult", "minor", None]


def test_case_with_else_and_repeated_constants():
    sql = ("SELECT CASE WHEN w < 0 THEN 1 WHEN w > 9 THEN 1 ELSE 2 END AS b, "
           "COUNT(*) FROM e GROUP BY b")
    assert bins(sql) == [1, 2]


def test_if_and_a_function_of_a_case_bucket():
    assert bins("SELECT IF(v > 5, 'hi', 'lo') AS b, COUNT(*) FROM e GROUP BY b") == ["hi", "lo"]
    sql = ("SELECT UPPER(CASE WHEN w < 3 THEN 'a' ELSE 'b' END) AS b, COUNT(*) FROM e "
           "GROUP BY b")
    assert bins(sql) == ["A", "B"]


def test_case_conditions_may_read_any_column():
    # the conditions decide which constant a row gets; the bins do not depend on them
    sql = ("SELECT CASE WHEN w < v AND id > 3 THEN 'x' ELSE 'y' END AS b, COUNT(*) FROM e "
           "GROUP BY b")
    assert bins(sql) == ["x", "y"]


# --------------------------------------------------------------------------- functions of a key


@pytest.mark.parametrize(("key", "expected"), [
    ("x % 2", [0, 1]),
    ("x * 10", [10, 20, 30]),
    ("UPPER(s)", ["AIR", "SHIP"]),  # 'air' and 'Air' are one bin
    ("SUBSTRING(s, 1, 1)", ["A", "a", "s"]),
    ("x > 1", [False, True]),
    ("pid % 2", [0, 1]),  # a public table's column as the domain
    ("x // 0", [None]),  # fails on every domain value: TRY makes it NULL, as on every row
])
def test_functions_of_a_declared_domain_are_its_image(key, expected):
    assert bins(f"SELECT {key} AS k, COUNT(*) FROM e GROUP BY k") == expected


def test_a_public_tables_column_function():
    sql = "SELECT UPPER(p.g) AS k, COUNT(*) FROM e JOIN p ON e.pid = p.pid GROUP BY k"
    assert bins(sql) == ["X", "Y"]


# --------------------------------------------------------------------------- through subqueries


@pytest.mark.parametrize("sql", [
    "SELECT y, COUNT(*) FROM (SELECT EXTRACT(year FROM d) AS y FROM e) t GROUP BY y",
    "WITH t AS (SELECT YEAR(d) AS y, id FROM e WHERE x > 1) "
    "SELECT t.y, COUNT(*) FROM t JOIN f ON t.id = f.id GROUP BY t.y",
    "SELECT u.y, COUNT(*) FROM (SELECT t.y FROM (SELECT YEAR(d) AS y FROM e) t) u GROUP BY u.y",
    "SELECT t.y, COUNT(*) FROM (SELECT YEAR(d) AS y, COUNT(*) AS n FROM e GROUP BY 1) t "
    "GROUP BY t.y",
])
def test_keys_computed_in_a_subquery_or_cte(sql):
    assert bins(sql) == [2020, 2021]


def test_a_function_outside_of_a_key_computed_inside_composes():
    sql = "SELECT t.y % 2 AS odd, COUNT(*) FROM (SELECT YEAR(d) AS y FROM e) t GROUP BY odd"
    assert bins(sql) == [0, 1]
    sql = ("SELECT t.b || '!' AS k, COUNT(*) FROM (SELECT CASE WHEN w > 1 THEN 'p' END AS b "
           "FROM e) t GROUP BY k")
    assert bins(sql) == ["p!", None]


def test_two_derived_keys_and_a_plain_one():
    sql = "SELECT YEAR(d), x % 2, s, COUNT(*) FROM e GROUP BY 1, 2, 3"
    analysis = analyze(sql, MD)
    assert [k.derived_domain is not None for k in analysis.group_keys] == [True, True, False]
    assert bins(sql, 0) == [2020, 2021] and bins(sql, 1) == [0, 1]


def test_histogram_sensitivity_is_unchanged():
    plain = analyze("SELECT x, COUNT(*) FROM e GROUP BY x", MD)
    derived = analyze("SELECT YEAR(d), COUNT(*) FROM e GROUP BY 1", MD)
    assert derived.measurements[0].sensitivity.at(0) == plain.measurements[0].sensitivity.at(0)
    assert derived.measurements[0].sensitivity.at(0) == 2
    summed = analyze("SELECT x % 2, SUM(v) FROM e GROUP BY 1", MD)
    assert summed.measurements[0].sensitivity.at(0) == 2 * 10


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("sql", "words"), [
    ("SELECT w % 2, COUNT(*) FROM e GROUP BY 1", ["e.w", "no declared domain"]),
    ("SELECT z % 2, COUNT(*) FROM e GROUP BY 1", ["not releasable"]),
    ("SELECT x + w, COUNT(*) FROM e GROUP BY 1", ["2 inputs", "one column"]),
    ("SELECT YEAR(d) + x, COUNT(*) FROM e GROUP BY 1", ["2 inputs"]),
    ("SELECT x + ?, COUNT(*) FROM e GROUP BY 1", ["parameter"]),
    ("SELECT EXTRACT(hour FROM ts), COUNT(*) FROM e GROUP BY 1", ["time of day"]),
    ("SELECT ts, COUNT(*) FROM e GROUP BY 1", ["time of day"]),
    ("SELECT hour(ts), COUNT(*) FROM e GROUP BY 1", ["time of day"]),
    ("SELECT YEAR(nd), COUNT(*) FROM e GROUP BY 1", ["type is unknown", "DATE"]),
    ("SELECT CASE WHEN w > 1 THEN w END, COUNT(*) FROM e GROUP BY 1", ["e.w"]),
    ("SELECT COUNT(*) FROM e GROUP BY COUNT(*)", ["cannot contain an aggregate"]),
    ("SELECT COUNT(*) FROM e GROUP BY SUM(v) + 1", ["cannot contain an aggregate"]),
    ("SELECT t.k, COUNT(*) FROM (SELECT w + 1 AS k FROM e) t GROUP BY t.k",
     ["no declared or derivable domain"]),
    # (a per-group COUNT is partition-selected: tests/analysis/test_keyed_groups.py)
    ("SELECT t.n, COUNT(*) FROM (SELECT x, SUM(v) AS n FROM e GROUP BY x) t GROUP BY t.n",
     ["no declared or derivable domain"]),
])
def test_keys_without_derivable_bins_are_refused(sql, words):
    with pytest.raises(ProtectedBinError) as err:
        analyze(sql, MD)
    for word in words:
        assert word in str(err.value), str(err.value)


def test_nondeterministic_functions_never_reach_the_key():
    with pytest.raises(UnsupportedConstructError, match="nondeterministic"):
        analyze("SELECT x + random(), COUNT(*) FROM e GROUP BY 1", MD)


def test_too_many_days_are_refused_from_the_metadata_alone():
    last = datetime.date(2000, 1, 1) + datetime.timedelta(days=MAX_DAYS)
    md = loads_metadata(f"""
tables:
  e:
    columns:
      d: {{bounds: ['2000-01-01', '{last}'], type: DATE}}
""")
    with pytest.raises(ProtectedBinError, match="narrower"):
        analyze("SELECT YEAR(d), COUNT(*) FROM e GROUP BY 1", md)


# --------------------------------------------------------------------------- OR-factoring


def _where(sql: str) -> exp.Expression:
    return parse_one(sql, dialect=DIALECT).args["where"].this


def test_factor_or_takes_out_what_every_branch_shares():
    node = _where("SELECT 1 FROM t WHERE (a = b AND x = 1 AND m IN (1, 2)) OR "
                  "(m IN (1, 2) AND a = b AND x = 2) OR (a = b AND m IN (1, 2) AND y < 3)")
    assert isinstance(node, exp.Or)
    factored = factor_or(node)
    assert factored.sql(dialect=DIALECT) == (
        "((a = b) AND (m IN (1, 2)) AND ((x = 1) OR (x = 2) OR (y < 3)))")


def test_factor_or_drops_an_or_with_an_empty_branch_and_keeps_unshared_ors():
    assert factor_or(_where("SELECT 1 FROM t WHERE a = b OR (a = b AND x = 1)")).sql() == \
        "(a = b)"
    unshared = _where("SELECT 1 FROM t WHERE (a = b AND x = 1) OR (a = c AND x = 1)")
    assert factor_or(unshared).sql() == "((x = 1) AND ((a = b) OR (a = c)))"
    nothing = _where("SELECT 1 FROM t WHERE (a = b AND x = 1) OR (a = c AND y = 1)")
    assert factor_or(nothing) is nothing


def test_conjuncts_factors_in_the_tree():
    query = parse_one("SELECT 1 FROM t WHERE z > 0 AND ((a = b AND x = 1) OR (a = b AND x = 2))",
                      dialect=DIALECT)
    parts = [c.sql() for c in conjuncts(query.args["where"].this)]
    assert parts == ["z > 0", "a = b", "(x = 1) OR (x = 2)"]
    assert query.sql() == "SELECT 1 FROM t WHERE z > 0 AND (((a = b) AND ((x = 1) OR (x = 2))))"


@pytest.mark.parametrize(("values", "expected"), [
    # the two forms agree on every row in three-valued logic: (A AND X) OR (A AND Y) and
    # A AND (X OR Y), for A, X, Y in {TRUE, FALSE, NULL}
    (v, None) for v in [(a, x, y) for a in ("TRUE", "FALSE", "NULL")
                        for x in ("TRUE", "FALSE", "NULL") for y in ("TRUE", "FALSE", "NULL")]
])
def test_factoring_preserves_three_valued_logic(values, expected):
    a, x, y = values
    original = _where("SELECT 1 FROM t WHERE (a AND x) OR (a AND y)")
    factored = factor_or(original).sql(dialect=DIALECT)
    both = _CON.execute(
        f"SELECT ({original.sql(dialect=DIALECT)}) IS NOT DISTINCT FROM ({factored}) "
        f"FROM (SELECT {a}::BOOLEAN AS a, {x}::BOOLEAN AS x, {y}::BOOLEAN AS y)").fetchone()
    assert both == (True,)


Q19_SHAPE = ("SELECT COUNT(*) FROM e, f WHERE (e.id = f.id AND e.x = 1 AND e.v < 3) "
             "OR (e.id = f.id AND e.x = 2) OR (f.id = e.id AND e.v > 5)")


def test_q19_shape_is_a_join():
    # the third branch writes the key the other way round: the same equality
    for sql in (Q19_SHAPE, Q19_SHAPE.replace("f.id = e.id", "e.id = f.id")):
        analysis = analyze(sql, MD)
        # join e (mf(id) = 1) with f (mf(id) = 2): ES(0) = max(1 * 1, 2 * 1)
        assert analysis.measurements[0].sensitivity.at(0) == 2
    other_key = Q19_SHAPE.replace("f.id = e.id", "f.id = e.x")
    with pytest.raises(UnsupportedConstructError, match="cross-joined"):
        analyze(other_key, MD)


@pytest.mark.parametrize("key", [
    "EXTRACT(year FROM d)", "d", "x % 2", "UPPER(s)", "pid + 1", "CASE WHEN w > 1 THEN 'a' END",
    "UPPER(CASE WHEN w > 1 THEN 'a' END)", "w % 2", "x + w", "x + ?", "YEAR(nd)", "1",
    "CASE WHEN w > 1 THEN w END",
])
def test_may_derive_is_necessary_for_derive_key(key):
    # the analyzer derives a subquery column's bins only when may_derive says it might
    from dpsql.analysis.derived_keys import derive_key, may_derive
    from dpsql.analysis.parse import parse_query
    from dpsql.analysis.relations import Analyzer

    query = parse_query(f"SELECT {key} AS k FROM e", MD)
    rel = Analyzer(MD).from_where(query, correlated_ok=False)[0]
    node = query.expressions[0].this
    try:
        derive_key(node, rel.columns, MD)
    except ProtectedBinError:
        return
    assert may_derive(node, rel.columns, MD)


def test_explain_names_where_derived_bins_come_from():
    from dpsql.analysis.explain import explain_text

    text = explain_text("SELECT YEAR(d) AS y, UPPER(s) AS u, COUNT(*) FROM e GROUP BY y, u",
                        MD, epsilon=1.0, delta=1e-6)
    assert "derived: YEAR(e.d) over the days 2020-01-01 .. 2021-12-31 of e.d" in text
    assert "derived: UPPER(e.s) over e.s's 3 listed values" in text


def test_a_public_domain_of_a_narrower_type_is_read_in_the_key_columns_type():
    # p.pid is INTEGER, the key column BIGINT: pid * 1e9 overflows INTEGER at 3, not BIGINT,
    # and the key is computed on the BIGINT column, so the bins must be too
    md = loads_metadata("""
tables:
  e:
    columns:
      pid: {releasable: true, domain: {table: p, column: pid}, type: BIGINT}
  p:
    public: true
    columns:
      pid: {max_freq: 1, type: INTEGER}
""")
    derived = analyze("SELECT pid * 1000000000 AS k, COUNT(*) FROM e GROUP BY k",
                      md).group_keys[0].derived_domain
    assert derived is not None
    relation = derived_domain_relation(derived).sql(dialect=DIALECT)
    got = [v for (v,) in _CON.execute(f"SELECT __v FROM ({relation}) ORDER BY __o").fetchall()]
    assert got == [1_000_000_000, 2_000_000_000, 3_000_000_000]


@pytest.mark.parametrize(("where", "expected"), [
    ("SUBSTRING(t.s, 1, 2) IN ('13', '31', '13')", ("13", "31")),  # deduplicated
    ("t.n > 0 AND (SUBSTRING(t.s, 1, 2) IN ('7'))", ("7",)),
    ("SUBSTRING(t.s, 1, 2) IN (1, 2)", (1, 2)),
    ("SUBSTRING(t.s, 1, 2) IN ('1') OR t.n > 0", None),  # not every row satisfies it
    ("NOT SUBSTRING(t.s, 1, 2) IN ('1')", None),
    ("SUBSTRING(t.s, 1, 3) IN ('1')", None),  # another expression
    ("SUBSTRING(t.s, 1, 2) IN ('1', NULL)", None),  # not constants only
    ("SUBSTRING(t.s, 1, 2) IN (SELECT u.s FROM u)", None),
])
def test_a_key_listed_by_its_own_where_takes_the_list_as_bins(where, expected):
    """listed_domain reads the SQL alone: a top-level conjunct ``key IN (constants)``."""
    from sqlglot import parse_one

    from dpsql.analysis.derived_keys import listed_domain

    key = parse_one("SUBSTRING(t.s, 1, 2)", dialect="duckdb")
    cond = parse_one(f"SELECT 1 FROM t WHERE {where}", dialect="duckdb").args.get("where")
    found = listed_domain(key, cond)
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.values is not None
        assert found.values.values == expected
