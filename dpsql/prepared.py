"""What a session keeps of a query between executions: the analysed, rewritten and compiled
:class:`Prepared` query, its fingerprint, and the checks of an execution's parameters."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from dpsql.analysis.checks import tables_read
from dpsql.analysis.elastic import QueryAnalysis
from dpsql.analysis.output_types import OutputRule
from dpsql.analysis.parse import DIALECT
from dpsql.errors import ProgrammingError
from dpsql.execute.blocks import PreparedBlocks
from dpsql.execute.exact import CompiledPlan
from dpsql.execute.public import PreparedPublic
from dpsql.execute.selection import PreparedSelection
from dpsql.noise.plan import is_public_query
from dpsql.release.record import ColumnSource
from dpsql.rewrite.literal_casts import ParameterType
from dpsql.rewrite.plan import ExecutionPlan
from dpsql.sample_aggregate.prepared import PreparedSampleAggregate


@dataclass(frozen=True)
class Prepared:
    """An analysed, rewritten and compiled query, reusable across executions (parameters
    vary). Everything here depends on the SQL, the metadata and the schema alone."""

    analysis: QueryAnalysis
    compiled: CompiledPlan
    fingerprint: str
    #: the release record's view of each output column
    columns: tuple[ColumnSource, ...] = field(default=())
    #: how each output column is typed and finished after the noise (dpsql.execute.typed)
    outputs: tuple[OutputRule, ...] = field(default=())
    #: each ``?`` compared with a typed column, and that type (dpsql.rewrite.literal_casts)
    param_types: tuple[ParameterType, ...] = field(default=())

    @property
    def plan(self) -> ExecutionPlan:
        """The execution plan (the SQL dpsql generated, before the backend compiled it)."""
        return self.compiled.plan

    @cached_property
    def qualified_sql(self) -> str:
        """The qualified query text (the answer-cache key), generated on first use."""
        return self.analysis.query.sql(dialect=DIALECT)

    @cached_property
    def tables(self) -> frozenset[str]:
        """The tables the query reads (CTE names excluded): where a server checks grants."""
        return tables_read(self.analysis.query)

    @cached_property
    def public(self) -> bool:
        """True when the query reads public tables only: answered exactly, for free."""
        return is_public_query(self.analysis)


#: what Session.prepare gives: one release, several (aggregates in CTEs / subqueries), a
#: selection (MIN / MAX / quantiles, top-k: dpsql.execute.selection), or a sample-and-aggregate
#: release (dpsql.sample_aggregate)
AnyPrepared = (Prepared | PreparedBlocks | PreparedSelection | PreparedSampleAggregate
               | PreparedPublic)


def fingerprint(sql: str) -> str:
    """A stable fingerprint of the normalised query text (ledger history, cache keys)."""
    return hashlib.sha256(sql.encode()).hexdigest()[:16]


def checked_params(plan: ExecutionPlan, params: Sequence[Any] | None) -> list[Any]:
    values = list(params or [])
    if len(values) != plan.n_params:
        raise ProgrammingError(
            f"the query has {plan.n_params} parameter marker(s) '?' but {len(values)} "
            "parameter(s) were given"
        )
    return values


def column_sources(analysis: QueryAnalysis) -> tuple[ColumnSource, ...]:
    return tuple(ColumnSource(c.name, c.measurements, c.bare_aggregate, c.function)
                 for c in analysis.columns)
