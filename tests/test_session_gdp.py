"""The GDP budget filter through the session, on real DuckDB and a real ledger file: Gaussian
counts and histograms are charged their certified mu; Laplace releases and Gaussian sums (whose
move in grid steps is too long to certify) are refused before anything is charged."""

from __future__ import annotations

import math

import pytest

from dpsql.errors import BudgetExhaustedError, NotSupportedError
from dpsql.noise.gdp import discrete_mu, gaussian_mu
from tests.ledgers import ANALYST, DATABASE, charged
from tests.test_session_filters import curves, database, session  # noqa: F401 (fixtures)


def test_gaussian_counts_and_histograms_are_charged_their_mu(session):  # noqa: F811
    session.ledger.set_budget(DATABASE, ANALYST, 1.0, 1e-6, filter="gdp")
    count = session.run("SELECT COUNT(*) FROM visits", epsilon=0.5, delta=1e-7,
                        mechanism="gaussian")
    hist = session.run("SELECT day, COUNT(*) FROM visits GROUP BY day", epsilon=0.5,
                       delta=1e-7, mechanism="gaussian")
    first, second = curves(session)
    assert first is not None and second is not None
    sigma = count.release.columns[0].sigma
    assert first.mu == pytest.approx(discrete_mu(sigma, 1), rel=1e-8)
    assert first.mu >= gaussian_mu(sigma, 1) > 1 / sigma  # the discrete excess is charged
    hist_sigma = next(c.sigma for c in hist.release.columns if c.sigma is not None)
    assert second.mu == pytest.approx(gaussian_mu(hist_sigma, 2), rel=1e-8)  # two bins move
    status = session.ledger.status(DATABASE, ANALYST)
    assert status.filter_spent == pytest.approx(first.mu ** 2 + second.mu ** 2, rel=1e-9)
    with pytest.raises(BudgetExhaustedError, match="GDP filter"):
        for i in range(100):
            session.run("SELECT COUNT(*) FROM visits WHERE spend > ?", [float(i)],
                        epsilon=0.5, delta=1e-7, mechanism="gaussian")
    assert math.sqrt(session.ledger.status(DATABASE, ANALYST).filter_spent) <= 0.2367044


def test_releases_without_a_mu_are_refused_before_the_charge(session):  # noqa: F811
    session.ledger.set_budget(DATABASE, ANALYST, 1.0, 1e-6, filter="gdp")
    for sql, mechanism in (("SELECT COUNT(*) FROM visits", "laplace"),
                           ("SELECT SUM(spend) FROM visits", "gaussian")):
        with pytest.raises(NotSupportedError, match=r"GDP filter.*Nothing was charged"):
            session.run(sql, epsilon=0.5, delta=1e-7, mechanism=mechanism)
    assert charged(session) == []
