"""Reading R2T's truncated sums and releasing them (a query under a privacy unit without
GROUP BY; the executed query is :func:`dpsql.units.rewrite.unit_contributions`'s).

The exact query returns one row: for part i (dpsql.units.analysis.R2TPart) and level j the
column ``__r<i>_<j>`` = Q(tau_j) over the part's own levels (dpsql.units.grid; NULL, over no
unit, is 0). :func:`r2t_bins` reads it, calls
``drawn`` before any noise, and returns the single bin of noisy measurements the
post-processing reads, with each measurement's released interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dpsql.backends.base import Backend
from dpsql.errors import ProgrammingError
from dpsql.execute.exact import CompiledPlan
from dpsql.execute.layout import Bins
from dpsql.noise.mechanisms import Sampler
from dpsql.noise.plan import NoisePlan
from dpsql.units.analysis import UnitRelease
from dpsql.units.grid import part_levels
from dpsql.units.noise import R2TOutcome, release_r2t_measurements


def read_truncated(backend: Backend, compiled: CompiledPlan, params: Sequence[Any],
                   release: UnitRelease) -> list[np.ndarray]:
    """Per R2T part, Q(tau_j) at every level (exact: reads private data)."""
    if release.more:  # two units: the flow truncation (dpsql.units.multi)
        from dpsql.units.multi_execute import read_pair_truncated

        return read_pair_truncated(backend, compiled, params, release)
    rows, _ = backend.execute(compiled.exact, compiled.plan.exact_bindings(params))
    counts = [len(part_levels(part, release.unit)) for part in release.parts]
    if len(rows) != 1 or len(rows[0]) != sum(counts):
        raise ProgrammingError("the exact result of a query under a privacy unit is malformed")
    row = rows[0]
    out = []
    start = 0
    for part, n in zip(release.parts, counts, strict=True):
        values = [0 if v is None else v for v in row[start:start + n]]
        start += n
        out.append(np.array(values, dtype=np.int64 if part.integer else np.float64))
    return out


def r2t_bins(backend: Backend, compiled: CompiledPlan, params: Sequence[Any],
             plans: Sequence[NoisePlan], release: UnitRelease, drawn: Callable[[], None],
             sampler: Sampler | None = None
             ) -> tuple[Bins, list[np.ndarray], list[R2TOutcome | None]]:
    """The exact read, then every measurement's R2T release (module docstring): the bin,
    the noisy value per measurement (COUNTs rounded to integers: post-processing), and
    each measurement's outcome (None: released exactly)."""
    truncated = read_truncated(backend, compiled, params, release)
    drawn()
    outcomes = release_r2t_measurements(truncated, plans, sampler, release.unit.level_base)
    noisy = []
    for plan, outcome in zip(plans, outcomes, strict=True):
        value = 0.0 if outcome is None else outcome.value
        if plan.measurement.integer:
            noisy.append(np.array([round(value)], dtype=np.int64))
        else:
            noisy.append(np.array([value], dtype=np.float64))
    bins = Bins([], [np.zeros(1) for _ in plans], 1, [], 1)
    return bins, noisy, outcomes
