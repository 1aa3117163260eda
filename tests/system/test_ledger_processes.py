"""The ledger across real processes: no overspend under contention, no lost charge after SIGKILL,
and fail-closed behaviour on corrupt, incomplete, foreign and locked files.

Children are separate Python interpreters (subprocess), each with its own SQLite connection.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from decimal import Decimal

import pytest

from dpsql.accounting import Ledger
from dpsql.errors import BudgetExhaustedError, OperationalError

pytestmark = pytest.mark.slow

DB = "/data/shop.duckdb"

# Charges `n` times 0.01 (and 1e-9 delta) after a start barrier; prints one JSON summary.
CONTENDER = r"""
import json, os, sys
from decimal import Decimal
from dpsql.accounting import Ledger
from dpsql.errors import BudgetExhaustedError
path, n = sys.argv[1], int(sys.argv[2])
ids, refused = [], 0
with Ledger(path, timeout=30) as ledger:
    print("ready", flush=True)
    sys.stdin.readline()  # start barrier: every child hammers the ledger at once
    for i in range(n):
        try:
            ids.append(ledger.charge("/data/shop.duckdb", "alice", fingerprint=f"{os.getpid()}-{i}",
                                     epsilon=0.01, delta=1e-9, mechanism="laplace"))
        except BudgetExhaustedError:
            refused += 1
print(json.dumps({"ids": ids, "refused": refused,
                  "epsilon": str(Decimal("0.01") * len(ids)),
                  "delta": str(Decimal("1e-9") * len(ids))}), flush=True)
"""

# Like CONTENDER, as the session does it: each charge carries its SQL and parameters; those of
# i = 1 mod 4 are refunded (a failed query), the others get their released rows recorded. Every
# refund is followed by another attempt of the same child (n = 0 mod 4), so the budget ends
# exactly full: after the last refusal each refund is made up by that child's next charge.
AUDITED = r"""
import json, os, sys
from dpsql.accounting import Ledger
from dpsql.errors import BudgetExhaustedError
path, n = sys.argv[1], int(sys.argv[2])
released, refunded, refused = {}, [], 0
with Ledger(path, timeout=30) as ledger:
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(n):
        try:
            cid = ledger.charge("/data/shop.duckdb", "alice", fingerprint="fp", epsilon=0.01,
                                delta=0.0, mechanism="laplace",
                                sql=f"SELECT {os.getpid()} AS p, ? AS i", params=[i])
        except BudgetExhaustedError:
            refused += 1
            continue
        if i % 4 == 1:
            ledger.refund("/data/shop.duckdb", "alice", cid)
            refunded.append(cid)
        else:
            ledger.record_release("/data/shop.duckdb", "alice", cid, [(os.getpid(), i)],
                                  columns=["p", "i"])
            released[cid] = [os.getpid(), i]
print(json.dumps({"released": released, "refunded": refunded, "refused": refused}), flush=True)
"""

# Charges forever; reports each charge id on stdout only AFTER charge() returned.
RUNNER = r"""
import sys
from dpsql.accounting import Ledger
path, tag = sys.argv[1], sys.argv[2]
ledger = Ledger(path, timeout=30)
i = 0
while True:
    cid = ledger.charge("/data/shop.duckdb", "alice", fingerprint=f"{tag}-{i}",
                        epsilon=0.001, delta=0.0, mechanism="laplace")
    sys.stdout.write(f"charged {cid}\n")
    sys.stdout.flush()
    i += 1
"""

# Holds an open BEGIN EXCLUSIVE transaction on the file until its stdin is closed.
LOCKER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def spawn(source: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", source, *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def reap(children) -> None:
    """Kill what still runs, wait for it, and close every pipe (left to the garbage
    collector, an unclosed pipe is a ResourceWarning in whichever test runs then)."""
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        for pipe in (child.stdin, child.stdout, child.stderr):
            if pipe is not None:
                pipe.close()


def test_eight_processes_never_overspend(tmp_path):
    path = str(tmp_path / "ledger.sqlite")
    with Ledger(path) as ledger:
        ledger.set_budget(DB, "alice", 3.0, 1e-6)  # exactly 300 charges of 0.01
    children = [spawn(CONTENDER, path, "50") for _ in range(8)]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        reports = []
        for child in children:
            # read through the same buffered stream as readline() above (communicate() would
            # read the raw pipe and miss what that stream already buffered)
            out = child.stdout.read()
            assert child.wait(timeout=60) == 0, child.stderr.read()
            reports.append(json.loads(out))
    finally:
        reap(children)
    assert sum(len(r["ids"]) for r in reports) == 300
    assert sum(r["refused"] for r in reports) == 100
    reported_eps = sum(Decimal(r["epsilon"]) for r in reports)
    reported_delta = sum(Decimal(r["delta"]) for r in reports)
    assert reported_eps == Decimal("3.00") and reported_delta == Decimal("3e-7")
    with Ledger(path) as ledger:
        status = ledger.status(DB, "alice")
    reported_ids = sorted(i for r in reports for i in r["ids"])
    assert sorted(c.id for c in status.history) == reported_ids  # nothing lost, nothing extra
    assert Decimal(repr(status.epsilon_spent)) == reported_eps
    assert Decimal(repr(status.delta_spent)) == reported_delta
    assert status.epsilon_remaining == 0.0


def test_processes_releasing_and_refunding_keep_budget_and_audit_log_consistent(tmp_path):
    path = str(tmp_path / "ledger.sqlite")
    with Ledger(path) as ledger:
        ledger.set_budget(DB, "alice", 0.5, 0.0)  # 50 charges of 0.01 count at most
    children = [spawn(AUDITED, path, "40") for _ in range(4)]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        reports = []
        for child in children:
            out = child.stdout.read()
            assert child.wait(timeout=60) == 0, child.stderr.read()
            reports.append(json.loads(out))
    finally:
        reap(children)
    released = {int(k): v for r in reports for k, v in r["released"].items()}
    refunded = {i for r in reports for i in r["refunded"]}
    assert sum(r["refused"] for r in reports) > 0  # the budget ran out under contention
    assert len(released) == 50 and refunded  # what counts is exactly the budget
    with Ledger(path) as ledger:
        status = ledger.status(DB, "alice")  # running sums agree with the live charges
        log = ledger.audit()
    assert status.epsilon_spent == 0.5 and status.epsilon_remaining == 0.0
    assert {c.id for c in status.history} == set(released)
    assert {e.id for e in log} == set(released) | refunded  # nothing lost, nothing extra
    for entry in log:
        pid = int(entry.sql.split()[1])  # type: ignore[union-attr]
        if entry.id in refunded:
            assert entry.state == "refunded" and entry.released is None
        else:
            assert entry.state == "released"
            assert entry.released == {"columns": ["p", "i"], "rows": [released[entry.id]]}
            assert released[entry.id] == [pid, *entry.params]  # type: ignore[union-attr]


def test_sigkill_loses_no_reported_charge(tmp_path):
    path = str(tmp_path / "ledger.sqlite")
    with Ledger(path) as ledger:
        ledger.set_budget(DB, "alice", 1000.0, 0.0)
    # kill each child after a different number of charges, while it is in its tight loop
    targets = {"a": 20, "b": 45, "c": 70, "d": 95}
    children = {tag: spawn(RUNNER, path, tag) for tag in targets}
    reported: dict[str, list[int]] = {tag: [] for tag in targets}
    try:
        for tag, child in children.items():
            while len(reported[tag]) < targets[tag]:
                line = child.stdout.readline()
                assert line.startswith("charged "), child.stderr.read()
                reported[tag].append(int(line.split()[1]))
            os.kill(child.pid, signal.SIGKILL)
        for tag, child in children.items():
            # lines written before the kill; read through the same buffered stream as above
            rest = child.stdout.read()
            reported[tag] += [int(x.split()[1]) for x in rest.splitlines()
                              if x.startswith("charged ")]
            assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        reap(children.values())
    with Ledger(path) as ledger:  # opens cleanly: quick_check passed, schema intact
        status = ledger.status(DB, "alice")  # running totals agree with the charges
    in_ledger = {c.id for c in status.history}
    for tag in targets:
        assert set(reported[tag]) <= in_ledger, f"child {tag} lost a reported charge"
        mine = {c.id for c in status.history if c.fingerprint.startswith(f"{tag}-")}
        # at most one charge committed but not yet reported when the kill landed
        assert len(mine) - len(reported[tag]) in (0, 1)


def assert_fails_closed(path, match: str) -> None:
    before = path.read_bytes()
    with pytest.raises(OperationalError, match=match) as info:
        Ledger(path)
    assert str(path) in info.value.message  # the message names the file
    assert path.read_bytes() == before  # never replaced by a fresh ledger


def test_corrupt_file_fails_closed(tmp_path):
    path = tmp_path / "garbage.sqlite"
    path.write_bytes(b"this is not an SQLite database\n" * 200)
    assert_fails_closed(path, "unreadable or corrupt")


def test_corrupt_pages_fail_closed(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.set_budget(DB, "alice", 100.0, 0.0)
        for i in range(400):
            ledger.charge(DB, "alice", fingerprint="x" * 100 + str(i), epsilon=0.01, delta=0.0,
                          mechanism="laplace")
    conn = sqlite3.connect(path)  # fold the WAL back so every page lives in the main file
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(path.read_bytes())
    assert len(data) > 8 * 4096
    data[3 * 4096 : 5 * 4096] = b"\xa5" * (2 * 4096)  # scribble over two b-tree pages
    path.write_bytes(bytes(data))
    assert_fails_closed(path, "corrupt")


def test_missing_table_fails_closed(tmp_path):
    path = tmp_path / "ledger.sqlite"
    with Ledger(path) as ledger:
        ledger.set_budget(DB, "alice", 1.0, 0.0)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE budgets")
    conn.commit()
    conn.close()
    assert_fails_closed(path, "table 'budgets' is missing")


def test_all_tables_missing_fails_closed(tmp_path):
    # a ledger emptied of its tables still carries the dpsql application id: not "new"
    path = tmp_path / "ledger.sqlite"
    Ledger(path).close()
    conn = sqlite3.connect(path)
    for table in ("budgets", "charges", "cache"):
        conn.execute(f"DROP TABLE {table}")
    conn.commit()
    conn.close()
    assert_fails_closed(path, "missing")


def test_foreign_database_fails_closed(tmp_path):
    path = tmp_path / "other.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE budgets (x)")
    conn.commit()
    conn.close()
    assert_fails_closed(path, "not a dpsql privacy ledger")


def test_lock_held_by_another_process_fails_closed(tmp_path):
    path = str(tmp_path / "ledger.sqlite")
    with Ledger(path) as ledger:
        ledger.set_budget(DB, "alice", 1.0, 0.0)
    locker = spawn(LOCKER, path)
    try:
        assert locker.stdout.readline().strip() == "locked", locker.stderr.read()
        with Ledger(path, timeout=0.5) as ledger:  # WAL: reading is still possible
            start = time.monotonic()
            with pytest.raises(OperationalError, match="locked") as info:
                ledger.charge(DB, "alice", fingerprint="q", epsilon=0.1, delta=0.0,
                              mechanism="laplace")
            waited = time.monotonic() - start
            assert not isinstance(info.value, BudgetExhaustedError)
            assert path in info.value.message and "nothing was charged" in info.value.message
            assert 0.4 <= waited < 5
            with pytest.raises(OperationalError, match="locked"):
                ledger.set_budget(DB, "alice", 2.0, 0.0)
            with pytest.raises(OperationalError, match="locked"):
                ledger.cache_put(DB, "alice", "k", b"v")
    finally:
        locker.stdin.close()
        locker.wait(timeout=10)
        reap([locker])
    with Ledger(path) as ledger:
        status = ledger.status(DB, "alice")
        assert status.history == () and status.epsilon_total == 1.0  # nothing happened
        ledger.charge(DB, "alice", fingerprint="q", epsilon=0.1, delta=0.0, mechanism="laplace")
