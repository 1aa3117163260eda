"""dpsql.server.app.Server in process (the protocol is tested on a real process elsewhere), and
`dpsql serve`'s exit on SIGTERM."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dpsql.accounting import Ledger
from dpsql.errors import ProgrammingError
from dpsql.server.app import Server
from dpsql.server.statements import StatementRunner
from tests.server.serving import prepare
from tests.units import tiny


def test_runners_opened_at_the_same_moment_all_open(tmp_path: Path) -> None:
    # The first connection to a fresh DuckDB instance locks its configuration; clients logging
    # in together used to race it ("the configuration has been locked", an XX000 at login).
    db, md, ledger, _ = prepare(tmp_path)
    server = Server(md, db, ledger)
    try:
        for _ in range(3):  # every round starts on a fresh instance: no connection is open
            barrier = threading.Barrier(8)

            def open_one(_: int, barrier: threading.Barrier = barrier
                         ) -> StatementRunner | Exception:
                barrier.wait()
                try:
                    return server.open_runner("alice")
                except Exception as exc:  # collected and asserted below
                    return exc

            with ThreadPoolExecutor(8) as pool:
                opened = list(pool.map(open_one, range(8)))
            failures = [r for r in opened if isinstance(r, Exception)]
            for runner in opened:
                if isinstance(runner, StatementRunner):
                    runner.session.close()
                    runner.session.backend.close()
            assert not failures, failures
    finally:
        server.close()


def test_sigterm_stops_the_server_and_says_so(tmp_path: Path) -> None:
    # QA round 5: `dpsql serve` exited on SIGTERM without a word
    db, md, ledger, _ = prepare(tmp_path)
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "dpsql.cli.main", "serve", "-m", str(md),
                                 "-d", str(db), "--ledger", str(ledger), "--listen",
                                 "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while "serving" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "dpsql: stopped" in log.read_text()


def test_a_unit_path_key_that_repeats_on_the_data_stops_the_server_before_it_serves(
        tmp_path: Path) -> None:
    # the #17 audit: a `to` key that is not unique was caught by `metadata check` only, and
    # queries still ran on it; every unit release assumes each row belongs to one unit
    rows = tiny.random_database(random.Random(3))
    ledger = tmp_path / "ledger.sqlite"
    Ledger(ledger).close()
    clean = tiny.write_file(tmp_path / "clean.duckdb", rows)
    Server(tiny.metadata(), clean, ledger).close()  # unique keys: it starts
    order = rows["orders"][0]
    doubled = tiny.write_file(tmp_path / "doubled.duckdb",
                              {**rows, "orders": [*rows["orders"], (order[0], order[1] + 1, 0)]})
    with pytest.raises(ProgrammingError) as info:
        Server(tiny.metadata(), doubled, ledger)
    message = info.value.message
    assert "path key orders.o_id is not unique on the data (1 values repeat)" in message
    assert "dpsql metadata check" in message
    customers = [*rows["customer"], (rows["customer"][0][0], 1)]
    twice = tiny.write_file(tmp_path / "twice.duckdb", {**rows, "customer": customers})
    with pytest.raises(ProgrammingError, match=r"unit's id customer\.c_id is not unique .* "
                       r"two rows of the unit table would be one unit"):
        Server(tiny.metadata(), twice, ledger)
