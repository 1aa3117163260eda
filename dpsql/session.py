"""The session: the one owner of "charge before release".

One request goes through these steps, in this order (docs/design.md, "Release pipeline"):

1. **budget**: (epsilon, delta) validated once, as a :class:`~dpsql.budget.Budget`;
2. **prepare** (memoised by text): the allow-list and name hygiene, the analysis, the rewrite
   and the backend's compile step (Spark translation);
3. **parameters** counted against the plan's markers;
4. a query that reads **public tables only** is answered exactly here: nothing to charge;
5. **cache lookup**: a repeat of a paid-for request returns the stored answer, free;
6. **noise plan**: each measurement's share of the budget and its scale;
7. **public reads and checks**: the domain query (public data only) gives the number of bins,
   checked against the limit; when a ledger is charged, the backend's binder checks the exact
   query (reads no row; once per query text and parameter types);
8. **release record**, then the **charge**, durable, for exactly the record's (epsilon, delta);
9. **execute** the exact query, add noise, post-process, and write the rows to the ledger's
   audit log (if that fails they are withheld; the charge stands);
10. **store** the answer in the cache, in the same transaction as step 9's audit write (one
    durable commit), and release it.

Contract: every refusal (steps 1-7, and a budget the ledger says is exhausted) raises before
anything is charged; none of them depends on private data. Once charged, a query whose exact
read fails or is cancelled (any exception, KeyboardInterrupt included) has its charge refunded
and the exception propagates: no noisy value exists yet, so nothing was released; so is a
cancellation (Ctrl-C, :meth:`Session.cancel`) at any later point, which shows nothing. Once noise
is drawn, an error stands charged: its occurrence and message can depend on the noisy values
(it is a release), and refunding it would let an analyst redraw noise for free. A released
answer is always charged first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dpsql.accounting import Ledger
from dpsql.accounting.curves import PrivacyCurve, release_curve
from dpsql.analysis.blocks import BlockQuery, analyze_request
from dpsql.analysis.domains import check_domains
from dpsql.analysis.output_types import output_rules
from dpsql.backends.base import Backend
from dpsql.backends.stored import StoredFacts
from dpsql.backends.types import fill_column_types
from dpsql.budget import Budget, missing_epsilon
from dpsql.errors import Error, OperationalError, ProgrammingError, QueryCancelledError
from dpsql.execute.blocks import PreparedBlocks, prepare_blocks
from dpsql.execute.exact import (
    CompiledPlan,
    DomainMemo,
    compile_plan,
    read_bins,
    read_domains,
    read_groups,
)
from dpsql.execute.layout import Domains, selected_bins
from dpsql.execute.post import PostProcessor, Rows, gc_paused
from dpsql.execute.post_check import check_rows, measurement_dtypes
from dpsql.execute.public import PreparedPublic, prepare_public, run_public
from dpsql.execute.selection import PreparedSelection, prepare_selection
from dpsql.execute.typed import annotate, release_notes
from dpsql.metadata import Metadata
from dpsql.metadata.digest import metadata_digest
from dpsql.noise import mechanisms
from dpsql.noise.apply import noisy_values
from dpsql.noise.partition import SelectionPlan, plan_with_selection, select_noisy
from dpsql.noise.plan import NoisePlan, draws_with_delta, plan_noise
from dpsql.prepared import AnyPrepared, Prepared, checked_params, column_sources, fingerprint
from dpsql.release.avg_rows import with_row_intervals
from dpsql.release.cache import cache_entry, cache_key, load_payload
from dpsql.release.record import (
    Release,
    Result,
    release_record,
)
from dpsql.rewrite.literal_casts import (
    analyst_query,
    check_parameter_casts,
    check_query_literals,
    parameter_types,
)
from dpsql.rewrite.plan import plan_execution
from dpsql.rewrite.post import post_processing_sql
from dpsql.sample_aggregate.analysis import mentions_wrapper
from dpsql.sample_aggregate.prepared import PreparedSampleAggregate, prepare_sample_aggregate
from dpsql.session_kinds import OtherReleases
from dpsql.units.execute import r2t_bins
from dpsql.units.record import two_stage_note, with_intervals, with_two_stage_note


@dataclass(frozen=True)
class Principal:
    """Who is charged: the analyst, on the database identity the ledger keys budgets by."""

    database: str
    analyst: str


class Session(OtherReleases):
    """Private queries for one analyst against one backend with one metadata file.

    ``ledger`` None: nothing is charged or cached (local experimentation); ``sampler`` is for
    tests only (production always uses the secure default). With a ledger, ``data_version``
    (:func:`dpsql.backends.data_version`, computed once by whoever opened the backend) is
    required: with the hash of ``metadata`` it scopes the answer cache, so a changed database
    or metadata never serves an answer cached before the change.
    """

    def __init__(
        self,
        metadata: Metadata,
        backend: Backend,
        *,
        ledger: Ledger | None = None,
        principal: Principal | None = None,
        sampler: mechanisms.Sampler | None = None,
        cache_size: int = 256,
        data_version: str | None = None,
    ) -> None:
        if ledger is not None and principal is None:
            raise ProgrammingError("a session with a ledger needs the principal it charges")
        if ledger is not None and data_version is None:
            raise ProgrammingError("a session with a ledger needs the data version its answer "
                                   "cache is keyed by (dpsql.backends.data_version)")
        #: the data version and the owner metadata's hash: part of every answer-cache key
        self.cache_scope = f"{data_version or ''}:{metadata_digest(metadata)}"
        # Join-key types are checked by the analysis: take undeclared ones from the database.
        self.metadata = fill_column_types(metadata, backend)
        check_domains(self.metadata)  # domain values of the key's type (analysis/domains.py)
        self.backend = backend
        self.ledger = ledger
        self.principal = principal
        self._sampler = sampler
        self._prepared: OrderedDict[str, AnyPrepared] = OrderedDict()
        #: (compiled exact SQL, parameter types) the backend's binder accepted
        self._bound: dict[tuple[str, tuple[str, ...]], None] = {}
        #: (post-processing, parameter types) dpsql.execute.post_check passed
        self._post_checked: dict[tuple[tuple[str, ...], tuple[str, ...]], None] = {}
        self._cache_size = cache_size
        self._stored = StoredFacts(backend)
        #: domains of plans that read only constants and registered domain tables
        self._domain_memo = DomainMemo()
        self._post = PostProcessor()

    # -- step 2 ---------------------------------------------------------------------------

    def prepare(self, sql: str) -> AnyPrepared:
        """Analyse, rewrite and compile ``sql`` (memoised by text: all three are pure).
        Raises the analysis's or the backend's refusal; charges nothing. A query with
        aggregates in CTEs / subqueries (dpsql.analysis.blocks) gives a PreparedBlocks."""
        if not isinstance(sql, str):
            raise ProgrammingError(f"sql must be a string, got {type(sql).__name__}")
        hit = self._prepared.get(sql)
        if hit is not None:
            self._prepared.move_to_end(sql)
            return hit
        try:
            return self._remember(sql, self._prepare_private(sql))
        except Error:
            # refused (the SQL and the metadata decide): a query of public tables only runs as
            # written, exact and free (dpsql.execute.public); anything else keeps the refusal
            public = prepare_public(sql, self.metadata, self.backend, fingerprint(sql))
            if public is None:
                raise
            return self._remember(sql, public)

    def _prepare_private(self, sql: str) -> AnyPrepared:
        """:meth:`prepare`'s private pipeline (raises its refusal)."""
        if mentions_wrapper(sql):  # the analyst asked for sample-and-aggregate
            sampled = prepare_sample_aggregate(sql, self.metadata, self.backend)
            return self._literals_checked(sql, sampled)
        chosen = prepare_selection(sql, self.metadata, self.backend, self._stored, fingerprint)
        if chosen is not None:  # MIN / MAX / quantiles, top-k (dpsql.execute.selection)
            return self._literals_checked(sql, chosen)
        request = analyze_request(sql, self.metadata)
        if isinstance(request, BlockQuery):
            blocks = prepare_blocks(request, self.backend, self.metadata, self._stored)
            return self._literals_checked(sql, blocks)
        analysis = request
        plan = plan_execution(analysis, self.metadata, self._stored)
        # The generated SQL is a normal form of the qualified query: fingerprint it rather
        # than generating the analysed query's text once more.
        prepared = Prepared(
            analysis, compile_plan(self.backend, plan),
            fingerprint(f"{plan.normal_form}\n{plan.post_sql or ''}"), column_sources(analysis),
            output_rules(analysis, self.metadata), parameter_types(analysis.query, self.metadata))
        return prepared

    def _literals_checked(self, sql: str, prepared: AnyPrepared) -> AnyPrepared:
        """``prepared`` once the analyst's whole query passed the literal check, for the
        kinds whose prepared form keeps no single analysed query (a release block's outer
        query is post-processing, run after the charge): once per text, with the rest of the
        preparation (the main path's runs in its rewrite, dpsql.rewrite.plan)."""
        query = analyst_query(sql, self.metadata)
        if query is not None:
            check_query_literals(query, self.metadata)
        return prepared

    def _remember(self, sql: str, prepared: AnyPrepared) -> AnyPrepared:
        self._prepared[sql] = prepared
        if len(self._prepared) > self._cache_size:
            self._prepared.popitem(last=False)
        return prepared

    # -- steps 1-10 -----------------------------------------------------------------------

    def run(self, sql: str, params: Sequence[Any] | None = None, *,
            epsilon: float | None = None, delta: float | None = 0.0,
            mechanism: str | None = None, calibration: str | None = None,
            raw_counts: bool = False) -> Result:
        """Answer ``sql`` privately (module contract). ``epsilon`` may be None only for a
        query that reads public tables only; ``mechanism`` 'laplace' (None: the default) or
        'gaussian', ``calibration`` 'analytic' (None: the default) or 'classical';
        ``raw_counts`` keeps noisy counts below 0 (dpsql.execute.typed: clamped by default;
        an answer is cached per choice)."""
        budget = Budget.of(epsilon, delta, mechanism=mechanism, calibration=calibration)
        prepared = self.prepare(sql)
        if isinstance(prepared, PreparedBlocks):
            return self._run_blocks(prepared, sql, params, budget, raw_counts)
        if isinstance(prepared, PreparedSelection):
            return self._run_selection(prepared, sql, params, budget)
        if isinstance(prepared, PreparedSampleAggregate):
            return self._run_sample_aggregate(prepared, sql, params, budget)
        if isinstance(prepared, PreparedPublic):
            return run_public(self.backend, prepared, params)
        values = checked_params(prepared.plan, params)
        check_parameter_casts(prepared.param_types, values)
        if prepared.public:
            return self._release(prepared, values, plan_noise(prepared.analysis, None),
                                 read_domains(self.backend, prepared.compiled, values,
                                              self._domain_memo),
                                 charge=None, raw_counts=raw_counts)
        if budget is None:
            raise missing_epsilon()
        key, cached = (None, None) if self.ledger is None else self._lookup(
            prepared.qualified_sql, sql, values, budget, raw_counts,  # text made on demand
            with_delta=draws_with_delta(prepared.analysis, budget,
                                        selected=prepared.plan.selected))
        if cached is not None:
            return cached
        selection = None
        if prepared.plan.selected:  # groups from the data: DP partition selection
            plans, selection = plan_with_selection(prepared.analysis, budget)
        else:
            plans = plan_noise(prepared.analysis, budget)
        domains = read_domains(self.backend, prepared.compiled, values, self._domain_memo)
        if self.ledger is not None:
            self._check_binds(prepared.compiled, values)
            plan = prepared.plan
            post_sql = plan.post_sql
            if post_sql is not None:
                functions = [p.measurement.function for p in plans]
                dtypes = measurement_dtypes(functions)
                # groups from the data have no domain to sample before the charge: their keys
                # are typed by their columns (metadata, or the database's schema)
                key_types = tuple(k.type for k in prepared.analysis.group_keys
                                  ) if plan.selected else ()
                self._check_post_once(
                    (post_sql, *domains.types, *functions, *map(str, key_types)), values,
                    lambda: check_rows(self._post.cursor(), post_sql, plan.post_params, values,
                                       domains, dtypes, key_types))
        # the answer is cached in the audit write's transaction (step 10 with step 9's record)
        return self._release(prepared, values, plans, domains, charge=self.ledger, sql=sql,
                             cache_key=key, selection=selection, raw_counts=raw_counts)

    def _scope(self, budget: Budget) -> str:
        """The answer-cache scope of a request: a Gaussian answer is cached apart from a
        Laplace one (and per calibration), so a repeat's record names the mechanism it used."""
        if budget.mechanism == "laplace":
            return self.cache_scope
        return f"{self.cache_scope}:{budget.mechanism}:{budget.calibration}"

    def _check_binds(self, compiled: CompiledPlan, values: list[Any]) -> None:
        """The backend's binder on the exact query, once per query text and parameter types
        (what the binder's outcome depends on). Only a charging session needs it: without a
        ledger there is no charge for a binder error to come after."""
        bindings = compiled.plan.exact_bindings(values)
        key = (compiled.exact, tuple(type(v).__name__ for v in bindings.values()))
        if key in self._bound:
            return
        self.backend.check(compiled.exact, bindings)
        self._bound[key] = None
        if len(self._bound) > self._cache_size:
            self._bound.pop(next(iter(self._bound)))

    def _check_post_once(self, what: tuple[str, ...], values: list[Any],
                         check: Callable[[], None]) -> None:
        """Run ``check`` (dpsql.execute.post_check) unless the post-processing ``what`` (its
        SQL and the domains' types) already passed it with parameters of these types: its
        outcome depends on nothing else. Only a pass is remembered."""
        key = (what, tuple(type(v).__name__ for v in values))
        if key in self._post_checked:
            return
        check()
        self._post_checked[key] = None
        if len(self._post_checked) > self._cache_size:
            self._post_checked.pop(next(iter(self._post_checked)))

    def _release(self, prepared: Prepared, values: list[Any], plans: tuple[NoisePlan, ...],
                 domains: Domains, *, charge: Ledger | None, sql: str | None = None,
                 cache_key: str | None = None, selection: SelectionPlan | None = None,
                 raw_counts: bool = False) -> Result:
        """Steps 8-9: record, charge (when ``charge`` is a ledger; the audit log gets ``sql``
        and the parameters), read the exact values, noise, post-process, and record the
        released rows in the audit log. Refunded: a failed or cancelled exact read, and a
        cancellation at any later point before the rows are recorded (nothing is shown).
        Charged: any error once noise is drawn, including a failure to record the rows (the
        answer is then withheld). With ``cache_key`` the answer is cached in the same
        transaction as its audit record. With ``selection`` the groups come from the data and
        only those the noisy selection keeps are noised and released (dpsql.noise.partition).
        The rows are typed and finished after the noise (dpsql.execute.typed; ``raw_counts``)
        and the record says how."""
        unit = prepared.analysis.unit
        record = with_two_stage_note(annotate(
            release_record(prepared.columns, plans, prepared.fingerprint, domains.n_bins,
                           selection, unit=unit.label if unit is not None else None),
            release_notes(prepared.analysis, prepared.outputs, raw_counts=raw_counts)), unit)
        plan = prepared.plan
        finish: list[Callable[[Release], Release]] = []

        def compute(drawn: Callable[[], None]) -> Rows:
            counts = None
            if unit is not None and unit.r2t:  # R2T: truncated sums, released per level
                bins, noisy, outcomes = r2t_bins(self.backend, prepared.compiled, values, plans,
                                                 unit, drawn, self._sampler)
                finish.append(lambda r: with_intervals(r, prepared.columns, outcomes, plans))
                return self._post.rows(plan, bins, noisy, values,
                                       lambda: post_processing_sql(prepared.analysis),
                                       prepared.outputs, raw_counts=raw_counts)
            if selection is not None:
                groups = read_groups(self.backend, prepared.compiled, values)
                drawn()
                kept, counts = select_noisy(groups.counts, selection, self._sampler)
                bins = selected_bins(groups, kept)
            else:
                bins = read_bins(self.backend, prepared.compiled, values, domains)
                drawn()
            noisy = [counts if selection is not None and j == selection.shared and
                     counts is not None else noisy_values(bins.exact[j], plans[j], self._sampler)
                     for j in range(plan.n_measurements)]
            # a grouped AVG's per-row interval reads each row's noisy SUM and COUNT
            averages: list[tuple[np.ndarray, np.ndarray]] | None = (
                [] if plan.avg_intervals else None)
            out = self._post.rows(plan, bins, noisy, values,
                                  lambda avg=(): post_processing_sql(prepared.analysis, avg),
                                  prepared.outputs, raw_counts=raw_counts, averages=averages)
            if averages:
                # all rows together: union-bounded over every bin, or, under partition
                # selection, over every kept group (their number is the selection's output;
                # the record's own half-widths there are per group)
                cells = bins.n_bins if selection is not None else domains.n_bins
                finish.append(lambda r: with_row_intervals(
                    r, plan.avg_intervals, averages, plans, cells, two_stage_note(unit)))
            return out

        return self._charged(record, values, charge, sql, cache_key, compute, finish,
                             curve=release_curve(plans, selection,
                                                 with_mu=charge is not None))

    def _charged(self, record: Release, values: list[Any], charge: Ledger | None,
                 sql: str | None, cache_key: str | None,
                 compute: Callable[[Callable[[], None]], Rows],
                 finish: Sequence[Callable[[Release], Release]] = (), *,
                 curve: PrivacyCurve | None = None) -> Result:
        """Charge ``record`` (when ``charge`` is a ledger; with the release's privacy
        ``curve``, which the budget's Rényi or zCDP filter charges), then ``compute`` the rows
        (it calls its argument before the first noise is drawn), with the refund rules of
        :meth:`_release`, and record the released rows."""
        if curve is not None:
            record = replace(record, rho=curve.rho)
        charge_id = None
        if charge is not None and self.principal is not None:
            charge_id = charge.charge(
                self.principal.database, self.principal.analyst,
                fingerprint=record.fingerprint, epsilon=record.epsilon, delta=record.delta,
                mechanism=record.mechanism, sql=sql, params=values, curve=curve)
        noise_drawn = False

        def drawn() -> None:
            nonlocal noise_drawn
            noise_drawn = True

        try:
            with gc_paused():
                names, types, rows = compute(drawn)
        except BaseException as exc:
            # Before the noise, nothing derived from the data exists: the analyst learns only
            # that the exact read failed or was cancelled, which the binder check and the
            # totality rewrite make independent of private data. After it, an error may
            # depend on the noisy values (it is shown: a release), and a free retry would draw
            # fresh noise; only a cancellation, which shows nothing, is refunded.
            cancelled = isinstance(exc, (KeyboardInterrupt, QueryCancelledError))
            if ((not noise_drawn or cancelled) and charge is not None and charge_id is not None
                    and self.principal is not None):
                charge.refund(self.principal.database, self.principal.analyst, charge_id)
            raise
        for step in finish:  # post-processing of the noisy values (R2T's intervals)
            record = step(record)
        result = Result(names, types, rows, record)
        if charge is not None and charge_id is not None and self.principal is not None:
            _record_release(charge, self.principal, charge_id, names, rows,
                            cache_entry(cache_key, result))
        return result

    # -- steps 5 and 10 -------------------------------------------------------------------

    def _lookup(self, qualified_sql: str, sql: str, values: list[Any], budget: Budget,
                raw_counts: bool = False, *, with_delta: bool = True
                ) -> tuple[str | None, Result | None]:
        """Step 5: (the answer-cache key, the cached answer or None); (None, None) without a
        ledger (nothing is cached then). A raw answer is cached apart from a clamped one.
        ``with_delta`` False (the caller's release provably never reads ``budget.delta``:
        dpsql.noise.plan.draws_with_delta) keys the request by delta 0, so it shares its entry
        with every other delta: the release drawn under any of them is the same mechanism with
        the same parameters. True (the safe default) keys it by the requested delta."""
        if self.ledger is None:
            return None, None
        key = cache_key(qualified_sql, values, budget.epsilon,
                        budget.delta if with_delta else 0.0,
                        scope=self._scope(budget) + (":raw" if raw_counts else ""))
        return key, self._cached(key, sql, values, budget)

    def _cached(self, key: str, sql: str, values: list[Any], budget: Budget) -> Result | None:
        assert self.ledger is not None and self.principal is not None
        # a hit is recorded in the audit log (the request, and the charge that paid) first
        payload = self.ledger.cache_lookup(
            self.principal.database, self.principal.analyst, key, sql=sql, params=values,
            epsilon=budget.epsilon, delta=budget.delta)
        if payload is None:
            return None
        try:
            return load_payload(payload)
        except (ValueError, KeyError, TypeError) as exc:
            # fail closed: a damaged cache entry may mean a tampered ledger
            raise OperationalError(
                f"privacy ledger {self.ledger.path}: a cached answer is unreadable "
                f"({type(exc).__name__}); refusing to answer until the owner checks the file"
            ) from None

    def cancel(self) -> None:
        """Stop the query running now (from another thread): it raises QueryCancelledError
        and its charge is refunded."""
        self.backend.interrupt()

    def close(self) -> None:
        """Close the post-processing database (the backend and ledger belong to the caller)."""
        self._post.close()


def _record_release(ledger: Ledger, principal: Principal, charge_id: int,
                    names: Sequence[str], rows: Sequence[Sequence[Any]],
                    cache: tuple[str, bytes] | None = None) -> None:
    """Write the rows about to be released to the audit log, or withhold them.

    Fail closed: the charge is committed and stands (noise was drawn: refunding would let a
    retry redraw it for free), and rows the audit log does not hold are never shown; the
    answer is not cached either, so a repeat is charged again."""
    try:
        ledger.record_release(principal.database, principal.analyst, charge_id, rows,
                              columns=names, cache=cache)
    except OperationalError as exc:
        raise OperationalError(
            f"the answer was computed and charged (charge {charge_id}) but could not be written "
            f"to the audit log, so it is withheld: {exc.message}"
        ) from None
