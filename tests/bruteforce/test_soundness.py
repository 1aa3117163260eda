"""Soundness of elastic sensitivity by brute force (docs/privacy.md sections 1-2).

For random tiny databases D (2-5 rows per table, values from {1, 2, 3}) and query templates
covering every rule, this file

1. builds the EXACT metadata of D (true max frequency of every column, >= 1),
2. analyses the query (dpsql.analysis.elastic.analyze) to get ES(k),
3. enumerates EVERY neighbour D' of D and runs the query on real DuckDB (in memory) on D and D'
   (all of one example's databases in one statement: tests/bruteforce/batch.py),
4. checks the local sensitivity max_D' |q(D) - q(D')| <= ES(0) and, for a subset of small
   cases, max over D' at distance <= 1 of LS(D') <= ES(1) (neighbours of neighbours).

Neighbouring model (docs/privacy.md section 1, FLEX's): *change one row of one private table* -- any
one row of a private table the query reads is replaced by any other tuple of values from the
column domains. Public tables never change. Histograms (top-level GROUP BY) are compared bin by
bin over the union of bins: the per-bin change and the L1 distance over bins must both be
<= ES(0) (= 2 * S: one changed row moves between two bins).

SUM is checked against the clamped sum the engine releases, computed on DuckDB as
SUM(LEAST(GREATEST(v, l), u)); an empty SUM counts as 0. NOT IN is executed by dpsql with NOT
EXISTS semantics; the data here are NOT NULL, so SQL's NOT IN is the same thing.

A failure message prints the database, the neighbour and both answers: a counterexample is a
privacy bug. The regression tests at the end keep the counterexamples found while writing this
suite (their queries are now rejected) with the DuckDB evidence of why.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dpsql.analysis.elastic import QueryAnalysis, analyze
from dpsql.analysis.keytypes import injectively_comparable, normalise
from dpsql.errors import MissingMetricError, UnsupportedConstructError
from dpsql.metadata import Column, Domain, Metadata, Table
from tests.bruteforce.batch import run_many

# ----------------------------------------------------------------------------- the universe

#: table -> columns. ``p`` is public; the others are private.
SCHEMA: dict[str, tuple[str, ...]] = {
    "a": ("x", "y"),
    "b": ("x", "y"),
    "c": ("x", "y"),
    "s": ("x", "v"),
    "p": ("x", "g"),
}
PUBLIC = frozenset({"p"})
#: column -> the values a row may take (the domain neighbours draw replacements from).
VALUES: dict[str, tuple[int, ...]] = {"x": (1, 2, 3), "y": (1, 2, 3), "v": (-2, 0, 1, 3),
                                      "g": (1, 2)}
#: private columns that may be GROUP BY keys, with their declared domain.
RELEASABLE = {("a", "x"): (1, 2, 3), ("s", "x"): (1, 2, 3)}

#: Scale with DPSQL_SOUNDNESS_EXAMPLES for a deep run (e.g. 200) and set DPSQL_SOUNDNESS_RANDOM=1
#: to draw new databases; the default (8, derandomized) keeps the file under 30 s.
EXAMPLES = int(os.environ.get("DPSQL_SOUNDNESS_EXAMPLES", "8"))
DERANDOMIZE = not os.environ.get("DPSQL_SOUNDNESS_RANDOM")

Database = dict[str, tuple[tuple[int, ...], ...]]


@dataclass(frozen=True)
class Template:
    name: str
    sql: str
    #: private tables the query reads (only these are changed to make neighbours)
    tables: tuple[str, ...]
    histogram: bool = False
    #: SUM templates: the declared bounds of s.v; the reference query clamps into them
    bounds: tuple[float, float] | None = None
    #: the query run on DuckDB when it differs from ``sql`` ({lo}/{hi}: the bounds)
    reference: str | None = None
    #: expected: ES depends on k (smoothed) or not (global sensitivity, pure release)
    depends_on_k: bool = True

    def reference_sql(self) -> str:
        if self.reference is None:
            return self.sql
        assert self.bounds is not None
        return self.reference.format(lo=self.bounds[0], hi=self.bounds[1])


def _clamped(expr: str) -> str:
    return f"LEAST(GREATEST({expr}, {{lo}}), {{hi}})"


TEMPLATES: tuple[Template, ...] = (
    # --- inner equijoins
    Template("join", "SELECT COUNT(*) FROM a JOIN b ON a.x = b.x", ("a", "b")),
    Template("join_two_keys", "SELECT COUNT(*) FROM a JOIN b ON a.x = b.x AND a.y = b.y",
             ("a", "b")),
    Template("comma_join_where", "SELECT COUNT(*) FROM a, b WHERE a.y = b.x AND b.y <> 2",
             ("a", "b")),
    Template("join_nested_and",
             "SELECT COUNT(*) FROM a JOIN b ON (a.x = b.y AND (a.y = b.x AND a.x >= 1))",
             ("a", "b")),
    Template("three_way", "SELECT COUNT(*) FROM a JOIN b ON a.x = b.x JOIN c ON b.y = c.x",
             ("a", "b", "c")),
    Template("three_way_comma",
             "SELECT COUNT(*) FROM a, c, b WHERE a.x = b.x AND c.y = b.y", ("a", "b", "c")),
    # --- self-joins through shared ancestors
    Template("self_join", "SELECT COUNT(*) FROM a a1 JOIN a a2 ON a1.x = a2.y", ("a",)),
    Template("self_join_cte",
             "WITH t AS (SELECT a.x, a.y FROM a WHERE a.y <> 3) "
             "SELECT COUNT(*) FROM t t1 JOIN t t2 ON t1.x = t2.x", ("a",)),
    Template("self_join_derived",
             "SELECT COUNT(*) FROM (SELECT a.x FROM a WHERE a.y > 1) t JOIN a ON t.x = a.y",
             ("a",)),
    Template("three_way_self",
             "SELECT COUNT(*) FROM a JOIN b ON a.x = b.x JOIN a a2 ON b.y = a2.y", ("a", "b")),
    # --- public tables (global sensitivity)
    Template("public_join", "SELECT COUNT(*) FROM a JOIN p ON a.x = p.x", ("a",),
             depends_on_k=False),
    Template("public_then_private",
             "SELECT COUNT(*) FROM a JOIN p ON a.x = p.x JOIN b ON b.y = p.g", ("a", "b")),
    # --- semi-joins and anti-joins
    Template("in_disjoint", "SELECT COUNT(*) FROM a WHERE a.x IN (SELECT b.y FROM b)",
             ("a", "b")),
    Template("in_shared",
             "SELECT COUNT(*) FROM a WHERE a.x IN (SELECT a2.y FROM a a2 WHERE a2.x <> 2)",
             ("a",)),
    Template("exists",
             "SELECT COUNT(*) FROM a WHERE EXISTS "
             "(SELECT 1 FROM b WHERE b.x = a.x AND b.y > a.y)", ("a", "b")),
    Template("exists_two_keys",
             "SELECT COUNT(*) FROM a WHERE EXISTS "
             "(SELECT 1 FROM b WHERE b.x = a.x AND b.y = a.y)", ("a", "b")),
    Template("exists_shared",
             "SELECT COUNT(*) FROM a WHERE EXISTS (SELECT 1 FROM a a2 WHERE a2.x = a.y)",
             ("a",)),
    Template("not_in", "SELECT COUNT(*) FROM a WHERE a.x NOT IN (SELECT b.y FROM b)",
             ("a", "b")),
    Template("not_in_shared", "SELECT COUNT(*) FROM a WHERE a.y NOT IN (SELECT a2.x FROM a a2)",
             ("a",)),
    Template("not_exists",
             "SELECT COUNT(*) FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.y = a.x)",
             ("a", "b")),
    Template("not_exists_shared",
             "SELECT COUNT(*) FROM a WHERE NOT EXISTS "
             "(SELECT 1 FROM a a2 WHERE a2.x = a.y AND a2.y <> a.x)", ("a",)),
    Template("semi_and_join",
             "SELECT COUNT(*) FROM a JOIN b ON a.x = b.x WHERE a.y IN (SELECT c.x FROM c)",
             ("a", "b", "c")),
    Template("in_union",
             "SELECT COUNT(*) FROM c WHERE c.x IN (SELECT a.x FROM a UNION ALL SELECT b.x FROM b)",
             ("a", "b", "c")),
    Template("in_self_join_subquery",
             "SELECT COUNT(*) FROM a WHERE a.x IN "
             "(SELECT a1.x FROM a a1 JOIN a a2 ON a1.y = a2.y)", ("a",)),
    Template("exists_inside_derived_table",
             "SELECT COUNT(*) FROM (SELECT a.x, a.y FROM a WHERE EXISTS "
             "(SELECT 1 FROM b WHERE b.y = a.x)) t JOIN c ON t.y = c.x", ("a", "b", "c")),
    Template("in_scalar_aggregate",
             "SELECT COUNT(*) FROM b WHERE b.y IN (SELECT COUNT(*) FROM a WHERE a.x <> 3)",
             ("a", "b")),
    # --- UNION ALL
    Template("union_shared",
             "SELECT COUNT(*) FROM (SELECT a.x FROM a WHERE a.y = 1 "
             "UNION ALL SELECT a.x FROM a WHERE a.y <> 2) u", ("a",), depends_on_k=False),
    Template("union_shared_join",
             "SELECT COUNT(*) FROM (SELECT a.x FROM a UNION ALL SELECT a.y FROM a) u "
             "JOIN b ON u.x = b.x", ("a", "b")),
    Template("union_disjoint_join",
             "SELECT COUNT(*) FROM (SELECT a.x FROM a UNION ALL SELECT b.y FROM b) u "
             "JOIN c ON u.x = c.x", ("a", "b", "c")),
    # --- GROUP BY: histograms at the top, grouped subqueries inside
    Template("histogram_join",
             "SELECT a.x, COUNT(*) FROM a JOIN b ON a.y = b.y GROUP BY a.x", ("a", "b"),
             histogram=True),
    Template("histogram_public_key",
             "SELECT p.g, COUNT(*) FROM a JOIN p ON a.x = p.x GROUP BY p.g", ("a",),
             histogram=True, depends_on_k=False),
    Template("histogram_self_join",
             "SELECT a1.x, COUNT(*) FROM a a1 JOIN a a2 ON a1.y = a2.x GROUP BY a1.x", ("a",),
             histogram=True),
    Template("histogram_semijoin",
             "SELECT a.x, COUNT(*) FROM a WHERE a.y IN (SELECT b.x FROM b) GROUP BY a.x",
             ("a", "b"), histogram=True),
    Template("histogram_sum", "SELECT s.x, SUM(s.v) FROM s GROUP BY s.x", ("s",),
             histogram=True, bounds=(-1.0, 2.0),
             reference=f"SELECT s.x, SUM({_clamped('s.v')}) FROM s GROUP BY s.x",
             depends_on_k=False),
    Template("nested_group_join",
             "SELECT COUNT(*) FROM (SELECT a.x FROM a GROUP BY a.x) t JOIN b ON t.x = b.x",
             ("a", "b")),
    Template("nested_group_count",
             "SELECT COUNT(*) FROM (SELECT a.x, COUNT(*) AS n FROM a GROUP BY a.x) t "
             "WHERE t.n > 1", ("a",), depends_on_k=False),
    Template("nested_group_having_in",
             "SELECT COUNT(*) FROM b WHERE b.x IN "
             "(SELECT a.x FROM a GROUP BY a.x HAVING COUNT(*) >= 2)", ("a", "b")),
    Template("nested_group_two_keys",
             "SELECT COUNT(*) FROM (SELECT a.x, a.y FROM a GROUP BY a.x, a.y) t "
             "JOIN b ON t.x = b.x", ("a", "b")),
    Template("nested_group_shared",
             "SELECT COUNT(*) FROM a JOIN (SELECT a2.x, COUNT(*) AS n FROM a a2 GROUP BY a2.x) g "
             "ON g.x = a.y WHERE g.n > 1", ("a",)),
    # GROUP BY without aggregates is a DISTINCT on the keys: S(input), not 2 * S(input)
    Template("nested_group_no_aggregate_count",
             "SELECT COUNT(*) FROM (SELECT a.x FROM a GROUP BY a.x) t", ("a",),
             depends_on_k=False),
    Template("nested_group_no_aggregate_shared",
             "SELECT COUNT(*) FROM a JOIN (SELECT a2.x FROM a a2 GROUP BY a2.x) g ON g.x = a.y",
             ("a",)),
    Template("nested_group_no_aggregate_key_filter",
             "SELECT COUNT(*) FROM (SELECT a.x, a.y FROM a GROUP BY a.x, a.y HAVING a.y <> 2) t "
             "JOIN b ON t.x = b.x", ("a", "b")),
    Template("nested_group_no_aggregate_over_join",
             "SELECT COUNT(*) FROM (SELECT a.x FROM a JOIN b ON a.y = b.y GROUP BY a.x) t "
             "JOIN c ON t.x = c.x", ("a", "b", "c")),
    Template("nested_group_no_aggregate_in",
             "SELECT COUNT(*) FROM c WHERE c.y IN (SELECT a.x FROM a GROUP BY a.x)",
             ("a", "c")),
    Template("distinct_subquery",
             "SELECT COUNT(*) FROM (SELECT DISTINCT a.x FROM a) t JOIN b ON t.x = b.x",
             ("a", "b")),
    # --- the three COUNTs
    Template("count_distinct_join", "SELECT COUNT(DISTINCT a.y) FROM a JOIN b ON a.x = b.x",
             ("a", "b")),
    Template("count_column",
             "SELECT COUNT(b.y) FROM a JOIN b ON a.x = b.x WHERE a.y <> b.y", ("a", "b")),
    # --- SUM with bounds: l < 0 < u, 0 < l, u < 0
    Template("sum_join", "SELECT SUM(s.v) FROM s JOIN a ON s.x = a.x", ("s", "a"),
             bounds=(-1.0, 2.0),
             reference=f"SELECT SUM({_clamped('s.v')}) FROM s JOIN a ON s.x = a.x"),
    Template("sum_positive_bounds_semijoin",
             "SELECT SUM(s.v) FROM s WHERE s.x IN (SELECT b.y FROM b)", ("s", "b"),
             bounds=(1.0, 2.0),
             reference=f"SELECT SUM({_clamped('s.v')}) FROM s WHERE s.x IN (SELECT b.y FROM b)"),
    Template("sum_negative_bounds_self_join",
             "SELECT SUM(s.v) FROM s JOIN s s2 ON s.x = s2.x", ("s",), bounds=(-3.0, -1.0),
             reference=f"SELECT SUM({_clamped('s.v')}) FROM s JOIN s s2 ON s.x = s2.x"),
    Template("sum_pure", "SELECT SUM(s.v) FROM s WHERE s.x <> 2", ("s",), bounds=(-1.0, 2.0),
             reference=f"SELECT SUM({_clamped('s.v')}) FROM s WHERE s.x <> 2",
             depends_on_k=False),
)

#: Templates for the distance-2 check (ES(1) >= LS at every neighbour).
DISTANCE_TWO = ("join", "self_join", "three_way_self", "in_shared", "not_exists_shared",
                "union_shared_join", "histogram_self_join", "sum_negative_bounds_self_join",
                "nested_group_shared", "nested_group_join", "nested_group_no_aggregate_shared",
                "nested_group_no_aggregate_over_join")
BY_NAME = {t.name: t for t in TEMPLATES}


# ----------------------------------------------------------------------------- metadata


def exact_metadata(db: Database, bounds: tuple[float, float] | None = None) -> Metadata:
    """The true metadata of ``db``: every column's max frequency (1 for an empty table)."""
    tables = {}
    for name, cols in SCHEMA.items():
        columns = {}
        for i, col in enumerate(cols):
            counts = Counter(row[i] for row in db[name])
            mf = max(counts.values(), default=1)
            domain = RELEASABLE.get((name, col))
            columns[col] = Column(
                col,
                mf,
                type="INTEGER",  # what DuckDB stores the VALUES below as
                bounds=bounds if (name, col) == ("s", "v") else None,
                releasable=domain is not None,
                domain=Domain(values=domain) if domain is not None else None,
            )
        tables[name] = Table(name, columns, public=name in PUBLIC)
    return Metadata(tables=tables)


# ----------------------------------------------------------------------------- DuckDB


#: one thread: the queries are tiny, and thread hand-offs cost more than they run
_CONN = duckdb.connect(":memory:", config={"threads": 1})


def _with_data(sql: str, db: Database, schema: dict[str, tuple[str, ...]]) -> str:
    """``sql`` with every table defined by a leading CTE holding ``db``'s rows."""
    defs = []
    for name, cols in schema.items():
        rows = db[name]
        if rows:
            body = "VALUES " + ", ".join(
                "(" + ", ".join(_literal(v) for v in row) + ")" for row in rows
            )
        else:
            body = "SELECT " + ", ".join(f"NULL::INTEGER AS {c}" for c in cols) + " WHERE false"
        defs.append(f"{name}({', '.join(cols)}) AS ({body})")
    prefix = "WITH " + ", ".join(defs)
    stripped = sql.lstrip()
    if stripped[:5].upper() == "WITH ":
        return prefix + ", " + stripped[5:]
    return prefix + " " + stripped


def _literal(v: object) -> str:
    return "'" + v.replace("'", "''") + "'" if isinstance(v, str) else str(v)


def run(sql: str, db: Database, *, histogram: bool,
        schema: dict[str, tuple[str, ...]] = SCHEMA) -> float | dict:
    """The exact answer of ``sql`` on ``db`` (DuckDB). Scalar: a float (NULL sum = 0).
    Histogram: {bin: value}."""
    return _answer(_CONN.execute(_with_data(sql, db, schema)).fetchall(), histogram)


def run_all(sql: str, dbs: list[Database], *, histogram: bool) -> list[float | dict]:
    """``[run(sql, db, histogram=histogram) for db in dbs]``, in one DuckDB statement."""
    return [_answer(rows, histogram) for rows in run_many(_CONN, sql, dbs, SCHEMA)]


def _answer(rows: list[tuple], histogram: bool) -> float | dict:
    if histogram:
        return {r[0]: float(r[1] or 0) for r in rows}
    assert len(rows) == 1, rows
    return float(rows[0][0] or 0)


def change(r1: float | dict, r2: float | dict) -> tuple[float, float]:
    """(largest per-bin change, L1 change); for scalars both are |r1 - r2|."""
    if isinstance(r1, dict):
        assert isinstance(r2, dict)
        diffs = [abs(r1.get(k, 0.0) - r2.get(k, 0.0)) for k in set(r1) | set(r2)]
        return max(diffs, default=0.0), sum(diffs)
    assert isinstance(r2, float)
    d = abs(r1 - r2)
    return d, d


def neighbours(db: Database, tables: tuple[str, ...],
               values: dict[str, tuple[int, ...]] = VALUES) -> Iterator[tuple[str, Database]]:
    """Every database that differs from ``db`` in one row of one of ``tables``: that row
    replaced by any other tuple of domain values. Yields (description, neighbour)."""
    for name in tables:
        cols = SCHEMA[name]
        tuples = list(itertools.product(*(values[c] for c in cols)))
        for i, row in enumerate(db[name]):
            for new in tuples:
                if new == row:
                    continue
                rows = list(db[name])
                rows[i] = new
                yield f"{name}[{i}]: {row} -> {new}", {**db, name: tuple(rows)}


class Evaluator:
    """q(D) on DuckDB, memoised by table contents (row order never changes an answer).
    ``evaluate(dbs)`` computes every database not yet memoised in one DuckDB statement."""

    def __init__(self, template: Template) -> None:
        self.template = template
        self.sql = template.reference_sql()
        self.memo: dict[tuple, float | dict] = {}

    @staticmethod
    def key(db: Database) -> tuple:
        return tuple(tuple(sorted(db[t])) for t in sorted(db))

    def evaluate(self, dbs: list[Database]) -> None:
        todo = {self.key(db): db for db in dbs if self.key(db) not in self.memo}
        answers = run_all(self.sql, list(todo.values()), histogram=self.template.histogram)
        self.memo.update(zip(todo, answers, strict=True))

    def __call__(self, db: Database) -> float | dict:
        if self.key(db) not in self.memo:
            self.evaluate([db])
        return self.memo[self.key(db)]


def analysed(template: Template, db: Database) -> QueryAnalysis:
    analysis = analyze(template.sql, exact_metadata(db, template.bounds))
    assert len(analysis.measurements) == 1, "templates release exactly one aggregate"
    es = analysis.measurements[0].sensitivity
    assert es.depends_on_k == template.depends_on_k, str(es)
    return analysis


def _tol(es: float) -> float:
    return es * (1 + 1e-12) + 1e-9


def _fmt(db: Database) -> str:
    return "{" + ", ".join(f"{t}: {list(rows)}" for t, rows in db.items()) + "}"


# ----------------------------------------------------------------------------- strategies


def _rows(cols: tuple[str, ...], values: dict[str, tuple[int, ...]], lo: int, hi: int):
    return st.lists(
        st.tuples(*(st.sampled_from(values[c]) for c in cols)), min_size=lo, max_size=hi
    ).map(tuple)


def databases(values: dict[str, tuple[int, ...]] = VALUES, lo: int = 2, hi: int = 5):
    return st.fixed_dictionaries({
        name: _rows(cols, values, 1 if name in PUBLIC else lo, 4 if name in PUBLIC else hi)
        for name, cols in SCHEMA.items()
    })


# ----------------------------------------------------------------------------- the checks


def test_every_template_is_accepted_and_exact_metadata_is_exact():
    db: Database = {"a": ((1, 1), (1, 2), (3, 2)), "b": ((2, 2), (2, 2)), "c": ((1, 3),),
                    "s": ((1, -2), (2, 3)), "p": ((1, 1), (1, 2), (2, 2))}
    md = exact_metadata(db, (-1.0, 2.0))
    # a.x: 1 twice; a.y: 2 twice; b.x and b.y: 2 twice; c: once; p.x: 1 twice; p.g: 2 twice
    assert [md.tables["a"].columns[c].max_freq for c in ("x", "y")] == [2, 2]
    assert [md.tables["b"].columns[c].max_freq for c in ("x", "y")] == [2, 2]
    assert [md.tables["c"].columns[c].max_freq for c in ("x", "y")] == [1, 1]
    assert [md.tables["p"].columns[c].max_freq for c in ("x", "g")] == [2, 2]
    assert exact_metadata({**db, "c": ()}).tables["c"].columns["x"].max_freq == 1
    for t in TEMPLATES:
        analysed(t, db)  # raises if a template is rejected or its k-dependence is not as stated


def test_neighbour_enumeration_is_complete():
    db: Database = {"a": ((1, 1), (2, 3)), "b": (), "c": (), "s": (), "p": ()}
    got = [n for _, n in neighbours(db, ("a",))]
    # 2 rows x (9 tuples - the row itself) = 16 neighbours, all distinct, all one row away
    assert len(got) == 16
    assert len({n["a"] for n in got}) == 16
    for n in got:
        assert sum(r1 != r2 for r1, r2 in zip(db["a"], n["a"], strict=True)) == 1


#: Databases every template is checked on, besides the random ones.
#: All rows identical: every max frequency is the table size and every join a full product.
ALL_EQUAL: Database = {"a": ((1, 1),) * 5, "b": ((1, 1),) * 5, "c": ((1, 1),) * 5,
                       "s": ((1, 3),) * 5, "p": ((1, 1), (1, 1))}
#: Empty private tables (max frequency 1 by convention) next to non-empty ones.
EMPTY_TABLES: Database = {"a": ((1, 2), (2, 3), (2, 1)), "b": (), "c": (), "s": (),
                          "p": ((1, 1),)}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.name)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases())
@example(db=ALL_EQUAL)
@example(db=EMPTY_TABLES)
def test_local_sensitivity_at_most_es0(template: Template, db: Database):
    es0 = analysed(template, db).measurements[0].sensitivity.at(0)
    q = Evaluator(template)
    q.evaluate([db, *(other for _, other in neighbours(db, template.tables))])
    base = q(db)
    for what, other in neighbours(db, template.tables):
        per_bin, l1 = change(base, q(other))
        assert per_bin <= _tol(es0) and l1 <= _tol(es0), (
            f"PRIVACY BUG: {template.sql}\n  D = {_fmt(db)}\n  neighbour: {what}\n"
            f"  q(D) = {base}, q(D') = {q(other)}: change {per_bin} (L1 {l1}) > ES(0) = {es0}"
        )


#: the distance-2 universe: 2 rows per table, values {1, 2} (v: {-2, 3}), so that the
#: neighbours of every neighbour stay enumerable.
SMALL_VALUES: dict[str, tuple[int, ...]] = {"x": (1, 2), "y": (1, 2), "v": (-2, 3), "g": (1, 2)}


@pytest.mark.parametrize("name", DISTANCE_TWO)
@settings(max_examples=max(2, EXAMPLES // 2), deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(db=databases(SMALL_VALUES, lo=2, hi=2))
def test_local_sensitivity_at_distance_one_at_most_es1(name: str, db: Database):
    template = BY_NAME[name]
    assert_within_es1(template, db, analysed(template, db).measurements[0].sensitivity.at(1))


def assert_within_es1(template: Template, db: Database, es1: float) -> None:
    """For D itself and every neighbour D' of ``db``, and every neighbour D'' of D': the query
    changes by at most ES(1) between D' and D'' (per bin and in L1). Shared by the brute-force
    files' distance-two tests."""
    q = Evaluator(template)
    at_most_one = [db, *(d1 for _, d1 in neighbours(db, template.tables, SMALL_VALUES))]
    q.evaluate([*at_most_one, *(d2 for d1 in at_most_one
                                for _, d2 in neighbours(d1, template.tables, SMALL_VALUES))])
    for what, d1 in itertools.chain([("D itself", db)],
                                    neighbours(db, template.tables, SMALL_VALUES)):
        base = q(d1)
        for what2, d2 in neighbours(d1, template.tables, SMALL_VALUES):
            per_bin, l1 = change(base, q(d2))
            assert per_bin <= _tol(es1) and l1 <= _tol(es1), (
                f"PRIVACY BUG at distance 1: {template.sql}\n  D = {_fmt(db)}\n"
                f"  D' = D with {what}, D'' = D' with {what2}\n"
                f"  q(D') = {base}, q(D'') = {q(d2)}: change {per_bin} (L1 {l1}) > ES(1) = {es1}"
            )


def test_self_join_local_sensitivity_is_attained_tightly():
    """The checks above have teeth: on this database the self-join rule's ES(0) is attained."""
    db: Database = {"a": ((1, 1), (1, 1), (2, 2)), "b": (), "c": (), "s": (), "p": ()}
    t = BY_NAME["self_join"]
    # mf(a.x) = 2, mf(a.y) = 2: ES(0) = mf(x)*1 + mf(y)*1 + 1*1 = 2 + 2 + 1 = 5
    es0 = analysed(t, db).measurements[0].sensitivity.at(0)
    assert es0 == 5.0
    q = Evaluator(t)
    ls = max(change(q(db), q(n))[0] for _, n in neighbours(db, t.tables))
    # a1.x = a2.y pairs: x=1 matches the two y=1 rows twice (4), x=2 matches y=2 (1): 5.
    # Changing (2,2) to (1,1) gives three (1,1) rows: 9 pairs, +4.
    assert q(db) == 5.0
    assert ls == 4.0
    assert ls <= es0


def test_nested_group_without_aggregates_bound_is_attained():
    """GROUP BY without aggregates gets S, not 2 * S, and S is attained: not looser, not less."""
    db: Database = {"a": ((1, 1),), "b": ((1, 1), (1, 2)), "c": (), "s": (), "p": ()}
    t = BY_NAME["nested_group_join"]
    # t = {1}, mf(t.x) = 1, S(t) = 1; mf(b.x) = 2: ES(0) = max(1 * 1, 2 * 1) = 2 (old rule: 4)
    es0 = analysed(t, db).measurements[0].sensitivity.at(0)
    assert es0 == 2.0
    q = Evaluator(t)
    assert q(db) == 2.0
    # moving a's row to x = 2 empties t's group 1: both b rows stop matching
    ls = max(change(q(db), q(n))[0] for _, n in neighbours(db, t.tables))
    assert ls == 2.0 == es0


def test_union_of_shared_branches_needs_the_sum():
    """FLEX's max rule for UNION ALL would give 1 here; one row sits in both branches."""
    db: Database = {"a": ((1, 1), (2, 3)), "b": (), "c": (), "s": (), "p": ()}
    t = BY_NAME["union_shared"]
    es0 = analysed(t, db).measurements[0].sensitivity.at(0)
    assert es0 == 2.0  # S1 + S2 = 1 + 1
    q = Evaluator(t)
    # (1,1) is in both branches (y = 1 and y <> 2); changing it to (1,2) drops it from both.
    assert q(db) == 3.0
    ls = max(change(q(db), q(n))[0] for _, n in neighbours(db, t.tables))
    assert ls == 2.0


# ----------------------------------------------------------------------------- key types
#
# Join, IN and EXISTS keys stored with different types: the database casts one side to a common
# type, which may make distinct stored values equal. Each key type has SQL literals chosen to
# collide under the casts DuckDB uses ('1', '01' and ' 1' all cast to INTEGER 1; 2^53 and
# 2^53 + 1 both become the same DOUBLE). The metadata's mf counts *stored* values, as
# `dpsql metadata build` does. The check: the analysis rejects the query, or the bound holds.

#: key type -> SQL literals of that type (each a distinct stored value)
KEY_VALUES: dict[str, tuple[str, ...]] = {
    "INTEGER": ("1", "2"),
    "SMALLINT": ("1", "2"),
    "BIGINT": ("1", "9007199254740992", "9007199254740993"),
    "UBIGINT": ("1", "2"),
    "HUGEINT": ("1", "9007199254740993"),
    "VARCHAR": ("'1'", "'01'", "' 1'", "'2'"),
    "TEXT": ("'1'", "'01'"),
    "DOUBLE": ("1.0", "1.5", "9007199254740992.0"),
    "DECIMAL(4,1)": ("1.0", "1.5"),
    "DATE": ("DATE '2020-01-01'", "DATE '2020-01-02'"),
    "TIMESTAMP": ("TIMESTAMP '2020-01-01 00:00:00'", "TIMESTAMP '2020-01-01 12:00:00'"),
}
KEY_TEMPLATES = (
    "SELECT COUNT(*) FROM a JOIN b ON a.x = b.x",
    "SELECT COUNT(*) FROM a, b WHERE b.x = a.x AND a.y <> 3",
    "SELECT COUNT(*) FROM a WHERE a.x IN (SELECT b.x FROM b)",
    "SELECT COUNT(*) FROM a WHERE a.x NOT IN (SELECT b.x FROM b)",
    "SELECT COUNT(*) FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.x = a.x)",
    "SELECT COUNT(*) FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE a.x = b.x AND b.y > 1)",
    "SELECT COUNT(*) FROM (SELECT b.x FROM b GROUP BY b.x) t JOIN a ON t.x = a.x",
)
KEY_Y = (1, 2)  # the non-key column y is INTEGER everywhere

TypedDatabase = dict[str, tuple[tuple[str, int], ...]]


def _typed_sql(sql: str, db: TypedDatabase, types: dict[str, str]) -> str:
    defs = []
    for name in ("a", "b"):
        rows = db[name] or (("NULL", 0),)
        body = " UNION ALL ".join(
            f"SELECT CAST({x} AS {types[name]}) AS x, {y} AS y" for x, y in rows
        )
        where = "" if db[name] else " WHERE false"
        defs.append(f"{name} AS (SELECT * FROM ({body}){where})")
    return "WITH " + ", ".join(defs) + " " + sql


def _typed_run_all(sql: str, dbs: list[TypedDatabase], types: dict[str, str]) -> list[float]:
    """The answer of ``sql`` on each of ``dbs`` (a.x and b.x stored with ``types``), in one
    DuckDB statement: ``_typed_sql`` casts each key literal to its column's type, so does this."""
    def literal(table: str, index: int, value: object) -> str:
        return f"CAST({value} AS {types[table]})" if index == 0 else str(value)

    per_db = run_many(_CONN, sql, dbs, {"a": ("x", "y"), "b": ("x", "y")}, literal=literal,
                      types={t: (types[t], "INTEGER") for t in ("a", "b")})
    answers = []
    for rows in per_db:
        (row,) = rows
        answers.append(float(row[0] or 0))
    return answers


def _typed_md(db: TypedDatabase, types: dict[str, str]) -> Metadata:
    tables = {}
    for name in ("a", "b"):
        mf_x = max(Counter(x for x, _ in db[name]).values(), default=1)
        mf_y = max(Counter(y for _, y in db[name]).values(), default=1)
        tables[name] = Table(name, {"x": Column("x", mf_x, type=types[name]),
                                    "y": Column("y", mf_y, type="INTEGER")})
    return Metadata(tables=tables)


@st.composite
def typed_cases(draw):
    types = {t: draw(st.sampled_from(sorted(KEY_VALUES))) for t in ("a", "b")}
    db = {t: tuple(draw(st.lists(st.tuples(st.sampled_from(KEY_VALUES[types[t]]),
                                           st.sampled_from(KEY_Y)), min_size=1, max_size=4)))
          for t in ("a", "b")}
    return draw(st.sampled_from(KEY_TEMPLATES)), types, db


#: the counterexample of test_regression_join_keys_of_different_types, for every template
_COLLIDING = ({"a": "VARCHAR", "b": "INTEGER"},
              {"a": (("'1'", 1), ("'01'", 2), ("' 1'", 2)), "b": (("2", 1),)})


@settings(max_examples=EXAMPLES * 25, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(case=typed_cases())
@example(case=(KEY_TEMPLATES[0], *_COLLIDING))
@example(case=(KEY_TEMPLATES[2], *_COLLIDING))
@example(case=(KEY_TEMPLATES[4], *_COLLIDING))
@example(case=(KEY_TEMPLATES[0], {"a": "BIGINT", "b": "DOUBLE"},
               {"a": (("9007199254740992", 1), ("9007199254740993", 1)),
                "b": (("1.0", 1),)}))
@example(case=(KEY_TEMPLATES[0], {"a": "SMALLINT", "b": "HUGEINT"},
               {"a": (("1", 1), ("2", 1)), "b": (("1", 1), ("9007199254740993", 2))}))
def test_mixed_key_types_are_rejected_or_bounded(case):
    sql, types, db = case
    try:
        es0 = analyze(sql, _typed_md(db, types)).measurements[0].sensitivity.at(0)
    except MissingMetricError as err:
        assert "same type" in str(err), err
        assert not injectively_comparable(normalise(types["a"]), normalise(types["b"]))
        return
    # accepted: the declared types must be injectively comparable, and the bound must hold
    assert injectively_comparable(normalise(types["a"]), normalise(types["b"]))
    moves = [(name, i, row, new)
             for name in ("a", "b")
             for i, row in enumerate(db[name])
             for new in itertools.product(KEY_VALUES[types[name]], KEY_Y)]
    others = []
    for name, i, _, new in moves:
        rows = list(db[name])
        rows[i] = new
        others.append({**db, name: tuple(rows)})
    base, *answers = _typed_run_all(sql, [db, *others], types)
    for (name, i, row, new), answer in zip(moves, answers, strict=True):
        assert abs(base - answer) <= _tol(es0), (
            f"PRIVACY BUG: {sql} with a.x {types['a']}, b.x {types['b']}\n"
            f"  D = {db}\n  neighbour: {name}[{i}]: {row} -> {new}\n"
            f"  q(D) = {base}, q(D') = {answer} > ES(0) = {es0}"
        )


def test_mixed_key_types_find_the_collision():
    """The check above has teeth: without the type rule, the colliding case breaks the bound."""
    types, db = _COLLIDING
    sql = KEY_TEMPLATES[0]
    assert _CONN.execute(_typed_sql(sql, db, types)).fetchall() == [(0,)]
    moved = {**db, "b": (("1", 1),)}
    assert _CONN.execute(_typed_sql(sql, moved, types)).fetchall() == [(3,)]
    md = _typed_md(db, types)
    assert md.tables["a"].columns["x"].max_freq == 1  # three distinct stored strings
    # what the analysis would say if the types matched: max(1 * 1, 1 * 1) = 1 < 3
    same = _typed_md(db, {"a": "INTEGER", "b": "INTEGER"})
    assert analyze(sql, same).measurements[0].sensitivity.at(0) == 1.0


# ----------------------------------------------------------------------------- regressions
#
# Counterexamples found while writing this suite. Each query used to be analysed with an ES(0)
# below the change DuckDB actually shows on a neighbour; each is now rejected. The tests keep the
# DuckDB evidence, so relaxing a rejection brings the counterexample back into view.

REGRESSION_SCHEMA = {"a": ("x", "y"), "b": ("x", "y")}


def _md(mf: dict[tuple[str, str], int], types: dict[tuple[str, str], str] | None = None):
    types = types or {}
    return Metadata(tables={
        t: Table(t, {c: Column(c, mf[(t, c)], type=types.get((t, c), "INTEGER")) for c in cols})
        for t, cols in REGRESSION_SCHEMA.items()
    })


def _run2(sql: str, db: Database) -> float:
    value = run(sql, db, histogram=False, schema=REGRESSION_SCHEMA)
    assert isinstance(value, float)
    return value


def test_regression_duplicate_output_name_in_subquery():
    # a.x repeats (mf 2), a.y is unique (mf 1). DuckDB binds t.k to the FIRST k (a.x); the
    # analysis used to keep the LAST (a.y): ES(0) = max(mf(a.y)*S(b), mf(b.x)*S(t)) = 1.
    sql = "SELECT COUNT(*) FROM (SELECT a.x AS k, a.y AS k FROM a) t JOIN b ON b.x = t.k"
    db: Database = {"a": ((1, 1), (1, 2)), "b": ((2, 1),)}
    md = _md({("a", "x"): 2, ("a", "y"): 1, ("b", "x"): 1, ("b", "y"): 1})
    moved = {**db, "b": ((1, 1),)}  # b's row moves to x = 1: both a rows join
    assert _run2(sql, db) == 0.0 and _run2(sql, moved) == 2.0  # LS 2 > the old ES 1
    # now the second k is renamed k_1 as DuckDB does (dpsql.analysis.outputs): t.k is a.x
    analysis = analyze(sql, md)
    assert analysis.measurements[0].sensitivity.at(0) == 2.0
    assert "a.y AS k_1" in analysis.query.sql()
    honest = "SELECT COUNT(*) FROM (SELECT a.x AS k FROM a) t JOIN b ON b.x = t.k"
    assert analyze(honest, md).measurements[0].sensitivity.at(0) == 2.0  # max(2*1, 1*1)


def test_regression_column_alias_list_on_a_base_table():
    # a AS t(y, x) renames by position: DuckDB's t.x is a's SECOND column, a.y (mf 2); the
    # analysis used to read it as a.x (mf 1): ES(0) = 1.
    sql = "SELECT COUNT(*) FROM a AS t(y, x) JOIN b ON t.x = b.x"
    db: Database = {"a": ((1, 1), (2, 1)), "b": ((2, 2),)}
    md = _md({("a", "x"): 1, ("a", "y"): 2, ("b", "x"): 1, ("b", "y"): 1})
    with pytest.raises(UnsupportedConstructError, match="column aliases"):
        analyze(sql, md)
    moved = {**db, "b": ((1, 2),)}
    assert _run2(sql, db) == 0.0 and _run2(sql, moved) == 2.0  # LS 2 > the old ES 1


def test_regression_correlated_derived_table_in_exists():
    # The derived table is re-evaluated per outer row (implicit LATERAL): one changed b row
    # changes n for every a row with that x. Old ES(0) = max(S(a), mf(a.y)*S(t)) = 1.
    sql = ("SELECT COUNT(*) FROM a WHERE EXISTS (SELECT 1 FROM "
           "(SELECT COUNT(*) AS n FROM b WHERE b.x = a.x) t WHERE t.n = a.y)")
    db: Database = {"a": ((1, 0), (2, 2)), "b": ((1, 1), (2, 1))}
    md = _md({("a", "x"): 1, ("a", "y"): 1, ("b", "x"): 1, ("b", "y"): 2})
    with pytest.raises(UnsupportedConstructError, match="LATERAL"):
        analyze(sql, md)
    moved = {**db, "b": ((2, 1), (2, 1))}  # n(1): 1 -> 0 and n(2): 1 -> 2, both rows match
    assert _run2(sql, db) == 0.0 and _run2(sql, moved) == 2.0  # LS 2 > the old ES 1


def test_regression_distinct_on():
    # DISTINCT ON (a.y) a.x used to get mf(t.x) = 1 like SELECT DISTINCT a.x: old ES(0) = 1.
    sql = "SELECT COUNT(*) FROM (SELECT DISTINCT ON (a.y) a.x FROM a) t JOIN b ON t.x = b.x"
    db: Database = {"a": ((1, 1), (1, 2)), "b": ((2, 1),)}
    md = _md({("a", "x"): 2, ("a", "y"): 1, ("b", "x"): 1, ("b", "y"): 1})
    with pytest.raises(UnsupportedConstructError, match="DISTINCT ON"):
        analyze(sql, md)
    moved = {**db, "b": ((1, 1),)}
    assert _run2(sql, db) == 0.0 and _run2(sql, moved) == 2.0


def test_regression_subquery_in_limit():
    # LIMIT (SELECT COUNT(*) FROM b) releases exactly |b| bins: an exact private count.
    sql = "SELECT a.x, COUNT(*) FROM a GROUP BY a.x ORDER BY a.x LIMIT (SELECT COUNT(*) FROM b)"
    md = Metadata(tables={
        "a": Table("a", {"x": Column("x", 1, releasable=True, domain=Domain(values=(1, 2, 3))),
                         "y": Column("y", 1)}),
        "b": Table("b", {"x": Column("x", 1), "y": Column("y", 1)}),
    })
    with pytest.raises(UnsupportedConstructError, match="subquery in LIMIT"):
        analyze(sql, md)
    db: Database = {"a": ((1, 1), (2, 2), (3, 3)), "b": ((1, 1),)}
    rows = _CONN.execute(_with_data(sql, db, REGRESSION_SCHEMA)).fetchall()
    rows2 = _CONN.execute(
        _with_data(sql, {**db, "b": ((1, 1), (2, 2))}, REGRESSION_SCHEMA)).fetchall()
    assert (len(rows), len(rows2)) == (1, 2)


def test_regression_subquery_in_an_outer_condition_inside_exists():
    # The EXISTS conjunct a.y IN (SELECT c.x FROM c) mentions the outer row, so it was only
    # read for equi-keys and never analysed: c was not even an ancestor. Old ES(0) =
    # max(S(a), mf(a.x)*S(b)) = 1.
    sql = ("SELECT COUNT(*) FROM a WHERE EXISTS "
           "(SELECT 1 FROM b WHERE b.x = a.x AND a.y IN (SELECT c.x FROM c))")
    db: Database = {"a": ((1, 1), (2, 1), (3, 1)), "b": ((1, 1), (2, 1), (3, 1)),
                    "c": ((2, 1), (2, 2)), "s": (), "p": ()}
    md = exact_metadata(db)  # a.x mf 1, a.y mf 3
    with pytest.raises(UnsupportedConstructError, match="inside EXISTS"):
        analyze(sql, md)
    moved = {**db, "c": ((1, 1), (2, 2))}  # now a.y = 1 is in c: every a row qualifies
    assert run(sql, db, histogram=False) == 0.0 and run(sql, moved, histogram=False) == 3.0
    # the same condition in the outer WHERE is analysed by the semi-join rule:
    # max(max(S(a), mf(a.x)*S(b)), mf(a.y)*S(c)) = max(1, 3) = 3
    honest = ("SELECT COUNT(*) FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.x = a.x) "
              "AND a.y IN (SELECT c.x FROM c)")
    assert analyze(honest, md).measurements[0].sensitivity.at(0) == 3.0
    assert run(honest, moved, histogram=False) == 3.0


def test_regression_join_keys_of_different_types():
    # DuckDB evaluates a.x = b.x as CAST(a.x AS INTEGER) = b.x: the distinct strings '1', '01'
    # and ' 1' (mf 1 each) all equal 1. Old ES(0) = max(mf(a.x)*S(b), mf(b.x)*S(a)) = 1.
    schema = {"a": ("x", "y"), "b": ("x", "y")}
    sql = "SELECT COUNT(*) FROM a JOIN b ON a.x = b.x"
    db: Database = {"a": (("1", 1), ("01", 2), (" 1", 3)), "b": ((2, 1),)}
    md = _md({("a", "x"): 1, ("a", "y"): 1, ("b", "x"): 1, ("b", "y"): 1},
             types={("a", "x"): "VARCHAR", ("b", "x"): "INTEGER"})
    with pytest.raises(MissingMetricError,
                       match=r"a\.x \(VARCHAR\) = b\.x \(INTEGER\).*same type"):
        analyze(sql, md)
    before = run(sql, db, histogram=False, schema=schema)
    after = run(sql, {**db, "b": ((1, 1),)}, histogram=False, schema=schema)
    assert (before, after) == (0.0, 3.0)  # LS 3 > the old ES 1
    # the same keys stored with one type are analysed as before
    same = _md({("a", "x"): 1, ("a", "y"): 1, ("b", "x"): 1, ("b", "y"): 1},
               types={("a", "x"): "VARCHAR", ("b", "x"): "TEXT"})
    assert analyze(sql, same).measurements[0].sensitivity.at(0) == 1.0
