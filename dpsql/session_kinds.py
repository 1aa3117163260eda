"""The session's runners for the requests that are not one ordinary release: several releases
(dpsql.analysis.blocks), a selection by the exponential mechanism (dpsql.execute.selection) and
sample-and-aggregate (dpsql.sample_aggregate).

Each is the same pipeline as :meth:`dpsql.session.Session.run` (docs/design.md section 3):
every refusal and the public reads before the one charge, then the private read; the charge,
refunds and audit record are :meth:`Session._charged`'s. They live here so that session.py
keeps one job per screen: this mixin is only ever a base of Session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dpsql.accounting.curves import PrivacyCurve, release_curve
from dpsql.budget import Budget, missing_epsilon
from dpsql.errors import ProgrammingError
from dpsql.execute.blocks import PreparedBlocks, check_lookups, check_post, read_public
from dpsql.execute.blocks import compute as compute_blocks
from dpsql.execute.exact import CompiledPlan, DomainMemo, read_domains
from dpsql.execute.layout import Domains
from dpsql.execute.post_check import check_rows
from dpsql.execute.selection import PreparedSelection, selection_dtypes
from dpsql.execute.selection import check_budget as check_selection_budget
from dpsql.execute.selection import compute as compute_selection
from dpsql.execute.selection import release_record as selection_record
from dpsql.execute.typed import annotate, final_rules
from dpsql.execute.typed import finish as finish_rows
from dpsql.noise.plan import draws_with_delta, plan_noise, split_budget
from dpsql.prepared import checked_params
from dpsql.release.record import Release, Result, combined_record
from dpsql.rewrite.literal_casts import analyst_query, check_parameter_casts, parameter_types
from dpsql.sample_aggregate.prepared import PreparedSampleAggregate
from dpsql.sample_aggregate.prepared import compute as sample_compute
from dpsql.sample_aggregate.release import plan_release
from dpsql.sample_aggregate.release import release_curve as sample_curve

if TYPE_CHECKING:
    from dpsql.accounting import Ledger
    from dpsql.backends.base import Backend
    from dpsql.execute.post import PostProcessor, Rows
    from dpsql.metadata import Metadata
    from dpsql.noise import mechanisms


class OtherReleases:
    """Session's runners for blocks, selections and sample-and-aggregate (module docstring)."""

    if TYPE_CHECKING:  # provided by Session
        backend: Backend
        ledger: Ledger | None
        metadata: Metadata
        _post: PostProcessor
        _sampler: mechanisms.Sampler | None
        _bound: dict[tuple[str, tuple[str, ...]], None]
        _domain_memo: DomainMemo

        def _lookup(self, qualified_sql: str, sql: str, values: list[Any], budget: Budget,
                    raw_counts: bool = False, *, with_delta: bool = True
                    ) -> tuple[str | None, Result | None]: ...

        def _check_binds(self, compiled: CompiledPlan, values: list[Any]) -> None: ...

        def _check_post_once(self, what: tuple[str, ...], values: list[Any],
                             check: Callable[[], None]) -> None: ...

        def _charged(self, record: Release, values: list[Any], charge: Ledger | None,
                     sql: str | None, cache_key: str | None,
                     compute: Callable[[Callable[[], None]], Rows],
                     finish: Sequence[Callable[[Release], Release]] = (), *,
                     curve: PrivacyCurve | None = None) -> Result: ...

    def _run_blocks(self, prepared: PreparedBlocks, sql: str, params: Sequence[Any] | None,
                    budget: Budget | None, raw_counts: bool = False) -> Result:
        """Steps 3-10 for a query of several releases (dpsql.analysis.blocks): the budget is
        split over them (noise.plan.split_budget), every refusal (each part's noise plan,
        domains and bin limit, binder check) comes before the one charge that covers them
        all, and dpsql.execute.blocks.compute runs after it."""
        values = list(params or [])
        if len(values) != prepared.n_params:
            raise ProgrammingError(
                f"the query has {prepared.n_params} parameter marker(s) '?' but {len(values)} "
                "parameter(s) were given")
        self._check_casts(sql, values)
        parts = prepared.parts
        if not prepared.public and budget is None:
            raise missing_epsilon()
        key = None
        if not prepared.public:
            assert budget is not None
            # split_budget gives delta only to parts that draw with it (Gaussian, smoothed)
            key, cached = self._lookup(
                prepared.qualified_sql, sql, values, budget, raw_counts,
                with_delta=any(draws_with_delta(p.analysis, budget,
                                                selected=bool(p.analysis.partition_selection))
                               for p in parts))
            if cached is not None:
                return cached
        shares = split_budget([p.analysis for p in parts], budget)
        plans = [plan_noise(p.analysis, b) for p, b in zip(parts, shares, strict=True)]
        checked = prepared.part_params(values)
        domains = [read_domains(self.backend, p.compiled, checked, self._domain_memo)
                   for p in parts]
        check_lookups(prepared, domains)
        public = read_public(self.backend, prepared)
        charge = None if prepared.public else self.ledger
        if charge is not None:
            for p in parts:
                self._check_binds(p.compiled, checked)
                if p.lookup_form is not None:
                    self._check_binds(p.lookup_form, checked)
            self._check_post_once(
                (prepared.fingerprint, *(t for d in domains for t in d.types)), checked,
                lambda: check_post(self._post, prepared, checked, domains, public))
        record = combined_record(
            [(p.label, p.columns, pl, d.n_bins) for p, pl, d in zip(parts, plans, domains,
                                                                     strict=True)],
            prepared.fingerprint)
        rules, notes = final_rules(prepared, self.metadata, raw_counts)
        return self._charged(
            annotate(record, notes), values, charge, sql if charge is not None else None,
            key, lambda drawn: finish_rows(
                compute_blocks(self.backend, self._post, prepared, values, plans, domains,
                               self._sampler, drawn, public, raw_counts), rules,
                raw_counts=raw_counts),
            curve=release_curve([p for part in plans for p in part],
                                with_mu=charge is not None))

    def _check_casts(self, sql: str, values: list[Any]) -> None:
        """A string bound to a ``?`` that a comparison sets against an operand whose type
        cannot read it, refused before the charge (as the main path does,
        dpsql.rewrite.literal_casts), read from the analyst's whole qualified query: only when
        a string is bound (parsed once more; the literals were checked in ``prepare``)."""
        if not any(isinstance(v, str) for v in values):
            return
        query = analyst_query(sql, self.metadata)
        if query is not None:
            check_parameter_casts(parameter_types(query, self.metadata), values)

    def _run_sample_aggregate(self, prepared: PreparedSampleAggregate, sql: str,
                              params: Sequence[Any] | None, budget: Budget | None) -> Result:
        """Steps 3-10 for SAMPLE_AGGREGATE (dpsql.sample_aggregate): every refusal (epsilon,
        mechanism, bounds, the binder) before the charge; a fresh block key per release."""
        values = prepared.checked_params(params)
        self._check_casts(sql, values)
        outputs, record = plan_release(prepared.plan, budget, prepared.fingerprint)
        assert budget is not None  # plan_release refuses a missing epsilon
        # Laplace reads epsilon alone (record delta 0); the Gaussian is calibrated at delta
        key, cached = self._lookup(prepared.qualified_sql, sql, values, budget,
                                   with_delta=budget.mechanism != "laplace")
        if cached is not None:
            return cached
        if self.ledger is not None:
            bound = (prepared.compiled, tuple(type(v).__name__ for v in values))
            if bound not in self._bound:
                self.backend.check(prepared.compiled, prepared.bindings(values))
                self._bound[bound] = None
        return self._charged(record, values, self.ledger, sql, key, lambda drawn: sample_compute(
            self.backend, prepared, values, outputs, self._sampler, drawn),
            curve=sample_curve(outputs))

    def _run_selection(self, prepared: PreparedSelection, sql: str,
                       params: Sequence[Any] | None, budget: Budget | None) -> Result:
        """Steps 3-10 for MIN / MAX / quantiles and top-k (dpsql.execute.selection): the same
        order as :meth:`run` (refusals, then the charge, then the one private read)."""
        values = checked_params(prepared.plan, params)
        self._check_casts(sql, values)
        if budget is None:
            raise missing_epsilon()
        check_selection_budget(budget)
        # pure: dpsql.execute.selection reads epsilon alone (check_budget refused the rest)
        key, cached = self._lookup(prepared.qualified_sql, sql, values, budget,
                                   with_delta=False)
        if cached is not None:
            return cached
        domains = read_domains(self.backend, prepared.compiled, values, self._domain_memo)
        outputs = prepared.outputs
        if self.ledger is not None:
            self._check_binds(prepared.compiled, values)
            post_sql = outputs.post_sql if outputs is not None else None
            if outputs is not None and post_sql is not None:
                dtypes = selection_dtypes(prepared)
                key_domains = Domains(domains.values[:-1], domains.types[:-1])
                self._check_post_once(
                    (post_sql, *domains.types, *(d.__name__ for d in dtypes)), values,
                    lambda: check_rows(self._post.cursor(), post_sql, outputs.post_params,
                                       values, key_domains, dtypes))
        record = selection_record(prepared, budget, domains.n_bins)
        return self._charged(
            record, values, self.ledger, sql, key,
            lambda drawn: compute_selection(self.backend, self._post, prepared, values, domains,
                                            budget, drawn, self._sampler))
