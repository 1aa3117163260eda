"""What the session keeps of a sample-and-aggregate query, and one release of it.

:func:`prepare_sample_aggregate` (memoised by the session with the other kinds) analyses,
plans and compiles; :func:`compute` runs the one exact query with a fresh block key, then
clamps, averages and noises (:mod:`.release`). The session owns the order around them:
refusals (:func:`.release.plan_release`, the binder check) before the charge, the charge, then
:func:`compute`, with its refund rules (dpsql.session).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlglot import exp

from dpsql.analysis.blocks import Outputs
from dpsql.analysis.model import OutputColumn
from dpsql.analysis.parse import DIALECT
from dpsql.backends.base import Backend
from dpsql.errors import ProgrammingError
from dpsql.execute.post import Rows
from dpsql.metadata import Metadata
from dpsql.noise import mechanisms
from dpsql.noise.block_key import block_key
from dpsql.sample_aggregate.analysis import SampleAggregateQuery, analyze_sample_aggregate
from dpsql.sample_aggregate.release import OutputNoise, block_answers, noisy_means
from dpsql.sample_aggregate.rewrite import SamplePlan, plan_sample_aggregate


@dataclass(frozen=True)
class PreparedSampleAggregate:
    """An analysed, planned and compiled SAMPLE_AGGREGATE query (parameters vary)."""

    query: SampleAggregateQuery
    plan: SamplePlan
    compiled: str  # the backend's text of plan.exact_sql
    fingerprint: str

    #: always private: the query reads the private table
    public = False

    @cached_property
    def qualified_sql(self) -> str:
        """The qualified query text (the answer-cache key)."""
        return self.query.query.sql(dialect=DIALECT)

    @cached_property
    def tables(self) -> frozenset[str]:
        """The tables the query reads (where a server checks grants)."""
        return frozenset(t.name for t in self.query.query.find_all(exp.Table))

    @cached_property
    def analysis(self) -> Outputs:
        """The output columns, as a block query's (what a server's Describe reads; never a
        group key: the query is scalar)."""
        return Outputs(tuple(OutputColumn(n, "expression", None) for n in self.plan.names))

    def checked_params(self, params: Sequence[Any] | None) -> list[Any]:
        values = list(params or [])
        if len(values) != self.plan.n_params:
            raise ProgrammingError(
                f"the query has {self.plan.n_params} parameter marker(s) '?' but "
                f"{len(values)} parameter(s) were given")
        return values

    def bindings(self, values: Sequence[Any], key: int = 0) -> dict[str, Any]:
        """The exact query's named parameters (key 0 for a binder check: types only)."""
        return self.plan.bindings(values, key)


def prepare_sample_aggregate(sql: str, metadata: Metadata,
                             backend: Backend) -> PreparedSampleAggregate:
    """Analyse, plan and compile ``sql``; raises the analysis's or the backend's refusal."""
    query = analyze_sample_aggregate(sql, metadata)
    # on Spark, backend.compile translates the quantiles (dpsql.backends.spark_quantiles)
    plan = plan_sample_aggregate(query, metadata)
    return PreparedSampleAggregate(query, plan, backend.compile(plan.exact_sql),
                                   _fingerprint(plan.exact_sql))


def _fingerprint(exact_sql: str) -> str:
    """As dpsql.prepared.fingerprint, of the generated SQL (a normal form of the query)."""
    return hashlib.sha256(f"sample_aggregate\n{exact_sql}".encode()).hexdigest()[:16]


def compute(backend: Backend, prepared: PreparedSampleAggregate, values: Sequence[Any],
            outputs: Sequence[OutputNoise], sampler: mechanisms.Sampler | None,
            drawn: Callable[[], None]) -> Rows:
    """One release: a fresh key, the exact read, then (``drawn()`` first) the noisy means."""
    key = block_key(sampler)
    rows, _types = backend.execute(prepared.compiled, prepared.bindings(values, key))
    answers = block_answers(rows, prepared.plan.blocks, len(outputs))
    drawn()
    means = noisy_means(answers, outputs, sampler)
    return prepared.plan.names, tuple("DOUBLE" for _ in outputs), [tuple(means)]
