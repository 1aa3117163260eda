"""One pipeline: analyse -> plan noise -> charge -> execute exactly -> add noise -> post-process.

Contract of :meth:`Engine.run`: a query dpsql cannot prove private raises before anything is
charged or executed; otherwise ``charge`` (the ledger hook) is called once, before the backend
runs anything, with the (epsilon, delta) this release spends, and every number in the result
comes from :mod:`dpsql.mechanisms` noise on exact aggregates, post-processed on noisy values
only. Nothing data-dependent (sensitivities, smoothed scales) appears in the release record of
a smoothed release.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import duckdb
import numpy as np
from sqlglot import exp

from dpsql import mechanisms
from dpsql.analysis.elastic import QueryAnalysis, analyze
from dpsql.analysis.smooth import NoisePlan, check_budget_parameters, plan_noise
from dpsql.backends.base import Backend
from dpsql.errors import ProgrammingError
from dpsql.metadata import Metadata
from dpsql.rewrite import NOISY_TABLE, ExecutionPlan, bind_params, plan_execution

CONFIDENCE = 0.95


@dataclass(frozen=True)
class ColumnRelease:
    """Per output column: how it was released and, for pure releases, its 95% half-width."""

    name: str
    mechanism: str | None  # None for group keys and constants
    epsilon: float
    delta: float
    half_width_95: float | None  # None: not publishable (smoothed) or not a single measurement


@dataclass(frozen=True)
class Release:
    """The release record of one query: what it spent and how it was noised."""

    epsilon: float
    delta: float
    mechanism: str
    columns: tuple[ColumnRelease, ...]
    fingerprint: str
    cached: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Result:
    """Noisy rows with column names and type names."""

    names: tuple[str, ...]
    types: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    release: Release


@dataclass(frozen=True)
class Prepared:
    """An analysed and rewritten query, reusable across executions (parameters vary)."""

    analysis: QueryAnalysis
    plan: ExecutionPlan
    fingerprint: str = field(default="")


ChargeHook = Callable[[Release], None]


def fingerprint(sql: str) -> str:
    """A stable fingerprint of the normalised query text (ledger history, cache keys)."""
    return hashlib.sha256(sql.encode()).hexdigest()[:16]


class Engine:
    """Runs private queries against one backend with one metadata file."""

    def __init__(
        self,
        metadata: Metadata,
        backend: Backend,
        *,
        sampler: mechanisms.Sampler | None = None,
        cache_size: int = 256,
    ) -> None:
        self.metadata = metadata
        self.backend = backend
        # Tests pass their own sampler (e.g. zero noise); production always uses the default.
        self._sampler = sampler
        self._prepared: OrderedDict[str, Prepared] = OrderedDict()
        self._cache_size = cache_size
        self._post = duckdb.connect(":memory:")
        self._post.execute("SET enable_external_access=false")
        self._post.execute("SET lock_configuration=true")

    def prepare(self, sql: str) -> Prepared:
        """Analyse and rewrite ``sql`` (memoised by text: analysis is pure)."""
        hit = self._prepared.get(sql)
        if hit is not None:
            self._prepared.move_to_end(sql)
            return hit
        analysis = analyze(sql, self.metadata)
        plan = plan_execution(analysis, self.metadata)
        # The generated SQL is a normal form of the qualified query: fingerprint it rather
        # than generating the analysed query's text once more.
        prepared = Prepared(analysis, plan, fingerprint(f"{plan.exact_sql}\n{plan.post_sql or ''}"))
        self._prepared[sql] = prepared
        if len(self._prepared) > self._cache_size:
            self._prepared.popitem(last=False)
        return prepared

    def run(
        self,
        sql: str,
        params: Sequence[Any] | None = None,
        *,
        epsilon: float,
        delta: float = 0.0,
        charge: ChargeHook | None = None,
    ) -> Result:
        """Answer ``sql`` privately (see module contract)."""
        check_budget_parameters(epsilon, delta)
        prepared = self.prepare(sql)
        params = list(params or [])
        n_params = _count_params(prepared)
        if len(params) != n_params:
            raise ProgrammingError(
                f"the query has {n_params} parameter marker(s) '?' but {len(params)} "
                "parameter(s) were given"
            )
        noise_plans = plan_noise(prepared.analysis, epsilon, delta)
        release = _release_record(prepared, noise_plans, n_bins=None)
        if charge is not None:
            charge(release)  # durable before anything runs: a crash later loses no charge
        plan = prepared.plan
        rows, exact_types = self.backend.execute(
            plan.exact_sql, bind_params(plan.exact_params, params)
        )
        keys = [[r[i] for r in rows] for i in range(plan.n_keys)]
        key_types = exact_types[: plan.n_keys]
        noisy = [
            self._noise(np.array([r[plan.n_keys + j] for r in rows]), noise_plans[j])
            for j in range(plan.n_measurements)
        ]
        names, types, out_rows = self._post_process(prepared, keys, key_types, noisy, params)
        release = _release_record(prepared, noise_plans, n_bins=max(len(rows), 1))
        return Result(names, types, out_rows, release)

    def _noise(self, exact: np.ndarray, plan: NoisePlan) -> np.ndarray:
        """Noise one measurement over all bins, as ``plan`` prescribes (see smooth.py)."""
        exact = np.where(exact == None, 0, exact) if exact.dtype == object else exact  # noqa: E711
        if plan.scale == 0:  # public data only (sensitivity 0): nothing to protect
            integer = plan.measurement.function == "COUNT"
            return exact.astype(np.int64 if integer else np.float64)
        if plan.measurement.function == "COUNT":
            return mechanisms.release_counts(exact.astype(np.int64), plan.scale,
                                             sampler=self._sampler)
        return mechanisms.release_sums(exact.astype(np.float64), plan.scale,
                                       sampler=self._sampler, granularity=plan.granularity)

    def _post_process(self, prepared: Prepared, keys, key_types, noisy, params):
        plan = prepared.plan
        if plan.fast_path is not None:
            columns: list[list[Any]] = []
            types: list[str] = []
            for spec in plan.fast_path:
                if spec.kind == "key":
                    columns.append(keys[spec.index])
                    types.append(key_types[spec.index])
                elif spec.kind == "measurement":
                    columns.append(noisy[spec.index].tolist())
                    integer = prepared.analysis.measurements[spec.index].integer
                    types.append("BIGINT" if integer else "DOUBLE")
                else:
                    assert spec.bounds is not None
                    s, c = noisy[spec.index], noisy[spec.count_index]
                    avg = np.clip(s / np.maximum(c, 1), spec.bounds[0], spec.bounds[1])
                    columns.append(avg.tolist())
                    types.append("DOUBLE")
            rows = list(zip(*columns, strict=True))
            return plan.output_names, tuple(types), rows
        table = {f"__k{i}": np.array(k, dtype=object) for i, k in enumerate(keys)}
        table.update({f"__m{j}": v for j, v in enumerate(noisy)})
        cur = self._post.cursor()
        try:
            cur.register(NOISY_TABLE, table)
            result = cur.execute(plan.post_sql, bind_params(plan.post_params, params))
            rows = result.fetchall()
            types = [str(d[1]) for d in result.description]
        except duckdb.Error as err:
            # Post-processing sees only noisy values, so its errors may be shown as they are.
            raise ProgrammingError(f"post-processing failed: {err}") from None
        finally:
            cur.close()
        return plan.output_names, tuple(types), rows


def _count_params(prepared: Prepared) -> int:
    plan = prepared.plan
    used = set(plan.exact_params) | set(plan.post_params)
    return max(used) + 1 if used else 0


def _mechanism_name(plan: NoisePlan) -> str:
    kind = "discrete_laplace" if plan.measurement.function == "COUNT" else "snapped_laplace"
    return kind if plan.pure else f"smoothed_{kind}"


def _release_record(prepared: Prepared, plans: tuple[NoisePlan, ...], n_bins: int | None):
    columns = []
    for col in prepared.analysis.columns:
        if not col.measurements:
            columns.append(ColumnRelease(col.name, None, 0.0, 0.0, None))
            continue
        parts = [plans[i] for i in col.measurements]
        mech = "+".join(sorted({_mechanism_name(p) for p in parts}))
        width = None
        single = len(parts) == 1 and parts[0].pure and col.node is not None
        if single and parts[0].scale == 0:
            width = 0.0  # public data only: released exactly
        elif single and n_bins is not None and _is_bare_aggregate(col.node):
            p = parts[0]
            width = mechanisms.laplace_half_width(p.scale, CONFIDENCE, cells=n_bins)
            # discrete counts: integer error <= alpha + 1/2; sums: <= alpha + grid step
            width += 0.5 if p.measurement.integer else (p.granularity or 0.0)
        columns.append(ColumnRelease(
            col.name, mech, math.fsum(p.epsilon for p in parts),
            math.fsum(p.delta for p in parts), width,
        ))
    mechanisms_used = sorted({_mechanism_name(p) for p in plans})
    return Release(
        epsilon=math.fsum(p.epsilon for p in plans),
        delta=math.fsum(p.delta for p in plans),
        mechanism="+".join(mechanisms_used),
        columns=tuple(columns),
        fingerprint=prepared.fingerprint,
    )


def _is_bare_aggregate(node: exp.Expression) -> bool:
    inner = node.this if isinstance(node, exp.Alias) else node
    return isinstance(inner, (exp.Count, exp.Sum))
