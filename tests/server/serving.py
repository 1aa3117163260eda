"""A real `dpsql serve` process on loopback for the server tests (not a test module).

``start_server(tmp)`` builds the shop database, a ledger with analysts and budgets, starts
``python -m dpsql.cli.main serve --listen 127.0.0.1:0`` and reads the bound port from its
first stderr line. Analysts: ``alice`` (every table, epsilon cap 2, default epsilon 0.5),
``bob`` (orders and products only, no default epsilon), ``carol`` (a tiny budget).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpsql.accounting import Ledger
from dpsql.backends import ledger_identity
from dpsql.metadata import load_metadata
from tests.shop_fixture import build_shop

PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}


@dataclass
class ServerProcess:
    process: subprocess.Popen
    host: str
    port: int
    database: Path | None
    metadata: Path
    ledger: Path
    database_id: str
    extra_args: list[str] = field(default_factory=list)

    def dsn(self, user: str = "alice", password: str | None = None, **extra: str) -> str:
        pw = PASSWORDS.get(user, "") if password is None else password
        parts = {"host": self.host, "port": str(self.port), "user": user, "password": pw,
                 "dbname": "shop", "sslmode": "disable", **extra}
        return " ".join(f"{k}={v}" for k, v in parts.items())

    def url(self, user: str = "alice") -> str:
        return f"postgresql://{user}:{PASSWORDS[user]}@{self.host}:{self.port}/shop?sslmode=disable"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def prepare(tmp: Path) -> tuple[Path, Path, Path, str]:
    """The shop database, its metadata and a ledger with the three analysts."""
    db = tmp / "shop.duckdb"
    shop = build_shop(db)
    md = tmp / "shop.yaml"
    md.write_text(shop.metadata_yaml())
    ledger_path = tmp / "ledger.sqlite"
    database_id = ledger_identity("duckdb", str(db), load_metadata(md))
    with Ledger(ledger_path) as ledger:
        ledger.add_analyst("alice", PASSWORDS["alice"], max_epsilon=2.0, default_epsilon=0.5)
        ledger.add_analyst("bob", PASSWORDS["bob"], tables=["orders", "products"])
        ledger.add_analyst("carol", PASSWORDS["carol"], default_epsilon=0.5)
        ledger.set_budget(database_id, "alice", 50.0, 1e-4)
        ledger.set_budget(database_id, "bob", 50.0, 0.0)
        ledger.set_budget(database_id, "carol", 1.0, 0.0)
    return db, md, ledger_path, database_id


def launch(db: Path | None, md: Path, ledger: Path, database_id: str, *extra: str,
           port: int = 0, env: dict[str, str] | None = None,
           timeout: float = 60) -> ServerProcess:
    """Start the server process and wait (at most ``timeout`` s) until it listens (``db``
    None: no ``-d``, the tables are the metadata's sources)."""
    cmd = [sys.executable, "-m", "dpsql.cli.main", "serve", "-m", str(md),
           *(() if db is None else ("-d", str(db))),
           "--ledger", str(ledger), "--listen", f"127.0.0.1:{port}", *extra]
    if "--failed-login-delay" not in extra:  # the default 0.5 s would make each refusal slow
        cmd += ["--failed-login-delay", "0.02"]
    env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=env)
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError(f"dpsql serve exited with {proc.wait()} before listening")
        m = re.search(r" on ([\d.]+):(\d+) ", line)
        if m:
            # keep draining stderr so the server never blocks on a full pipe
            import threading

            # (and close it at its end: an unclosed pipe was a ResourceWarning wherever the
            # garbage collector happened to run, e.g. in tests/test_cursor_arrow.py)
            threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
            return ServerProcess(proc, m.group(1), int(m.group(2)), db, md, ledger,
                                 database_id, list(extra))
    proc.kill()
    raise RuntimeError(f"dpsql serve did not start listening within {timeout:g} s")


def _drain(stream: Any) -> None:
    """Read ``stream`` to its end, then close it."""
    with stream:
        for _ in stream:
            pass


def start_server(tmp: Path, *extra: str) -> ServerProcess:
    db, md, ledger, database_id = prepare(tmp)
    return launch(db, md, ledger, database_id, *extra)
