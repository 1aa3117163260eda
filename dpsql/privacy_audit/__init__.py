"""The owner's privacy audit (``dpsql audit -m M.yaml -d D.duckdb "SQL"``; seeds 000 and 004).

:func:`audit` finds a neighbouring database that moves the query's exact answer most
(:mod:`.neighbours`), runs the full engine ``runs`` times on each of the two databases (the exact
values are read once per database and replayed, :class:`~dpsql.backends.replay.ReplayBackend`;
every run draws its own noise and post-processes as in production), and bounds the privacy
loss from below (:mod:`.bounds`) on one scalar statistic of each release: the Laplace
log-likelihood ratio ``T(x) = sum_i (|x_i - m'_i| - |x_i - m_i|) / b_i`` over the numeric output
cells, with centres ``m``, ``m'`` and scales ``b`` estimated from separate pilot runs. T is the
most telling single statistic (the privacy loss itself when the estimates are right); a fixed
function of the output, so the bound stays valid whatever the estimates. The verdict is
``fail`` when the samples *prove*, at the stated confidence, a loss above the claimed epsilon;
``pass`` only means they do not contradict it. The claim is what the release records: the
epsilon asked for and the delta the release plan spends (a pure release, such as R2T, spends
none of the delta allowed, and is audited, and reported, as pure).

Neighbours are built by changing one row (dpsql's relation) or, with ``relation='remove'``,
removing one (:mod:`.neighbours`), or, with ``relation='unit'`` under a declared privacy unit,
removing one unit with every row linked to it along the declared paths (:mod:`.units`; the
units tried are the heaviest and some spread ones). Without a relation, the metadata's own
decides: ``unit`` under a privacy unit (a changed row may move between two units, a pair
the unit mechanisms do not claim epsilon for), ``change`` otherwise. A query of
several releases (aggregates in CTEs or derived tables, scalar subqueries:
:class:`~dpsql.execute.blocks.PreparedBlocks`) is audited as one mechanism, its output rows
after post-processing; its neighbour is chosen by the change of those rows computed without
noise.

The audit is an owner's tool: its report names rows and exact changes. It never charges a
ledger, and it copies the database once per neighbour tried, so run it on a test database or
a sample of the data.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.replay import ReplayBackend
from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.execute.blocks import PreparedBlocks
from dpsql.execute.exact import read_exact
from dpsql.execute.public import PreparedPublic
from dpsql.execute.selection import PreparedSelection
from dpsql.metadata import Metadata
from dpsql.noise.mechanisms import Sampler
from dpsql.privacy_audit.bounds import LossBounds, loss_lower_bounds
from dpsql.privacy_audit.neighbours import (
    RELATIONS,
    Neighbour,
    candidates,
    copy_database,
    make_neighbour,
)
from dpsql.privacy_audit.units import make_unit_neighbour, unit_candidates
from dpsql.sample_aggregate.prepared import PreparedSampleAggregate
from dpsql.session import Session

__all__ = ["AuditReport", "audit"]

PILOT_RUNS = 100


@dataclass(frozen=True)
class AuditReport:
    """The audit's findings for one query (owner-only: names rows and exact changes).
    ``delta`` is what the releases spend (their records' delta: the claim audited),
    ``requested_delta`` the delta they were allowed."""

    sql: str
    epsilon: float
    delta: float
    neighbour: Neighbour
    #: L1 change between the two databases of the exact measurements (one release) or of the
    #: noiseless output's numeric cells (several releases)
    exact_change: float
    neighbours_tried: int
    cells: int  # numeric output cells the statistic combines
    runs: int
    bounds: LossBounds
    requested_delta: float = 0.0

    @property
    def verdict(self) -> str:
        return "fail" if self.bounds.max_divergence > self.epsilon else "pass"


class _Noiseless:
    """A sampler that adds nothing: the audit's owner-side view of a multi-release query's
    exact output, to pick the neighbour (never used for a release anyone sees)."""

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        return np.zeros(size, dtype=np.int64)

    def discrete_gaussian(self, sigma: float, size: int) -> np.ndarray:
        return np.zeros(size, dtype=np.int64)


def _exact_vector(session: Session, sql: str, params: Sequence[Any], epsilon: float,
                  delta: float) -> np.ndarray:
    prepared = session.prepare(sql)
    if isinstance(prepared, PreparedSelection):
        raise NotSupportedError(
            "the audit measures noisy values: MIN / MAX / quantiles and top-k by COUNT(*) "
            "release a choice by the exponential mechanism, which it does not model yet; "
            "tests/statistical/test_engine_selection_privacy_loss.py checks that path")
    if isinstance(prepared, PreparedSampleAggregate):
        raise NotSupportedError(
            "the audit runs ordinary releases only, not SAMPLE_AGGREGATE queries (their "
            "2(hi - lo)/m bound is checked by dpsql's brute-force and statistical tests)")
    if isinstance(prepared, PreparedPublic):
        raise NotSupportedError(
            "the query reads public tables only: it is answered exactly and spends nothing, "
            "so there is no privacy loss to audit")
    if isinstance(prepared, PreparedBlocks):
        noiseless = Session(session.metadata, session.backend, sampler=_Noiseless())
        try:
            rows = _rows_by_key(noiseless, sql, noiseless.run(sql, params, epsilon=epsilon,
                                                               delta=delta).rows)
        finally:
            noiseless.close()
        cells = _cells([rows])
        return np.array([cells[c][0] for c in sorted(cells, key=repr)], dtype=np.float64)
    unit = prepared.analysis.unit
    if unit is not None and (unit.r2t or unit.more):  # R2T: the levels, as Session.run reads
        # them (one unit: the truncated sums, or for counts the histogram of contributions
        # evaluated in Python; two units: the flow-truncated levels, units.multi), then each
        # part's rows of no unit, c_NULL, apart: added to a level in float64 a huge c_NULL
        # would round the level's move past tau_j, which the release never does (it adds
        # c_NULL after the noise)
        from dpsql.units.execute import read_truncated_parts

        parts = read_truncated_parts(session.backend, prepared.compiled, params, unit)
        return np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in parts.levels]
                              + [np.asarray(parts.no_unit, dtype=np.float64)])
    bins = read_exact(session.backend, prepared.compiled, params)
    return np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in bins.exact])


def _rows_by_key(session: Session, sql: str, rows: list[tuple]) -> dict[tuple, tuple]:
    prepared = session.prepare(sql)
    assert not isinstance(prepared, PreparedPublic)  # refused by _exact_vector first
    columns = prepared.analysis.columns
    keys = [i for i, c in enumerate(columns) if c.kind == "group_key"]
    if not keys:
        return {(i,): row for i, row in enumerate(rows)}
    return {tuple(row[i] for i in keys): row for row in rows}


def _draw(session: Session, sql: str, params: Sequence[Any], epsilon: float, delta: float,
          runs: int, spent: set[float]) -> list[dict[tuple, tuple]]:
    """``runs`` releases' rows by key; each release's recorded delta is added to ``spent``."""
    out = []
    for _ in range(runs):
        result = session.run(sql, params, epsilon=epsilon, delta=delta)
        spent.add(result.release.delta)
        out.append(_rows_by_key(session, sql, result.rows))
    return out


def _cells(draws: list[dict[tuple, tuple]], *, complete: bool = True) -> dict[tuple, np.ndarray]:
    """(row key, column index) -> the numeric values of that cell across draws. Non-numeric
    cells are skipped; a cell missing from some draw (a group not released, an AVG that came
    out NULL) is skipped when ``complete``, else NaN in that draw."""
    out: dict[tuple, np.ndarray] = {}
    for j, draw in enumerate(draws):
        for key, row in draw.items():
            for i, value in enumerate(row):
                # Decimal: a DECIMAL column's sum (dpsql.execute.typed)
                if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
                    out.setdefault((key, i), np.full(len(draws), np.nan))[j] = float(value)
    if complete:
        return {cell: v for cell, v in out.items() if not np.isnan(v).any()}
    return out


@dataclass(frozen=True)
class LikelihoodRatio:
    """``T(x) = sum_i (|x_i - far_i| - |x_i - near_i|) / scale_i`` over ``cells``: large when a
    release looks like it came from the database whose centres are ``near``."""

    cells: tuple[tuple, ...]
    near: np.ndarray
    far: np.ndarray
    scale: np.ndarray

    @staticmethod
    def fit(d: dict[tuple, np.ndarray], e: dict[tuple, np.ndarray]) -> LikelihoodRatio | None:
        cells = tuple(sorted((c for c in d.keys() & e.keys()
                              if d[c].std() > 0 or e[c].std() > 0), key=repr))
        if not cells:
            return None
        near = np.array([np.median(d[c]) for c in cells])
        far = np.array([np.median(e[c]) for c in cells])
        scale = np.array([(np.abs(d[c] - m).mean() + np.abs(e[c] - f).mean()) / 2.0
                          for c, m, f in zip(cells, near, far, strict=True)])
        return LikelihoodRatio(cells, near, far, np.where(scale > 0, scale, 1.0))

    def __call__(self, values: dict[tuple, np.ndarray], runs: int) -> np.ndarray:
        """T over ``runs`` releases; a cell missing from a release (NaN, or absent from all)
        counts as the midpoint of near and far, i.e. 0: still a fixed function of the
        release, so the audit's bounds hold (a fitted cell can be NULL in a later release)."""
        missing = np.full(runs, np.nan)
        x = np.stack([values.get(c, missing) for c in self.cells], axis=1)
        x = np.where(np.isnan(x), (self.near + self.far) / 2.0, x)
        return ((np.abs(x - self.far) - np.abs(x - self.near)) / self.scale).sum(axis=1)


def _neighbours(base: Path, folder: Path, metadata: Metadata, private: list[str],
                relation: str, count: int) -> Iterator[Neighbour]:
    """The candidate neighbours of ``base`` (copies in ``folder``), one at a time."""
    if relation == "unit":
        assert metadata.privacy_unit is not None
        from dpsql.metadata.unit_multi import all_units, unit_view

        n = 0
        for declared in all_units(metadata):  # several unit tables: each one's cascade
            view = unit_view(metadata, declared.table)
            for unit in unit_candidates(base, view, count):
                path, removed = make_unit_neighbour(base, folder / f"u-{n}.duckdb", view, unit)
                n += 1
                yield Neighbour(declared.table, None, None, path, unit, removed)
        return
    for table in private:
        for n, (replaced, replacement) in enumerate(candidates(base, table, relation, count)):
            yield make_neighbour(base, folder / f"n-{table}-{n}.duckdb", table, replaced,
                                 replacement)


def audit(database: str | Path, metadata: Metadata, sql: str, params: Sequence[Any] = (), *,
          epsilon: float, delta: float = 0.0, neighbours: int = 8, runs: int = 4000,
          confidence: float = 0.99, workdir: str | Path | None = None,
          sampler: Sampler | None = None, relation: str | None = None) -> AuditReport:
    """Audit ``sql`` on ``database`` at (epsilon, delta) (module docstring): ``neighbours``
    candidates tried per private table, ``relation`` ``change`` (one row replaced) or
    ``remove`` (one row deleted); or ``unit`` (one unit and its linked rows removed;
    ``neighbours`` units tried in all, per unit table when several are declared), which
    needs the metadata's ``privacy_unit``; None
    (the default): ``unit`` when the metadata declares a privacy unit, else ``change``.

    ``sampler`` is for the audit's own self-tests (an under-noised mechanism it must catch);
    production audits use the secure default. Raises the engine's own refusal if ``sql`` is
    refused, and ProgrammingError when the query reads no private table stored in the
    database (nothing to audit), ``relation`` is unknown, or ``unit`` has no privacy unit.
    """
    if relation is None:
        relation = "unit" if metadata.privacy_unit is not None else "change"
    if relation not in RELATIONS:
        raise ProgrammingError(f"unknown neighbouring relation {relation!r}: choose one of "
                               f"{', '.join(RELATIONS)}")
    if relation == "unit" and metadata.privacy_unit is None:
        raise ProgrammingError("--neighbours unit needs a privacy unit in the metadata "
                               "(privacy_unit: {table: T, column: C} and each private table's "
                               "unit path); audit with change or remove otherwise")
    database = Path(database)
    original = Session(metadata, DuckDBBackend(database, metadata))
    try:
        prepared = original.prepare(sql)
        private = sorted(t for t in prepared.tables
                         if not metadata.table(t).public and not metadata.table(t).source)
        if not private:
            raise ProgrammingError("the query reads no private table stored in the database: "
                                   "nothing to audit")
        base_exact = _exact_vector(original, sql, params, epsilon, delta)
    finally:
        original.backend.close()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        folder = Path(tmp)
        base = copy_database(database, folder / "base.duckdb")
        best: tuple[float, Neighbour] | None = None
        tried = 0
        for candidate in _neighbours(base, folder, metadata, private, relation, neighbours):
            tried += 1
            session = Session(metadata, DuckDBBackend(candidate.path, metadata))
            try:
                change = float(np.abs(_exact_vector(session, sql, params, epsilon, delta)
                                      - base_exact).sum())
            finally:
                session.backend.close()
            if best is None or change > best[0]:
                best = (change, candidate)
        if best is None:
            raise ProgrammingError("the private tables have too few rows to build a "
                                   f"neighbour by {relation}: nothing to compare with")
        change, neighbour = best
        backends = [DuckDBBackend(path, metadata) for path in (base, neighbour.path)]
        sessions = [Session(metadata, ReplayBackend(b), sampler=sampler) for b in backends]
        spent: set[float] = set()  # the plan's delta: one value (SQL, metadata, budget)
        try:
            pilot = [_cells(_draw(s, sql, params, epsilon, delta, PILOT_RUNS, spent))
                     for s in sessions]
            statistic = LikelihoodRatio.fit(*pilot)
            if statistic is None:
                raise ProgrammingError("the query's output has no noisy numeric cell present in "
                                       "every release on both databases: nothing to audit")
            samples = [statistic(_cells(_draw(s, sql, params, epsilon, delta, runs, spent),
                                        complete=False), runs) for s in sessions]
        finally:
            for backend in backends:
                backend.close()
    claimed = max(spent)  # what the releases spend, at most the delta allowed
    bounds = loss_lower_bounds(samples[0], samples[1], delta=claimed, confidence=confidence)
    return AuditReport(sql, epsilon, claimed, neighbour, change, tried, len(statistic.cells),
                       runs, bounds, requested_delta=delta)
