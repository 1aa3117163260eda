"""Running a query of several releases (dpsql.analysis.blocks): its plans, and the work after
the charge.

:func:`prepare_blocks` plans and compiles every release of a :class:`BlockQuery` (each block,
then the final query of a two-phase one) and the post-processing query; nothing reads data.
:func:`compute` is what the session runs once the request is charged. The releases run in
order (a scalar block before the releases that use its value):

* without scalars bound as constants, every release's exact values are read first (a failure
  there is before any noise: refunded); then each block is noised and post-processed into its
  table ``__b<i>`` in the post-processing DuckDB, and the analyst's outer query runs over those
  tables only (and copies of the public tables it reads);
* with them, each release is read once the scalars it uses are released: a scalar block is
  read, noised and post-processed into its one value, bound as its parameter for the later
  releases (a threshold inside a block, or the final query of two phases). From the first
  noise on, a failure stands charged (the session's rule: it may depend on noisy values);
* a correlated subquery released as a histogram (dpsql.analysis.correlated) is read the same
  way, its noisy rows becoming the lookup that replaces its parameter in the final query's
  exact SQL (dpsql.rewrite.lookups), compiled once they are released; the lookup's form is
  compiled and bound before the charge (``Part.lookup_form``), its size checked against
  MAX_LOOKUP on the domain (public data).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

import numpy as np

from dpsql.analysis.blocks import BlockQuery, Outputs
from dpsql.analysis.correlated import Lookup
from dpsql.analysis.elastic import QueryAnalysis
from dpsql.analysis.parse import DIALECT
from dpsql.backends.base import Backend
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.execute.exact import CompiledPlan, compile_plan, read_bins
from dpsql.execute.layout import Bins, Domains
from dpsql.execute.post import PostProcessor, Rows
from dpsql.execute.post_check import check_rows, check_tables, measurement_dtypes
from dpsql.execute.typed import clamp_block_counts
from dpsql.metadata import Metadata
from dpsql.noise import mechanisms
from dpsql.noise.apply import noisy_values
from dpsql.noise.plan import NoisePlan, is_public_query
from dpsql.release.record import ColumnSource
from dpsql.rewrite.context import StoredData
from dpsql.rewrite.lookups import MAX_LOOKUP, LookupSQL, lookup_case, with_lookups
from dpsql.rewrite.parameters import used_params
from dpsql.rewrite.plan import plan_execution
from dpsql.rewrite.post import post_processing_sql, public_table_sql


@dataclass(frozen=True)
class Part:
    """One release of the request: a block, or the final query of a two-phase one."""

    label: str  # the record's prefix: the block's name, "" for the final query
    table: str | None  # blocks, then post-processing: the table of its noisy rows
    analysis: QueryAnalysis
    compiled: CompiledPlan
    columns: tuple[ColumnSource, ...]
    #: a scalar block bound as a constant of later releases: its parameter position
    param: int | None = None
    #: a histogram read as a lookup by later releases (dpsql.analysis.correlated)
    lookup: Lookup | None = None
    #: a release reading lookups: its exact query with each lookup empty (what the binder
    #: checks before the charge; the real one is compiled once the histograms are released)
    lookup_form: CompiledPlan | None = None


@dataclass(frozen=True)
class PublicRead:
    """A public table the post-processing query reads: its declared columns and types, and
    the backend's query reading them."""

    table: str
    columns: tuple[str, ...]
    types: tuple[str | None, ...]
    compiled: str


#: a public table's rows as read: (table, columns, types, rows)
PublicRows = tuple[str, tuple[str, ...], tuple[str | None, ...], list[tuple[Any, ...]]]


@dataclass(frozen=True)
class PreparedBlocks:
    """A planned and compiled query of several releases (the session's ``Prepared`` for it)."""

    request: BlockQuery
    parts: tuple[Part, ...]  # the blocks in order, then the final query (two phases)
    fingerprint: str
    post_sql: str | None  # blocks, then post-processing: the analyst's query over __b<i>
    post_params: tuple[int, ...] = ()
    #: the public tables ``post_sql`` reads, copied in before the charge
    public_reads: tuple[PublicRead, ...] = ()

    @property
    def qualified_sql(self) -> str:
        return self.request.qualified_sql

    @property
    def tables(self) -> frozenset[str]:
        return self.request.tables

    @property
    def analysis(self) -> QueryAnalysis | Outputs:
        return self.request.analysis

    @property
    def n_params(self) -> int:
        return self.request.n_params

    @property
    def n_scalars(self) -> int:
        """The scalar blocks bound as parameters n_params.. of later releases."""
        return self.request.n_scalars

    @cached_property
    def public(self) -> bool:
        return all(is_public_query(p.analysis) for p in self.parts)

    def part_params(self, values: Sequence[Any]) -> list[Any]:
        """The parameters every part is checked against before the charge: the analyst's, then
        each scalar as 0.0 (a binder depends on types only; no domain reads a scalar)."""
        return list(values) + [0.0] * self.n_scalars


def _sources(analysis: QueryAnalysis) -> tuple[ColumnSource, ...]:
    return tuple(ColumnSource(c.name, c.measurements, c.bare_aggregate, c.function)
                 for c in analysis.columns)


def prepare_blocks(request: BlockQuery, backend: Backend, metadata: Metadata,
                   stored: StoredData | None) -> PreparedBlocks:
    """Plan and compile every release of ``request`` (reads no data; raises the planner's
    and the backend's refusals, which depend on the SQL and metadata alone)."""
    parts: list[Part] = []
    scalars = set(range(request.n_params, request.n_params + request.n_scalars))
    releases = [(b.name, b.table if request.post is not None and b.param is None else None,
                 b.analysis, b.param, b.lookup) for b in request.blocks]
    if request.final is not None:
        releases.append(("", None, request.final, None, None))
    empty = {b.param: lookup_case(b.lookup, []) for b in request.blocks
             if b.lookup is not None and b.param is not None}
    for label, table, analysis, param, lookup in releases:
        if analysis.partition_selection:
            # one selection per request is what dpsql.noise.partition plans and proves
            raise NotSupportedError(
                "a GROUP BY key without a declared domain (partition_selection) is supported "
                "only in a query that makes one release: move the grouped aggregate to the "
                "outer SELECT, or ask the owner to declare the column's domain"
            )
        plan = plan_execution(analysis, metadata, stored)
        if scalars & set(plan.domain_params):
            # the bins would be narrowed by a noisy value, and the bin count is checked before
            # the charge, when no noisy value exists yet
            raise NotSupportedError(
                "a scalar aggregate subquery is compared with a GROUP BY key, so which bins "
                "exist would depend on its noisy value: compare it with an aggregate (HAVING) "
                "or with a column that is not a key"
            )
        form = (compile_plan(backend, with_lookups(plan, empty))
                if empty.keys() & set(plan.exact_params) else None)
        parts.append(Part(label, table, analysis, compile_plan(backend, plan),
                          _sources(analysis), param, lookup, form))
    post_sql = None
    reads = []
    if request.post is not None:
        post_sql = request.post.sql(dialect=DIALECT)
        for name in request.public_tables:
            declared = metadata.table(name).columns.values()
            columns = tuple(c.name for c in declared)
            reads.append(PublicRead(name, columns, tuple(c.type for c in declared),
                                    backend.compile(public_table_sql(name, columns))))
    text = "\n".join([*(p.compiled.plan.normal_form for p in parts),
                      *(p.compiled.plan.post_sql or "" for p in parts), post_sql or ""])
    return PreparedBlocks(request, tuple(parts), hashlib.sha256(text.encode()).hexdigest()[:16],
                          post_sql, used_params(post_sql) if post_sql else (), tuple(reads))


def read_public(backend: Backend, prepared: PreparedBlocks) -> list[PublicRows]:
    """The rows of every public table the post-processing query reads (public data: read
    before the charge, like the domains)."""
    out = []
    for read in prepared.public_reads:
        rows, _ = backend.execute(read.compiled, {})
        out.append((read.table, read.columns, read.types, rows))
    return out


def check_lookups(prepared: PreparedBlocks, domains: Sequence[Domains]) -> None:
    """Before the charge: each histogram read as a lookup has at most MAX_LOOKUP bins (its
    domain's size: public data and the SQL)."""
    for part, d in zip(prepared.parts, domains, strict=True):
        if part.lookup is not None and d.n_bins > MAX_LOOKUP:
            raise NotSupportedError(
                f"the correlated subquery {part.label} is released as {d.n_bins} bins, one per "
                f"value of its key, more than the {MAX_LOOKUP} dpsql reads as a lookup: "
                "restrict the outer query's public table (a WHERE on its columns) or the "
                "subquery's key (a WHERE on it)"
            )


def check_post(post: PostProcessor, prepared: PreparedBlocks, checked: list[Any],
               domains: Sequence[Domains], public: Sequence[PublicRows] = ()) -> None:
    """Before the charge: every release's post-processing SQL, and the analyst's query over the
    blocks, bound over empty tables of their types (dpsql.execute.post_check; ``checked``: the
    parameters with each scalar as 0.0, as the binder check uses them)."""
    tables = []
    for part, d in zip(prepared.parts, domains, strict=True):
        dtypes = measurement_dtypes([m.function for m in part.analysis.measurements])
        if part.table is not None:
            tables.append((part.table, _post_sql(part), d, dtypes))
        elif part.compiled.plan.post_sql is not None:
            plan = part.compiled.plan
            check_rows(post.cursor(), part.compiled.plan.post_sql, plan.post_params, checked, d,
                       dtypes)
    if prepared.post_sql is not None:
        check_tables(post.cursor(), tables, checked, prepared.post_sql, prepared.post_params,
                     public)


def compute(backend: Backend, post: PostProcessor, prepared: PreparedBlocks,
            values: list[Any], plans: Sequence[tuple[NoisePlan, ...]],
            domains: Sequence[Domains], sampler: mechanisms.Sampler | None,
            noise_drawn: Callable[[], None], public: Sequence[PublicRows] = (),
            raw_counts: bool = False) -> Rows:
    """The analyst's rows (module docstring). Call only once the request is charged;
    ``noise_drawn`` is called before the first noise is drawn. A block table's bare COUNT
    columns are clamped at 0 unless ``raw_counts`` (dpsql.execute.typed)."""
    parts = prepared.parts
    bound: list[Any] = list(values) + [None] * prepared.n_scalars
    # Without scalars to bind, every exact read comes before any noise (a failed read is then
    # refunded); with them, each release is read once the scalars it uses are released.
    ahead = [] if any(p.param is not None for p in parts) else [
        read_bins(backend, p.compiled, bound, d) for p, d in zip(parts, domains, strict=True)]
    tables = []
    lookups: dict[int, LookupSQL] = {}
    for i, part in enumerate(parts):
        compiled = part.compiled
        if part.lookup_form is not None:  # the released histograms it reads, as lookups
            compiled = compile_plan(backend, with_lookups(compiled.plan, lookups))
        b = ahead[i] if ahead else read_bins(backend, compiled, bound, domains[i])
        noise_drawn()
        noisy = _noised(b, plans[i], sampler)
        if part.table is not None:
            if not raw_counts:
                noisy = clamp_block_counts(part.analysis, noisy)
            tables.append((part.table, _post_sql(part), b, noisy))
            continue
        rows = post.rows(part.compiled.plan, b, noisy, bound,
                         partial(post_processing_sql, part.analysis))
        if part.param is None:  # the final query of two phases
            return rows
        if part.lookup is not None:
            lookups[part.param] = lookup_case(part.lookup, rows[2])
            continue
        bound[part.param] = _scalar(rows[2], part.label)
    assert prepared.post_sql is not None
    return post.over_tables(tables, bound, prepared.post_sql, prepared.post_params,
                            prepared.request.output_names, public)


def _noised(bins: Bins, plans: tuple[NoisePlan, ...],
            sampler: mechanisms.Sampler | None) -> list[np.ndarray]:
    return [noisy_values(bins.exact[j], plans[j], sampler) for j in range(len(plans))]


def _post_sql(part: Part) -> tuple[str, tuple[int, ...]]:
    plan = part.compiled.plan
    if plan.post_sql is not None:
        return plan.post_sql, plan.post_params
    return post_processing_sql(part.analysis)


def _scalar(rows: list[tuple[Any, ...]], label: str) -> Any:
    """A scalar subquery's value: NULL without a row (its HAVING dropped it), as in SQL."""
    if not rows:
        return None
    if len(rows) != 1 or len(rows[0]) != 1:  # the analysis allows one column, no GROUP BY
        raise ProgrammingError(f"the scalar subquery {label} returned {len(rows)} rows")
    value = rows[0][0]
    return value.item() if isinstance(value, np.generic) else value
