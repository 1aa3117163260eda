"""Reading a plan's exact values from the backend: the domains (public data, read before the
charge) and the bins (private data, read after it). No noise here: the session adds it, and
only the session releases anything."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsql.backends.base import Backend
from dpsql.execute import layout
from dpsql.execute.layout import Bins, Domains, Groups
from dpsql.rewrite.plan import ExecutionPlan


@dataclass(frozen=True)
class CompiledPlan:
    """A plan and the backend's own text of its exact and domain queries."""

    plan: ExecutionPlan
    exact: str
    domains: str | None


def compile_plan(backend: Backend, plan: ExecutionPlan) -> CompiledPlan:
    """``plan`` compiled by ``backend`` (raises its NotSupportedError; reads no data)."""
    domains = backend.compile(plan.domain_sql) if plan.domain_sql is not None else None
    return CompiledPlan(plan, backend.compile(plan.exact_sql), domains)


def read_domains(backend: Backend, compiled: CompiledPlan, params: Sequence[Any]) -> Domains:
    """The group keys' domains (the domain query reads public data only), with the bin limit
    checked: a refusal here depends on the SQL and public data alone."""
    plan = compiled.plan
    if compiled.domains is None:
        return layout.NO_DOMAINS
    rows, types = backend.execute(compiled.domains, plan.domain_bindings(params))
    domains = layout.read_domains(plan.n_keys, rows, types)
    layout.check_bins(domains.n_bins)
    return domains


def read_bins(backend: Backend, compiled: CompiledPlan, params: Sequence[Any],
              domains: Domains) -> Bins:
    """The exact measurements in every bin of ``domains`` (reads private data)."""
    plan = compiled.plan
    columns, _ = backend.execute_columns(compiled.exact, plan.exact_bindings(params))
    return layout.read_bins(domains, plan.integer_measurements, columns)


def read_groups(backend: Backend, compiled: CompiledPlan, params: Sequence[Any]) -> Groups:
    """Every non-empty group of a plan with a partition-selected key, with its row count and
    exact measurements (reads private data; the session selects among them by DP). Rows as
    Python values, so key values come back exactly as stored (numpy would turn DECIMAL keys
    into floats)."""
    plan = compiled.plan
    assert plan.selected
    rows, types = backend.execute(compiled.exact, plan.exact_bindings(params))
    return layout.read_groups(plan.n_keys, plan.integer_measurements, rows, types)


def read_exact(backend: Backend, plan: ExecutionPlan | CompiledPlan,
               params: Sequence[Any] = ()) -> Bins:
    """Both reads, without noise: the exact bins of ``plan`` (owners' tools, tests and
    benchmarks; never an analyst's answer)."""
    compiled = plan if isinstance(plan, CompiledPlan) else compile_plan(backend, plan)
    if compiled.plan.selected:  # every non-empty group, none selected away
        groups = read_groups(backend, compiled, params)
        return layout.selected_bins(groups, np.arange(len(groups.counts)))
    return read_bins(backend, compiled, params, read_domains(backend, compiled, params))
