"""The neighbouring-database test of the Gaussian mechanism through the whole engine.

As in tests/statistical/test_engine_privacy_loss.py (whose database and metadata this reuses):
``SELECT v.g, COUNT(*) FROM visits v GROUP BY v.g`` releases 2B bins with independent noise of
one data-independent sigma; bins ``0 .. B-1`` hold D (10 visits) and ``B .. 2B-1`` hold D'
(11 visits), so one run gives B samples of a bin's release on D and B on D'.

The Gaussian is (epsilon, delta)-DP, not pure, so the estimate is the audit's delta-aware lower
bound (:func:`dpsql.privacy_audit.bounds.loss_lower_bounds`): ``ln((P_lo[E] - delta) /
Q_hi[E])`` over half-line events, Clopper-Pearson at confidence 1 - 1e-6. One bin's release is
a post-processing of the whole release, so it is (epsilon, delta)-DP too and the bound must
stay at most epsilon. It is a lower bound, so passing proves nothing by itself; the teeth: the
SAME harness, fed by an engine whose sampler halves sigma, must report a bound above epsilon.
delta = 0.1 makes that visible with 100,000 samples: the halved marginal's best half-line has
ln((P - delta)/Q) = 1.32 at P = 0.29, Q = 0.052 (Clopper-Pearson at 1e-6 keeps about 1.2),
the correct one's at most 0.32. False-failure rate: at most 1e-6 for the first assertion (the
bound's confidence); the second has about 0.2 of headroom, many standard errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.noise.gaussian import discrete_gaussian
from dpsql.privacy_audit.bounds import loss_lower_bounds
from dpsql.session import Session
from tests.statistical.test_engine_privacy_loss import METADATA, B, database  # noqa: F401

EPSILON = 1.0
DELTA = 0.1  # large, so that a factor-2 error is visible at this sample size
N_RUNS = 50
SQL = "SELECT v.g, COUNT(*) AS n FROM visits v GROUP BY v.g"


class HalvedSigma:
    """A deliberately broken sampler: secure discrete Gaussian with HALF the requested sigma."""

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:  # pragma: no cover
        raise AssertionError("the Gaussian path must not draw Laplace noise")

    def discrete_gaussian(self, sigma: float, size: int) -> np.ndarray:
        return discrete_gaussian(sigma / 2.0, size)


@pytest.fixture(scope="module")
def engines(database, make_backend):  # noqa: F811
    return {
        "secure": Session(METADATA, make_backend(database, METADATA)),
        "halved": Session(METADATA, make_backend(database, METADATA), sampler=HalvedSigma()),
    }


def _samples(engine: Session) -> tuple[np.ndarray, np.ndarray]:
    d, d_prime = [], []
    for _ in range(N_RUNS):
        result = engine.run(SQL, epsilon=EPSILON, delta=DELTA, mechanism="gaussian")
        assert result.release.mechanism == "discrete_gaussian"
        keys = np.array([row[0] for row in result.rows])
        values = np.array([row[1] for row in result.rows], dtype=np.float64)
        d.append(values[keys < B])
        d_prime.append(values[keys >= B])
    return np.concatenate(d), np.concatenate(d_prime)


def _bound(engine: Session) -> float:
    d, d_prime = _samples(engine)
    assert abs(np.median(d) - 10) <= 0.5 and abs(np.median(d_prime) - 11) <= 0.5
    return loss_lower_bounds(d, d_prime, delta=DELTA, confidence=1 - 1e-6,
                             thresholds=30).max_divergence


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["duckdb"], scope="module")
def test_gaussian_histogram_keeps_its_privacy_loss(engines):
    assert _bound(engines["secure"]) <= EPSILON  # measured: about 0.27


@pytest.mark.slow
@pytest.mark.parametrize("backend_name", ["duckdb"], scope="module")
def test_same_harness_catches_a_halved_sigma(engines):
    assert _bound(engines["halved"]) > EPSILON  # measured: about 1.2
