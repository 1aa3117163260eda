"""The extended query protocol: Parse, Bind, Describe, Execute, Close (a mixin of
:class:`~dpsql.server.connection.ClientConnection`).

A portal is answered once: Describe of a portal computes (and, if private, charges) the answer
that Execute then streams, possibly in several Execute calls with a row limit. Describe of a
statement reads no data: a catalog query runs on the shadow schema with NULL parameters, a
private query's column names come from its analysis.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dpsql import errors
from dpsql.analysis.hygiene import check_size
from dpsql.execute.public import PreparedPublic
from dpsql.server import pgtypes, wire
from dpsql.server.catalog import parse_session_command
from dpsql.server.placeholders import count_markers, to_qmark
from dpsql.server.sqlstates import NoSuchObject
from dpsql.server.statements import Answer

if TYPE_CHECKING:
    from dpsql.server.app import Server
    from dpsql.server.statements import StatementRunner

#: named prepared statements one connection may hold (each holds its text): a client that
#: never closes them is refused rather than growing the server without bound
MAX_STATEMENTS = 1000


@dataclass
class Statement:
    sql: str
    param_oids: list[int]


@dataclass
class Portal:
    statement: Statement
    params: list[Any]
    result_formats: list[int]
    answer: Answer | None = None
    sent: int = 0



class ExtendedQuery:
    """Parse/Bind/Describe/Execute/Close over the connection's statements and portals."""

    server: Server
    runner: StatementRunner | None
    statements: dict[str, Statement]
    portals: dict[str, Portal]

    def send(self, *chunks: bytes) -> None:  # the connection's
        raise NotImplementedError

    async def _run(self, sql: str, params: list[Any] | None) -> Answer:  # the connection's
        raise NotImplementedError

    async def _send_answer(self, answer: Answer, formats: list[int], *, describe: bool,
                           limit: int, start: int = 0) -> int:  # the connection's
        raise NotImplementedError

    async def _parse(self, body: wire.Body) -> None:
        name, sql = body.cstring(), body.cstring()
        oids = [body.int32() for _ in range(body.count())]
        body.end()
        check_size(sql)  # before count_markers reads it on the event loop
        if name and name in self.statements:
            raise NoSuchObject(f'prepared statement "{name}" already exists', "42P05")
        if name and len(self.statements) >= MAX_STATEMENTS:
            raise errors.OperationalError(
                f"too many prepared statements ({MAX_STATEMENTS}): close some (DEALLOCATE)")
        markers = count_markers(sql)
        oids += [0] * max(0, markers - len(oids))
        self.statements[name] = Statement(sql, oids)
        self.send(wire.PARSE_COMPLETE)

    async def _bind(self, body: wire.Body) -> None:
        portal, name = body.cstring(), body.cstring()
        formats = [body.int16() for _ in range(body.count())]
        raw: list[bytes | None] = []
        for _ in range(body.count()):
            length = body.int32()
            raw.append(None if length == -1 else body.bytes_(length))
        result_formats = [body.int16() for _ in range(body.count())]
        body.end()
        statement = self.statements.get(name)
        if statement is None:
            raise NoSuchObject(f'prepared statement "{name}" does not exist', "26000")
        if len(raw) != len(statement.param_oids):
            raise errors.ProgrammingError(
                f"bind message supplies {len(raw)} parameters, but prepared statement "
                f'"{name}" requires {len(statement.param_oids)}')
        if any(f not in (0, 1) for f in formats + result_formats):
            raise wire.ProtocolViolation("format codes must be 0 (text) or 1 (binary)")
        params = [pgtypes.decode_param(v, statement.param_oids[i], format_of(formats, i) == 1)
                  for i, v in enumerate(raw)]
        self.portals[portal] = Portal(statement, params, result_formats)
        self.send(wire.BIND_COMPLETE)

    async def _describe(self, body: wire.Body) -> None:
        what, name = body.byte(), body.cstring()
        body.end()
        if what == b"S":
            statement = self.statements.get(name)
            if statement is None:
                raise NoSuchObject(f'prepared statement "{name}" does not exist', "26000")
            self.send(wire.parameter_description(
                [oid or pgtypes.TEXT for oid in statement.param_oids]))
            fields = await self._statement_fields(statement)
            self.send(wire.row_description(fields) if fields else wire.NO_DATA)
            return
        if what != b"P":
            raise wire.ProtocolViolation("Describe must name a statement (S) or a portal (P)")
        portal = self._portal(name)
        # A portal's columns are known once it is answered: the answer is computed here (and
        # charged, if private) and Execute streams it.
        answer = await self._answer(portal)
        if answer.has_rows:
            self.send(wire.row_description(fields_of(answer, portal.result_formats)))
        else:
            self.send(wire.NO_DATA)

    async def _statement_fields(self, statement: Statement) -> list[wire.Field]:
        """A statement's columns before it runs: a catalog or session query is answered with
        NULL parameters (it reads no data); a private query's names come from its analysis
        (nothing is charged), typed as text."""
        runner = self.runner
        assert runner is not None
        nulls = [None] * len(statement.param_oids)
        if parse_session_command(statement.sql) is None and not runner.is_catalog(statement.sql):
            text, _ = to_qmark(statement.sql, nulls)
            loop = asyncio.get_running_loop()
            prepared = await loop.run_in_executor(self.server.executor, runner.prepared, text)
            names = (prepared.names if isinstance(prepared, PreparedPublic)
                     else [c.name for c in prepared.analysis.columns])
            return [wire.Field(name, pgtypes.TEXT) for name in names]
        answer = await self._run(statement.sql, nulls)
        return fields_of(answer, [0])

    def _portal(self, name: str) -> Portal:
        portal = self.portals.get(name)
        if portal is None:
            raise NoSuchObject(f'portal "{name}" does not exist', "34000")
        return portal

    async def _answer(self, portal: Portal) -> Answer:
        if portal.answer is None:
            portal.answer = await self._run(portal.statement.sql, portal.params)
        return portal.answer

    async def _execute(self, body: wire.Body) -> None:
        name, limit = body.cstring(), body.int32()
        body.end()
        portal = self._portal(name)
        answer = await self._answer(portal)
        portal.sent = await self._send_answer(answer, portal.result_formats, describe=False,
                                        limit=limit, start=portal.sent)

    async def _close(self, body: wire.Body) -> None:
        what, name = body.byte(), body.cstring()
        body.end()
        if what == b"S":
            self.statements.pop(name, None)
        elif what == b"P":
            self.portals.pop(name, None)
        else:
            raise wire.ProtocolViolation("Close must name a statement (S) or a portal (P)")
        self.send(wire.CLOSE_COMPLETE)


def format_of(formats: list[int], i: int) -> int:
    if not formats:
        return 0
    return formats[0] if len(formats) == 1 else formats[i] if i < len(formats) else 0


def fields_of(answer: Answer, formats: list[int]) -> list[wire.Field]:
    fields = []
    for i, (name, type_name) in enumerate(zip(answer.names, answer.types, strict=True)):
        oid = pgtypes.type_oid(type_name)
        fmt = format_of(formats, i)
        if fmt == 1 and not pgtypes.binary_supported(oid):
            raise errors.NotSupportedError(
                f"binary results of type {type_name} are not supported; ask for text format")
        fields.append(wire.Field(name, oid, pgtypes.type_size(oid), fmt))
    return fields
