"""dpsql/sample_aggregate/analysis.py: which queries take the sample-and-aggregate path, and
every refusal names the construct and the fix (decided by the SQL and metadata only)."""

from __future__ import annotations

import pytest
from sqlglot import exp

from dpsql.errors import ProgrammingError, UnsupportedConstructError
from dpsql.metadata.model import SampleAggregate
from dpsql.sample_aggregate.analysis import analyze_sample_aggregate, mentions_wrapper
from tests.sample_aggregate.world import metadata

MD = metadata()


def test_accepted_query_names_table_alias_setting_and_outputs():
    q = analyze_sample_aggregate(
        "SELECT SAMPLE_AGGREGATE(MEDIAN(o.x), 0, 100) AS med, "
        "sample_aggregate(SUM(o.x * p.w) / COUNT(*), -2.5, 1e3) "
        "FROM t AS o JOIN p ON o.g = p.g WHERE o.n > 1", MD)
    assert (q.table, q.alias, q.setting) == ("t", "o", SampleAggregate(4, "cid"))
    assert q.blocks == 4
    assert [(o.name, o.lower, o.upper) for o in q.outputs] == [
        ("med", 0.0, 100.0), ("sample_aggregate(sum(o.x * p.w) / count(*), -2.5, 1e3)",
                              -2.5, 1000.0)]
    assert isinstance(q.outputs[0].expression, exp.Median)


@pytest.mark.parametrize("sql", [
    "SELECT SAMPLE_AGGREGATE(COUNT(DISTINCT cid), 0, 10) FROM t",
    "SELECT SAMPLE_AGGREGATE(MAX(x) - MIN(x), 0, 100) FROM t LEFT JOIN p ON t.g = p.g",
    "SELECT SAMPLE_AGGREGATE(QUANTILE_CONT(x, 0.9), 0, 100) FROM t, p",
    "SELECT SAMPLE_AGGREGATE(STDDEV(x) + VARIANCE(n) + CORR(x, n), 0, 100) FROM t",
    "SELECT SAMPLE_AGGREGATE(AVG(v), 0, 20) FROM u WHERE v > ?",
    "SELECT SAMPLE_AGGREGATE(MAX(n), 0, 5) FROM t WHERE g IN (SELECT g FROM p WHERE w > 1)",
    "SELECT SAMPLE_AGGREGATE(MIN(n), 0, 5) FROM t WHERE x > (SELECT AVG(w) FROM p)",
])
def test_accepted(sql):
    assert analyze_sample_aggregate(sql, MD).outputs


REFUSED = {
    "not enabled": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM q",
                    "has not enabled sample-and-aggregate on table 'q'"),
    "two private tables": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t JOIN u "
                           "ON t.id = u.id", "exactly one private table"),
    "private table twice": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t WHERE id IN "
                            "(SELECT id FROM t)", "exactly one private table"),
    "private in a subquery": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM p WHERE g IN "
                              "(SELECT g FROM t)", "first table of its FROM"),
    "public first": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM p JOIN t ON p.g = t.g",
                     "first table of its FROM"),
    "right join": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t RIGHT JOIN p ON "
                   "t.g = p.g", "RIGHT, FULL"),
    "full join": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t FULL JOIN p ON t.g = p.g",
                  "RIGHT, FULL"),
    "semi join": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t SEMI JOIN p ON t.g = p.g",
                  "SEMI"),
    "positional join": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t POSITIONAL JOIN p",
                        "inner or LEFT joins"),
    "derived table": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t JOIN (SELECT g FROM p) "
                      "AS s ON t.g = s.g", "not subqueries"),
    "group by": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t GROUP BY g", "GROUP BY"),
    "having": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t HAVING COUNT(*) > 1",
               "HAVING"),
    "order": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) AS c FROM t ORDER BY c", "ORDER BY"),
    "limit": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t LIMIT 1", "LIMIT"),
    "distinct": ("SELECT DISTINCT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t", "DISTINCT"),
    "cte": ("WITH c AS (SELECT g FROM p) SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t",
            "WITH"),
    "union": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t UNION ALL "
              "SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t", "set operations"),
    "mixed outputs": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9), COUNT(*) FROM t",
                      "every output column must be"),
    "inside arithmetic": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) * 2 FROM t",
                          "every output column must be"),
    "nested wrapper": ("SELECT SAMPLE_AGGREGATE(SAMPLE_AGGREGATE(COUNT(*), 0, 9), 0, 9) "
                       "FROM t", "only as a whole output column"),
    "in where": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t WHERE "
                 "SAMPLE_AGGREGATE(1, 0, 1) > 0", "only as a whole output column"),
    "two arguments": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 9) FROM t", "three arguments"),
    "bound not literal": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 1 + 1) FROM t",
                          "numeric literals"),
    "bound a parameter": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, ?) FROM t", "numeric literals"),
    "bound a string": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, '9') FROM t", "numeric literals"),
    "empty bounds": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 5, 5) FROM t", "must be below"),
    "reversed bounds": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 9, -1) FROM t", "must be below"),
    "no aggregate": ("SELECT SAMPLE_AGGREGATE(1 + 1, 0, 9) FROM t", "contain an aggregate"),
    "bare column": ("SELECT SAMPLE_AGGREGATE(x + COUNT(*), 0, 9) FROM t",
                    "outside any aggregate"),
    "nested aggregates": ("SELECT SAMPLE_AGGREGATE(MAX(COUNT(*)), 0, 9) FROM t", "nested"),
    "unlisted aggregate": ("SELECT SAMPLE_AGGREGATE(SKEWNESS(x), 0, 9) FROM t", "SKEWNESS"),
    "mode (ties by arrival order)": ("SELECT SAMPLE_AGGREGATE(MODE(n), 0, 9) FROM t",
                                     "aggregate MODE is not supported"),
    "string aggregate": ("SELECT SAMPLE_AGGREGATE(LENGTH(STRING_AGG(g, ',')), 0, 9) FROM t",
                         "GROUP_CONCAT is not supported; use COUNT, SUM, AVG, MIN"),
    "median in a public subquery": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t WHERE x > "
                                    "(SELECT MEDIAN(w) FROM p)", "only inside SAMPLE_AGGREGATE"),
    "filter": ("SELECT SAMPLE_AGGREGATE(COUNT(*) FILTER (WHERE x > 1), 0, 9) FROM t",
               "FILTER"),
    "subquery inside": ("SELECT SAMPLE_AGGREGATE(COUNT(*) / (SELECT COUNT(*) FROM p), 0, 9) "
                        "FROM t", "no subquery"),
    "quantile fraction": ("SELECT SAMPLE_AGGREGATE(QUANTILE_CONT(x, 1.5), 0, 9) FROM t",
                          "between 0 and 1"),
    "quantile column fraction": ("SELECT SAMPLE_AGGREGATE(QUANTILE_DISC(x, MIN(x)), 0, 9) "
                                 "FROM t", "nested"),
    "window": ("SELECT SAMPLE_AGGREGATE(SUM(x) OVER (), 0, 9) FROM t", "window"),
    "no from": ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9)", "exactly one private table"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_refused_with_the_construct_and_the_fix(case):
    sql, part = REFUSED[case]
    with pytest.raises((UnsupportedConstructError, ProgrammingError)) as err:
        analyze_sample_aggregate(sql, MD)
    assert part in str(err.value)


def test_undeclared_names_are_programming_errors():
    with pytest.raises(ProgrammingError, match="declared"):
        analyze_sample_aggregate("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM nope", MD)


def test_the_wrapper_is_detected_from_the_sql_alone():
    assert mentions_wrapper("select sample_aggregate(count(*), 0, 1) from t")
    assert mentions_wrapper("SELECT 1 FROM t WHERE Sample_Aggregate(1, 0, 1) > 0")
    assert not mentions_wrapper("SELECT COUNT(*) FROM t")
    assert not mentions_wrapper("SELECT 'sample_aggregate(' FROM t")
    assert not mentions_wrapper("SELECT COUNT(*) FROM t -- sample_aggregate(x, 0, 1)")
    assert not mentions_wrapper("SELECT sample_aggregate( FROM")  # the normal path reports it


def test_with_a_privacy_unit_by_must_be_the_unit_column():
    import dataclasses

    from dpsql.metadata.model import PrivacyUnit, UnitPath
    sql = "SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t"
    unit = PrivacyUnit(table="t", column="cid")
    tables = dict(MD.tables)
    tables["t"] = dataclasses.replace(MD.tables["t"], unit=UnitPath("id"))
    with pytest.raises(UnsupportedConstructError, match="privacy unit"):
        analyze_sample_aggregate(sql, dataclasses.replace(MD, tables=tables, privacy_unit=unit))
    tables["t"] = dataclasses.replace(MD.tables["t"], unit=UnitPath("cid"))
    q = analyze_sample_aggregate(sql, dataclasses.replace(MD, tables=tables, privacy_unit=unit))
    assert q.setting.by == "cid"


UNITS = """\
privacy_unit: {table: customer, column: id}
tables:
  customer:
    sample_aggregate: {blocks: 4, by: id}
    columns:
      id: {type: INTEGER, max_freq: 1}
      age: {type: INTEGER}
  orders:
    unit: cid
    sample_aggregate: {blocks: 4, by: cid}
    columns:
      oid: {type: INTEGER, max_freq: 1}
      cid: {type: INTEGER}
      cost: {type: DOUBLE}
  items:
    unit: {via: oid, to: orders.oid}
    sample_aggregate: {blocks: 4, by: oid}
    columns:
      oid: {type: INTEGER}
      qty: {type: INTEGER}
  lines:
    unit: cid
    sample_aggregate: {blocks: 4}
    columns:
      cid: {type: INTEGER}
      v: {type: DOUBLE}
"""


@pytest.mark.parametrize(("table", "accepted"), [
    ("customer", True),  # the unit table, by its own id
    ("orders", True),  # by the column holding the unit's id
    ("items", False),  # an indirect path: its rows' units are not its own column
    ("lines", False),  # no 'by': one unit's rows could spread over every block
])
def test_under_a_declared_privacy_unit_blocks_follow_units(table, accepted):
    from dpsql.metadata import loads_metadata

    md = loads_metadata(UNITS)
    sql = f"SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM {table}"
    if accepted:
        assert analyze_sample_aggregate(sql, md).table == table
    else:
        with pytest.raises(UnsupportedConstructError, match="privacy unit"):
            analyze_sample_aggregate(sql, md)
