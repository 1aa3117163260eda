"""A raw PostgreSQL v3 frontend on a plain socket, for the protocol fuzzing tests (not a test
module): it builds well-formed and deliberately broken frontend messages, reads backend
messages with a deadline, and speaks the client side of SCRAM-SHA-256 (RFC 5802 / 7677,
written here with hashlib/hmac, as libpq sends it: an empty user name in ``n=,r=...``).

Every read has a timeout (10 s): a server that hangs makes :meth:`RawClient.read` raise
``socket.timeout`` (a test failure), never a stuck test.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket
import struct
from dataclasses import dataclass

PROTOCOL_3 = 196608
MECHANISM = b"SCRAM-SHA-256"


def message(kind: bytes, body: bytes = b"") -> bytes:
    """A typed frontend message with its correct length."""
    return kind + struct.pack("!i", len(body) + 4) + body


def startup_packet(params: dict[bytes, bytes], code: int = PROTOCOL_3) -> bytes:
    body = struct.pack("!i", code)
    for name, value in params.items():
        body += name + b"\0" + value + b"\0"
    body += b"\0"
    return struct.pack("!i", len(body) + 4) + body


def query(sql: bytes) -> bytes:
    return message(b"Q", sql + b"\0")


def parse(name: bytes, sql: bytes) -> bytes:
    return message(b"P", name + b"\0" + sql + b"\0" + struct.pack("!h", 0))


def bind(portal: bytes, statement: bytes) -> bytes:
    return message(b"B", portal + b"\0" + statement + b"\0" + struct.pack("!hhh", 0, 0, 0))


def execute(portal: bytes, limit: int = 0) -> bytes:
    return message(b"E", portal + b"\0" + struct.pack("!i", limit))


SYNC = message(b"S")
TERMINATE = message(b"X")


def sasl_initial(data: bytes, mechanism: bytes = MECHANISM) -> bytes:
    return message(b"p", mechanism + b"\0" + struct.pack("!i", len(data)) + data)


def sasl_response(data: bytes) -> bytes:
    return message(b"p", data)


@dataclass(frozen=True)
class Backend:
    """One backend message: its type byte and body."""

    kind: bytes
    body: bytes

    @property
    def auth_code(self) -> int:
        assert self.kind == b"R", self
        return int(struct.unpack("!i", self.body[:4])[0])

    def fields(self) -> dict[str, str]:
        """The fields of an ErrorResponse / NoticeResponse, by their one-letter code."""
        out: dict[str, str] = {}
        for part in self.body.split(b"\0"):
            if part:
                out[chr(part[0])] = part[1:].decode("utf-8", "replace")
        return out


class RawClient:
    """A socket to the server with bounded reads (``timeout`` seconds per read)."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _exactly(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def read(self) -> Backend | None:
        """The next backend message, or None when the server closed the connection."""
        header = self._exactly(5)
        if header is None:
            return None
        (length,) = struct.unpack("!i", header[1:])
        body = self._exactly(length - 4)
        return None if body is None else Backend(header[:1], body)

    def read_until(self, kinds: bytes) -> list[Backend]:
        """Messages up to and including the first whose type is in ``kinds`` (or the close)."""
        got: list[Backend] = []
        while True:
            msg = self.read()
            if msg is None:
                return got
            got.append(msg)
            if msg.kind in kinds:
                return got

    def drain(self) -> list[Backend]:
        """Every message until the server closes the connection (bounded by the timeout)."""
        got: list[Backend] = []
        while (msg := self.read()) is not None:
            got.append(msg)
        return got

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- SCRAM-SHA-256, the client side --------------------------------------------------------


@dataclass
class ScramClient:
    """The client side of one SCRAM-SHA-256 exchange without channel binding."""

    password: str
    nonce: str = ""
    _first_bare: str = ""
    _server_signature: bytes = b""

    def first(self) -> bytes:
        self.nonce = self.nonce or base64.b64encode(secrets.token_bytes(18)).decode()
        self._first_bare = f"n=,r={self.nonce}"
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(part.split("=", 1) for part in text.split(","))
        combined, salt, iterations = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        assert combined.startswith(self.nonce)
        salted = hashlib.pbkdf2_hmac("sha256", self.password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        stored_key = hashlib.sha256(client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={combined}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", "sha256")
        self._server_signature = hmac.digest(server_key, auth_message, "sha256")
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        return server_final.decode() == f"v={base64.b64encode(self._server_signature).decode()}"


def start(client: RawClient, user: str, dbname: str = "shop") -> Backend | None:
    """Send the StartupMessage; returns the server's first answer (AuthenticationSASL)."""
    client.send(startup_packet({b"user": user.encode(), b"database": dbname.encode()}))
    return client.read()


def login(client: RawClient, user: str, password: str,
          scram: ScramClient | None = None) -> tuple[bytes, list[Backend]]:
    """A full successful login; returns the client-final message sent (for replay tests) and
    the messages up to ReadyForQuery. Asserts every step succeeded."""
    scram = scram or ScramClient(password)
    sasl = start(client, user)
    assert sasl is not None and sasl.auth_code == 10, sasl
    client.send(sasl_initial(scram.first()))
    cont = client.read()
    assert cont is not None and cont.auth_code == 11, cont
    final = scram.final(cont.body[4:])
    client.send(sasl_response(final))
    done = client.read_until(b"ZE")
    assert done and done[0].auth_code == 12 and scram.verify(done[0].body[4:]), done
    assert done[-1].kind == b"Z", done
    return final, done
