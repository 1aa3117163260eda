"""A charge above epsilon ~709.78 (the ledger allows one query epsilon 1e6): e^epsilon overflows
and ``math.expm1`` raises OverflowError, so ``dpsql budget show`` -- which prints every
composition bound of the history -- died with a traceback on such a ledger (fourth units QA).
The advanced (DRV) bound there is infinite, as it already was just below the threshold (where
the product ``eps * (e^eps - 1)`` overflows to inf without raising)."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from dpsql.accounting import Ledger, advanced_composition, compose
from dpsql.cli.main import cli


@pytest.mark.parametrize("charges", [
    [(709.0, 0.0)], [(710.0, 0.0)], [(1000.0, 0.0), (1.0, 1e-8)], [(1e6, 0.0)],
])
def test_the_advanced_bound_is_infinite_not_an_overflow(charges):
    eps, delta = advanced_composition(charges, 1e-6)
    assert eps == math.inf and delta == pytest.approx(1e-6 + sum(d for _, d in charges))
    report = compose(charges)
    assert report.advanced.epsilon == math.inf
    assert report.basic.epsilon == pytest.approx(sum(e for e, _ in charges))


def test_small_charges_are_unchanged():
    eps, _ = advanced_composition([(1.0, 0.0), (1.0, 0.0)], 1e-6)
    assert eps == pytest.approx(math.sqrt(2 * math.log(1e6) * 2) + 2 * math.expm1(1.0))


def _budget_show(tmp_path, monkeypatch, *extra: str):
    """``dpsql budget show`` on a ledger holding a charge of epsilon 1000 and one of 1."""
    monkeypatch.delenv("DPSQL_LEDGER", raising=False)
    path = str(tmp_path / "ledger.sqlite")
    db = str(tmp_path / "shop.duckdb")
    with Ledger(path) as ledger:
        ledger.set_budget(db, "bob", epsilon=1e6, delta=0.0)
        ledger.charge(db, "bob", fingerprint="f1", epsilon=1000.0, delta=0.0, mechanism="r2t")
        ledger.charge(db, "bob", fingerprint="f2", epsilon=1.0, delta=0.0, mechanism="r2t")
    done = CliRunner().invoke(cli, ["budget", "show", "-l", path, "-a", "bob", "-d", db,
                                    *extra], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.output


def test_budget_show_on_a_ledger_with_a_huge_charge(tmp_path, monkeypatch):
    output = _budget_show(tmp_path, monkeypatch)
    assert "advanced (DRV)  epsilon inf" in output
    assert "basic           epsilon 1001" in output


def test_budget_show_json_is_strict_json_with_a_huge_charge(tmp_path, monkeypatch):
    import json

    output = _budget_show(tmp_path, monkeypatch, "--json")
    assert "Infinity" not in output  # strict JSON: no non-standard constants

    def strict(name: str) -> float:
        raise ValueError(name)

    payload = json.loads(output, parse_constant=strict)
    advanced = payload["composition"]["advanced"]
    assert advanced["epsilon"] is None and "unbounded" in advanced["note"]
    assert payload["composition"]["basic"]["epsilon"] == 1001.0
