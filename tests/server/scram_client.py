"""The client side of SCRAM-SHA-256 as libpq speaks it (empty user name in the messages), for
tests that drive the server's exchange directly (not a test module)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets


class ScramClient:
    def __init__(self, password: str) -> None:
        self.password = password
        self.nonce = base64.b64encode(secrets.token_bytes(18)).decode()
        self.bare = f"n=,r={self.nonce}"

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(part.split("=", 1) for part in text.split(","))
        salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
        salted = hashlib.pbkdf2_hmac("sha256", self.password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        stored = hashlib.sha256(client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={attrs['r']}"
        message = f"{self.bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored, message, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self.server_key = hmac.digest(salted, b"Server Key", "sha256")
        self.message = message
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def expected_server_final(self) -> bytes:
        sig = hmac.digest(self.server_key, self.message, "sha256")
        return f"v={base64.b64encode(sig).decode()}".encode()
