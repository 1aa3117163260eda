"""The privacy-budget ledger (real SQLite files in tmp_path) and the composition theorems.

Composition expectations are computed by hand in the test (the arithmetic is written out), or by a
naive direct evaluation of the seed formula that shares no code with dpsql.accounting.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.accounting import (
    BudgetStatus,
    Ledger,
    advanced_composition,
    basic_composition,
    compose,
    database_identity,
    kov_bound,
    kov_delta,
    optimal_homogeneous_composition,
)
from dpsql.errors import (
    BudgetExhaustedError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
)

DB = "shop.duckdb"


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as book:
        yield book


def spend(book: Ledger, epsilon: float, delta: float = 0.0, *, analyst: str = "alice",
          database: str = DB) -> int:
    return book.charge(database, analyst, fingerprint="q", epsilon=epsilon, delta=delta,
                       mechanism="laplace")


# -- identity ---------------------------------------------------------------------------------


def test_database_identity(tmp_path, monkeypatch):
    assert database_identity(None) == ":memory:"
    assert database_identity(":memory:") == ":memory:"
    assert database_identity("") == ":memory:"
    assert database_identity("s3://bucket/x") == "s3://bucket/x"
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "shop.duckdb"
    target.touch()
    os.symlink(target, tmp_path / "link.duckdb")
    real = os.path.realpath(target)
    assert database_identity("shop.duckdb") == real
    assert database_identity("./shop.duckdb") == real
    assert database_identity(tmp_path / "link.duckdb") == real
    assert database_identity(database_identity("shop.duckdb")) == real  # idempotent


def test_relative_and_absolute_paths_share_one_budget(tmp_path, monkeypatch, ledger):
    monkeypatch.chdir(tmp_path)
    ledger.set_budget("shop.duckdb", "alice", 1.0, 0.0)
    spend(ledger, 0.6, database=str(tmp_path / "shop.duckdb"))
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.6, database="./shop.duckdb")
    assert ledger.status("shop.duckdb", "alice").epsilon_spent == 0.6


# -- file format ------------------------------------------------------------------------------


def test_new_file_is_a_wal_ledger(tmp_path):
    path = tmp_path / "new.sqlite"
    Ledger(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA application_id").fetchone()[0] != 0
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"budgets", "charges", "cache"} <= tables
    conn.close()


def test_missing_file_without_create_and_directory_fail_closed(tmp_path):
    with pytest.raises(OperationalError, match="does not exist"):
        Ledger(tmp_path / "absent.sqlite", create=False)
    assert not (tmp_path / "absent.sqlite").exists()
    with pytest.raises(OperationalError, match="directory"):
        Ledger(tmp_path)


def test_in_memory_ledger_works():
    with Ledger(":memory:") as book:
        book.set_budget(DB, "alice", 1.0, 0.0)
        spend(book, 0.5)
        assert book.status(DB, "alice").epsilon_remaining == 0.5


def test_closed_ledger_raises_interface_error(tmp_path):
    book = Ledger(tmp_path / "l.sqlite")
    book.close()
    book.close()  # idempotent
    with pytest.raises(InterfaceError):
        book.status(DB, "alice")


# -- budgets and charges ----------------------------------------------------------------------


def test_no_budget_means_nothing_allowed(ledger):
    status = ledger.status(DB, "alice")
    assert (status.epsilon_total, status.delta_total) == (0.0, 0.0)
    assert status.epsilon_remaining == 0.0 and status.history == ()
    with pytest.raises(BudgetExhaustedError, match="no privacy budget"):
        spend(ledger, 0.0)  # not even a free query
    assert ledger.status(DB, "alice").history == ()


def test_set_charge_status(ledger):
    ledger.set_budget(DB, "alice", 1.0, 1e-6)
    first = ledger.charge(DB, "alice", fingerprint="fp1", epsilon=0.25, delta=1e-8,
                          mechanism="laplace")
    second = ledger.charge(DB, "alice", fingerprint="fp2", epsilon=0.5, delta=0.0,
                           mechanism="smooth-laplace")
    assert second > first
    status = ledger.status(DB, "alice")
    assert isinstance(status, BudgetStatus)
    assert status.epsilon_total == 1.0 and status.delta_total == 1e-6
    assert status.epsilon_spent == 0.75 and status.delta_spent == 1e-8
    assert status.epsilon_remaining == 0.25 and status.delta_remaining == 9.9e-7
    assert [c.id for c in status.history] == [first, second]
    c = status.history[0]
    assert (c.analyst, c.database, c.fingerprint, c.epsilon, c.delta, c.mechanism) == (
        "alice", database_identity(DB), "fp1", 0.25, 1e-8, "laplace"
    )
    assert c.at.endswith("+00:00")  # UTC
    # budgets are per (database, analyst)
    assert ledger.status(DB, "bob").epsilon_total == 0.0
    assert ledger.status("other.duckdb", "alice").epsilon_total == 0.0


def test_exhaustion_raises_and_spends_nothing(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    spend(ledger, 0.7)
    before = ledger.status(DB, "alice")
    with pytest.raises(BudgetExhaustedError) as info:
        spend(ledger, 0.5)
    assert isinstance(info.value, OperationalError)
    message = info.value.message
    assert "epsilon=0.5" in message and "epsilon=0.3" in message  # requested vs remaining
    assert "Nothing was charged" in message
    after = ledger.status(DB, "alice")
    assert after.history == before.history and after.epsilon_spent == 0.7
    spend(ledger, 0.3)  # the exact remainder is still available
    assert ledger.status(DB, "alice").epsilon_remaining == 0.0


def test_delta_budget_is_enforced_too(ledger):
    ledger.set_budget(DB, "alice", 10.0, 1e-6)
    spend(ledger, 0.1, 6e-7)
    with pytest.raises(BudgetExhaustedError, match="delta"):
        spend(ledger, 0.1, 6e-7)
    spend(ledger, 0.1, 4e-7)  # exactly the remaining delta
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.1, 1e-18)  # the smallest delta unit
    spend(ledger, 0.1, 0.0)  # pure-epsilon queries still fit
    status = ledger.status(DB, "alice")
    assert status.delta_spent == 1e-6 and status.delta_remaining == 0.0
    assert len(status.history) == 3


def test_pure_epsilon_budget_refuses_any_delta(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.1, 1e-12)


def test_fixed_point_is_exact_300_charges_of_a_cent(ledger):
    # Floats drift: adding 0.01 three hundred times gives 2.99999999999998, not 3.0 (a float
    # ledger would then admit a 301st charge of 1e-14; other sequences drift the other way).
    total = 0.0
    for _ in range(300):
        total += 0.01
    assert total != 3.0
    ledger.set_budget(DB, "alice", 3.0, 0.0)
    for _ in range(300):
        spend(ledger, 0.01)
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.01)
    status = ledger.status(DB, "alice")
    assert len(status.history) == 300
    assert status.epsilon_spent == 3.0 and status.epsilon_remaining == 0.0


def test_fixed_point_exact_for_tenths_and_tiny_deltas(ledger):
    ledger.set_budget(DB, "alice", 1.0, 1e-6)
    for _ in range(10):
        spend(ledger, 0.1, 1e-9)  # 10 x 0.1 = 1.0 exactly; 10 x 1e-9 of 1e-6
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.1)
    ledger.set_budget(DB, "bob", 0.0, 1e-6)
    for _ in range(1000):
        spend(ledger, 0.0, 1e-9, analyst="bob")  # 1000 x 1e-9 = 1e-6 exactly
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.0, 1e-9, analyst="bob")


def test_rounding_charges_up_and_budgets_down(ledger):
    # epsilon unit is 1e-12: a budget of 1 + 9e-13 floors to 1.0 ...
    ledger.set_budget(DB, "alice", 1.0000000000009, 0.0)
    assert ledger.status(DB, "alice").epsilon_total == 1.0
    # ... and a charge of 1e-13 costs a whole unit, 1e-12
    spend(ledger, 1e-13)
    assert ledger.status(DB, "alice").epsilon_spent == 1e-12
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 1.0)  # 1e-12 + 1.0 > 1.0
    spend(ledger, 1.0 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    budget=st.integers(min_value=0, max_value=5 * 10**12),
    amounts=st.lists(st.integers(min_value=1, max_value=10**12), min_size=1, max_size=40),
)
def test_fixed_point_matches_exact_rational_filter(tmp_path_factory, budget, amounts):
    """Whatever the amounts, the ledger admits exactly what exact rational arithmetic admits."""
    path = tmp_path_factory.mktemp("prop") / "l.sqlite"
    with Ledger(path) as book:
        book.set_budget(DB, "alice", float(Fraction(budget, 10**12)), 0.0)
        spent = Fraction(0)
        limit = Fraction(repr(float(Fraction(budget, 10**12))))
        for units in amounts:
            eps = float(Fraction(units, 10**12))
            exact = Fraction(repr(eps))  # the decimal number the float denotes
            if spent + exact <= limit:
                spend(book, eps)
                spent += exact
            else:
                with pytest.raises(BudgetExhaustedError):
                    spend(book, eps)
        assert Fraction(repr(book.status(DB, "alice").epsilon_spent)) == spent


def test_set_budget_keeps_spending_and_may_lower_below_it(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    spend(ledger, 0.6)
    ledger.set_budget(DB, "alice", 2.0, 0.0)
    assert ledger.status(DB, "alice").epsilon_spent == 0.6
    ledger.set_budget(DB, "alice", 0.5, 0.0)
    status = ledger.status(DB, "alice")
    assert status.epsilon_remaining == 0.0
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 1e-12)


def test_reset_forgets_charges_keeps_budget_and_ids(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    ledger.set_budget(DB, "bob", 1.0, 0.0)
    spend(ledger, 1.0)
    last = spend(ledger, 0.5, analyst="bob")
    ledger.reset(DB, "alice")
    status = ledger.status(DB, "alice")
    assert status.history == () and status.epsilon_spent == 0.0 and status.epsilon_total == 1.0
    assert ledger.status(DB, "bob").epsilon_spent == 0.5  # other principals untouched
    assert spend(ledger, 1.0) > last  # ids are never reused


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(-0.1, 0.0), (math.nan, 0.0), (math.inf, 0.0), (0.1, -1e-9), (0.1, 1.5), (2e6, 0.0),
     (True, 0.0), ("0.1", 0.0)],
)
def test_invalid_amounts_are_programming_errors(ledger, epsilon, delta):
    with pytest.raises(ProgrammingError):
        ledger.set_budget(DB, "alice", epsilon, delta)
    ledger.set_budget(DB, "alice", 1.0, 1e-6)
    with pytest.raises(ProgrammingError):
        spend(ledger, epsilon, delta)
    assert ledger.status(DB, "alice").history == ()


def test_empty_analyst_rejected(ledger):
    with pytest.raises(ProgrammingError):
        ledger.set_budget(DB, "", 1.0, 0.0)


def test_charges_persist_across_reopen(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 0.0)
        spend(book, 0.4)
    with Ledger(path) as book:
        assert book.status(DB, "alice").epsilon_spent == 0.4
        with pytest.raises(BudgetExhaustedError):
            spend(book, 0.7)


def test_threads_sharing_one_ledger_never_overspend(ledger):
    ledger.set_budget(DB, "alice", 1.0, 0.0)
    results: list[int] = []

    def worker() -> None:
        for _ in range(30):
            try:
                spend(ledger, 0.01)
                results.append(1)
            except BudgetExhaustedError:
                results.append(0)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 100 and len(results) == 120
    assert ledger.status(DB, "alice").epsilon_remaining == 0.0


def test_tampered_running_total_fails_closed(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        book.set_budget(DB, "alice", 1.0, 0.0)
        spend(book, 0.5)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE budgets SET epsilon_spent = 0")
    conn.commit()
    conn.close()
    with Ledger(path) as book, pytest.raises(OperationalError, match="inconsistent"):
        book.status(DB, "alice")


# -- cache ------------------------------------------------------------------------------------


def test_cache_round_trip_and_isolation(ledger):
    assert ledger.cache_get(DB, "alice", "k") is None
    payload = b"\x00noisy\xffanswer"
    ledger.cache_put(DB, "alice", "k", payload)
    assert ledger.cache_get(DB, "alice", "k") == payload
    assert ledger.cache_get(DB, "bob", "k") is None
    assert ledger.cache_get("other.duckdb", "alice", "k") is None
    ledger.cache_put(DB, "alice", "k", b"second")  # last write wins
    assert ledger.cache_get(DB, "alice", "k") == b"second"
    with pytest.raises(ProgrammingError):
        ledger.cache_put(DB, "alice", "k", "not bytes")  # type: ignore[arg-type]


def test_cache_survives_reopen_and_reset(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        book.cache_put(DB, "alice", "select count(*)|0.1|0", b"42.5")
    with Ledger(path) as book:
        assert book.cache_get(DB, "alice", "select count(*)|0.1|0") == b"42.5"
        book.reset(DB, "alice")  # paid-for answers stay releasable
        assert book.cache_get(DB, "alice", "select count(*)|0.1|0") == b"42.5"


# -- composition ------------------------------------------------------------------------------


def naive_delta_i(eps: float, k: int, i: int) -> float:
    """The seed formula evaluated directly in floats (fine for small k)."""
    num = sum(math.comb(k, j) * (math.exp((k - j) * eps) - math.exp((k - 2 * i + j) * eps))
              for j in range(i))
    return num / (1 + math.exp(eps)) ** k


def test_basic_composition():
    assert basic_composition([]) == (0.0, 0.0)
    assert basic_composition([(0.1, 1e-8)] * 3) == (0.3, 3e-8)
    assert basic_composition([(0.1, 0.0)] * 100) == (10.0, 0.0)


def test_advanced_composition_homogeneous_drv():
    eps, delta = advanced_composition([(0.1, 0.0)] * 100, 1e-6)
    # 0.1 * sqrt(2 * 100 * ln(1e6)) + 100 * 0.1 * (e^0.1 - 1)
    #   = 0.1 * sqrt(200 * 13.815510557964274) + 10 * 0.10517091807564763
    #   = 0.1 * 52.56521769...           + 1.0517091807564763 = 6.30823...
    assert eps == pytest.approx(0.1 * math.sqrt(200 * math.log(1e6)) + 10 * (math.e**0.1 - 1))
    assert eps == pytest.approx(6.308, abs=5e-4)
    assert delta == 1e-6
    assert advanced_composition([(0.1, 1e-8)] * 100, 1e-6)[1] == pytest.approx(1e-6 + 100e-8)


def test_advanced_composition_heterogeneous():
    eps, delta = advanced_composition([(0.1, 1e-7), (0.5, 0.0), (1.0, 2e-7)], 1e-5)
    # sum eps^2 = 0.01 + 0.25 + 1 = 1.26; ln(1e5) = 11.512925464970229
    # sqrt(2 * 11.512925464970229 * 1.26) = sqrt(29.012572...) = 5.38633...
    # sum eps (e^eps - 1) = 0.1*0.10517092 + 0.5*0.64872127 + 1.0*1.71828183 = 2.05316...
    assert eps == pytest.approx(math.sqrt(2 * math.log(1e5) * 1.26)
                                + 0.1 * math.expm1(0.1) + 0.5 * math.expm1(0.5) + math.expm1(1.0))
    assert eps == pytest.approx(5.38633 + 2.05316, abs=1e-4)  # 7.43949
    assert delta == pytest.approx(3e-7 + 1e-5)


def test_kov_bound_homogeneous_seed_formula():
    eps, delta = kov_bound([(0.1, 0.0)] * 100, 1e-6)
    # k eps (e^eps-1)/(e^eps+1) = 10 * 0.10517092 / 2.10517092 = 0.49958347...
    drift = 10 * (math.e**0.1 - 1) / (math.e**0.1 + 1)
    # second: + 0.1 sqrt(200 ln(e + sqrt(100*0.01)/1e-6)) = + 0.1 sqrt(200 ln(1000002.718...))
    second = drift + 0.1 * math.sqrt(200 * math.log(math.e + 1.0 / 1e-6))
    # third:  + 0.1 sqrt(200 ln(1e6)) = + 5.25652177
    third = drift + 0.1 * math.sqrt(200 * math.log(1e6))
    assert eps == pytest.approx(min(10.0, second, third))
    assert eps == pytest.approx(5.7561, abs=1e-4)
    assert delta == pytest.approx(1e-6)  # 1 - (1 - 1e-6) * 1


def test_kov_delta_by_hand():
    # k = 3, eps = 1, i = 1: C(3,0)(e^3 - e^1)/(1+e)^3 = e(e-1)/(1+e)^2
    assert kov_delta(1.0, 3, 1) == pytest.approx(math.e * (math.e - 1) / (1 + math.e) ** 2,
                                                 rel=1e-8)
    assert kov_delta(1.0, 3, 1) == pytest.approx(0.337834712, rel=1e-8)
    assert kov_delta(1.0, 3, 0) == 0.0
    # slack: the computed value never understates the exact one
    for eps, k in [(0.5, 20), (0.1, 100), (0.05, 300)]:
        for i in range(k // 2 + 1):
            exact = naive_delta_i(eps, k, i)
            assert exact <= kov_delta(eps, k, i) <= exact * (1 + 1e-8) + 1e-300


def test_kov_delta_grows_with_i():
    values = [kov_delta(0.2, 40, i) for i in range(21)]
    assert values == sorted(values)


def test_kov_optimal_small_case_by_hand_beats_basic_and_drv():
    # k = 3, eps = 1, delta' = 0.5: delta_1 = 0.3378 <= 0.5 and i = 1 is floor(3/2),
    # so the composition is ((3 - 2) * 1, 0.3378)-DP = (1, 0.3378).
    eps, delta = optimal_homogeneous_composition(1.0, 0.0, 3, 0.5)
    assert eps == 1.0 and delta == pytest.approx(0.337834712, rel=1e-8)
    assert eps < basic_composition([(1.0, 0.0)] * 3)[0] == 3.0
    # DRV: sqrt(2 ln 2 * 3) + 3 (e - 1) = 2.0393 + 5.1548 = 7.19
    assert eps < advanced_composition([(1.0, 0.0)] * 3, 0.5)[0]


def test_kov_optimal_k20_strictly_below_kov_bound_basic_and_drv():
    eps, k, dp = 0.5, 20, 1e-2
    z = (1 + math.exp(0.5)) ** 20  # = 2.6487212707^20
    # delta_3 = [C(20,0)(e^10 - e^7) + C(20,1)(e^9.5 - e^7.5) + C(20,2)(e^9 - e^8)] / z
    delta_3 = (1 * (math.exp(10) - math.exp(7)) + 20 * (math.exp(9.5) - math.exp(7.5))
               + 190 * (math.exp(9) - math.exp(8))) / z
    delta_4 = (1 * (math.exp(10) - math.exp(6)) + 20 * (math.exp(9.5) - math.exp(6.5))
               + 190 * (math.exp(9) - math.exp(7)) + 1140 * (math.exp(8.5) - math.exp(7.5))) / z
    assert delta_3 == pytest.approx(0.0042410, rel=1e-4) and delta_3 <= dp < delta_4
    got_eps, got_delta = optimal_homogeneous_composition(eps, 0.0, k, dp)
    assert got_eps == (20 - 2 * 3) * 0.5 == 7.0
    assert got_delta == pytest.approx(delta_3, rel=1e-8) and got_delta >= delta_3
    # KOV closed form: 10 tanh(0.25) + sqrt(2 * 20 * 0.25 * ln(100)) = 2.4492 + 6.7861 = 9.2353
    assert kov_bound([(eps, 0.0)] * k, dp)[0] == pytest.approx(9.2353, abs=1e-4)
    # DRV: sqrt(2 ln(100) * 5) + 20 * 0.5 * (e^0.5 - 1) = 6.7861 + 6.4872 = 13.2733
    assert advanced_composition([(eps, 0.0)] * k, dp)[0] == pytest.approx(13.2733, abs=1e-4)
    assert got_eps < kov_bound([(eps, 0.0)] * k, dp)[0] < 10.0 < 13.27


def test_kov_optimal_100_queries_at_a_tenth():
    # naive seed formula: delta_26 = 8.05e-7 <= 1e-6 < delta_27 = 2.21e-6 -> (100 - 52) * 0.1
    assert naive_delta_i(0.1, 100, 26) <= 1e-6 < naive_delta_i(0.1, 100, 27)
    eps, delta = optimal_homogeneous_composition(0.1, 0.0, 100, 1e-6)
    assert eps == pytest.approx(4.8)
    assert delta == pytest.approx(naive_delta_i(0.1, 100, 26), rel=1e-8)
    # 4.8 < KOV bound 5.756 < DRV 6.308 < basic 10
    assert eps < kov_bound([(0.1, 0.0)] * 100, 1e-6)[0] < 6.308 < 10


def test_kov_optimal_with_per_mechanism_delta():
    # 1 - (1 - delta)^k (1 - delta_i) with delta = 1e-7, k = 100, delta_i = delta_26
    eps, delta = optimal_homogeneous_composition(0.1, 1e-7, 100, 1e-6)
    assert eps == pytest.approx(4.8)
    expected = 1 - (1 - 1e-7) ** 100 * (1 - naive_delta_i(0.1, 100, 26))
    assert delta == pytest.approx(expected, rel=1e-6)
    assert delta <= 100 * 1e-7 + 1e-6  # never worse than DRV's delta


def test_kov_optimal_large_k_no_overflow():
    # e^(k eps) = e^1000 would overflow a float; everything stays in log space.
    eps, delta = optimal_homogeneous_composition(0.1, 0.0, 10_000, 1e-6)
    assert math.isfinite(eps) and 0 < delta <= 1e-6
    bound = kov_bound([(0.1, 0.0)] * 10_000, 1e-6)[0]
    assert eps <= bound + 2 * 0.1  # grid optimum is within 2 eps of the continuous optimum
    assert eps < advanced_composition([(0.1, 0.0)] * 10_000, 1e-6)[0] < 1000.0


def test_optimal_edge_cases():
    assert optimal_homogeneous_composition(0.5, 0.0, 0, 1e-6) == (0.0, 0.0)
    assert optimal_homogeneous_composition(0.0, 1e-3, 2, 1e-6) == pytest.approx(
        (0.0, 1 - (1 - 1e-3) ** 2))
    # delta' too small for any i >= 1: falls back to k eps
    assert optimal_homogeneous_composition(1.0, 0.0, 4, 1e-12) == (4.0, 0.0)
    with pytest.raises(ProgrammingError):
        optimal_homogeneous_composition(0.1, 0.0, 10, 0.0)
    with pytest.raises(ProgrammingError):
        kov_delta(0.1, 10, 6)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(0.001, 2.0), k=st.integers(1, 200), exp=st.integers(1, 12))
def test_bounds_are_ordered(eps, k, exp):
    dp = 10.0**-exp
    charges = [(eps, 0.0)] * k
    basic = basic_composition(charges)[0]
    drv = advanced_composition(charges, dp)[0]
    kov = kov_bound(charges, dp)[0]
    opt = optimal_homogeneous_composition(eps, 0.0, k, dp)[0]
    assert kov <= basic * (1 + 1e-12) and kov <= drv * (1 + 1e-12)
    assert opt <= basic * (1 + 1e-12)
    assert opt <= kov + 2 * eps + 1e-9


def test_compose_homogeneous_and_heterogeneous():
    report = compose([(0.1, 0.0)] * 100, 1e-6)
    assert report.homogeneous and report.k == 100
    assert report.basic.epsilon == 10.0
    assert report.advanced.epsilon == pytest.approx(6.3082, abs=1e-4)
    assert report.kov_bound.epsilon == pytest.approx(5.7561, abs=1e-4)
    assert report.kov_optimal.epsilon == pytest.approx(4.8)
    assert "exact" in report.kov_optimal.note

    mixed = compose([(0.1, 0.0)] * 50 + [(0.2, 1e-8)] * 10, 1e-6)
    assert not mixed.homogeneous
    assert mixed.basic.epsilon == 7.0 and mixed.basic.delta == pytest.approx(1e-7)
    # the optimal bound is applied to 60 charges of (max eps, max delta) = (0.2, 1e-8)
    assert (mixed.kov_optimal.epsilon, mixed.kov_optimal.delta) == pytest.approx(
        optimal_homogeneous_composition(0.2, 1e-8, 60, 1e-6))
    assert "upper bound" in mixed.kov_optimal.note and "0.2" in mixed.kov_optimal.note
    assert mixed.kov_bound.epsilon == pytest.approx(kov_bound([(0.1, 0.0)] * 50
                                                              + [(0.2, 1e-8)] * 10, 1e-6)[0])

    empty = compose([], 1e-6)
    assert all(b.epsilon == 0.0 and b.delta == 0.0 for b in empty.bounds())


def test_status_reports_composition(ledger):
    ledger.set_budget(DB, "alice", 20.0, 1e-5)
    for _ in range(100):
        spend(ledger, 0.1)
    report = ledger.status(DB, "alice").composition(1e-6)
    assert report.basic.epsilon == 10.0
    assert report.advanced.epsilon == pytest.approx(6.3082, abs=1e-4)
    assert report.kov_optimal.epsilon == pytest.approx(4.8)
