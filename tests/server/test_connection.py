"""dpsql.server.connection in a Server running in this process (a loop in a thread), for what
a real process cannot be told quickly or shown from outside: a short authentication timeout,
and the bytes queued for a client that does not read (backpressure)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpsql.server.app import Server
from dpsql.server.connection import OUT_HIGH_WATER
from tests.server import rawwire as rw
from tests.server.serving import PASSWORDS, prepare


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Server, str, int]]:
    db, md, ledger, _ = prepare(tmp_path)
    server = Server(md, db, ledger, auth_timeout=1.0)
    loop = asyncio.new_event_loop()
    host, port = loop.run_until_complete(server.start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server, host, port
    finally:
        async def shut() -> None:  # the listening socket and every client's transport
            assert server._server is not None
            server._server.close()
            for client in list(server._clients.values()):
                client.writer.transport.abort()
            await asyncio.sleep(0.05)  # let the aborted connections' handlers finish

        asyncio.run_coroutine_threadsafe(shut(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        server.close()


@pytest.fixture
def quick_server(running: tuple[Server, str, int]) -> tuple[str, int]:
    return running[1], running[2]


def test_a_connection_that_does_not_authenticate_in_time_is_closed(
        quick_server: tuple[str, int]) -> None:
    host, port = quick_server
    # the three clients wait side by side (the timeout is per connection): one silent, one
    # that starts but never answers SASL, one that logs in and then idles past the timeout
    with rw.RawClient(host, port, timeout=10) as silent, \
            rw.RawClient(host, port, timeout=10) as starting, \
            rw.RawClient(host, port, timeout=10) as authenticated:
        began = time.monotonic()
        silent.send(b"")
        starting.send(rw.startup_packet({b"user": b"alice"}))
        rw.login(authenticated, "alice", PASSWORDS["alice"])
        for client in (silent, starting):
            answers = client.drain()  # the server closes it; no half-close from us
            assert 0.9 < time.monotonic() - began < 9
            assert [a.fields().get("C") for a in answers if a.kind == b"E"] == ["57014"], \
                answers
        time.sleep(max(0.0, began + 1.5 - time.monotonic()))  # authenticated: no timeout after
        authenticated.send(rw.query(b"SHOW dpsql.budget"))
        assert [m.kind for m in authenticated.read_until(b"Z")] == [b"T", b"D", b"C", b"Z"]


# -- backpressure ------------------------------------------------------------------------------

#: one Execute's answer: 100 rows of 2,000 bytes (a catalog query: the shadow reads no data)
WIDE = b"SELECT repeat('x', 2000) AS pad FROM generate_series(1, 100)"


def _queued(server: Server) -> list[int]:
    """Bytes each connection holds for its client: queued replies plus the transport's buffer."""
    return [sum(map(len, c._out)) + c.writer.transport.get_write_buffer_size()
            for c in list(server._clients.values())]


def _stalled(server: Server) -> int:
    """Wait until the server holds at least OUT_HIGH_WATER bytes for a client that does not
    read and that amount stays put for 0.3 s (it has filled the socket's buffers and waits),
    then return it: a fixed sleep would pass a server that had not started writing yet."""
    deadline, last, since = time.monotonic() + 15, -1, time.monotonic()
    while time.monotonic() < deadline:
        now = max(_queued(server), default=0)
        if now != last:
            last, since = now, time.monotonic()
        elif now >= OUT_HIGH_WATER and time.monotonic() - since >= 0.3:
            return now
        time.sleep(0.02)
    raise AssertionError(f"the server never stalled on the slow client (holds {last} bytes)")


def test_a_client_that_stops_reading_holds_a_bounded_buffer_and_stalls_no_one(
        running: tuple[Server, str, int]) -> None:
    """Pipelined Executes without Sync, never read: ~40 MB of answers. The server writes at
    most OUT_HIGH_WATER past the transport's high-water mark, then waits for the reader (and
    stops reading its requests); another client is answered meanwhile; once the slow client
    reads, it gets every answer, in order."""
    server, host, port = running
    executes = 200
    with rw.RawClient(host, port, timeout=20) as slow:
        rw.login(slow, "alice", PASSWORDS["alice"])
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        slow.send(rw.parse(b"wide", WIDE))
        slow.send(b"".join(rw.bind(b"", b"wide") + rw.execute(b"") for _ in range(executes))
                  + rw.SYNC)
        # the server answers until the socket's buffers are full, then waits
        assert _stalled(server) < 2 * OUT_HIGH_WATER + 64 * 1024 + 4096
        with rw.RawClient(host, port, timeout=20) as other:  # meanwhile, another client
            began = time.monotonic()
            rw.login(other, "alice", PASSWORDS["alice"])
            other.send(rw.query(b"SELECT COUNT(*) AS n FROM orders"))
            replies = other.read_until(b"Z")
            assert [m.kind for m in replies] == [b"N", b"T", b"D", b"C", b"Z"], replies
            assert time.monotonic() - began < 10
        assert max(_queued(server)) < 2 * OUT_HIGH_WATER + 64 * 1024 + 4096
        kinds = [m.kind for m in slow.read_until(b"Z")]
    assert kinds.count(b"C") == executes and kinds.count(b"D") == 100 * executes
    assert kinds[0] == b"1" and kinds[-1] == b"Z" and b"E" not in kinds


def test_one_large_answer_is_written_as_the_client_reads_it(
        running: tuple[Server, str, int]) -> None:
    """A simple Query whose answer is ~10 MB: the DataRows are written as the client reads
    them, never all queued at once."""
    server, host, port = running
    with rw.RawClient(host, port, timeout=20) as slow:
        rw.login(slow, "alice", PASSWORDS["alice"])
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        slow.send(rw.query(b"SELECT repeat('x', 2000) AS pad FROM generate_series(1, 5000)"))
        assert _stalled(server) < 2 * OUT_HIGH_WATER + 64 * 1024 + 4096
        kinds = [m.kind for m in slow.read_until(b"Z")]
    assert kinds.count(b"D") == 5000 and kinds[-2:] == [b"C", b"Z"]
