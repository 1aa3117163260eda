"""One client connection: startup, TLS, SCRAM, then simple and extended queries.

The protocol state machine only (the extended protocol is :mod:`dpsql.server.extended`);
statements are answered by :class:`~dpsql.server.statements.StatementRunner` in a worker
thread, so a long query never blocks other clients, and a CancelRequest (from another
connection, by PostgreSQL's design) can interrupt it. Errors: dpsql's PEP 249 errors become
ErrorResponses with SQLSTATE codes (:mod:`dpsql.server.sqlstates`); anything unexpected is
logged for the owner and answered with XX000 and no details (never a traceback). After an error
in the extended protocol, messages are skipped until Sync, as PostgreSQL does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import duckdb

from dpsql import errors
from dpsql.analysis.hygiene import MAX_SQL_CHARS
from dpsql.server import pgtypes, wire
from dpsql.server.auth import MECHANISM, AuthenticationFailed, ScramExchange
from dpsql.server.catalog import SERVER_VERSION
from dpsql.server.extended import ExtendedQuery, Portal, Statement, fields_of, format_of
from dpsql.server.sqlstates import sqlstate
from dpsql.server.statements import Answer, StatementRunner, release_notice

if TYPE_CHECKING:
    from dpsql.server.app import Server

log = logging.getLogger("dpsql.server")

#: bytes of queued replies after which they are written and the connection waits until the
#: client has read enough (asyncio's drain: the transport's own high-water mark, 64 KiB):
#: a client that sends without reading stops being read instead of growing the server's memory
OUT_HIGH_WATER = 64 * 1024

#: the longest simple-Query text (several statements, each at most MAX_SQL_CHARS): longer
#: texts are refused before they are tokenized
MAX_QUERY_TEXT = 4 * MAX_SQL_CHARS


class Closed(Exception):
    """The connection is over (Terminate, hang-up, or a fatal error already sent)."""


class ClientConnection(ExtendedQuery):
    """The protocol state of one client (see module docstring)."""

    def __init__(self, server: Server, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        self.pid = secrets.randbelow(2**31 - 1) + 1
        self.secret = secrets.randbelow(2**31 - 1) + 1
        self.runner: StatementRunner | None = None
        self.statements: dict[str, Statement] = {}
        self.portals: dict[str, Portal] = {}
        self.failed = False  # skipping extended-protocol messages until Sync
        self.running: Callable[[], None] | None = None
        self.tls = False
        self.failed_transaction = False  # an error inside BEGIN ... until ROLLBACK
        self._out: list[bytes] = []  # messages not yet written (see send)
        self._out_bytes = 0  # their total length

    # -- plumbing ---------------------------------------------------------------------------

    def send(self, *chunks: bytes) -> None:
        """Queue messages; :meth:`flush` writes them. As PostgreSQL does, replies reach the
        socket at Sync, Flush, the end of a simple query, or an authentication step: one write
        per exchange instead of one per message, so the client wakes up once per reply.
        Bounded: past :data:`OUT_HIGH_WATER` bytes, :meth:`backpressure` writes them."""
        self._out.extend(chunks)
        self._out_bytes += sum(len(c) for c in chunks)

    async def flush(self) -> None:
        """Write the queued messages and wait until the transport's buffer is below its
        high-water mark (a client that does not read holds only this connection: the event
        loop serves the others meanwhile)."""
        if self._out:
            self.writer.write(b"".join(self._out))
            self._out.clear()
            self._out_bytes = 0
        await self.writer.drain()

    async def backpressure(self) -> None:
        """Flush when more than :data:`OUT_HIGH_WATER` bytes are queued: called between
        messages and between DataRows, so neither pipelined requests without Sync nor a
        large answer queue more than that before waiting for the client to read."""
        if self._out_bytes >= OUT_HIGH_WATER:
            await self.flush()

    def status(self) -> bytes:
        runner = self.runner
        if runner is None or not runner.in_transaction:
            return b"I"
        return b"E" if self.failed_transaction else b"T"

    async def fatal(self, code: str, text: str) -> NoReturn:
        self.send(wire.error_response(code, text, severity="FATAL"))
        await self.flush()
        raise Closed

    # -- lifecycle --------------------------------------------------------------------------

    async def serve(self) -> None:
        try:
            await self._startup()
            while True:
                msg = await wire.read_message(self.reader)
                await self._dispatch(msg)
                await self.backpressure()  # before the next message is read
        except (Closed, asyncio.IncompleteReadError, ConnectionError):
            pass
        except wire.ProtocolViolation as exc:
            await self._quietly(self.fatal("08P01", f"protocol violation: {exc}"))
        except ssl.SSLError:
            pass
        except Exception:  # never a traceback to the client; the owner's log has it
            log.exception("dpsql server: connection from %s failed", self.address)
            await self._quietly(self.fatal("XX000", "internal error in the dpsql server"))
        finally:
            self.server.forget(self)
            if self.runner is not None:
                try:
                    await asyncio.get_running_loop().run_in_executor(
                        self.server.executor, self._close_runner)
                except (RuntimeError, asyncio.CancelledError):
                    # the loop or the executor is shutting down: close here instead
                    self._close_runner()
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                self.writer.close()

    def _close_runner(self) -> None:
        runner = self.runner
        if runner is not None:
            runner.close()
            runner.session.close()
            runner.session.backend.close()

    @staticmethod
    async def _quietly(coro: Any) -> None:
        with contextlib.suppress(Closed, ConnectionError, ssl.SSLError, RuntimeError):
            await coro

    async def _startup(self) -> None:
        try:  # as PostgreSQL's authentication_timeout: no connection waits forever unknown
            user, params = await asyncio.wait_for(self._handshake(), self.server.auth_timeout)
        except TimeoutError:
            await self.fatal("57014", "canceling authentication due to timeout")
        self.runner = await asyncio.get_running_loop().run_in_executor(
            self.server.executor, self.server.open_runner, user)
        self.server.register(self)
        self.runner.settings["application_name"] = params.get("application_name", "")
        status = {
            "server_version": SERVER_VERSION, "server_encoding": "UTF8",
            "client_encoding": "UTF8", "DateStyle": "ISO, MDY", "TimeZone": "UTC",
            "integer_datetimes": "on", "standard_conforming_strings": "on",
            "is_superuser": "off", "session_authorization": user,
            "application_name": params.get("application_name", ""),
            "default_transaction_read_only": "on", "IntervalStyle": "postgres",
        }
        self.send(*(wire.parameter_status(k, v) for k, v in status.items()))
        self.send(wire.backend_key_data(self.pid, self.secret), wire.ready_for_query())
        await self.flush()

    async def _handshake(self) -> tuple[str, dict[str, str]]:
        """Startup packets (TLS, cancel) and authentication: the user and the parameters."""
        while True:
            code, body = await wire.read_startup(self.reader)
            if code == wire.SSL_REQUEST:
                await self._negotiate_tls()
            elif code == wire.GSSENC_REQUEST:
                self.send(b"N")
                await self.flush()
            elif code == wire.CANCEL_REQUEST:
                if len(body) == 8:
                    pid, secret = struct.unpack("!ii", body)
                    self.server.cancel(pid, secret)
                raise Closed
            elif code == wire.PROTOCOL_3:
                break
            else:
                version = f"{code >> 16}.{code & 0xFFFF}"
                await self.fatal("0A000", f"unsupported frontend protocol {version}")
        if self.server.tls_context is not None and not self.tls:
            await self.fatal("28000", "this dpsql server requires TLS (sslmode=require)")
        params = wire.parse_startup_parameters(body)
        user = params.get("user", "")
        if not user:
            await self.fatal("28000", "no user name in the startup message")
        await self._authenticate(user)
        return user, params

    async def _negotiate_tls(self) -> None:
        context = self.server.tls_context
        if context is None or self.tls:
            self.send(b"N")
            await self.flush()
            return
        self.send(b"S")
        await self.flush()
        await self.writer.start_tls(context)
        self.tls = True

    async def _authenticate(self, user: str) -> None:
        throttle = self.server.throttle
        locked = "too many failed logins from this address; try again later"
        if not throttle.allowed(self.address):
            await self.fatal("28P01", locked)
        exchange = ScramExchange(user, self.server.auth_info)
        self.send(wire.sasl_mechanisms([MECHANISM]))
        await self.flush()
        try:
            first = await self._password_message()
            body = wire.Body(first)
            mechanism = body.cstring()
            if mechanism != MECHANISM:
                raise AuthenticationFailed(f"unsupported SASL mechanism {mechanism!r}")
            length = body.int32()
            data = body.bytes_(length) if length >= 0 else b""
            self.send(wire.authentication(11, exchange.first(data)))
            await self.flush()
            final = await self._password_message()
            # Again, now: exchanges started together all passed the check above. From here
            # to the failure's record there is no await, so no two proofs interleave.
            if not throttle.allowed(self.address):
                await self.fatal("28P01", locked)
            self.send(wire.authentication(12, exchange.final(final)))
        except AuthenticationFailed as exc:
            throttle.failed(self.address)
            await asyncio.sleep(self.server.failed_login_delay)
            await self.fatal("28P01", str(exc))
        self.send(wire.authentication(0))

    async def _password_message(self) -> bytes:
        msg = await wire.read_message(self.reader)
        if msg.kind != b"p":
            raise wire.ProtocolViolation(f"expected a password message, got {msg.kind!r}")
        return msg.body

    # -- messages ---------------------------------------------------------------------------

    async def _dispatch(self, msg: wire.Message) -> None:
        kind = msg.kind
        if kind == b"X":
            raise Closed
        if kind == b"Q":
            await self._simple_query(wire.Body(msg.body).cstring())
            return
        if kind == b"S":
            self.failed = False
            self.send(wire.ready_for_query(self.status()))
            await self.flush()
            return
        if kind == b"H":
            await self.flush()
            return
        if self.failed and kind in b"PBDEC":
            return  # skipped until Sync
        handler = {b"P": self._parse, b"B": self._bind, b"D": self._describe,
                   b"E": self._execute, b"C": self._close}.get(kind)
        if handler is None:
            raise wire.ProtocolViolation(f"unexpected message type {kind!r}")
        try:
            await handler(wire.Body(msg.body))
        except (errors.Error, duckdb.Error, ValueError) as exc:
            self._error(exc)
            self.failed = True

    def _error(self, exc: BaseException) -> None:
        if self.runner is not None and self.runner.in_transaction:
            self.failed_transaction = True
        code = sqlstate(exc)
        text = getattr(exc, "message", None) or str(exc)
        if isinstance(exc, duckdb.Error):
            text = f"catalog query not supported by dpsql: {str(exc).splitlines()[0]}"
        elif isinstance(exc, ValueError):
            code, text = "22P02", f"invalid parameter value: {exc}"
        elif isinstance(exc, errors.OperationalError) and not isinstance(
                exc, (errors.BudgetExhaustedError, errors.QueryCancelledError)):
            # The owner's trouble (a damaged ledger, a missing data file): its message names
            # the owner's files, which the analyst-facing schema keeps from analysts.
            log.error("dpsql server: %s (analyst %s)", text,
                      self.runner.analyst if self.runner else "?")
            text = "the server cannot answer right now; the data owner's log says why"
        self.send(wire.error_response(code, text))

    async def _run(self, sql: str, params: list[Any] | None) -> Answer:
        runner = self.runner
        assert runner is not None
        if self.failed_transaction and not sql.strip().upper().startswith(
                ("ROLLBACK", "ABORT", "COMMIT", "END")):
            raise errors.ProgrammingError(
                "current transaction is aborted, commands ignored until end of transaction block")
        loop = asyncio.get_running_loop()
        runner.begin_statement()
        self.running = runner.session.cancel
        try:
            answer = await loop.run_in_executor(self.server.executor, runner.answer, sql, params)
        finally:
            self.running = None
        if not runner.in_transaction or sql.strip().upper().startswith("ROLLBACK"):
            self.failed_transaction = False  # ROLLBACK [TO SAVEPOINT] clears the failure
        return answer

    async def _simple_query(self, text: str) -> None:
        try:
            if len(text) > MAX_QUERY_TEXT:
                raise errors.UnsupportedQueryError(
                    f"the query text is {len(text):,} characters long, more than the "
                    f"{MAX_QUERY_TEXT:,} one Query message may hold: send one statement at a "
                    f"time (each at most {MAX_SQL_CHARS:,} characters)")
            # tokenizing is CPU work: off the event loop, which serves every client
            statements = await asyncio.get_running_loop().run_in_executor(
                self.server.executor, _split, text)
        except errors.Error as exc:
            self._error(exc)
            statements = None
        if statements == []:
            self.send(wire.EMPTY_QUERY)
        for sql in statements or ():
            try:
                answer = await self._run(sql, None)
            except (errors.Error, duckdb.Error, ValueError) as exc:
                self._error(exc)
                break
            await self._send_answer(answer, [0], describe=True, limit=0)
        self.send(wire.ready_for_query(self.status()))
        await self.flush()

    async def _send_answer(self, answer: Answer, formats: list[int], *, describe: bool,
                           limit: int, start: int = 0) -> int:
        """RowDescription (if ``describe``), DataRows from ``start`` (at most ``limit``, 0: all),
        then CommandComplete or PortalSuspended. Returns the index after the last row sent."""
        if answer.release is not None and start == 0:
            text, detail = answer.notice or release_notice(answer.release)
            self.send(wire.notice_response(text, detail=detail))
        oids = [pgtypes.type_oid(t) for t in answer.types]
        if describe and answer.has_rows:
            self.send(wire.row_description(fields_of(answer, formats)))
        end = len(answer.rows) if limit <= 0 else min(len(answer.rows), start + limit)
        binary = [format_of(formats, i) == 1 for i in range(len(oids))]
        for row in answer.rows[start:end]:
            self.send(wire.data_row([
                pgtypes.encode_binary(v, oids[i]) if binary[i] else pgtypes.encode_text(v)
                for i, v in enumerate(row)]))
            if self._out_bytes >= OUT_HIGH_WATER:  # backpressure(), inlined in the row loop
                await self.flush()
        if end < len(answer.rows):
            self.send(wire.PORTAL_SUSPENDED)
        else:
            self.send(wire.command_complete(answer.tag))
        return end


def _split(text: str) -> list[str]:
    """The statements of a simple Query message (split where sqlglot's tokenizer sees ';')."""
    from dpsql.sql import statement_end

    out, start = [], 0
    while start < len(text):
        end = statement_end(text, start)
        piece = text[start:] if end is None else text[start:end]
        if piece.strip():
            out.append(piece.strip())
        if end is None:
            break
        start = end + 1
    return out
