"""The PostgreSQL v3 wire format: reading frontend messages and writing backend messages.

Only framing lives here (no state, no policy): :mod:`dpsql.server.connection` decides what a
message means. Every read is bounded (:data:`MAX_MESSAGE`), and a malformed message raises
:class:`ProtocolViolation`, which the connection answers with SQLSTATE 08P01 and a close.
Reference: PostgreSQL's documentation, chapter "Frontend/Backend Protocol", "Message Formats".
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PROTOCOL_3 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

#: the largest frontend message accepted (a query text of a few MB is already absurd here)
MAX_MESSAGE = 8 * 1024 * 1024
#: the largest startup packet (PostgreSQL itself allows 10,000 bytes)
MAX_STARTUP = 10_000


class ProtocolViolation(Exception):
    """The peer broke the wire format: answered with 08P01 and the connection is closed."""


@dataclass(frozen=True)
class Message:
    """One frontend message after startup: its type byte and its body."""

    kind: bytes
    body: bytes


async def read_startup(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One untyped startup-phase packet: (code, the rest). Raises ProtocolViolation for a
    length outside [8, MAX_STARTUP], and IncompleteReadError when the peer hangs up."""
    header = await reader.readexactly(4)
    (length,) = struct.unpack("!i", header)
    if length < 8 or length > MAX_STARTUP:
        raise ProtocolViolation(f"invalid startup packet length {length}")
    body = await reader.readexactly(length - 4)
    (code,) = struct.unpack("!i", body[:4])
    return code, body[4:]


async def read_message(reader: asyncio.StreamReader) -> Message:
    """One typed frontend message. Raises ProtocolViolation for a length outside
    [4, MAX_MESSAGE], and IncompleteReadError when the peer hangs up mid-message."""
    header = await reader.readexactly(5)
    kind = header[:1]
    (length,) = struct.unpack("!i", header[1:])
    if length < 4 or length > MAX_MESSAGE:
        raise ProtocolViolation(f"invalid length {length} of message type {kind!r}")
    return Message(kind, await reader.readexactly(length - 4))


def parse_startup_parameters(body: bytes) -> dict[str, str]:
    """The name/value pairs of a StartupMessage (after the protocol code)."""
    parts = body.split(b"\0")
    if len(parts) < 2 or parts[-1] != b"" or parts[-2] != b"":
        raise ProtocolViolation("startup parameters are not NUL-terminated")
    fields = [decode(p) for p in parts[:-2]]
    if len(fields) % 2:
        raise ProtocolViolation("startup parameters are not name/value pairs")
    return dict(zip(fields[0::2], fields[1::2], strict=True))


def decode(raw: bytes) -> str:
    """UTF-8 text from the peer; bad UTF-8 is a protocol violation, not a crash."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolViolation("invalid UTF-8 in a message") from None


class Body:
    """A cursor over one message body; every read checks the bounds."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolViolation("message shorter than its fields")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return int(struct.unpack("!h", self._take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack("!i", self._take(4))[0])

    def byte(self) -> bytes:
        return self._take(1)

    def cstring(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolViolation("string without its terminating NUL")
        text = decode(self.data[self.pos:end])
        self.pos = end + 1
        return text

    def bytes_(self, n: int) -> bytes:
        return self._take(n)

    def rest(self) -> bytes:
        return self._take(len(self.data) - self.pos)

    def count(self, limit: int = 65535) -> int:
        """A non-negative Int16 count (negative counts are violations)."""
        n = self.int16()
        if n < 0 or n > limit:
            raise ProtocolViolation(f"invalid count {n}")
        return n

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolViolation("message longer than its fields")


# -- backend messages ---------------------------------------------------------------------


def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def cstr(text: str) -> bytes:
    return text.replace("\0", "").encode() + b"\0"


def authentication(code: int, data: bytes = b"") -> bytes:
    return message(b"R", struct.pack("!i", code) + data)


def sasl_mechanisms(names: Iterable[str]) -> bytes:
    return authentication(10, b"".join(cstr(n) for n in names) + b"\0")


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstr(name) + cstr(value))


def backend_key_data(pid: int, secret: int) -> bytes:
    return message(b"K", struct.pack("!ii", pid, secret))


def ready_for_query(status: bytes = b"I") -> bytes:
    return message(b"Z", status)


@dataclass(frozen=True)
class Field:
    """One column of a RowDescription."""

    name: str
    type_oid: int
    type_size: int = -1
    format: int = 0


def row_description(fields: Sequence[Field]) -> bytes:
    body = bytearray(struct.pack("!h", len(fields)))
    for f in fields:
        body += cstr(f.name) + struct.pack("!ihihih", 0, 0, f.type_oid, f.type_size, -1, f.format)
    return message(b"T", bytes(body))


def data_row(cells: Sequence[bytes | None]) -> bytes:
    body = bytearray(struct.pack("!h", len(cells)))
    for cell in cells:
        if cell is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += struct.pack("!i", len(cell)) + cell
    return message(b"D", bytes(body))


def command_complete(tag: str) -> bytes:
    return message(b"C", cstr(tag))


def parameter_description(oids: Sequence[int]) -> bytes:
    return message(b"t", struct.pack(f"!h{len(oids)}i", len(oids), *oids))


PARSE_COMPLETE = message(b"1")
BIND_COMPLETE = message(b"2")
CLOSE_COMPLETE = message(b"3")
NO_DATA = message(b"n")
EMPTY_QUERY = message(b"I")
PORTAL_SUSPENDED = message(b"s")


def _notice_fields(severity: str, code: str, text: str, detail: str | None,
                   hint: str | None) -> bytes:
    body = b"S" + cstr(severity) + b"V" + cstr(severity) + b"C" + cstr(code) + b"M" + cstr(text)
    if detail:
        body += b"D" + cstr(detail)
    if hint:
        body += b"H" + cstr(hint)
    return body + b"\0"


def error_response(code: str, text: str, *, detail: str | None = None,
                   hint: str | None = None, severity: str = "ERROR") -> bytes:
    return message(b"E", _notice_fields(severity, code, text, detail, hint))


def notice_response(text: str, *, detail: str | None = None, code: str = "00000") -> bytes:
    return message(b"N", _notice_fields("NOTICE", code, text, detail, None))
