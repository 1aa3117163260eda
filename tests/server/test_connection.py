"""dpsql.server.connection in a Server running in this process (a loop in a thread), for what
a real process cannot be told quickly: here, a short authentication timeout."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpsql.server.app import Server
from tests.server import rawwire as rw
from tests.server.serving import PASSWORDS, prepare


@pytest.fixture
def quick_server(tmp_path: Path) -> Iterator[tuple[str, int]]:
    db, md, ledger, _ = prepare(tmp_path)
    server = Server(md, db, ledger, auth_timeout=1.0)
    loop = asyncio.new_event_loop()
    host, port = loop.run_until_complete(server.start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield host, port
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        server.close()


def test_a_connection_that_does_not_authenticate_in_time_is_closed(
        quick_server: tuple[str, int]) -> None:
    host, port = quick_server
    for send in (b"", rw.startup_packet({b"user": b"alice"})):  # silent; no SASL response
        with rw.RawClient(host, port, timeout=10) as client:
            began = time.monotonic()
            client.send(send)
            answers = client.drain()  # the server closes it; no half-close from us
            assert 0.9 < time.monotonic() - began < 9
        assert [a.fields().get("C") for a in answers if a.kind == b"E"] == ["57014"], answers
    with rw.RawClient(host, port, timeout=10) as client:  # authenticated: no timeout after
        rw.login(client, "alice", PASSWORDS["alice"])
        time.sleep(1.5)
        client.send(rw.query(b"SHOW dpsql.budget"))
        assert [m.kind for m in client.read_until(b"Z")] == [b"T", b"D", b"C", b"Z"]
