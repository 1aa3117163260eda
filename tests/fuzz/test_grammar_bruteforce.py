"""Brute-force sensitivity over a query grammar (issue #12): for every query the analysis
accepts, no neighbour of a tiny database moves the answer by more than ES(0).

The universe, exact metadata, neighbour enumeration and DuckDB runner are those of
``tests/bruteforce/test_soundness.py`` (tables a, b, c, s private and p public; values
{1, 2, 3}). That file checks one template per rule; this one draws combinations: filters of
every kind (comparisons, column equalities, CASE, COALESCE, arithmetic, IN lists, NOT, OR) on
top of joins, self-joins, LEFT / RIGHT / FULL joins (kept or null-extended side), public joins,
derived tables, UNION ALL, grouped subqueries and IN / EXISTS / NOT IN subqueries, released
as a count, a distinct count, a filtered count, a sum of a clamped expression (issue #15) or a
histogram (over a.x, a function of it, a CASE bucket, or such a key computed in a derived
table), and histograms over a subquery's per-key count (TPC-H Q13's shape, issue #15). For a
pure release it also checks the Gaussian plan's integer move (linf, l2^2; sums
snapped on its grid).
A failure prints the query, the database, the neighbour and both answers: a privacy bug.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import sqlglot
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dpsql.analysis.blocks import analyze_request
from dpsql.analysis.elastic import analyze
from dpsql.errors import Error
from dpsql.metadata.model import SampleAggregate
from tests.bruteforce.sample_blocks import Engine
from tests.bruteforce.test_gaussian import _steps
from tests.bruteforce.test_soundness import (
    _fmt,
    _tol,
    change,
    databases,
    exact_metadata,
    neighbours,
    run_all,
)

EXAMPLES = int(os.environ.get("DPSQL_FUZZ_EXAMPLES", "40"))
PRIVATE = ("a", "b", "s")


def _predicate(draw, alias: str, depth: int = 0) -> str:
    col = lambda: f"{alias}.{draw(st.sampled_from(['x', 'y']))}"  # noqa: E731
    const = lambda: draw(st.sampled_from(["1", "2", "3"]))  # noqa: E731
    choice = draw(st.integers(0, 8 if depth < 2 else 4))
    if choice == 0:
        return f"{col()} {draw(st.sampled_from(['=', '<>', '<', '>=']))} {const()}"
    if choice == 1:
        return f"{col()} = {col()}"
    if choice == 2:
        return f"{col()} IN ({const()}, {const()})"
    if choice == 3:
        return f"{col()} + {col()} > {const()}"
    if choice == 4:
        return f"COALESCE({col()}, 0) <= {const()}"
    if choice == 5:
        return f"NOT ({_predicate(draw, alias, depth + 1)})"
    if choice == 6:
        op = draw(st.sampled_from(["AND", "OR"]))
        return f"({_predicate(draw, alias, depth + 1)} {op} {_predicate(draw, alias, depth + 1)})"
    if choice == 7:
        return (f"CASE WHEN {_predicate(draw, alias, depth + 1)} THEN {col()} ELSE {const()} "
                f"END > 1")
    return f"{col()} BETWEEN {const()} AND {const()}"


@st.composite
def grammar_queries(draw) -> tuple[str, bool]:
    """(SQL, whether it is a histogram)."""
    alias = "a"
    choice = draw(st.integers(0, 13))
    if choice == 13:  # a group key computed in a derived table (dpsql.analysis.derived_keys)
        key = draw(st.sampled_from([
            "a.x % 2", f"CASE WHEN {_predicate(draw, 'a', 1)} THEN 'p' END", "a.x * 10 + a.x"]))
        source, alias = f"(SELECT {key} AS k, a.x, a.y FROM a) d", "d"
    elif choice == 0:
        source = "a"
    elif choice >= 10:  # outer joins: a kept, a null-extended (its columns NULL unmatched), both
        extra = f" AND {_predicate(draw, draw(st.sampled_from(['a', 'b'])))}" if draw(
            st.booleans()) else ""
        source = draw(st.sampled_from([
            f"a LEFT JOIN b ON a.x = b.x{extra}", f"b RIGHT JOIN a ON b.y = a.x{extra}",
            f"b LEFT JOIN a ON b.y = a.x{extra}", f"a FULL JOIN b ON a.y = b.x{extra}",
            "a LEFT JOIN a a2 ON a.x = a2.y", "a RIGHT JOIN a a2 ON a.x = a2.y AND a2.x <> 1",
            "a FULL JOIN a a2 ON a.y = a2.x"]))
    elif choice == 1:
        source = "a JOIN b ON a.x = b.x"
    elif choice == 2:
        source = "a JOIN p ON a.x = p.x"
    elif choice == 3:
        source = "a JOIN a a2 ON a.x = a2.y"
    elif choice == 4:
        source, alias = f"(SELECT a.x, a.y FROM a WHERE {_predicate(draw, 'a')}) d", "d"
    elif choice == 5:
        source, alias = "(SELECT x, y FROM a UNION ALL SELECT x, y FROM b) d", "d"
    elif choice == 6:
        source, alias = "(SELECT x, COUNT(*) AS y FROM a GROUP BY x) d", "d"
    elif choice == 7:
        source = f"a WHERE a.x IN (SELECT b.y FROM b WHERE {_predicate(draw, 'b')})"
    elif choice == 8:
        source = "a WHERE EXISTS (SELECT 1 FROM b WHERE b.x = a.x)"
    else:
        source = "a WHERE a.y NOT IN (SELECT b.x FROM b)"
    aggregate = draw(st.sampled_from(["COUNT(*)", f"COUNT(DISTINCT {alias}.y)"]))
    if draw(st.integers(0, 3)) == 0:  # issue #15: FILTER and sums of clamped expressions
        # (the analyst's clamp is the one dpsql derives, so the SQL run below is what it sums)
        aggregate = draw(st.sampled_from([
            f"COUNT(*) FILTER (WHERE {_predicate(draw, alias)})",
            f"SUM(LEAST(GREATEST({alias}.y * 2 - {alias}.x, 0), 4))",
            f"SUM(CASE WHEN {_predicate(draw, alias)} THEN "
            f"GREATEST(LEAST({alias}.x - {alias}.y, 1), -1) END)",
        ]))
    histogram = (alias == "a" or choice == 13) and draw(st.booleans())
    # computed keys: functions of the declared domain of a.x, CASE buckets with constant
    # results (their bins derived from the metadata); d.k is computed in the derived table
    key = "d.k" if choice == 13 else draw(st.sampled_from([
        "a.x", "a.x", "a.x % 2", "a.x * 10 + a.x", f"CASE WHEN {_predicate(draw, 'a', 1)} "
        "THEN 'p' ELSE 'q' END", f"CASE WHEN {_predicate(draw, 'a', 1)} THEN 1 END"]))
    where = ""
    if draw(st.booleans()):
        outer_where = " WHERE " in source and not source.endswith(") d")
        where = (" AND " if outer_where else " WHERE ") + _predicate(draw, alias)
    if histogram:
        group = draw(st.sampled_from([key, "1"]))  # the key again, or its ordinal
        return f"SELECT {key}, {aggregate} FROM {source}{where} GROUP BY {group}", True
    return f"SELECT {aggregate} FROM {source}{where}", False


def _gaussian_limits(analysis) -> tuple[int, int, float | None] | None:
    """(linf, l2^2, grid) of the Gaussian plan of a pure release, None for a smoothed one."""
    from dpsql.noise import gaussian_plan

    m = analysis.measurements[0]
    es = m.sensitivity.at(0)
    if m.sensitivity.depends_on_k or es == 0:
        return None
    grouped = bool(analysis.group_keys)
    if m.function == "COUNT":
        _, l2, linf = gaussian_plan.count_sigma(es, grouped, 1.0, 1e-6, "analytic")
        return linf, l2, None
    width = max(m.bounds[1], 0.0) - min(m.bounds[0], 0.0)
    _, g, l2, linf = gaussian_plan.sum_sigma(es, width, grouped, 1.0, 1e-6, "analytic")
    return linf, l2, g


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(query=grammar_queries(), db=databases(hi=4))
def test_local_sensitivity_at_most_es0_over_the_grammar(query, db):
    sql, histogram = query
    try:
        analysis = analyze(sql, exact_metadata(db))
    except Error:
        assume(False)  # refused (the fuzzer checks refusals are the same on neighbours)
        return
    assert len(analysis.measurements) == 1
    es0 = analysis.measurements[0].sensitivity.at(0)
    others = list(neighbours(db, PRIVATE))
    # D and every neighbour, each evaluated on its own, in one DuckDB statement
    base, *answers = run_all(sql, [db, *(other for _, other in others)], histogram=histogram)
    gaussian = _gaussian_limits(analysis)
    for (what, _), answer in zip(others, answers, strict=True):
        per_bin, l1 = change(base, answer)
        assert per_bin <= _tol(es0) and l1 <= _tol(es0), (
            f"PRIVACY BUG: {sql}\n  D = {_fmt(db)}\n  neighbour: {what}\n"
            f"  q(D) = {base}, q(D') = {answer}: change {per_bin} (L1 {l1}) > ES(0) = {es0}")
        if gaussian is not None:  # the Gaussian's integer move (dpsql.noise.gaussian_plan)
            linf, l2, grid = gaussian
            for offset in (0.0, 0.5) if grid else (0.0,):
                t = _steps(base, answer, grid, offset)
                assert max(map(abs, t), default=0) <= linf and sum(x * x for x in t) <= l2, (
                    f"PRIVACY BUG (Gaussian): {sql}\n  D = {_fmt(db)}\n  neighbour: {what}\n"
                    f"  steps {t} exceed linf {linf} / l2^2 {l2} (grid {grid})")


@settings(max_examples=max(EXAMPLES // 4, 5), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(query=grammar_queries(), db=databases(hi=4),
       op=st.sampled_from(["<", ">=", "="]), constants=st.lists(
           st.sampled_from([-1, 0, 1, 1.5, 2, 3, 4]), min_size=1, max_size=3, unique=True))
def test_two_phase_sensitivity_holds_for_every_value_of_the_scalar(query, db, op, constants):
    """A scalar aggregate threshold (dpsql.analysis.blocks, two phases): the outer query's ES(0)
    is computed with the subquery as a parameter, and must bound its local sensitivity
    whatever (noisy) value the parameter takes."""
    import sqlglot

    from dpsql.analysis.blocks import BlockQuery, analyze_request

    sql, histogram = query
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    alias = "d" if ") d" in sql else "a"
    scalar = "(SELECT COUNT(*) FROM b WHERE b.x > 1)"
    template = tree.copy().where(f"{alias}.y {op} {scalar}").sql(dialect="duckdb")
    try:
        request = analyze_request(template, exact_metadata(db))
    except Error:
        assume(False)
        return
    assert isinstance(request, BlockQuery)
    # an aggregate over a grouped subquery filtered by the scalar is post-processing of that
    # block's noisy rows instead (no final query; the blocks' bounds are checked elsewhere)
    assume(request.final is not None)
    es0 = request.final.measurements[0].sensitivity.at(0)
    others = list(neighbours(db, PRIVATE))
    for c in constants:
        fixed = tree.copy().where(f"{alias}.y {op} {c}").sql(dialect="duckdb")
        base, *answers = run_all(fixed, [db, *(o for _, o in others)], histogram=histogram)
        for (what, _), answer in zip(others, answers, strict=True):
            per_bin, l1 = change(base, answer)
            assert per_bin <= _tol(es0) and l1 <= _tol(es0), (
                f"PRIVACY BUG: {template} with the scalar = {c}\n  D = {_fmt(db)}\n"
                f"  neighbour: {what}\n  q(D) = {base}, q(D') = {answer} > ES(0) = {es0}")


@settings(max_examples=max(EXAMPLES // 4, 5), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(query=grammar_queries(), db=databases(hi=4), op=st.sampled_from(["<", ">=", "="]),
       lookups=st.lists(st.fixed_dictionaries({x: st.sampled_from([None, -1, 0, 1.5, 2, 3])
                                               for x in (1, 2, 3)}),
                        min_size=1, max_size=2))
def test_a_correlated_lookup_keeps_the_sensitivity_for_every_lookup(query, db, op, lookups):
    """A correlated subquery keyed by one equality (dpsql.analysis.correlated): the outer
    query's ES(0) is computed with the subquery as a parameter, and must bound its local
    sensitivity whatever released histogram the lookup reads (any value per key, NULL too)."""
    import sqlglot

    from dpsql.analysis.blocks import BlockQuery, analyze_request
    from dpsql.rewrite.lookups import lookup_case

    sql, histogram = query
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    alias = "d" if ") d" in sql else "a"
    correlated = f"(SELECT COUNT(*) FROM s WHERE s.x = {alias}.x AND s.v > 0)"
    template = tree.copy().where(f"{alias}.y {op} {correlated}").sql(dialect="duckdb")
    try:
        request = analyze_request(template, exact_metadata(db))
    except Error:
        assume(False)
        return
    assert isinstance(request, BlockQuery)
    assume(request.final is not None)
    (block,) = [b for b in request.blocks if b.lookup is not None]
    assert block.lookup is not None
    es0 = request.final.measurements[0].sensitivity.at(0)
    others = list(neighbours(db, PRIVATE))
    for values in lookups:
        case = lookup_case(block.lookup, sorted(values.items())).sql(dialect="duckdb")
        fixed_sql = tree.copy().where(f"{alias}.y {op} ({case})").sql(dialect="duckdb")
        base, *answers = run_all(fixed_sql, [db, *(o for _, o in others)], histogram=histogram)
        for (what, _), answer in zip(others, answers, strict=True):
            per_bin, l1 = change(base, answer)
            assert per_bin <= _tol(es0) and l1 <= _tol(es0), (
                f"PRIVACY BUG: {template} with the lookup {values}\n  D = {_fmt(db)}\n"
                f"  neighbour: {what}\n  q(D) = {base}, q(D') = {answer} > ES(0) = {es0}")


def _partition_metadata(db):
    """The exact metadata of ``db`` with a.y releasable without a domain: its groups come
    from the data by partition selection (dpsql.noise.partition)."""
    md = exact_metadata(db)
    a = md.tables["a"]
    y = dataclasses.replace(a.columns["y"], releasable=True, partition_selection=True)
    tables = dict(md.tables)
    tables["a"] = dataclasses.replace(a, columns={**a.columns, "y": y})
    return dataclasses.replace(md, tables=tables)


@settings(max_examples=max(EXAMPLES // 2, 5), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(query=grammar_queries(), db=databases(hi=4))
def test_partition_selected_histograms_over_the_grammar(query, db):
    """The grammar's sources and aggregates grouped by a.y, a column without a domain: where
    the analysis accepts it (constant stability S), no neighbour moves a group's count by
    more than ES(0) per group or in L1 (groups absent on one side count 0), and the groups
    themselves (the relation's row counts) move by at most 2S in L1 with at most S groups
    emptied and S created: the premises of the selection's (epsilon, delta) proof."""
    sql, _ = query
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    if tree.args.get("group") is not None:
        assume(False)  # regrouped below (a source aliased d has no a.y: refused, skipped)
    aggregate = tree.expressions[-1].sql(dialect="duckdb")
    rest = sql.split(" FROM ", 1)[1]
    grouped = f"SELECT a.y, {aggregate} FROM {rest} GROUP BY a.y"
    counted = f"SELECT a.y, COUNT(*) FROM {rest} GROUP BY a.y"
    try:
        analysis = analyze(grouped, _partition_metadata(db))
    except Error:
        assume(False)
        return
    _check_selected_histogram(analysis, grouped, counted, db)


def _check_selected_histogram(analysis, grouped: str, counted: str, db) -> None:
    """The premises of partition selection, over every neighbour of ``db``: ``grouped``'s
    value moves by at most ES(0) per group and in L1, and its groups' row counts
    (``counted``) by at most 2S in L1, with at most S groups emptied and S created."""
    assert analysis.partition_selection
    stability = analysis.selection_stability
    assert stability is not None
    es0 = analysis.measurements[0].sensitivity.at(0)
    others = list(neighbours(db, PRIVATE))
    dbs = [db, *(other for _, other in others)]
    base, *answers = run_all(grouped, dbs, histogram=True)
    base_n, *counts = run_all(counted, dbs, histogram=True)
    for (what, _), answer, count in zip(others, answers, counts, strict=True):
        per_bin, l1 = change(base, answer)
        context = f"{grouped}\n  D = {_fmt(db)}\n  neighbour: {what}"
        assert per_bin <= _tol(es0) and l1 <= _tol(es0), (
            f"PRIVACY BUG: {context}\n  q(D) = {base}, q(D') = {answer} > ES(0) = {es0}")
        _, moved = change(base_n, count)
        assert moved <= 2 * stability, f"PRIVACY BUG: {context}: counts move by {moved}"
        assert len(set(base_n) - set(count)) <= stability, context
        assert len(set(count) - set(base_n)) <= stability, context


# --------------------------------------------------------- histograms of per-key counts (#15)

@st.composite
def keyed_count_queries(draw) -> tuple[str, str]:
    """(``SELECT d.n, agg FROM (D) d GROUP BY d.n``, the same with COUNT(*)): D counts per
    key (TPC-H Q13's shape, dpsql.analysis.keyed_groups) over the grammar's joins and
    predicates, with near misses (a private table on another column, the key from the
    null-extended side, a second key) that the analysis must refuse or bound by the general
    rule."""
    extra = f" AND {_predicate(draw, 'b')}" if draw(st.booleans()) else ""
    key, source = draw(st.sampled_from([
        ("a.x", f"a LEFT JOIN b ON a.x = b.x{extra}"),
        ("a.x", f"a JOIN b ON b.x = a.x{extra}"),
        ("b.x", f"a, b WHERE a.x = b.x{extra}"),
        ("a.x", f"a LEFT JOIN b ON a.x = b.x{extra} LEFT JOIN s ON a.x = s.x"),
        ("a.x", f"a LEFT JOIN a a2 ON a.x = a2.x{extra.replace('b.', 'a2.')}"),
        ("a.x", f"a LEFT JOIN b ON a.x = b.x{extra} JOIN p ON a.y = p.x"),
        ("a.x", f"a LEFT JOIN b ON a.y = b.x{extra}"),  # b on another column
        ("b.x", f"a LEFT JOIN b ON a.x = b.x{extra}"),  # the null-extended side's key
        ("a.x, a.y", f"a LEFT JOIN b ON a.x = b.x{extra}"),  # a second key
    ]))
    where = ""
    if draw(st.booleans()):
        where = (" AND " if " WHERE " in source else " WHERE ") + _predicate(draw, "a")
    counted = draw(st.sampled_from(["COUNT(*)", "COUNT(b.y)", "COUNT(DISTINCT b.y)"]))
    if "a2" in source:
        counted = counted.replace("b.", "a2.")
    first = key.split(",")[0]
    sub = f"SELECT {first} AS k, {counted} AS n FROM {source}{where} GROUP BY {key}"
    aggregate = draw(st.sampled_from(["COUNT(*)", "COUNT(DISTINCT d.k)"]))
    return (f"SELECT d.n, {aggregate} FROM ({sub}) d GROUP BY d.n",
            f"SELECT d.n, COUNT(*) FROM ({sub}) d GROUP BY d.n")


@settings(max_examples=max(EXAMPLES // 2, 5), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(query=keyed_count_queries(), db=databases(hi=4))
def test_histograms_of_keyed_counts_over_the_grammar(query, db):
    """Where the analysis accepts a histogram over a subquery's per-key count (its groups by
    partition selection at the constant S the keyed rule gives), no neighbour moves a group's
    value by more than ES(0) per group or in L1, and the groups' row counts move by at most 2S
    in L1 with at most S groups emptied and S created (the selection's premises)."""
    grouped, counted = query
    try:
        analysis = analyze(grouped, exact_metadata(db))
    except Error:
        assume(False)
        return
    _check_selected_histogram(analysis, grouped, counted, db)


# --------------------------------------------------------------------------- selection (#18)

#: the selection aggregates drawn over the grammar's sources (dpsql.analysis.selection_aggregates)
SELECTIONS = ["MIN({y})", "MAX({y})", "MEDIAN({y})", "quantile({y}, 0.3)",
              "quantile_cont({y}, 0.8)", "percentile_disc(0.5) WITHIN GROUP (ORDER BY {y})"]


def _with_y_bounds(md):
    """``md`` with every table's y bounded by [0, 3] (the grid the quantiles choose from)."""
    tables = {}
    for name, table in md.tables.items():
        columns = {c: dataclasses.replace(col, bounds=(0.0, 3.0)) if c == "y" else col
                   for c, col in table.columns.items()}
        tables[name] = dataclasses.replace(table, columns=columns)
    return dataclasses.replace(md, tables=tables)


@st.composite
def selection_queries(draw) -> str:
    """A grammar query with its aggregate replaced by one or two quantiles of the source's y
    (the top-level SELECT's first FROM follows the aggregate: the grammar's keys and
    aggregates hold no FROM)."""
    sql, histogram = draw(grammar_queries())
    _, rest = sql.split(" FROM ", 1)
    alias = "d" if " d WHERE " in f"{rest} " or rest.split(" GROUP BY ")[0].endswith(") d") \
        or ") d " in rest else "a"
    picks = draw(st.lists(st.sampled_from(SELECTIONS), min_size=1, max_size=2, unique=True))
    aggregates = ", ".join(p.format(y=f"{alias}.y") for p in picks)
    key = (sqlglot.parse_one(sql, dialect="duckdb").expressions[0].sql(dialect="duckdb") + ", "
           if histogram else "")
    return f"SELECT {key}{aggregates} FROM {rest}"


@settings(max_examples=max(EXAMPLES // 2, 10), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(sql=selection_queries(), db=databases(hi=4))
def test_quantile_utilities_over_the_grammar(sql, db):
    """Every quantile query the selection analysis accepts over the grammar's sources: on
    every neighbour, each bin's utilities move by at most S and the bins' largest moves sum
    to at most the claimed sensitivity (dpsql.execute.selection; docs/privacy.md)."""
    from dpsql.analysis.selection_aggregates import QuantileQuery, analyze_selection
    from dpsql.execute import layout
    from dpsql.execute.selection import cell_counts, quantile_utilities
    from dpsql.rewrite.plan import plan_execution
    from tests.bruteforce.batch import run_many
    from tests.bruteforce.test_soundness import _CONN, SCHEMA

    md = _with_y_bounds(exact_metadata(db))
    try:
        query = analyze_selection(sql, md)
    except Error:
        assume(False)  # refused (the error fuzzer checks refusals are the same on neighbours)
        return
    assert isinstance(query, QuantileQuery), sql
    plan = plan_execution(query.histogram, md)
    grouped = len(query.histogram.group_keys) > 1
    stability = query.sensitivity / (2.0 if grouped else 1.0)
    domain_rows = run_many(_CONN, plan.domain_sql, [db], SCHEMA)[0]
    # run_many returns values only: the types are those the layout reads (unused here)
    domains = layout.read_domains(plan.n_keys, domain_rows, [""] * (2 + plan.n_keys))
    others = list(neighbours(db, PRIVATE))
    results = run_many(_CONN, plan.exact_sql, [db, *(o for _, o in others)], SCHEMA)

    def utilities(rows) -> list:
        columns = ([np.array(c, dtype=object) for c in zip(*rows, strict=True)] if rows
                   else [np.zeros(0, dtype=object), np.zeros(0, dtype=object)])
        counts = cell_counts(layout.read_bins(domains, [True], columns), query.grid.cells)
        return [quantile_utilities(counts, a) for a in query.aggregates]

    base, *answers = (utilities(r) for r in results)
    for (what, _), answer in zip(others, answers, strict=True):
        for u, v in zip(base, answer, strict=True):
            per_bin = np.abs(u - v).max(axis=1)
            assert per_bin.max() <= stability + 1e-9 and per_bin.sum() <= (
                query.sensitivity + 1e-9), (
                f"PRIVACY BUG: {sql}\n  D = {_fmt(db)}\n  neighbour: {what}\n"
                f"  utilities move {per_bin.tolist()} > S = {stability} / "
                f"{query.sensitivity}")


#: SAMPLE_AGGREGATE expressions over a (issue #18): any scalar SQL of its rows
_SAMPLE_EXPRESSIONS = [
    ("MEDIAN(a.y)", 1, 3), ("AVG(a.x + a.y)", 2, 5), ("MAX(a.y) - MIN(a.x)", -1, 1),
    ("COUNT(*)", 0, 2), ("COUNT(DISTINCT a.y)", 1, 2), ("SUM(a.x * a.y) / COUNT(*)", 1, 4),
    ("QUANTILE_DISC(a.y, 0.5)", 1, 3), ("STDDEV_POP(a.x)", 0, 1),
    ("CASE WHEN COUNT(*) > 2 THEN MIN(a.x) ELSE MAX(a.y) END", 1, 3),
]


@st.composite
def sample_aggregate_queries(draw) -> str:
    """SAMPLE_AGGREGATE over a, alone or with public joins and the grammar's filters; some
    sources the analysis must refuse (another private table, a derived table)."""
    source = draw(st.sampled_from([
        "a", "a", "a JOIN p ON a.x = p.x", "a LEFT JOIN p ON a.y = p.x AND p.g = 1",
        "a WHERE a.x IN (SELECT p.x FROM p)", "a JOIN b ON a.x = b.x",
        "(SELECT a.x, a.y FROM a) a"]))
    outputs = draw(st.lists(st.sampled_from(_SAMPLE_EXPRESSIONS), min_size=1, max_size=3))
    select = ", ".join(f"SAMPLE_AGGREGATE({e}, {lo}, {hi})" for e, lo, hi in outputs)
    where = ""
    if draw(st.booleans()):
        where = (" AND " if " WHERE " in source else " WHERE ") + _predicate(draw, "a")
    return f"SELECT {select} FROM {source}{where}"


@settings(max_examples=max(EXAMPLES // 2, 5), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(sql=sample_aggregate_queries(), db=databases(hi=4), blocks=st.sampled_from([2, 3]),
       by=st.sampled_from(["x", None]))
def test_sample_aggregate_over_the_grammar(sql, db, blocks, by):
    """Where the analysis accepts a SAMPLE_AGGREGATE query, no neighbour (a row of a changed)
    moves any output's clamped block sum by more than the release's 2 (hi - lo)
    (tests/bruteforce/test_sample_aggregate.py's harness: the engine's exact query)."""
    md = exact_metadata(db)
    a = dataclasses.replace(md.tables["a"], sample_aggregate=SampleAggregate(blocks, by))
    md = dataclasses.replace(md, tables={**md.tables, "a": a})
    try:
        engine = Engine(sql, md)
    except Error:
        assume(False)  # refused (the fuzzer checks refusals are the same on neighbours)
        return
    others = list(neighbours(db, ("a",)))
    limit = [o.sensitivity for o in engine.outputs]
    for key in (1, 99):
        base, *answers = engine.sums([db, *(other for _, other in others)], key)
        for (what, _), answer in zip(others, answers, strict=True):
            for j, bound in enumerate(limit):
                assert abs(answer[j] - base[j]) <= _tol(bound), (
                    f"PRIVACY BUG: {sql}\n  D = {_fmt(db)}\n  neighbour: {what}\n  key {key}: "
                    f"S = {base[j]} vs {answer[j]} > 2 (hi - lo) = {bound}")


# --------------------------------------------------------------- partition selection under a unit

def _unit_predicate(draw, depth: int = 0,
                    columns: tuple[str, ...] = ("i.qty", "i.kind", "o.amount", "o.o_cust")
                    ) -> str:
    col = draw(st.sampled_from(columns))
    choice = draw(st.integers(0, 4 if depth < 1 else 2))
    if choice == 0:
        return f"{col} {draw(st.sampled_from(['=', '<>', '<', '>=']))} {draw(st.integers(-1, 4))}"
    if choice == 1:
        return f"{col} IN ({draw(st.integers(0, 3))}, {draw(st.integers(0, 3))})"
    if choice == 2:
        return f"COALESCE({col}, 0) + i.qty > {draw(st.integers(0, 5))}"
    if choice == 3:
        return f"NOT ({_unit_predicate(draw, depth + 1, columns)})"
    op = draw(st.sampled_from(["AND", "OR"]))
    left, right = (_unit_predicate(draw, depth + 1, columns) for _ in range(2))
    return f"({left} {op} {right})"


@st.composite
def unit_selection_queries(draw) -> tuple[str, str]:
    """(a GROUP BY over the partition-selected items.kind under the shop's unit, the plain SQL
    of its rows' keys): items joined to their orders (and customers), or filtered by an
    [NOT] EXISTS / IN over orders, with random filters; aggregates or none (key-only)."""
    source = draw(st.integers(0, 3))
    outer = ("i.qty", "i.kind") if source >= 2 else ("i.qty", "i.kind", "o.amount", "o.o_cust")
    where = f" WHERE {_unit_predicate(draw, 0, outer)}" if draw(st.booleans()) else ""
    keys = "i.kind"
    if source == 0:
        frm = "items i JOIN orders o ON o.o_id = i.i_order"
    elif source == 1:
        frm = ("customer c JOIN orders o ON o.o_cust = c.c_id JOIN items i ON i.i_order = o.o_id")
        keys = draw(st.sampled_from(["i.kind", "c.region, i.kind"]))
    else:
        neg = "NOT " if source == 3 else ""
        inner = _unit_predicate(draw, 1, ("o.amount", "o.o_cust"))
        frm = (f"items i WHERE {neg}EXISTS (SELECT 1 FROM orders o WHERE o.o_id = i.i_order"
               f" AND {inner})")
        where = where.replace(" WHERE ", " AND ")
    aggregates = draw(st.lists(st.sampled_from(
        ["COUNT(*)", "SUM(i.qty)", "COUNT(i.qty)", "AVG(i.qty)"]
        + (["SUM(o.amount)"] if source < 2 else [])), max_size=2, unique=True))
    select = ", ".join([keys, *aggregates])
    return (f"SELECT {select} FROM {frm}{where} GROUP BY {keys}",
            f"SELECT {keys} FROM {frm}{where}")


@settings(max_examples=max(EXAMPLES // 4, 5), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(query=unit_selection_queries(), kappa=st.sampled_from([1, 2]),
       c=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_partition_selection_under_a_unit_over_the_grammar(query, kappa, c, seed):
    """Every accepted query: no group outside the data; adding a unit raises each group's
    ``__n`` by 0 or 1, by at most kappa in L1, creates at most kappa groups at ``__n`` 1; the
    measurements move by at most kappa*C*w in L1 (tests/bruteforce/test_unit_partition.py's
    checks, over every unit removal of three tiny databases)."""
    import random

    from tests.bruteforce.test_unit_partition import check_selection, metadata
    from tests.units import tiny

    sql, relation = query
    md = metadata(kappa, c)
    try:
        analyze_request(sql, md)
    except Error:
        assume(False)
        return
    rng = random.Random(seed)
    check_selection(sql, relation, md, [tiny.random_database(rng) for _ in range(3)])
