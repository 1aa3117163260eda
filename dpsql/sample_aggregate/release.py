"""Releasing the block answers: clamp, default, and a noisy mean (docs/privacy.md,
"Sample-and-aggregate").

Contract. For one output with public bounds [lo, hi] over m blocks, let ``a_b`` be block b's
answer (NaN when the block has no row or its answer is NULL / not a number). The released value
is ``L(S) / m`` where ``S = sum_b c_b``, ``c_b = clip(a_b, lo, hi)`` with NaN taken as ``lo``,
and ``L`` is :func:`dpsql.noise.mechanisms.release_sums` at scale ``2 (hi - lo) / epsilon_j``
(``epsilon_j`` = epsilon / k over k outputs, basic composition); with ``mechanism='gaussian'``,
``L`` adds snapped discrete Gaussian noise instead (:mod:`.gaussian`: the same sensitivity
``2 (hi - lo)``, calibrated at (epsilon_j, delta_j)).

Why ``2 (hi - lo)``: neighbouring databases differ in one row of the private table (changed in
place: removed, and another added). A row's block depends on that row alone, so the removed
row's block and the added row's block are the only blocks whose rows differ; every other
block's answer is the same function of the same rows (public tables never change). Each
``c_b`` lies in [lo, hi] whatever the rows, so each of the (at most) two blocks moves ``S`` by
at most ``hi - lo``: ``|S - S'| <= 2 (hi - lo)``, and ``L(S)`` is epsilon_j-DP (up to
``release_sums``' grid slack). Dividing by the public m is post-processing. Adding or removing
a row touches one block (``hi - lo``); the factor 2 is for the change-one-row neighbours
dpsql protects. With a privacy unit declared, ``by`` is the unit's column (the analysis
requires it), so one unit's rows share one block and the same two-block argument holds.

Everything :func:`plan_release` refuses depends on the SQL, the metadata and the budget only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsql.accounting.curves import PrivacyCurve, gaussian_curve, pure_curve
from dpsql.budget import Budget, missing_epsilon
from dpsql.errors import NotSupportedError, OperationalError
from dpsql.noise import mechanisms
from dpsql.noise.gaussian_release import release_gaussian_sums
from dpsql.release.record import CONFIDENCE, ColumnRelease, Release
from dpsql.sample_aggregate import gaussian
from dpsql.sample_aggregate.rewrite import SamplePlan

#: the release record's name for this mechanism
MECHANISM = "sample_aggregate_laplace"
#: largest magnitude of a sum of clamped answers the snapped release may handle
_MAX_SUM = 2.0**1000


@dataclass(frozen=True)
class OutputNoise:
    """How one output is released: its bounds, epsilon share, and the sum's noise."""

    name: str
    lower: float
    upper: float
    blocks: int
    epsilon: float
    sensitivity: float  # of the sum of clamped block answers: 2 (hi - lo)
    scale: float  # Laplace scale of that sum (Gaussian: sigma * granularity, value units)
    granularity: float  # the sum's grid step at that scale
    #: the Gaussian's (:mod:`.gaussian`): delta_j, sigma in grid steps, the squared L2 move
    #: in grid steps, and the calibration; None / 0 for Laplace
    delta: float = 0.0
    sigma: float | None = None
    l2_squared: int | None = None
    calibration: str | None = None

    @property
    def half_width_95(self) -> float:
        """|noisy mean - clamped mean| <= this with probability >= 95%: the sum's Laplace
        half-width plus its grid step, over m (mechanisms.laplace_half_width); for the
        Gaussian, :func:`.gaussian.half_width`."""
        if self.sigma is not None:
            return gaussian.half_width(self.sigma, self.granularity, self.blocks, CONFIDENCE)
        sum_width = mechanisms.laplace_half_width(self.scale, CONFIDENCE) + self.granularity
        return sum_width / self.blocks

    def note(self) -> str:
        noise = ("Laplace" if self.sigma is None else
                 f"discrete Gaussian ({self.calibration} sigma)")
        return (f"mean over {self.blocks} blocks of the block answers clamped to "
                f"[{self.lower:g}, {self.upper:g}] (an empty block or a NULL answer counts as "
                f"{self.lower:g}), {noise} noise for sensitivity 2*(hi-lo)/m")

    def column(self) -> ColumnRelease:
        """The record's column: for the Gaussian, also sigma and seed 003's (alpha, beta)
        accuracy of the mean (value units; public: from the bounds, m and the budget)."""
        if self.sigma is None:
            return ColumnRelease(self.name, MECHANISM, self.epsilon, 0.0, self.half_width_95,
                                 self.note())
        width = self.half_width_95
        return ColumnRelease(
            self.name, gaussian.MECHANISM_GAUSSIAN, self.epsilon, self.delta, width,
            self.note(), calibration=self.calibration, sigma=self.scale / self.blocks,
            accuracy_alpha=width, accuracy_beta=round(1.0 - CONFIDENCE, 12),
            noise_scale=self.scale / self.blocks)


def plan_release(plan: SamplePlan, budget: Budget | None,
                 fingerprint: str) -> tuple[tuple[OutputNoise, ...], Release]:
    """Each output's noise and the release record (charged as is); refusals before any read."""
    if budget is None:
        raise missing_epsilon()
    if budget.mechanism == "gaussian":
        return _plan_gaussian(plan, budget, fingerprint)
    epsilon = budget.epsilon / len(plan.names)
    mechanisms.check_sum_epsilon(epsilon)  # its sums' grid, as every sum's
    outputs = []
    for name, (lower, upper) in zip(plan.names, plan.bounds, strict=True):
        sensitivity = 2.0 * (upper - lower)
        scale = sensitivity / epsilon
        try:
            granularity = mechanisms.sum_granularity(scale)
        except ValueError:
            granularity = math.nan
        _check_sampleable(name, lower, upper, plan.blocks, epsilon, granularity)
        outputs.append(OutputNoise(name, lower, upper, plan.blocks, epsilon, sensitivity,
                                   scale, granularity))
    columns = tuple(o.column() for o in outputs)
    record = Release(epsilon=budget.epsilon, delta=0.0, mechanism=MECHANISM,
                     columns=columns, fingerprint=fingerprint)
    return tuple(outputs), record


def _check_sampleable(name: str, lower: float, upper: float, blocks: int, epsilon: float,
                      granularity: float) -> None:
    """The clamped sum stays a number the snapped release can handle on its grid."""
    largest = blocks * max(abs(lower), abs(upper))
    if not (math.isfinite(granularity) and largest <= _MAX_SUM
            and largest / granularity <= _MAX_SUM):
        raise NotSupportedError(
            f"SAMPLE_AGGREGATE output {name!r}: the bounds [{lower:g}, {upper:g}] at "
            f"epsilon {epsilon:g} give a noise scale dpsql cannot sample; declare "
            "narrower bounds or a larger epsilon")


def _plan_gaussian(plan: SamplePlan, budget: Budget,
                   fingerprint: str) -> tuple[tuple[OutputNoise, ...], Release]:
    """plan_release for ``mechanism='gaussian'`` (:mod:`.gaussian`)."""
    epsilon, delta = gaussian.check_budget(budget, len(plan.names))
    outputs = []
    for name, (lower, upper) in zip(plan.names, plan.bounds, strict=True):
        sigma, grid, l2_squared = gaussian.sum_noise(lower, upper, epsilon, delta,
                                                     budget.calibration)
        _check_sampleable(name, lower, upper, plan.blocks, epsilon, grid)
        outputs.append(OutputNoise(name, lower, upper, plan.blocks, epsilon,
                                   2.0 * (upper - lower), sigma * grid, grid, delta, sigma,
                                   l2_squared, budget.calibration))
    record = Release(epsilon=budget.epsilon, delta=budget.delta,
                     mechanism=gaussian.MECHANISM_GAUSSIAN,
                     columns=tuple(o.column() for o in outputs), fingerprint=fingerprint)
    return tuple(outputs), record


def release_curve(outputs: Sequence[OutputNoise]) -> PrivacyCurve:
    """The release's privacy curve (what a Rényi or zCDP budget filter charges): each output
    is a pure epsilon_j-DP Laplace release (module contract), independent of the others; or
    each a rho_j-zCDP discrete Gaussian release (:func:`.gaussian.rho`)."""
    sigmas = [(o.sigma, o.l2_squared) for o in outputs]
    if any(s is not None for s, _ in sigmas):
        return gaussian_curve([gaussian.rho(s, n) for s, n in sigmas
                               if s is not None and n is not None])
    return pure_curve([o.epsilon for o in outputs])


def block_answers(rows: Sequence[Sequence[Any]], blocks: int, n_outputs: int) -> np.ndarray:
    """The exact query's rows ``(block, answer_0, ...)`` as a ``(n_outputs, blocks)`` float
    array, NaN where a block has no row or a NULL answer. A block id outside [0, m) or
    repeated is a broken plan: OperationalError (before any noise is drawn)."""
    answers = np.full((n_outputs, blocks), np.nan)
    seen = np.zeros(blocks, dtype=bool)
    for row in rows:
        block = row[0]
        if (isinstance(block, bool) or not isinstance(block, int | np.integer)
                or not 0 <= block < blocks or seen[block]):
            raise OperationalError("the sample-and-aggregate query returned a malformed block "
                                   "id; nothing was released (please report this)")
        seen[block] = True
        for j in range(n_outputs):
            value = row[1 + j]
            answers[j, block] = np.nan if value is None else float(value)
    return answers


def clamped_sums(answers: np.ndarray, outputs: Sequence[OutputNoise]) -> np.ndarray:
    """Per output, ``sum_b clip(a_b, lo, hi)`` with NaN as ``lo`` (module contract)."""
    sums = np.empty(len(outputs))
    for j, o in enumerate(outputs):
        row = np.where(np.isnan(answers[j]), o.lower, answers[j])
        sums[j] = math.fsum(np.clip(row, o.lower, o.upper).tolist())
    return sums


def noisy_means(answers: np.ndarray, outputs: Sequence[OutputNoise],
                sampler: mechanisms.Sampler | None = None) -> list[float]:
    """The released values: each clamped sum through ``release_sums`` at its scale, over m
    (``sampler`` is for tests only)."""
    sums = clamped_sums(answers, outputs)
    return [float(_release(s, o, sampler)) / o.blocks for s, o in zip(sums, outputs, strict=True)]


def _release(total: float, o: OutputNoise, sampler: mechanisms.Sampler | None) -> float:
    if o.sigma is not None:
        return float(release_gaussian_sums(np.array([total]), o.sigma, o.granularity,
                                           sampler=sampler)[0])
    return float(mechanisms.release_sums(np.array([total]), o.scale, sampler=sampler)[0])
