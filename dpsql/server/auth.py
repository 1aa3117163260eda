"""SCRAM-SHA-256 authentication (RFC 5802 / 7677, as PostgreSQL speaks it) and login throttling.

Verifiers are made with scramp (the SCRAM library pg8000 uses); the server side of the
exchange is :class:`ScramExchange`. Contract:

* the server stores and sees only verifiers (salt, StoredKey, ServerKey, iteration count),
  never a password;
* an unknown analyst runs the same exchange against a random verifier and fails at the same
  step as a wrong password, with the same message (no user enumeration);
* each exchange uses a fresh server nonce, so a replayed client-final message fails;
* after :attr:`LoginThrottle.limit` failures from one address within ``window`` seconds, further
  attempts from it are refused without running the exchange until the window passes. The
  connection checks again just before it verifies a proof, so exchanges started together
  cannot test more than ``limit`` passwords either.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from scramp import ScramMechanism

MECHANISM = "SCRAM-SHA-256"
_MECHANISM = ScramMechanism(MECHANISM)

#: (salt, stored_key, server_key, iteration_count), as scramp's make_auth_info returns it
AuthInfo = tuple[bytes, bytes, bytes, int]


def make_auth_info(password: str, iterations: int = 4096) -> AuthInfo:
    """A SCRAM-SHA-256 verifier for ``password`` (the owner's tools store only this)."""
    salt, stored, server, count = _MECHANISM.make_auth_info(password, iteration_count=iterations)
    return salt, stored, server, count


class AuthenticationFailed(Exception):
    """Wrong password, unknown analyst or a broken exchange (SQLSTATE 28P01)."""


@dataclass
class ScramExchange:
    """One server-side SCRAM-SHA-256 exchange (RFC 5802 section 5, without channel binding):
    client-first in, server-first out; client-final in, server-final out. ``lookup`` returns
    the analyst's verifier or None (unknown analyst). The user name inside the SCRAM messages
    is ignored, as PostgreSQL does (libpq sends it empty): the startup message names the user.
    scramp refuses that empty name, so the server side is written here (scramp still makes the
    verifiers, SASLprep included)."""

    user: str
    lookup: Callable[[str], AuthInfo | None]
    _info: AuthInfo | None = field(init=False, default=None)
    _known: bool = field(init=False, default=False)
    _gs2: str = field(init=False, default="")
    _bare: str = field(init=False, default="")
    _server_first: str = field(init=False, default="")
    _nonce: str = field(init=False, default="")

    def first(self, client_first: bytes) -> bytes:
        text = _text(client_first)
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or parts[1]:
            raise AuthenticationFailed(
                "invalid SCRAM client-first message (channel binding is not offered)")
        self._gs2, self._bare = f"{parts[0]},,", parts[2]
        attributes = _attributes(self._bare)
        client_nonce = attributes.get("r", "")
        if not client_nonce or "m" in attributes:
            raise AuthenticationFailed("invalid SCRAM client-first message")
        info = self.lookup(self.user)
        self._known = info is not None
        if info is None:  # same work and the same failure as a wrong password
            info = (os.urandom(16), os.urandom(32), os.urandom(32), 4096)
        self._info = info
        self._nonce = client_nonce + base64.b64encode(secrets.token_bytes(18)).decode()
        salt, _, _, iterations = info
        self._server_first = (
            f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}")
        return self._server_first.encode()

    def final(self, client_final: bytes) -> bytes:
        info = self._info
        if info is None:
            raise AuthenticationFailed("SCRAM client-final message before client-first")
        text = _text(client_final)
        without_proof, sep, proof_text = text.rpartition(",p=")
        attributes = _attributes(without_proof) if sep else {}
        failed = AuthenticationFailed(f'password authentication failed for user "{self.user}"')
        if (attributes.get("r") != self._nonce
                or attributes.get("c") != base64.b64encode(self._gs2.encode()).decode()):
            raise failed
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            raise failed from None
        _, stored_key, server_key, _ = info
        message = f"{self._bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(stored_key, message, "sha256")
        if len(proof) != len(signature):
            raise failed
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        valid = hmac.compare_digest(hashlib.sha256(client_key).digest(), stored_key)
        self._info = None  # one exchange, one answer: a replayed final meets no state
        if not (valid and self._known):
            raise failed
        verifier = base64.b64encode(hmac.digest(server_key, message, "sha256")).decode()
        return f"v={verifier}".encode()


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("SCRAM message is not UTF-8") from None


def _attributes(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthenticationFailed("malformed SCRAM message")
        out.setdefault(part[0], part[2:])
    return out


class LoginThrottle:
    """Counts failed logins per client address in a sliding window (thread-safe)."""

    def __init__(self, limit: int = 10, window: float = 60.0) -> None:
        self.limit = limit
        self.window = window
        self._failures: dict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float) -> deque[float]:
        times = self._failures[address]
        while times and now - times[0] > self.window:
            times.popleft()
        return times

    def allowed(self, address: str) -> bool:
        with self._lock:
            return len(self._recent(address, time.monotonic())) < self.limit

    def failed(self, address: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._recent(address, now).append(now)
