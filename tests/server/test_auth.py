"""The server side of SCRAM-SHA-256 (dpsql/server/auth.py), exchanged with the libpq-style
client of tests/server/rawwire.py."""

from __future__ import annotations

import pytest

from dpsql.server.auth import AuthenticationFailed, LoginThrottle, ScramExchange, make_auth_info
from tests.server.rawwire import ScramClient

INFO = make_auth_info("correct horse")


def lookup(name: str):
    return INFO if name == "alice" else None


def test_the_right_password_authenticates_and_the_server_proves_it_knows_the_verifier() -> None:
    client, server = ScramClient("correct horse"), ScramExchange("alice", lookup)
    final = client.final(server.first(client.first()))
    assert client.verify(server.final(final))


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "correct horse")])
def test_wrong_password_and_unknown_user_fail_with_the_same_message(user: str,
                                                                    password: str) -> None:
    client, server = ScramClient(password), ScramExchange(user, lookup)
    final = client.final(server.first(client.first()))
    with pytest.raises(AuthenticationFailed) as info:
        server.final(final)
    assert str(info.value) == f'password authentication failed for user "{user}"'


def test_a_replayed_client_final_fails_against_a_new_exchange() -> None:
    client, server = ScramClient("correct horse"), ScramExchange("alice", lookup)
    final = client.final(server.first(client.first()))
    server.final(final)
    with pytest.raises(AuthenticationFailed):
        server.final(final)  # the same exchange answers once
    fresh = ScramExchange("alice", lookup)
    fresh.first(client.first())  # same client nonce, a new server nonce
    with pytest.raises(AuthenticationFailed):
        fresh.final(final)


@pytest.mark.parametrize("first", [b"p=tls-server-end-point,,n=,r=abc", b"n,,n=,", b"garbage",
                                   b"n,,n=,r=abc,m=ext", b"\xff\xfe"])
def test_malformed_or_channel_binding_client_first_is_refused(first: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        ScramExchange("alice", lookup).first(first)


def test_verifiers_never_hold_the_password() -> None:
    salt, stored, server_key, iterations = make_auth_info("correct horse")
    assert iterations >= 4096
    assert b"correct horse" not in salt + stored + server_key


def test_throttle_refuses_after_the_limit_within_the_window() -> None:
    throttle = LoginThrottle(limit=3, window=60)
    for _ in range(3):
        assert throttle.allowed("10.0.0.1")
        throttle.failed("10.0.0.1")
    assert not throttle.allowed("10.0.0.1")
    assert throttle.allowed("10.0.0.2")
    expiring = LoginThrottle(limit=1, window=0.0)
    expiring.failed("10.0.0.1")
    assert expiring.allowed("10.0.0.1")
