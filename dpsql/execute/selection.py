"""Selection releases (dpsql.analysis.selection_aggregates): quantiles by the exponential
mechanism over a public grid, top-k keys by Report Noisy Max (dpsql.noise.selection).

The exact read uses the ordinary exact-result layout (dpsql.execute.layout): a quantile query's
histogram analysis has the grid cell as its *last* group key, so the bins query returns the
row count of every non-empty (bin of the analyst's keys, cell) pair and :func:`cell_counts`
reads it back as a ``(bins, cells)`` matrix, cells varying fastest. One private read per
query; every refusal (:func:`check_budget`, the domain query's bin limit, the binder) comes
before the charge and depends on the SQL, the metadata and epsilon/delta only.

Budget: a quantile query spends epsilon / (number of distinct aggregates) on each; a top-k
query spends all of epsilon on the selection, or half on the selection and half on the
released COUNT(*) of the chosen keys (discrete Laplace at ES = 2 S) when the select list has
one. The mechanisms are pure: the record's delta is 0.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dpsql.analysis.checks import tables_read
from dpsql.analysis.model import QueryAnalysis
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.selection_aggregates import (
    QuantileQuery,
    TopKQuery,
    analyze_selection,
    epsilon_shares,
)
from dpsql.analysis.selection_grid import SelectionAggregate
from dpsql.backends.base import Backend
from dpsql.budget import Budget
from dpsql.errors import NotSupportedError
from dpsql.execute.exact import CompiledPlan, compile_plan, read_bins
from dpsql.execute.layout import Bins, Domains
from dpsql.execute.post import PostProcessor, Rows
from dpsql.metadata import Metadata
from dpsql.noise import mechanisms, selection
from dpsql.noise.apply import noisy_values
from dpsql.noise.plan import NoisePlan, plan_noise
from dpsql.release.record import CONFIDENCE, ColumnRelease, Release
from dpsql.rewrite.context import StoredData
from dpsql.rewrite.plan import ExecutionPlan, plan_execution
from dpsql.rewrite.post import post_processing_sql

EXPONENTIAL = "exponential"
REPORT_NOISY_MAX = "report_noisy_max"


@dataclass(frozen=True)
class PreparedSelection:
    """A planned and compiled selection query (the session's ``Prepared`` for it)."""

    query: QuantileQuery | TopKQuery
    compiled: CompiledPlan  # the one private read
    #: quantiles: the outputs carrier's plan (post-processing of the chosen values)
    outputs: ExecutionPlan | None
    fingerprint: str
    qualified_sql: str
    tables: frozenset[str]
    public: bool = False

    @property
    def plan(self) -> ExecutionPlan:
        return self.compiled.plan

    @property
    def analysis(self) -> QueryAnalysis:
        """The analysis whose ``columns`` are the analyst's output columns."""
        query = self.query
        if isinstance(query, QuantileQuery):
            return query.outputs
        n = len(_top_k_names(query))
        return replace(query.analysis, columns=query.analysis.columns[:n])


def prepare_selection(sql: str, metadata: Metadata, backend: Backend,
                      stored: StoredData | None, fingerprint: Callable[[str], str]
                      ) -> PreparedSelection | None:
    """Analyse, plan and compile ``sql`` as a selection query, or None when it is not one."""
    query = analyze_selection(sql, metadata)
    if query is None:
        return None
    if isinstance(query, QuantileQuery):
        exact = plan_execution(query.histogram, metadata, stored)
        outputs = plan_execution(query.outputs, metadata, stored)
        integer = query.grid.integer and query.grid.origin is None
        outputs = replace(outputs, integer_measurements=(integer,) * outputs.n_measurements)
        if query.grid.origin is not None:  # dates: the numpy path orders numbers only
            post_sql, post_params = post_processing_sql(query.outputs)
            outputs = replace(outputs, fast_path=None, fast_order=(), post_sql=post_sql,
                              post_params=post_params)
        described = ", ".join(f"{a.function}:{a.quantile!r}" for a in query.aggregates)
        qualified = query.outputs.query.sql(dialect=DIALECT)
        text = (f"selection quantiles [{described}] grid {query.grid}\n{exact.normal_form}\n"
                f"{outputs.post_sql or outputs.fast_path}")
        tables_of = query.histogram.query
    else:
        exact = plan_execution(query.analysis, metadata, stored)
        outputs = None
        qualified = query.analysis.query.sql(dialect=DIALECT)
        text = (f"selection top {query.k} count {query.count_column} key {query.key_column}\n"
                f"{exact.normal_form}")
        tables_of = query.analysis.query
    tables = tables_read(tables_of)
    return PreparedSelection(query, compile_plan(backend, exact), outputs, fingerprint(text),
                             f"-- {text.splitlines()[0]}\n{qualified}", tables)


def check_budget(budget: Budget) -> None:
    """Refuse what the selection mechanisms do not offer (the budget's choices only)."""
    if budget.mechanism != "laplace":
        raise NotSupportedError(
            "MIN / MAX / quantiles and top-k by COUNT(*) use the exponential mechanism and "
            "Report Noisy Max (pure epsilon-DP), not the Gaussian mechanism: run this query "
            "without mechanism='gaussian'")


def selection_dtypes(prepared: PreparedSelection) -> list[type]:
    """The type of each chosen-value column the post-processing sees (dpsql.execute.post_check
    binds the post-processing SQL over empty columns of these types before the charge)."""
    query = prepared.query
    assert isinstance(query, QuantileQuery)
    kind: type = (datetime.date if query.grid.origin is not None else
                  np.int64 if query.grid.integer else np.float64)
    return [kind] * len(query.aggregates)


def _grid_note(query: QuantileQuery) -> str:
    grid = query.grid
    if grid.origin is not None:
        last = grid.origin + datetime.timedelta(days=int(grid.upper))
        kind = ("every day" if grid.integer else
                f"the middle days of {grid.cells} periods of {grid.step:g} days")
        return (f"exponential mechanism over {kind} from {grid.origin} to {last} (utility "
                "-|rank - target rank|); no 95% interval: the error depends on how spread the "
                "data are around the quantile, which is private")
    kind = ("every integer of the bounds" if grid.integer else
            f"the midpoints of {grid.cells} cells of width {grid.step:g}")
    return (f"exponential mechanism over {kind} in [{grid.lower:g}, {grid.upper:g}] "
            "(utility -|rank - target rank|); no 95% interval: the error depends on how "
            "spread the data are around the quantile, which is private")


def release_record(prepared: PreparedSelection, budget: Budget, n_bins: int) -> Release:
    """The record (before the charge): epsilon as :func:`epsilon_shares`, delta 0, the
    mechanism per column, the public grid step, and no half-width for a chosen value."""
    query = prepared.query
    shares = epsilon_shares(prepared.query, budget.epsilon)
    columns: list[ColumnRelease] = []
    if isinstance(query, QuantileQuery):
        assert prepared.outputs is not None
        note = _grid_note(query)
        for col in query.outputs.columns:
            if not col.measurements:
                columns.append(ColumnRelease(col.name, None, 0.0, 0.0, None))
                continue
            columns.append(ColumnRelease(
                col.name, EXPONENTIAL, math.fsum(shares[j] for j in col.measurements), 0.0,
                None, note, grid_step=query.grid.step))
        return Release(budget.epsilon, 0.0, EXPONENTIAL, tuple(columns), prepared.fingerprint)
    names = _top_k_names(query)
    k = min(query.k, n_bins)
    mechanism = REPORT_NOISY_MAX
    for i, name in enumerate(names):
        if i == query.key_column:
            columns.append(ColumnRelease(
                name, REPORT_NOISY_MAX, shares[0], 0.0, None,
                f"the {query.k} keys of largest COUNT(*), largest first, by Report Noisy Max "
                f"with peeling ({query.k} rounds of epsilon/{query.k}); no interval: a choice, "
                "not a number"))
        else:
            plan = _count_plan(query, shares[1])
            width = mechanisms.laplace_half_width(plan.scale, CONFIDENCE, cells=max(k, 1)) + 0.5
            columns.append(ColumnRelease(name, "discrete_laplace", shares[1], 0.0, width,
                                         noise_scale=plan.scale if plan.pure else None))
            mechanism = f"discrete_laplace+{REPORT_NOISY_MAX}"
    return Release(math.fsum(shares), 0.0, mechanism, tuple(columns), prepared.fingerprint)


def _top_k_names(query: TopKQuery) -> list[str]:
    n = len(query.analysis.columns) - (1 if query.count_column is None else 0)
    return [c.name for c in query.analysis.columns[:n]]


def _count_plan(query: TopKQuery, epsilon: float) -> NoisePlan:
    return plan_noise(query.analysis, Budget(epsilon, 0.0))[0]


def cell_counts(bins: Bins, cells: int) -> np.ndarray:
    """The histogram's exact counts as a ``(bins of the analyst's keys, cells)`` matrix (the
    cell is the last key: it varies fastest in the layout's row-major order)."""
    counts = np.asarray(bins.exact[0], dtype=np.int64)
    return counts.reshape(-1, cells)


def quantile_utilities(counts: np.ndarray, aggregate: SelectionAggregate) -> np.ndarray:
    """Per bin (row) and cell: ``-max(L + 1 - t, t - R, 0)``, where L and R count the values
    in the cells below and up to the cell, n the bin's values and the target rank
    ``t = floor(q (n - 1)) + 1`` (discrete) or ``q (n - 1) + 1``: 0 exactly at the cells
    holding the t-th smallest value. Each changed row moves L, R and t so that every utility
    moves by at most 1 per row added or removed in the bin (docs/privacy.md)."""
    counts = np.asarray(counts, dtype=np.float64)
    at_or_below = np.cumsum(counts, axis=1)
    below = at_or_below - counts
    n = at_or_below[:, -1:]
    position = aggregate.quantile * (n - 1.0)
    target = (np.floor(position) if aggregate.discrete else position) + 1.0
    return -np.maximum(np.maximum(below + 1.0 - target, target - at_or_below), 0.0)


def compute(backend: Backend, post: PostProcessor, prepared: PreparedSelection,
            values: list[Any], domains: Domains, budget: Budget,
            drawn: Callable[[], None], sampler: object | None = None) -> Rows:
    """Read the exact counts (after the charge), choose, and post-process."""
    bins = read_bins(backend, prepared.compiled, values, domains)
    drawn()
    shares = epsilon_shares(prepared.query, budget.epsilon)
    query = prepared.query
    if isinstance(query, QuantileQuery):
        return _quantiles(post, prepared, query, bins, domains, values, shares)
    return _top_k(query, bins, domains, shares, sampler)


def _quantiles(post: PostProcessor, prepared: PreparedSelection, query: QuantileQuery,
               bins: Bins, domains: Domains, values: list[Any],
               shares: Sequence[float]) -> Rows:
    assert prepared.outputs is not None
    counts = cell_counts(bins, query.grid.cells)
    grid = query.grid.released()
    chosen = []
    for j, aggregate in enumerate(query.aggregates):
        utilities = quantile_utilities(counts, aggregate)
        picks = selection.exponential_mechanism_rows(utilities, shares[j], query.sensitivity)
        chosen.append(grid[picks])
    key_bins = Bins(domains.types[:-1], chosen, counts.shape[0], domains.values[:-1])
    return post.rows(prepared.outputs, key_bins, chosen, values,
                     lambda: post_processing_sql(query.outputs))


def _top_k(query: TopKQuery, bins: Bins, domains: Domains, shares: Sequence[float],
           sampler: object | None) -> Rows:
    names = tuple(_top_k_names(query))
    types = tuple(domains.types[0] if i == query.key_column else "BIGINT"
                  for i in range(len(names)))
    counts = np.asarray(bins.exact[0], dtype=np.int64)
    k = min(query.k, counts.size)
    if k == 0:
        return names, types, []
    picks = selection.report_noisy_max(counts, shares[0], query.sensitivity, k=k)
    keys = bins.key(0)[picks]
    noisy = (noisy_values(counts[picks], _count_plan(query, shares[1]), sampler)
             if query.count_column is not None else None)
    rows = []
    for r in range(k):
        rows.append(tuple(keys[r] if i == query.key_column else int(noisy[r])  # type: ignore[index]
                          for i in range(len(names))))
    return names, types, rows
