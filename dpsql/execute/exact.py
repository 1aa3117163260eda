"""Reading a plan's exact values from the backend: the domains (public data, read before the
charge) and the bins (private data, read after it). No noise here: the session adds it, and
only the session releases anything."""

from __future__ import annotations

import threading
from collections import OrderedDict
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
    """A plan and the backend's own text of its exact, domain and fallback queries."""

    plan: ExecutionPlan
    exact: str
    domains: str | None
    fallback: tuple[str, ...] | None = None


def compile_plan(backend: Backend, plan: ExecutionPlan) -> CompiledPlan:
    """``plan`` compiled by ``backend`` (raises its NotSupportedError; reads no data)."""
    domains = backend.compile(plan.domain_sql) if plan.domain_sql is not None else None
    fallback = (tuple(backend.compile(sql) for sql in plan.fallback_sql)
                if plan.fallback_sql is not None else None)
    return CompiledPlan(plan, backend.compile(plan.exact_sql), domains, fallback)


class DomainMemo:
    """Domains read once per session: those of plans whose domain query reads nothing but
    constants and tables the backend registered (``ExecutionPlan.domains_fixed``), whose
    result, for given SQL and parameters, is the same at every run while the backend is open
    (the tables cannot change; the analysis refuses volatile functions). Public data only.

    Keyed by the compiled domain query and its parameters (each with its type: ``1`` and
    ``True`` bind differently); least recently used first out beyond ``max_entries`` entries
    or ``max_values`` domain values in all. The arrays kept are read-only: runs share them."""

    def __init__(self, max_entries: int = 64, max_values: int = 2_000_000) -> None:
        self.max_entries, self.max_values = max_entries, max_values
        self._entries: OrderedDict[tuple[Any, ...], Domains] = OrderedDict()
        self._values = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Domains | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
            return hit

    def put(self, key: tuple[Any, ...], domains: Domains) -> None:
        size = sum(len(v) for v in domains.values)
        if size > self.max_values:
            return
        for values in domains.values:
            values.flags.writeable = False
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = domains
            self._values += size
            while len(self._entries) > self.max_entries or self._values > self.max_values:
                _, old = self._entries.popitem(last=False)
                self._values -= sum(len(v) for v in old.values)


def _memo_key(sql: str, bindings: dict[str, Any]) -> tuple[Any, ...] | None:
    """A DomainMemo key, or None when a parameter value is not hashable."""
    key = (sql, *((name, type(value).__qualname__, value)
                  for name, value in sorted(bindings.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def read_domains(backend: Backend, compiled: CompiledPlan, params: Sequence[Any],
                 memo: DomainMemo | None = None) -> Domains:
    """The group keys' domains (the domain query reads public data only), with the bin limit
    checked: a refusal here depends on the SQL and public data alone. With ``memo``, a plan's
    fixed domains (``domains_fixed``) are read once and then taken from it."""
    plan = compiled.plan
    if compiled.domains is None:
        return layout.NO_DOMAINS
    bindings = plan.domain_bindings(params)
    key = (_memo_key(compiled.domains, bindings)
           if memo is not None and plan.domains_fixed else None)
    domains = memo.get(key) if memo is not None and key is not None else None
    if domains is None:
        rows, types = backend.execute(compiled.domains, bindings)
        domains = layout.read_domains(plan.n_keys, rows, types)
        if memo is not None and key is not None:
            memo.put(key, domains)
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
