"""The execution plan: the SQL dpsql actually runs, never the analyst's text.

From a :class:`~dpsql.analysis.elastic.QueryAnalysis`, :func:`plan_execution` runs the rewrite
passes (:data:`PASSES`, each ``fn(expr, *, ctx) -> expr``, in order) over the analyst's
qualified query and writes the result in the exact-result layout (:mod:`dpsql.execute.layout`):

* the *exact* query, run by the backend on private data: the measurements ``__m<j>`` per
  non-empty bin inside the declared domains; SUM arguments clamped to their bounds; every
  expression that could raise a data-dependent error wrapped in TRY (or proved total); ``x NOT
  IN (subquery)`` with NOT EXISTS semantics;
* the *domain* query (GROUP BY only), reading public data only;
* the *post-processing* query, run on an in-memory table of NOISY values only.

Contract: with noise switched off, the plan returns exactly what the analyst's SQL returns on
the same data (for group keys, restricted to and completed with the declared domain, itself
narrowed by the query's conditions on the key column; for SUM, when the data lie inside the
bounds; for NOT IN, when the subquery has no NULLs). Which bins are released never depends on
private data, and a SUM clamp is left out only where it cannot change any value.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dpsql.analysis.elastic import QueryAnalysis
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.trees import copy_tree
from dpsql.execute import layout
from dpsql.metadata import Metadata
from dpsql.rewrite.clamps import clamp_measurements
from dpsql.rewrite.context import Removable, RewriteContext, StoredData
from dpsql.rewrite.domains import domain_relations, relation_sql
from dpsql.rewrite.not_in import not_in_as_not_exists, null_safe_not_in
from dpsql.rewrite.ordered import order_inner_aggregates
from dpsql.rewrite.parameters import bind_params, number_parameters, used_params
from dpsql.rewrite.post import (
    NOISY_TABLE,
    AvgInterval,
    OutputSpec,
    avg_intervals,
    build_post,
    fast_order,
    fast_path,
)
from dpsql.rewrite.totality import check_literals_pass, make_total_pass
from dpsql.units.flat_counts import flat_unit_ids
from dpsql.units.multi_rewrite import guarded_flat
from dpsql.units.rewrite import one_row_levels, unit_contributions

__all__ = ["NOISY_TABLE", "PASSES", "ExecutionPlan", "plan_execution"]


def exact_shape(query: exp.Select, *, ctx: RewriteContext) -> exp.Select:
    """Pass: a copy of the (parameter-numbered) query without what post-processing does
    (ORDER BY, LIMIT, OFFSET, HAVING, DISTINCT); the original is kept in ``ctx.numbered``."""
    ctx.numbered = query
    inner = copy_tree(query)
    for arg in ("order", "limit", "offset", "having", "distinct"):
        inner.set(arg, None)
    return inner


Pass = Callable[..., exp.Expression]

#: The exact query's passes, in order. Literals are checked on the query as written (HAVING and
#: the post-processed outer query included) before its shape is cut. Totality and NOT IN
#: semantics apply to CTE bodies too,
#: so they run before the select list is replaced; the null-safe NOT IN form needs to know
#: which comparisons totality left plain; domains read the clamps pass's outer tables; under a
#: privacy unit, each unit's contribution is bounded last (the identity without a unit).
PASSES: tuple[Pass, ...] = (
    number_parameters,
    check_literals_pass,
    exact_shape,
    not_in_as_not_exists,
    make_total_pass,
    null_safe_not_in,
    order_inner_aggregates,
    clamp_measurements,
    domain_relations,
    unit_contributions,
)


@dataclass(frozen=True)
class ExecutionPlan:
    """The exact query for the backend, and how to post-process its noisy values."""

    exact_sql: str  # what the backend runs
    exact_params: tuple[int, ...]  # positions of the analyst's parameters it uses, in order
    n_keys: int
    n_measurements: int
    output_names: tuple[str, ...]
    post_sql: str | None  # over NOISY_TABLE; None when the fast path below suffices
    post_params: tuple[int, ...]
    fast_path: tuple[OutputSpec, ...] | None
    #: ORDER BY for the fast path: (output column, descending), most significant first
    fast_order: tuple[tuple[int, bool], ...] = ()
    #: per measurement: a COUNT (integer) or a SUM
    integer_measurements: tuple[bool, ...] = ()
    #: ``exact_sql`` with every SUM clamp in place: a normal form of the query that does not
    #: depend on the data (what the engine fingerprints); "" when it is ``exact_sql`` itself
    canonical_sql: str = ""

    #: with GROUP BY: the domain query (public data only, run before the charge; see
    #: :mod:`dpsql.execute.layout`)
    domain_sql: str | None = None
    domain_params: tuple[int, ...] = ()
    #: ``domain_sql`` reads nothing but constants and tables the backend registered
    #: (dpsql.rewrite.domains): its result, for given parameters, is the same at every run
    #: while the backend is open (dpsql.execute.exact.DomainMemo keeps it)
    domains_fixed: bool = False
    #: with a partition-selected key: ``exact_sql`` is the groups query
    #: (:func:`dpsql.execute.layout.write_selected`), whose groups the session selects by DP
    selected: bool = False
    #: the queries run instead of ``exact_sql`` (same parameters) when it returns more
    #: rows than its guard allows: plain counts and SUMs over two privacy units read their
    #: rows flat, and past dpsql.units.multi_rewrite.FLAT_ROWS group them in the database; a
    #: SUM under one unit read per unit is read as one row of levels by a backend that is not
    #: columnar (dpsql.units.rewrite.one_row_levels); a COUNT(*) under one unit over many
    #: units is read as one id per row by one that is (dpsql.units.flat_counts, up to its
    #: guard: the same levels). Compiled while preparing, like every
    #: query a plan may run, so reaching it (which depends on the data) can never meet a
    #: compile error.
    fallback_sql: tuple[str, ...] | None = None
    #: the output columns that are a bare AVG, for their per-row intervals
    #: (dpsql.release.avg_rows; none under DISTINCT), and ``post_sql`` with each one's noisy
    #: SUM and COUNT after the columns (None without ``post_sql``; dpsql.rewrite.post)
    avg_intervals: tuple[AvgInterval, ...] = ()
    avg_post_sql: str | None = None

    def exact_bindings(self, params: Sequence[Any]) -> dict[str, Any]:
        """Every named parameter ``exact_sql`` takes, from the analyst's qmark ``params``."""
        return self._bindings(self.exact_params, params)

    def domain_bindings(self, params: Sequence[Any]) -> dict[str, Any]:
        """Every named parameter ``domain_sql`` takes."""
        return self._bindings(self.domain_params, params)

    def _bindings(self, positions: tuple[int, ...], params: Sequence[Any]) -> dict[str, Any]:
        return bind_params(positions, params)

    @property
    def normal_form(self) -> str:
        """The exact SQL with every clamp (see ``canonical_sql``)."""
        return self.canonical_sql or self.exact_sql

    @property
    def n_params(self) -> int:
        """How many ``?`` values the plan takes (the highest position used, plus one)."""
        used = set(self.exact_params) | set(self.domain_params) | set(self.post_params)
        return max(used) + 1 if used else 0


def _with_and_without_clamps(tree: exp.Expression, removable: Sequence[Removable]
                             ) -> tuple[str, str | None]:
    """The SQL of ``tree`` (which this consumes) with every clamp, and without the
    ``removable`` ones, each replaced by its column (None when there are none).

    Generated once: each removable clamp is replaced by a marker column whose name holds a
    fresh random token, and each marker, found exactly once in the generated template, is
    then replaced by the clamp's text or the column's (both single operands, whose text does
    not depend on what surrounds them). Should a marker occur other than once, or in a
    replacement's text (no analyst can write the token), both statements are generated in
    full instead."""
    if not removable:
        return tree.sql(dialect=DIALECT, copy=False), None
    token = secrets.token_hex(8)
    swaps: list[tuple[str, str, str]] = []  # (marker, clamp's text, column's text)
    markers = []
    for i, (clamp, column) in enumerate(removable):
        name = f"__dpsql_clamp_{i}_{token}"  # no marker's name contains another's
        swaps.append((name, clamp.sql(dialect=DIALECT), column.sql(dialect=DIALECT)))
        marker = exp.column(name)
        clamp.replace(marker)
        markers.append((marker, clamp, column))
    template = tree.sql(dialect=DIALECT, copy=False)
    if all(template.count(name) == 1 and not any(name in text for _, *texts in swaps
                                                  for text in texts)
           for name, _, _ in swaps):
        canonical = exact = template
        for name, clamp_sql, column_sql in swaps:
            canonical = canonical.replace(name, clamp_sql)
            exact = exact.replace(name, column_sql)
        return canonical, exact
    for marker, clamp, _ in markers:  # a marker's text occurs elsewhere
        marker.replace(clamp)
    canonical = tree.sql(dialect=DIALECT, copy=False)
    for _, clamp, column in markers:
        clamp.replace(copy_tree(column))
    return canonical, tree.sql(dialect=DIALECT, copy=False)


def plan_execution(analysis: QueryAnalysis, metadata: Metadata | None = None,
                   stored: StoredData | None = None) -> ExecutionPlan:
    """Run :data:`PASSES` over ``analysis``'s query and lay out the result (module contract).

    Pass the ``metadata`` the query was analysed with: its declared column types spare TRY and
    DOUBLE casts that cannot matter.

    ``stored`` (the session's view of what the backend promises about stored data) allows two
    shortcuts that change no released value, only the running time (which the database's own
    plans already make data-dependent; timing is outside dpsql's privacy model,
    docs/privacy.md):

    * a SUM runs without its clamp when every stored value of its column lies inside the
      bounds: the clamp is then the identity on every row. The fingerprint analysts see is
      taken from ``canonical_sql``, which keeps every clamp, so it does not reveal whether the
      data fit;
    * a public table's domain is inlined as its (public) value list instead of a DISTINCT scan
      in every query (TPC-H Q16 at SF10: ~15 ms of ~230).
    """
    selected = analysis.partition_selection
    if not selected:  # selected groups are capped after the selection (noise.partition)
        layout.check_bins(math.prod(len(k.domain.values) for k in analysis.group_keys
                                    if k.domain.values is not None))
    ctx = RewriteContext(analysis, metadata, stored)
    tree: exp.Expression = analysis.query
    for rewrite in PASSES:
        tree = rewrite(tree, ctx=ctx)
    query = ctx.numbered
    assert query is not None
    n = len(analysis.measurements)
    write: Callable[[str], layout.ExactSQL]
    if selected:
        # each group's row count, what the partition selection thresholds; a unit's two-stage
        # query returns its own (its kept units and rows of no unit: dpsql.units.rewrite)
        assert isinstance(tree, exp.Select)
        if not any(e.alias_or_name == "__n" for e in tree.expressions):
            tree.select(exp.alias_(exp.Count(this=exp.Star()), "__n", copy=False), copy=False)
        optional = [None if d is None else relation_sql(d) for d in ctx.domains]
        write = lambda inner: layout.write_selected(inner, optional, n)  # noqa: E731
    else:
        domain_sqls = [relation_sql(d) for d in ctx.domains if d is not None]
        write = lambda inner: layout.write(inner, domain_sqls, n)  # noqa: E731
    # The exact tree is a fresh copy owned here: generate without another copy.
    canonical_sql, exact_sql = _with_and_without_clamps(tree, ctx.removable)
    canonical = write(canonical_sql)
    exact = canonical if exact_sql is None else write(exact_sql)
    fast = fast_path(analysis, query)
    order = fast_order(analysis, query) if fast is not None else None
    if order is None:
        fast, order = None, ()
    # With a fast path the SQL is built only if the session needs it (post_processing_sql:
    # an ORDER BY over group-key values that do not sort in Python, NULL or mixed types).
    post_sql = (None if fast is not None
                else build_post(analysis, query).sql(dialect=DIALECT, copy=False))
    averages = avg_intervals(analysis, query)
    avg_post_sql = (None if post_sql is None or not averages
                    else build_post(analysis, query, averages).sql(dialect=DIALECT, copy=False))
    exact_sql, fallback_sql = exact.bins_sql, None
    flat = guarded_flat(exact_sql, analysis.unit, ctx.sum_exponents)
    if flat is not None:
        exact_sql, fallback_sql = flat
    elif (one_row := one_row_levels(exact_sql, analysis.unit)) is not None:
        fallback_sql = (one_row,)  # a backend that is not columnar reads the levels as one row
    elif (flat_ids := flat_unit_ids(exact_sql, analysis.unit)) is not None:
        fallback_sql = (flat_ids,)  # over many units a columnar backend counts the ids flat
    return ExecutionPlan(
        exact_sql=exact_sql,
        exact_params=used_params(exact_sql),
        n_keys=len(analysis.group_keys),
        n_measurements=n,
        output_names=tuple(c.name for c in analysis.columns),
        post_sql=post_sql,
        post_params=used_params(post_sql) if post_sql else (),
        fast_path=fast,
        fast_order=order,
        integer_measurements=tuple(m.integer for m in analysis.measurements),
        canonical_sql="" if exact is canonical else canonical.bins_sql,
        domain_sql=exact.domain_sql,
        domain_params=used_params(exact.domain_sql) if exact.domain_sql else (),
        selected=selected,
        domains_fixed=ctx.domains_fixed and exact.domain_sql is not None,
        fallback_sql=fallback_sql,
        avg_intervals=averages,
        avg_post_sql=avg_post_sql,
    )
