"""Analyst accounts (dpsql/accounting/analysts.py): SCRAM verifiers, never passwords; the owner's
per-analyst policy, validated; caps enforced by the charge; on real ledger files."""

from __future__ import annotations

import pytest
from scramp import ScramClient, ScramException, ScramMechanism

from dpsql.accounting import AnalystAccount, Ledger
from dpsql.accounting.analysts import MAX_NAME_LENGTH, SCRAM_ITERATIONS
from dpsql.errors import BudgetExhaustedError, OperationalError, ProgrammingError
from tests.accounting.helpers import DB, spend

PASSWORD = "correct horse battery staple"


def scram_login(account: AnalystAccount, password: str) -> bool:
    """A full SCRAM-SHA-256 exchange: scramp's client with ``password`` against a server that
    knows only the account's stored verifier. True when the server accepts the proof."""
    server = ScramMechanism("SCRAM-SHA-256").make_server(
        lambda name: account.scram_auth_info())
    client = ScramClient(["SCRAM-SHA-256"], account.name, password)
    server.set_client_first(client.get_client_first())
    client.set_server_first(server.get_server_first())
    try:
        server.set_client_final(client.get_client_final())
    except ScramException:
        return False
    client.set_server_final(server.get_server_final())  # the client verifies the server too
    return True


def test_add_stores_a_verifier_that_authenticates_and_never_the_password(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as book:
        account = book.add_analyst("alice", PASSWORD)
        assert account == AnalystAccount("alice", None, None, None, None, None)
        assert book.analyst("alice") == account
        salt, stored, server, iterations = account.scram_auth_info()
        assert iterations == SCRAM_ITERATIONS >= 4096
        assert len(salt) >= 16 and len(stored) == len(server) == 32
        assert scram_login(account, PASSWORD)
        assert not scram_login(account, PASSWORD + "!")
        assert "stored" not in repr(account) and repr(stored) not in repr(account)
    data = path.read_bytes() + (tmp_path / "l.sqlite-wal").read_bytes() if (
        tmp_path / "l.sqlite-wal").exists() else path.read_bytes()
    assert PASSWORD.encode() not in data and b"horse" not in data


def test_each_verifier_has_its_own_salt(ledger):
    a = ledger.add_analyst("alice", PASSWORD)
    b = ledger.add_analyst("bob", PASSWORD)
    assert a.scram_auth_info()[0] != b.scram_auth_info()[0]
    assert a.scram_auth_info()[1] != b.scram_auth_info()[1]


def test_policy_round_trip_update_and_clear(ledger):
    account = ledger.add_analyst("alice", PASSWORD, tables=["Orders", "shop.customers"],
                                 max_epsilon=1.0, max_delta=1e-6, default_epsilon=0.1,
                                 default_delta=1e-8)
    assert account == AnalystAccount("alice", frozenset({"orders", "customers"}), 1.0, 1e-6,
                                     0.1, 1e-8)
    updated = ledger.update_analyst("alice", max_epsilon=2.0, tables=None)
    assert updated == AnalystAccount("alice", None, 2.0, 1e-6, 0.1, 1e-8)
    assert ledger.analyst("alice") == updated
    cleared = ledger.update_analyst("alice", max_epsilon=None, default_epsilon=None,
                                    max_delta=None, default_delta=None)
    assert cleared == AnalystAccount("alice", None, None, None, None, None)
    # the verifier is untouched by a policy change
    assert scram_login(cleared, PASSWORD)


def test_set_password_replaces_the_verifier(ledger):
    old = ledger.add_analyst("alice", PASSWORD)
    ledger.set_password("alice", "new password")
    new = ledger.analyst("alice")
    assert new is not None and new.scram_auth_info()[0] != old.scram_auth_info()[0]
    assert scram_login(new, "new password") and not scram_login(new, PASSWORD)
    with pytest.raises(OperationalError, match="no analyst account 'bob'"):
        ledger.set_password("bob", "x")


def test_list_and_remove(ledger):
    ledger.add_analyst("carol", "p1")
    ledger.add_analyst("alice", "p2", max_epsilon=0.5)
    assert [a.name for a in ledger.analysts()] == ["alice", "carol"]
    ledger.set_budget(DB, "carol", 1.0, 0.0)
    spend(ledger, 0.25, analyst="carol")
    ledger.remove_analyst("carol")
    assert ledger.analyst("carol") is None and [a.name for a in ledger.analysts()] == ["alice"]
    assert ledger.status(DB, "carol").epsilon_spent == 0.25  # budget and history stay
    assert len(ledger.audit(analyst="carol")) == 1
    with pytest.raises(OperationalError, match="no analyst account 'carol'"):
        ledger.remove_analyst("carol")
    with pytest.raises(OperationalError, match="no analyst account"):
        ledger.update_analyst("carol", max_epsilon=1.0)


def test_duplicate_account_is_refused(ledger):
    ledger.add_analyst("alice", "p")
    with pytest.raises(OperationalError, match="already has an account"):
        ledger.add_analyst("alice", "q")
    assert ledger.analyst("alice") is not None
    ledger.add_analyst("Alice", "q")  # names are case-sensitive, like PostgreSQL user names
    assert len(ledger.analysts()) == 2


@pytest.mark.parametrize("name", ["", " alice", "alice ", "al\x00ice", "al\nice", "a\x7f",
                                  "x" * (MAX_NAME_LENGTH + 1), None, 3])
def test_invalid_names_are_refused(ledger, name):
    with pytest.raises(ProgrammingError, match="name"):
        ledger.add_analyst(name, "p")
    assert ledger.analysts() == []


def test_unusual_but_valid_names(ledger):
    for name in ("o'brien", "Zoë", "a b", "x" * MAX_NAME_LENGTH, "alice@example.com"):
        ledger.add_analyst(name, "p")
    assert len(ledger.analysts()) == 5


@pytest.mark.parametrize("policy, match", [
    ({"max_epsilon": 0}, "max_epsilon must be > 0"),
    ({"max_epsilon": -1.0}, "max_epsilon must be > 0"),
    ({"max_epsilon": float("inf")}, "max_epsilon"),
    ({"max_epsilon": float("nan")}, "max_epsilon"),
    ({"max_epsilon": 2e6}, "max_epsilon"),
    ({"default_epsilon": 0.0}, "default_epsilon must be > 0"),
    ({"max_delta": 1.5}, r"max_delta must be in \[0, 1\]"),
    ({"default_delta": -1e-9}, "default_delta"),
    ({"max_epsilon": True}, "must be a number"),
    ({"max_epsilon": "1"}, "must be a number"),
    ({"max_epsilon": 0.5, "default_epsilon": 1.0}, "default_epsilon=1.0 is above max_epsilon"),
    ({"max_delta": 0.0, "default_delta": 1e-9}, "default_delta=1e-09 is above max_delta"),
    ({"tables": "orders"}, "not a string"),
    ({"tables": ["orders", ""]}, "invalid table name"),
    ({"tables": ["or\x00ders"]}, "invalid table name"),
])
def test_invalid_policies_are_refused(ledger, policy, match):
    with pytest.raises(ProgrammingError, match=match):
        ledger.add_analyst("alice", "p", **policy)
    assert ledger.analyst("alice") is None


def test_invalid_updates_change_nothing(ledger):
    before = ledger.add_analyst("alice", "p", max_epsilon=1.0, default_epsilon=0.5)
    with pytest.raises(ProgrammingError, match="unknown analyst policy 'password'"):
        ledger.update_analyst("alice", password="x")
    with pytest.raises(ProgrammingError, match=r"default_epsilon=0\.5 is above max_epsilon"):
        ledger.update_analyst("alice", max_epsilon=0.25)  # checked against the stored default
    assert ledger.analyst("alice") == before


def test_invalid_passwords_are_refused(ledger):
    for password in ("", None, b"bytes"):
        with pytest.raises(ProgrammingError, match="password"):
            ledger.add_analyst("alice", password)
    with pytest.raises(ProgrammingError, match="SCRAM"):
        ledger.add_analyst("alice", "bad\u0007password")  # SASLprep prohibits control chars
    assert ledger.analyst("alice") is None


def test_an_account_built_by_hand_cannot_authenticate():
    with pytest.raises(ProgrammingError, match="no password verifier"):
        AnalystAccount("alice", None, None, None, None, None).scram_auth_info()


def test_query_budget_and_may_read():
    account = AnalystAccount("alice", frozenset({"orders"}), 1.0, 1e-6, 0.1, 0.0)
    assert account.query_budget(None, None) == (0.1, 0.0)
    assert account.query_budget(0.5, 1e-7) == (0.5, 1e-7)
    assert account.query_budget(1.0, 1e-6) == (1.0, 1e-6)  # exactly the cap
    with pytest.raises(ProgrammingError, match=r"at most epsilon=1\.0 .* asks epsilon=1\.5"):
        account.query_budget(1.5, None)
    with pytest.raises(ProgrammingError, match="at most delta=1e-06"):
        account.query_budget(None, 1e-5)
    free = AnalystAccount("bob", None, None, None, None, None)
    assert free.query_budget(None, None) == (None, None)
    assert free.query_budget(1e5, 0.5) == (1e5, 0.5)
    assert account.may_read("orders") and account.may_read("SHOP.Orders")
    assert not account.may_read("customers") and free.may_read("anything")


def test_charge_enforces_the_accounts_caps(ledger):
    ledger.set_budget(DB, "alice", 10.0, 1e-3)
    ledger.add_analyst("alice", "p", max_epsilon=0.5, max_delta=1e-6)
    spend(ledger, 0.5, 1e-6)  # exactly at the caps
    with pytest.raises(ProgrammingError,
                       match=r"at most epsilon=0\.5 .*needs epsilon=0\.500000000001"):
        spend(ledger, 0.500000000001)  # one unit above
    with pytest.raises(ProgrammingError, match="at most delta=1e-06"):
        spend(ledger, 0.1, 2e-6)
    status = ledger.status(DB, "alice")
    assert len(status.history) == 1 and status.epsilon_spent == 0.5  # refusals charged nothing
    ledger.update_analyst("alice", max_epsilon=None)
    spend(ledger, 5.0)
    ledger.remove_analyst("alice")  # no account: no cap (library mode), the budget still holds
    spend(ledger, 4.5)
    with pytest.raises(BudgetExhaustedError):
        spend(ledger, 0.1)
