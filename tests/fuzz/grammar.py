"""A grammar of analyst queries for the differential fuzzers (hypothesis strategies; not a test
module).

It covers dpsql's accepted surface and the constructs the hole classes of issue #12 used (and
release blocks: an aggregate in a CTE / derived table post-processed outside, scalar aggregate
thresholds):
comparisons between columns and constants of every type, casts, arithmetic, string/date
functions, CASE, COALESCE, non-boolean values in boolean positions, parameters, IN / EXISTS /
NOT IN subqueries, derived tables and CTEs with ORDER BY / LIMIT, UNION ALL (BY NAME), a table
used as a value, CTEs named like declared tables, inner and LEFT / RIGHT / FULL joins on plain
and collated keys, GROUP BY over listed, table and mistyped domains and computed keys (date
parts of a column with day bounds, functions of a declared domain, CASE buckets), MIN / MAX /
quantiles and top-k by COUNT(*) (issue #18: selection by the exponential mechanism and Report
Noisy Max), SUM/AVG over
bounded INTEGER, DOUBLE and DECIMAL(38,20) columns and over expressions of them (CASE,
LEAST/GREATEST, division), FILTER clauses, the variance family, long AND chains, and
SAMPLE_AGGREGATE(expr, lo, hi) over aggregates of every type (issue #18), histograms of
per-key counts (TPC-H Q13's shape, issue #15). The schema
it draws names from is ``tests/fuzz/worlds.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

#: column -> the kind of value it holds (see worlds.SCHEMA)
COLUMNS = {"id": "int", "n": "int", "s": "str", "f": "str", "d": "date", "x": "float",
           "dec": "decimal", "g": "str", "ck": "str", "b": "bool", "pid": "int", "h": "str"}
LITERALS = {
    "int": ["0", "1", "-1", "2147483647", "9223372036854775807", "100"],
    "str": ["'a'", "'x'", "''", "'1'", "'true'", "'2024-01-01'", "'A'"],
    "date": ["DATE '2024-01-01'", "DATE '9999-12-31'", "'2024-01-01'",
             "DATE '2024-01-01' + INTERVAL 3 MONTH"],
    "float": ["0.5", "1e300", "-1.5"],
    "decimal": ["1.25", "99999999999999999.5"],
    "bool": ["TRUE", "FALSE", "NULL"],
}
TYPES = ["INTEGER", "BIGINT", "VARCHAR", "DATE", "DOUBLE", "DECIMAL(10,2)", "BOOLEAN",
         "SMALLINT"]
#: extreme values a parameter may be bound to
PARAMS: list[Any] = ["x", "", "1", "true", 0, 1, -(2**63), 2**63 - 1, 1e308, None, "2024-01-01"]


@dataclass
class Query:
    sql: str
    params: list[Any] = field(default_factory=list)
    #: the noise the analyst chose (issue #18): its refusals must not depend on data either
    mechanism: str = "laplace"
    #: False when the released group labels are themselves chosen by noise (top-k by COUNT(*),
    #: Report Noisy Max): then only the number of rows must not differ
    labels: bool = True
    #: True when the rows are ordered by a noisy value (ORDER BY a released count): the set of
    #: labels must not differ, their order is noise
    noisy_order: bool = False


def _col(draw, alias: str = "t", kinds: tuple[str, ...] | None = None) -> tuple[str, str]:
    names = [c for c, k in COLUMNS.items() if kinds is None or k in kinds]
    name = draw(st.sampled_from(names))
    return f"{alias}.{name}", COLUMNS[name]


def _value(draw, params: list[Any], alias: str = "t", depth: int = 0) -> str:
    """A scalar expression of any type (the point is that types mix)."""
    choice = draw(st.integers(0, 11 if depth < 2 else 2))
    if choice == 0:
        return _col(draw, alias)[0]
    if choice == 1:
        return draw(st.sampled_from([lit for lits in LITERALS.values() for lit in lits]))
    if choice == 2:
        params.append(draw(st.sampled_from(PARAMS)))
        return "?"
    inner = _value(draw, params, alias, depth + 1)
    if choice == 3:
        return f"CAST({inner} AS {draw(st.sampled_from(TYPES))})"
    if choice == 4:
        op = draw(st.sampled_from(["+", "-", "*", "/", "//", "%"]))
        return f"({inner} {op} {_value(draw, params, alias, depth + 1)})"
    if choice == 5:
        fn = draw(st.sampled_from(["UPPER", "LOWER", "LENGTH", "ABS", "YEAR", "TRIM", "SIGN",
                                   "REVERSE", "DAYOFYEAR", "MONTHNAME", "HOUR", "ISODOW",
                                   "LAST_DAY"]))
        return f"{fn}({inner})"
    if choice == 6:
        return f"COALESCE({inner}, {_value(draw, params, alias, depth + 1)})"
    if choice == 7:
        if draw(st.booleans()):  # a simple CASE: its operand compared with the WHEN value
            when = _value(draw, params, alias, depth + 1)
            return (f"CASE {inner} WHEN {when} THEN {_value(draw, params, alias, depth + 1)} "
                    f"ELSE {_value(draw, params, alias, depth + 1)} END")
        cond = _predicate(draw, params, alias, depth + 1)
        return f"CASE WHEN {cond} THEN {inner} ELSE {_value(draw, params, alias, depth + 1)} END"
    if choice == 8:
        return f"NULLIF({inner}, {_value(draw, params, alias, depth + 1)})"
    if choice == 9:
        return f"SUBSTRING({inner}, 1, 2)"
    if choice == 10:
        return f"CAST({alias} AS VARCHAR)"  # a table used as a value (class 7)
    return f"{inner} || 'z'"


def _predicate(draw, params: list[Any], alias: str = "t", depth: int = 0) -> str:
    choice = draw(st.integers(0, 9 if depth < 2 else 3))
    if choice == 0:
        op = draw(st.sampled_from(["=", "<>", "<", ">=", "<=>", "IS DISTINCT FROM"]))
        left = _value(draw, params, alias, depth + 1)
        return f"{left} {op} {_value(draw, params, alias, depth + 1)}"
    if choice == 1:
        a, _ = _col(draw, alias)
        b, _ = _col(draw, alias)
        return f"{a} = {b}"  # column against column of any types (class 2)
    if choice == 2:  # a bare value in a boolean position (class 3)
        return _value(draw, params, alias, depth + 1)
    if choice == 3:
        a, kind = _col(draw, alias)
        return f"{a} = {draw(st.sampled_from(LITERALS[kind] + LITERALS['str']))}"
    if choice == 4:
        return f"NOT {_predicate(draw, params, alias, depth + 1)}"
    if choice == 5:
        left = _predicate(draw, params, alias, depth + 1)
        right = _predicate(draw, params, alias, depth + 1)
        return f"({left} {draw(st.sampled_from(['AND', 'OR']))} {right})"
    if choice == 6:
        test = draw(st.sampled_from(["TRUE", "NOT FALSE", "NULL"]))
        return f"{_value(draw, params, alias, depth + 1)} IS {test}"
    if choice == 7:
        items = ", ".join(draw(st.lists(st.sampled_from(
            [lit for lits in LITERALS.values() for lit in lits]), min_size=1, max_size=3)))
        if draw(st.booleans()):  # one constant as a subquery (dpsql.analysis.constant_subqueries)
            a, kind = _col(draw, alias)
            one = draw(st.sampled_from(LITERALS[kind]))
            return draw(st.sampled_from([f"{a} IN (SELECT {one})", f"{a} = (SELECT {one})",
                                         f"{a} NOT IN (SELECT {one})"]))
        return f"{_col(draw, alias)[0]} IN ({items})"
    if choice == 8:
        a, _ = _col(draw, alias)
        low = _value(draw, params, alias, depth + 1)
        return f"{a} BETWEEN {low} AND {_value(draw, params, alias, depth + 1)}"
    if draw(st.booleans()):  # the whole row as text: reads undeclared columns (class 7)
        return f"CAST({alias} AS VARCHAR) LIKE '%SECRET%'"
    return f"{_col(draw, alias)[0]} LIKE {draw(st.sampled_from(LITERALS['str']))}"


def _subquery_modifier(draw, params: list[Any]) -> str:
    """ORDER BY / LIMIT inside a subquery (class 4), or (half the time) nothing."""
    choice = draw(st.integers(0, 5))
    if choice in (0, 4, 5):
        return ""
    if choice == 1:  # a cast of a stored value, the kind of key that fails on one row
        return f" ORDER BY CAST({_col(draw)[0]} AS {draw(st.sampled_from(TYPES))})"
    if choice == 2:
        return f" LIMIT {draw(st.sampled_from(['3', '1 + 1']))}"
    return f" ORDER BY {_value(draw, params)} LIMIT 5"


def _source(draw, params: list[Any]) -> tuple[str, str]:
    """FROM clause and the alias whose columns the rest may use (``t``'s columns, as ``t``
    or as a derived table ``d``)."""
    choice = draw(st.integers(0, 11))
    if choice == 0:
        return "t", "t"
    if choice in (10, 11):
        # outer joins: t kept (LEFT / RIGHT), null-extended (its columns NULL when unmatched)
        # or both (FULL)
        key = draw(st.sampled_from(["id", "ck", "s"]))
        on = f"t.{key} = u.{key}"
        if draw(st.booleans()):
            on += f" AND {_predicate(draw, params, draw(st.sampled_from(['t', 'u'])))}"
        if choice == 10:
            return draw(st.sampled_from([f"t LEFT JOIN u ON {on}", f"t FULL JOIN u ON {on}"])), "t"
        return draw(st.sampled_from([f"u RIGHT JOIN t ON {on}", f"u LEFT JOIN t ON {on}"])), "t"
    if choice == 9:
        # BY NAME pairs the second branch's id with the first's id although it stands where
        # n stands; the analysis pairs by position (class 5); the u-row neighbour shows it
        by_name = draw(st.sampled_from(["", " BY NAME"]))
        rest = ", ".join(c for c in COLUMNS if c not in ("id", "n"))
        return (f"(SELECT id, n, {rest} FROM t UNION ALL{by_name} SELECT id AS n, n AS id, "
                f"{rest} FROM t) d JOIN u ON d.id = u.id", "d")
    if choice == 8:  # a CTE shadowing the scanned public domain table (class 1)
        return f"__WITH__p__(SELECT {', '.join(COLUMNS)} FROM t)", "d"
    if choice == 1:
        key = draw(st.sampled_from(["id", "ck", "s"]))
        return f"t JOIN u ON t.{key} = u.{key}", "t"  # ck is collated (class 8)
    if choice == 2:
        where = f" WHERE {_predicate(draw, params)}" if draw(st.booleans()) else ""
        mod = _subquery_modifier(draw, params)
        cols = ", ".join(COLUMNS)
        return f"(SELECT {cols} FROM t{where}{mod}) d", "d"
    if choice == 3:
        name = draw(st.sampled_from(["c", "p", "u"]))  # p and u are declared tables (class 1)
        mod = _subquery_modifier(draw, params)
        return f"__WITH__{name}__(SELECT {', '.join(COLUMNS)} FROM t{mod})", "d"
    if choice == 4:
        by_name = draw(st.sampled_from(["", " BY NAME"]))  # class 5
        cols = ", ".join(COLUMNS)
        swapped = ", ".join(f"{c}" for c in reversed(list(COLUMNS)))
        # rotated: each position's branches of other types (INTEGER beside DATE, ...), which
        # DuckDB casts to their common type row by row (dpsql.rewrite.set_operations)
        turn = draw(st.integers(0, len(COLUMNS) - 1))
        rotated = ", ".join(list(COLUMNS)[turn:] + list(COLUMNS)[:turn])
        other = swapped if by_name else rotated
        # a condition on the second branch: whether any row reaches its casts depends on data
        where = f" WHERE {_predicate(draw, params)}" if draw(st.booleans()) else ""
        return f"(SELECT {cols} FROM t UNION ALL{by_name} SELECT {other} FROM t{where}) d", "d"
    if choice == 5:
        return f"t WHERE t.id IN (SELECT u.id FROM u{_subquery_modifier(draw, params)})", "t"
    if choice == 6:
        return ("t WHERE EXISTS (SELECT 1 FROM u WHERE u.id = t.id AND "
                f"{_predicate(draw, params, 'u')})", "t")
    return "t WHERE t.s NOT IN (SELECT u.s FROM u)", "t"


def _computed_aggregate(draw, params: list[Any], alias: str) -> str:
    """An aggregate over a computed value, with a FILTER clause, or of the variance family
    (n: INTEGER [0, 100], x: DOUBLE [-10, 10], dec: DECIMAL(38,20) [0, 1e17]; id unbounded)."""
    value = draw(st.sampled_from([
        "A.n * 2 - A.x", "A.x / 4 + A.n", "A.dec * (1 - A.x / 100)", "LEAST(GREATEST(A.id, 0), 9)",
        "ABS(A.x) + COALESCE(A.n, 0)", "A.n / GREATEST(A.n, 1)", "CAST(A.x AS INTEGER) * 3",
        "-A.n + A.x",  # a row holds INT32's least n, whose negation overflows
        "A.id * 2",  # unbounded: refused, naming A.id
        "A.n / A.x",  # a denominator that can be 0: refused
    ]))
    choice = draw(st.integers(0, 4))
    if choice == 0:
        cond = _predicate(draw, params, alias)
        fn = draw(st.sampled_from(["SUM", "AVG"]))
        other = draw(st.sampled_from(["0", "NULL"]))
        text = f"{fn}(CASE WHEN {cond} THEN {value} ELSE {other} END)"
    elif choice == 1:
        fn = draw(st.sampled_from(["COUNT(*)", "COUNT(A.s)", "SUM(A.x)", f"AVG({value})"]))
        text = f"{fn} FILTER (WHERE {_predicate(draw, params, alias)})"
    elif choice == 2:
        fn = draw(st.sampled_from(["VAR_POP", "VAR_SAMP", "STDDEV", "STDDEV_POP"]))
        text = f"{fn}({draw(st.sampled_from(['A.x', 'A.n', value]))})"
    else:
        text = f"{draw(st.sampled_from(['SUM', 'AVG']))}({value})"
    return text.replace("A.", f"{alias}.")


def _computed_key(draw, alias: str) -> tuple[str, str]:
    """A computed GROUP BY key (dpsql.analysis.derived_keys) and what GROUP BY names it by:
    date parts of d (day bounds; the extreme rows hold dates far outside them), functions of
    the declared domains of g, h and pid (h's values are integers on a VARCHAR column), CASE
    buckets over any condition (which may fail on a row: TRY), and keys that stay refused (two
    inputs, a column without a domain)."""
    a = alias
    scratch: list[Any] = []
    cond = _predicate(draw, scratch, alias, 2)
    if scratch:  # a parameter would be named twice (SELECT and GROUP BY)
        cond = f"{a}.n > 1"
    key = draw(st.sampled_from([
        f"YEAR({a}.d)", f"EXTRACT(month FROM {a}.d)", f"date_trunc('month', {a}.d)",
        f"EXTRACT(dow FROM {a}.d) * 10 + EXTRACT(quarter FROM {a}.d)", f"CAST({a}.d AS DATE)",
        f"UPPER({a}.g)", f"{a}.pid % 2", f"CAST({a}.h AS INTEGER) + 1", f"SUBSTRING({a}.h, 1, 1)",
        f"CASE WHEN {cond} THEN 'x' ELSE 'y' END", f"CASE WHEN {cond} THEN 1 END",
        f"{a}.pid + YEAR({a}.d)", f"{a}.n % 2", f"{a}.d", f"DAYNAME({a}.d)", f"WEEK({a}.d)",
        f"REPLACE({a}.g, 'a', 'b')",
    ]))
    return key, draw(st.sampled_from([key, "1"]))


#: issue #18: arguments of MIN / MAX / quantiles (n INTEGER [0, 100]: an exact grid; x DOUBLE
#: [-10, 10] with NaN and infinities in the extreme rows; dec DECIMAL(38,20); an expression;
#: id without bounds, d a DATE and s a VARCHAR: refused) and the aggregates over them
SELECTION_ARGS = ["A.n", "A.x", "A.dec", "A.n * 2 - A.x", "A.id", "A.d", "A.s"]
SELECTIONS = ["MIN({})", "MAX({})", "MEDIAN({})", "quantile({}, 0.9)", "quantile_cont({}, 0.25)",
              "percentile_disc(0.5) WITHIN GROUP (ORDER BY {})"]

#: scalar aggregate subqueries used as constants (two-phase releases, dpsql.analysis.blocks);
#: the last four are correlated: by a key without a domain (refused), by keys with a declared
#: domain (a histogram read as a lookup, dpsql.analysis.correlated: pid's is the public p's,
#: g's a value list), and by an inequality (refused)
SCALARS = ["(SELECT COUNT(*) FROM u)", "(SELECT AVG(t2.x) FROM t AS t2)",
           "(SELECT SUM(u.n) * 0.5 FROM u)", "(SELECT COUNT(*) FROM t AS t2 WHERE t2.n > ?)",
           "(SELECT AVG(t2.x) FROM t AS t2 WHERE t2.id = t.id)",
           "(SELECT AVG(t2.x) * 2 FROM t AS t2 WHERE t2.pid = t.pid AND t2.n > 1)",
           "(SELECT COUNT(*) FROM t AS t2 WHERE t.g = t2.g)",
           "(SELECT SUM(t2.n) FROM t AS t2 WHERE t2.pid < t.pid)"]
_OUTER_T = re.compile(r"(?<![.\w])t[.]")


def _post_processing(draw, block: str, group: str | None, n_aggregates: int,
                     params: list[Any]) -> str:
    """The analyst's outer query over one release block ``blk`` (post-processing). Its rows
    and labels must not depend on the values (the fuzzer compares them across neighbours): no
    filter on a noisy value, ordered by the key."""
    key = group.split(".")[1] if group else None
    choice = draw(st.integers(0, 6))
    if choice == 5 and key == "pid":  # joined with the public table p
        outer = "SELECT blk.pid, p.name, blk.a0 FROM blk JOIN p ON p.pid = blk.pid"
    elif choice in (5, 6):  # an aggregate over the noisy rows (a constant label first)
        outer = "SELECT 'all' AS label, SUM(a0) AS total, COUNT(*) AS n FROM blk"
    elif choice == 0:
        outer = "SELECT * FROM blk"
    elif choice == 1:
        outer = f"SELECT {key + ', ' if key else ''}a0 * 2 + 1 AS m FROM blk"
    elif choice == 2:  # the same block joined with itself under a second name
        on = f" ON b1.{key} = b2.{key}" if key else " ON TRUE"
        outer = f"SELECT {'b1.' + key + ', ' if key else ''}b1.a0, b2.a0 AS again FROM blk b1 " \
                f"JOIN blk b2{on}"
    elif choice == 3:  # reads a private table outside the block: refused
        outer = "SELECT blk.a0, u.n FROM blk, u"
    else:
        outer = f"SELECT {key + ', ' if key else ''}a{n_aggregates - 1} FROM blk"
    if (key and choice in (0, 1, 2, 4)) or outer.startswith("SELECT blk.pid"):
        # (the fuzzer compares the labels in order)
        outer += f" ORDER BY {'b1.' if choice == 2 else 'blk.' if choice == 5 else ''}{key}"
    if choice == 2 or draw(st.booleans()):
        return f"WITH blk AS ({block}) {outer}"
    return outer.replace("FROM blk", f"FROM ({block}) blk")


#: SAMPLE_AGGREGATE block answers (issue #18): aggregates of every type, some refused
SAMPLE_AGGREGATES = [
    "MEDIAN(t.x)", "AVG(t.n)", "MIN(t.s)", "MAX(t.d) - MIN(t.d)", "SUM(t.dec)", "STDDEV(t.x)",
    "COUNT(*) / COUNT(t.n)", "QUANTILE_CONT(t.x, 0.5)", "MODE(t.g)", "MAX(t.id) - MIN(t.n)",
    "CORR(t.x, t.n)", "COUNT(DISTINCT t.s)", "SUM(t.n) // (COUNT(*) - 12)", "MAX(t.b)",
    "SKEWNESS(t.x)", "t.n + COUNT(*)", "MIN(t.x) * 1e300 * 1e300",
]


def _sample_aggregate(draw, params: list[Any]) -> Query:
    """``SELECT SAMPLE_AGGREGATE(expr, lo, hi), ... FROM <t, public joins or refused sources>
    [WHERE ...]`` (t enables it with 3 blocks over the whole row; worlds.py)."""
    outputs = []
    for _ in range(draw(st.integers(1, 2))):
        if draw(st.booleans()):
            expr = draw(st.sampled_from(SAMPLE_AGGREGATES))
        else:  # an aggregate of a scalar expression of any type (totality, class 2-3)
            fn = draw(st.sampled_from(["MEDIAN", "AVG", "MAX", "SUM", "COUNT", "STDDEV_POP"]))
            expr = f"{fn}({_value(draw, params)})"
        bounds = draw(st.sampled_from(["0, 100", "-1, 1", "-1e300, 1e300", "5, 5", "0, ?"]))
        if bounds.endswith("?"):
            params.append(draw(st.sampled_from(PARAMS)))
        outputs.append(f"SAMPLE_AGGREGATE({expr}, {bounds})")
    source = draw(st.sampled_from([
        "t", "t", "t LEFT JOIN p ON t.pid = p.pid", "t JOIN p ON t.pid = p.pid",
        "t JOIN u ON t.id = u.id", "p RIGHT JOIN t ON t.pid = p.pid",
        "t WHERE t.id IN (SELECT u.id FROM u)", "(SELECT * FROM t) t"]))
    where = ""
    if draw(st.booleans()):
        where = (" AND " if " WHERE " in source else " WHERE ") + _predicate(draw, params)
    return Query(f"SELECT {', '.join(outputs)} FROM {source}{where}", params,
                 draw(st.sampled_from(["laplace", "laplace", "gaussian"])))


def _keyed_counts(draw, params: list[Any]) -> Query:
    """TPC-H Q13's shape (issue #15, dpsql.analysis.keyed_groups): a histogram over a
    per-key count of a subquery grouped by the join key (a partition-selected key at S = 2),
    and near misses (a collated key, a join on another column: refused)."""
    key = draw(st.sampled_from(["id", "id", "s", "n", "ck"]))  # ck: NOCASE, not the shape
    other = draw(st.sampled_from([key, key, key, "id"]))  # "id" beside another key: refused
    on = f"t.{key} = u.{other}"
    if draw(st.booleans()):
        on += f" AND {_predicate(draw, params, 'u')}"
    source = draw(st.sampled_from([f"t LEFT JOIN u ON {on}", f"t JOIN u ON {on}",
                                   f"t, u WHERE {on}", f"u RIGHT JOIN t ON {on}"]))
    if draw(st.booleans()):
        source += " JOIN p ON t.pid = p.pid"
    count = draw(st.sampled_from(["COUNT(u.n)", "COUNT(*)", "COUNT(DISTINCT u.s)",
                                  "LEAST(COUNT(u.n), 3)"]))  # the last: bins 0..3
    sql = (f"SELECT d.c, COUNT(*) AS m FROM (SELECT t.{key} AS k, {count} AS c FROM {source} "
           f"GROUP BY t.{key}) d GROUP BY d.c")
    ordered = draw(st.booleans())
    if ordered:
        sql += " ORDER BY m DESC, d.c"
    return Query(sql, params, noisy_order=ordered)


@st.composite
def queries(draw) -> Query:
    params: list[Any] = []
    if draw(st.integers(0, 7)) == 0:  # issue #18: sample-and-aggregate
        return _sample_aggregate(draw, params)
    if draw(st.integers(0, 15)) == 0:  # issue #15: a histogram of per-key counts (Q13)
        return _keyed_counts(draw, params)
    if draw(st.integers(0, 15)) == 0:  # the public-only path (dpsql.execute.public)
        return _public_only(draw, params)
    source, alias = _source(draw, params)
    aggregates = draw(st.lists(st.sampled_from([
        "COUNT(*)", "COUNT(A.s)", "SUM(A.n)", "SUM(A.dec)", "AVG(A.x)", "COUNT(DISTINCT A.id)",
        "SUM(A.x)"]), min_size=1, max_size=2, unique=True))
    aggregates = [a.replace("A.", f"{alias}.") for a in aggregates]
    selection = draw(st.integers(0, 5)) == 0
    if selection:  # issue #18: MIN / MAX / quantiles (the exponential mechanism), one argument
        arg = draw(st.sampled_from(SELECTION_ARGS)).replace("A.", f"{alias}.")
        aggregates = [p.format(arg) for p in draw(st.lists(
            st.sampled_from(SELECTIONS), min_size=1, max_size=2, unique=True))]
        if draw(st.integers(0, 5)) == 4:
            aggregates.append("COUNT(*)")  # mixed with a noisy count: refused
    elif draw(st.integers(0, 3)) == 0:  # issue #15: expressions, FILTER, variance (sparingly)
        extra: list[Any] = []
        aggregates.append(_computed_aggregate(draw, extra, alias))
        # the SELECT list comes after a WITH but before any other source in the text
        params[len(params) if source.startswith("__WITH__") else 0:0] = extra
    # h: integer domain values on a VARCHAR column (class 9); pid: a scanned table domain;
    # s: no domain, groups by partition selection (issue #16; ck: the same under a NOCASE
    # collation, refused)
    group = draw(st.sampled_from([None, "g", "pid", "pid", "h", "computed", "computed", "s",
                                  "ck"]))
    by = None
    listed = None  # a key bounded by its own WHERE's IN list (derived_keys.listed_domain)
    if group == "computed" and draw(st.integers(0, 3)) == 0:
        group, listed = draw(st.sampled_from([
            (f"{alias}.n % 2", f"{alias}.n % 2 IN (0, 1)"),
            (f"SUBSTRING({alias}.s, 1, 1)", f"SUBSTRING({alias}.s, 1, 1) IN ('k', 'x')"),
            (f"SUBSTRING({alias}.s, 1, 1)", f"SUBSTRING({alias}.s, 1, 2) IN ('k', 'x')"),  # refused
        ]))
        by = draw(st.sampled_from([group, "1"]))
    elif group == "computed":
        group, by = _computed_key(draw, alias)
    elif group:
        group = f"{alias}.{group}"
    select = ", ".join(([group] if group else []) + aggregates)
    conditions = [listed] if listed else []
    if draw(st.integers(0, 3)):
        conditions.append(_predicate(draw, params, alias))
    if draw(st.integers(0, 7)) == 0:  # a scalar aggregate threshold (released first)
        scalar = draw(st.sampled_from(SCALARS))
        if "?" in scalar:
            params.append(draw(st.sampled_from(PARAMS)))
        scalar = _OUTER_T.sub(f"{alias}.", scalar)  # its outer columns: the query's alias
        conditions.append(f"{_col(draw, alias)[0]} {draw(st.sampled_from(['>', '=', '<']))} "
                          f"{scalar}")
    if draw(st.integers(0, 20)) == 20:  # a long AND chain (class 11); shrinks away
        conditions += [f"{alias}.n <> {i}" for i in range(draw(st.sampled_from([50, 300])))]
    where = ""
    if conditions:
        outer_where = source.startswith("t WHERE ")  # the semi-join sources
        joiner = " AND " if outer_where else " WHERE "
        where = joiner + " AND ".join(conditions)
    with_ = ""
    if source.startswith("__WITH__"):
        name, body = source[len("__WITH__"):].split("__", 1)
        with_ = f"WITH {name} AS {body} "
        source = f"{name} d"
    # (a computed key has no plain column name for the outer query to read)
    block = not with_ and by is None and not selection and draw(st.integers(0, 5)) == 0
    if block:  # the aggregate in a CTE or derived table, post-processed outside (named)
        select = ", ".join(([group] if group else [])
                           + [f"{a} AS a{i}" for i, a in enumerate(aggregates)])
    sql = f"{with_}SELECT {select} FROM {source}{where}"
    if group:
        sql += f" GROUP BY {by or group}"
    if (group and group.endswith((".s", ".ck")) and not block and "?" not in select
            and draw(st.integers(0, 3)) == 0):
        # key-only releases of partition-selected keys (issue #16): the selected keys alone
        sql = f"{with_}SELECT DISTINCT {group} FROM {source}{where}"
    labels = True
    if (group and not block and not selection and not group.endswith((".s", ".ck"))
            and " GROUP BY " in sql and draw(st.integers(0, 5)) == 2):
        # issue #18: top-k by COUNT(*) (Report Noisy Max; a computed key falls back to the
        # noisy histogram, ordered and cut): which labels are released is noise
        count = draw(st.sampled_from(["", ", COUNT(*) AS cnt"]))
        sql = (f"{with_}SELECT {group}{count} FROM {source}{where} GROUP BY {by or group} "
               f"ORDER BY {'cnt' if count else 'COUNT(*)'} DESC LIMIT {draw(st.integers(1, 3))}")
        labels = False
    if block:
        sql = _post_processing(draw, sql, group, len(aggregates), params)
    # qmark order follows the text; _value appended in generation order, which is text order
    # except inside the WITH (generated first, also first in the text)
    return Query(sql, params, draw(st.sampled_from(["laplace", "laplace", "gaussian"])), labels)


def _public_only(draw, params: list[Any]) -> Query:
    """A query the private rules refuse over the public table p (MAX beside COUNT, AVG without
    bounds, a public scalar subquery: run as written, exact), or the same reaching into the
    private t (refused alike, or released privately): never an answer that reads t's rows."""
    head = draw(st.sampled_from([
        "SELECT MAX(p.pid) AS m, COUNT(*) AS n FROM p",
        "SELECT p.name, MIN(p.pid) AS m, AVG(p.pid) AS a FROM p",
        "SELECT (SELECT MAX(q.pid) FROM p AS q) AS m, COUNT(*) AS n FROM p",
    ]))
    where = draw(st.sampled_from([
        "", " WHERE p.pid > ?", " WHERE p.name <> 'two'",
        " WHERE p.pid IN (SELECT t.pid FROM t)",  # a private read: never the public path
        " WHERE EXISTS (SELECT 1 FROM t WHERE t.pid = p.pid)",
        " WHERE p.pid IN (SELECT 1)",
    ]))
    if "?" in where:
        params.append(draw(st.sampled_from([0, 1, 2])))
    group = " GROUP BY p.name" if "p.name," in head else ""
    return Query(f"{head}{where}{group}", params, "laplace")


@st.composite
def unit_queries(draw) -> Query:
    """Queries the unit world (``worlds.metadata(..., unit=True)``) accepts often: ``t`` (its own
    unit table), joined to ``u`` on the unit id or with an EXISTS over ``u``, grouped by the
    partition-selected ``t.s`` (``t.ck``: the same under NOCASE, refused) or the domain key
    ``t.g``, with the grammar's predicates; key-only GROUP BY and DISTINCT forms included."""
    params: list[Any] = []
    if draw(st.integers(0, 3)) == 0:
        return _unit_derived(draw, params)
    source = draw(st.sampled_from(["t", "t JOIN u ON u.id = t.id", "exists"]))
    if source == "exists":
        source = (f"t WHERE EXISTS (SELECT 1 FROM u WHERE u.id = t.id AND "
                  f"{_predicate(draw, params, 'u', 2)})")
    keys = draw(st.sampled_from(["t.s", "t.s", "t.ck", "t.g", "t.s, t.g"]))
    aggregates = draw(st.lists(st.sampled_from(
        ["COUNT(*)", "SUM(t.n)", "AVG(t.x)", "COUNT(t.s)", "SUM(t.dec)"]),
        min_size=0, max_size=2, unique=True))
    where = ""
    if draw(st.booleans()):
        where = (" AND " if " WHERE " in source else " WHERE ") + _predicate(draw, params)
    if not aggregates and draw(st.booleans()):
        sql = f"SELECT DISTINCT {keys} FROM {source}{where}"
    else:
        sql = f"SELECT {', '.join([keys, *aggregates])} FROM {source}{where} GROUP BY {keys}"
    return Query(sql, params, draw(st.sampled_from(["laplace", "laplace", "gaussian"])))


def _unit_derived(draw, params: list[Any]) -> Query:
    """A derived table grouped by the unit id (dpsql.units.derived; TPC-H Q13's shape): in the
    unit world (worlds.unit_metadata) u is the unit table, its id ``u.n``, and t's rows reach
    it through ``t.id -> u.id``: u's rows with their t rows counted (``LEFT JOIN t ON t.id =
    u.id``, the grammar's predicates in the ON or the WHERE), or u alone; near misses too
    (grouped by a non-unit key, t joined off its path). The outer query histograms the count
    (a partition-selected key), its clamp ``LEAST(.., 3)`` (bins 0..3) or sums the clamp.
    (Grouped by t.id or u.id, as before the red team of issue #17, every one was refused.)"""
    inner = draw(st.sampled_from(["left", "inner", "u", "off-path", "non-unit"]))
    on = f" AND {_predicate(draw, params, 't', 1)}" if draw(st.booleans()) else ""
    key = "u.s" if inner == "non-unit" else "u.n"
    if inner == "u":
        source = "u"
    else:
        join = "LEFT JOIN" if inner in ("left", "non-unit") else "JOIN"
        cond = "t.n = u.id" if inner == "off-path" else "t.id = u.id"
        source = f"u {join} t ON {cond}{on}"
    where = f" WHERE {_predicate(draw, params, 'u', 1)}" if draw(st.booleans()) else ""
    counted = draw(st.sampled_from(["COUNT(u.id)" if inner == "u" else "COUNT(t.id)",
                                    "COUNT(*)", "SUM(u.n)"]))
    # D's HAVING runs on exact per-unit values where TRY cannot reach: total comparisons are
    # accepted, a CAST above the aggregate is refused (dpsql.analysis.aggregate_totality)
    col = "u" if inner == "u" else "t"
    having = draw(st.sampled_from(["", "", " HAVING COUNT(*) > 1", f" HAVING SUM({col}.n) >= 0",
                                   f" HAVING CAST(SUM({col}.n) AS SMALLINT) > 0"]))
    derived = (f"SELECT {key}, {counted} AS c, LEAST(COUNT(*), 3) AS l FROM {source}{where} "
               f"GROUP BY {key}{having}")
    outer = draw(st.sampled_from([
        "SELECT d.c, COUNT(*) FROM ({}) AS d GROUP BY d.c",
        "SELECT d.l, COUNT(*), SUM(d.l) FROM ({}) AS d GROUP BY d.l",
        "SELECT SUM(d.l), COUNT(*) FROM ({}) AS d WHERE d.c > 0",
        "SELECT d.c FROM ({}) AS d GROUP BY d.c",
        "WITH d AS ({}) SELECT d.l, AVG(d.l) FROM d GROUP BY d.l",
    ]))
    # without an outer GROUP BY the first column is a value, not a label: compare row counts
    return Query(outer.format(derived), params,
                 draw(st.sampled_from(["laplace", "laplace", "gaussian"])),
                 labels="GROUP BY d." in outer)


@st.composite
def two_unit_queries(draw) -> Query:
    """Queries the two-unit world (``worlds.two_unit_metadata``) releases: ``t`` (reaching both
    units) alone, joined to ``u`` on its path or with an EXISTS over ``u``, COUNT(*) and SUMs
    (of columns and of a fractional expression: R2T's flat reading, dpsql.units.multi_rewrite)
    or COUNT of a column (the grouped pairs), no GROUP BY, with the grammar's predicates."""
    params: list[Any] = []
    source = draw(st.sampled_from(["t", "t JOIN u ON u.id = t.id", "exists"]))
    if source == "exists":
        source = (f"t WHERE EXISTS (SELECT 1 FROM u WHERE u.id = t.id AND "
                  f"{_predicate(draw, params, 'u', 2)})")
    aggregates = draw(st.lists(st.sampled_from(
        ["COUNT(*)", "SUM(t.n)", "SUM(t.x)", "SUM(t.n * 0.37)", "SUM(t.x + t.n)", "AVG(t.x)",
         "COUNT(t.s)"]), min_size=1, max_size=3, unique=True))
    where = ""
    if draw(st.booleans()):
        where = (" AND " if " WHERE " in source else " WHERE ") + _predicate(draw, params)
    sql = f"SELECT {', '.join(aggregates)} FROM {source}{where}"
    return Query(sql, params, draw(st.sampled_from(["laplace", "laplace", "gaussian"])))
