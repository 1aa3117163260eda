"""The server process: holds the data, the owner's metadata and the ledger; analysts only ask.

Trust model (docs/privacy.md, "Trust model"): in server mode the analyst never holds the
database, the metadata (max frequencies, row counts) or the ledger. They authenticate with
SCRAM-SHA-256 against verifiers the owner stored in the ledger (``dpsql analyst add``); the name
charged is the authenticated user, never one the client asserts. The ledger is mandatory.

Concurrency: one asyncio loop reads and writes the sockets; statements run in a thread pool,
each client connection with its own :class:`~dpsql.session.Session` and backend connection;
all share one :class:`~dpsql.accounting.Ledger`, whose charges are serialised transactions, so
concurrent clients can never overspend a budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import signal
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dpsql.accounting import Ledger
from dpsql.backends import data_version, ledger_identity, open_backend
from dpsql.backends.types import fill_column_types
from dpsql.dbapi import same_file
from dpsql.errors import ProgrammingError
from dpsql.metadata import Metadata, load_metadata
from dpsql.metadata.unit_check import refuse_repeated_keys
from dpsql.server.auth import AuthInfo, LoginThrottle
from dpsql.server.cancel import CancellableBackend
from dpsql.server.connection import ClientConnection
from dpsql.server.shadow import Shadows
from dpsql.server.statements import StatementRunner
from dpsql.session import Principal, Session

log = logging.getLogger("dpsql.server")


class Server:
    """A dpsql server over one database, one metadata file and one ledger (all the owner's)."""

    def __init__(
        self,
        metadata: str | os.PathLike | Metadata,
        database: str | os.PathLike | None,
        ledger: str | os.PathLike,
        *,
        backend: str = "duckdb",
        spark: Any = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        workers: int = 8,
        failed_login_delay: float = 0.5,
        login_limit: int = 10,
        auth_timeout: float = 60.0,
    ) -> None:
        md = metadata if isinstance(metadata, Metadata) else load_metadata(metadata)
        ledger_path = os.fspath(ledger)
        if md.ledger is not None and not same_file(md.ledger, ledger_path):
            raise ProgrammingError(
                f"the metadata names the ledger {md.ledger!r}; --ledger {ledger_path!r} cannot "
                "replace it (omit it or pass the same file)")
        self.ledger = Ledger(ledger_path, create=False)
        self.backend_name, self.database, self.spark = backend, database, spark
        self.database_id = ledger_identity(backend, database, md)
        probe = open_backend(backend, database, md, spark)
        try:  # undeclared column types, once (every session would otherwise ask again)
            self.metadata = fill_column_types(md, probe)
            # the unit paths' keys, on the data: every unit release assumes them unique
            refuse_repeated_keys(md, lambda sql: probe.execute(probe.compile(sql))[0])
        finally:
            probe.close()
        #: the catalog queries' shadow databases, one per analyst, shared by their connections
        self.shadows = Shadows(self.metadata)
        self.tls_context: ssl.SSLContext | None = None
        if tls_cert or tls_key:
            if not (tls_cert and tls_key):
                raise ProgrammingError("TLS needs both --tls-cert and --tls-key")
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(tls_cert, tls_key)
            self.tls_context = context
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dpsql-query")
        self.throttle = LoginThrottle(limit=login_limit)
        self.failed_login_delay = failed_login_delay
        #: seconds a connection may take from connect to authenticated (PostgreSQL's
        #: authentication_timeout, same default): then it is closed
        self.auth_timeout = auth_timeout
        self._clients: dict[int, ClientConnection] = {}
        # Backends are opened one at a time: DuckDB shares one instance per file in a process,
        # and the first connection to it locks its configuration down; two clients opening
        # it at once could both see it unlocked and the second fail to SET a locked option.
        self._opening = threading.Lock()
        self._server: asyncio.AbstractServer | None = None

    # -- what connections ask of the server ---------------------------------------------------

    def auth_info(self, user: str) -> AuthInfo | None:
        """The analyst's SCRAM verifier, or None for an unknown analyst."""
        account = self.ledger.analyst(user)
        return None if account is None else account.scram_auth_info()

    def open_runner(self, user: str) -> StatementRunner:
        """A statement runner for the authenticated ``user``: their own session and backend
        connection, charged to their budget on this database."""
        account = self.ledger.analyst(user)
        if account is None:  # removed between authentication and now
            raise ProgrammingError(f"analyst {user!r} no longer exists")
        with self._opening:
            # a CancelRequest at any moment has its defined effect (dpsql.server.cancel)
            backend = CancellableBackend(
                open_backend(self.backend_name, self.database, self.metadata, self.spark))
        try:
            # the data version per connection, after the backend opened the data: a client
            # that connects after the owner changed the database never gets an old answer
            version = data_version(self.backend_name, self.database, self.metadata)
            session = Session(self.metadata, backend, ledger=self.ledger,
                              principal=Principal(self.database_id, user),
                              data_version=version)
        except BaseException:
            backend.close()
            raise
        return StatementRunner(session, account, user, self.shadows)

    def register(self, client: ClientConnection) -> None:
        self._clients[client.pid] = client

    def forget(self, client: ClientConnection) -> None:
        if self._clients.get(client.pid) is client:
            del self._clients[client.pid]

    def cancel(self, pid: int, secret: int) -> None:
        """CancelRequest: interrupt the client's running statement if the key matches (compared
        in constant time; a wrong key is ignored silently, as PostgreSQL does)."""
        client = self._clients.get(pid)
        if client is None or not hmac.compare_digest(
                client.secret.to_bytes(4, "big"), secret.to_bytes(4, "big", signed=True)):
            return
        running = client.running
        if running is not None:
            running()
            if client.runner is not None and client.runner._catalog is not None:
                client.runner._catalog.interrupt()

    # -- running -------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 5433) -> tuple[str, int]:
        """Listen; returns the bound (host, port) (port 0 picks a free one)."""

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await ClientConnection(self, reader, writer).serve()

        self._server = await asyncio.start_server(handle, host, port, limit=2**20)
        sockname = self._server.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    async def serve_forever(self, host: str, port: int, ready: Any = None) -> None:
        bound = await self.start(host, port)
        if ready is not None:
            ready(bound)
        loop = asyncio.get_running_loop()
        stop: asyncio.Future[None] = loop.create_future()

        def request_stop() -> None:
            if not stop.done():
                stop.set_result(None)

        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
                loop.add_signal_handler(sig, request_stop)
        assert self._server is not None
        async with self._server:
            await stop

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.ledger.close()
        self.shadows.close()
