"""Part ``server``: what a `dpsql serve` round trip adds to a query, and how many it answers.

On the demo shop (:mod:`dpsql.demo`: 1M orders, built once in ``$DPSQL_HOME/demo`` or
``~/.cache/dpsql/demo``; ``--smoke`` builds a 20,000-order shop in the data folder), with a
real ``python -m dpsql.cli.main serve`` process on loopback and psycopg 3 clients. The query is
one small count, ``SELECT COUNT(*) AS n FROM orders WHERE order_cost > <p>``, at epsilon 0.01.
A fresh ledger per run (in the data folder, on the disk the repository is on: its fsyncs are
part of every uncached answer) gives the server's analyst and the in-process one a budget of
``MAX_EPSILON``, so nothing is refused.

* **latency**: the same query in-process (``dpsql.connect(db, metadata, analyst=...)`` with the
  same ledger file, a different analyst) and through psycopg to the server, interleaved (the
  order rotates each round), ``rounds`` times. Uncached: every round uses a new parameter, so
  both sides pay the full release (analysis memo warm, DuckDB, noise, the durable charge, the
  audit row and the cache write); the figure is the median over rounds of ``server_ms -
  inprocess_ms`` (goal <= 1 ms). Cached: the same parameter again on both sides (a ledger read,
  no fsync): the same difference without the fsyncs' variance, beside ``SHOW server_version``
  through the server (no query work: the floor of a round trip, wire and thread hops). A
  ledger-free in-process connection (``ledger=None``) runs in the uncached rounds, to show
  what the ledger costs.
* **throughput**: ``clients`` (16) client *processes* (so the clients' own Python does not
  share one GIL and limit the measurement; on 2 cores they do share the CPUs with the
  server), each with its own psycopg connection, start together and send the query back to
  back for ``duration`` seconds: uncached (a new parameter each time) then cached (one
  parameter per client, answered once before the clock starts). Queries/s = queries completed
  inside the window / window (goal >= 300 uncached/s). The server's CPU seconds over the window
  (``/proc/<pid>/stat``) per query say whether it is CPU-bound.
* **the ledger's disk**: the median time of one durable SQLite commit (WAL, synchronous=FULL,
  as the ledger) in the same folder before and after, since an uncached release makes two
  (the charge, the audit log's release row, the cache entry) and the ledger serialises them;
  and, outside ``--smoke`` and only as a diagnostic, the uncached throughput again with the
  ledger on ``/dev/shm`` (tmpfs: fsync is free), which shows what those commits cost.

Writes ``server.json``; timings move with other processes' load, so the load averages are
recorded at the start and end of each measurement.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import Settings, environment, uptime, write_json
from .server_load import (
    LATENCY_CACHED,
    QUERIES,
    durable_commit_ms,
    load_average,
    median_ms,
    param,
    percentile,
    throughput,
)

EPSILON = 0.01
PASSWORD = "bench-secret"
SERVER_ANALYST, LOCAL_ANALYST = "bench", "local"
LATENCY_GOAL_MS = 1.0
WARMUP = 999_998  # the latency part's warm-up parameter number (server_load.param)
THROUGHPUT_GOAL = 300.0
WORKERS = 8  # the server's query threads (`dpsql serve --workers`, its default)
FULL = {"rounds": 300, "clients": 16, "duration": 20.0}
SMOKE = {"rounds": 10, "clients": 4, "duration": 1.0}
SMOKE_SHOP = {"customers": 2_000, "orders": 20_000, "products": 100}


@dataclass(frozen=True)
class Shop:
    """The demo database and, in a scratch folder, its metadata naming a fresh ledger."""

    database: Path
    metadata: Path
    ledger: Path
    rows: dict[str, int]


def prepare(settings: Settings, data_dir: Path, work: Path, log=print) -> Shop:
    """The demo shop (built if missing) and a ledger with the two analysts in ``work``."""
    from dpsql.accounting import Ledger
    from dpsql.accounting.units import MAX_EPSILON
    from dpsql.backends import ledger_identity
    from dpsql.demo import create_demo
    from dpsql.metadata import dump_metadata, load_metadata

    if settings.smoke:
        demo = create_demo(data_dir / "demo-smoke", **SMOKE_SHOP)
    else:
        log("server: the demo shop (built once, ~1M orders)")
        demo = create_demo()
    work = work.resolve()
    ledger = work / "ledger.sqlite"
    metadata = work / "shop.yaml"
    md = dataclasses.replace(load_metadata(demo.metadata), ledger=str(ledger), path=metadata)
    metadata.write_text(dump_metadata(md), encoding="utf-8")
    database_id = ledger_identity("duckdb", str(demo.database), md)
    with Ledger(ledger) as book:
        book.add_analyst(SERVER_ANALYST, PASSWORD, default_epsilon=EPSILON)
        for analyst in (SERVER_ANALYST, LOCAL_ANALYST):
            book.set_budget(database_id, analyst, MAX_EPSILON, 0.0)
    rows = {"customers": demo.customers, "orders": demo.orders, "products": demo.products}
    return Shop(demo.database, metadata, ledger, rows)


@dataclass
class ServerProcess:
    process: subprocess.Popen
    port: int
    log: collections.deque[str]

    def dsn(self) -> str:
        return (f"host=127.0.0.1 port={self.port} user={SERVER_ANALYST} password={PASSWORD} "
                "dbname=shop sslmode=disable")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def launch(shop: Shop, workers: int = WORKERS) -> ServerProcess:
    """Start ``dpsql serve`` on a free loopback port; wait (<= 60 s) until it listens."""
    cmd = [sys.executable, "-m", "dpsql.cli.main", "serve", "-m", str(shop.metadata), "-d",
           str(shop.database), "--ledger", str(shop.ledger), "--listen", "127.0.0.1:0",
           "--workers", str(workers)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    said: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError(f"dpsql serve exited with {proc.wait()} before listening: "
                               + "".join(said[-5:]))
        said.append(line)
        m = re.search(r" on 127\.0\.0\.1:(\d+) ", line)
        if m:  # keep draining stderr so the server never blocks on a full pipe
            tail: collections.deque[str] = collections.deque(maxlen=100)
            threading.Thread(target=tail.extend, args=(proc.stderr,), daemon=True).start()
            return ServerProcess(proc, int(m.group(1)), tail)
    proc.kill()
    raise RuntimeError("dpsql serve did not listen within 60 s")


def _median_ci95(values: list[float]) -> list[float]:
    """A 95% bootstrap interval (ms) of the median of ``values`` (seconds): how far the
    reported median may be from the true one, given the rounds' spread."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(1000))
    return [meds[25] * 1e3, meds[974] * 1e3]


def latency(shop: Shop, server: ServerProcess, rounds: int) -> dict[str, Any]:
    """In-process (ledger-free and charged) against the server, interleaved (module doc)."""
    import psycopg

    import dpsql
    from dpsql.metadata import load_metadata

    md = load_metadata(shop.metadata)
    notices: list[str] = []
    with (psycopg.connect(server.dsn(), autocommit=True) as pg,
          dpsql.connect(shop.database, md, analyst=LOCAL_ANALYST, epsilon=EPSILON) as local,
          dpsql.connect(shop.database, dataclasses.replace(md, ledger=None),
                        analyst=LOCAL_ANALYST, ledger=None, epsilon=EPSILON) as plain):
        pg.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        pg_cur, local_cur, plain_cur = pg.cursor(), local.cursor(), plain.cursor()
        sql_pg, sql_q = QUERIES["small"].format("%s"), QUERIES["small"].format("?")

        def run_server(p: float, cached: bool) -> None:
            notices.clear()
            pg_cur.execute(sql_pg, [p])
            pg_cur.fetchall()
            if ("repeated query" in " ".join(notices)) != cached:
                raise AssertionError(f"server: expected cached={cached}, notices {notices}")

        def run_local(p: float, cached: bool) -> None:
            local_cur.execute(sql_q, [p])
            local_cur.fetchall()
            release = local_cur.release
            if release is None or release.cached != cached:
                raise AssertionError(f"in-process: expected cached={cached}")

        def run_plain(p: float, cached: bool) -> None:
            plain_cur.execute(sql_q, [p])
            plain_cur.fetchall()

        def run_show(p: float, cached: bool) -> None:
            pg_cur.execute("SHOW server_version")
            pg_cur.fetchall()

        paths = {"server": run_server, "inprocess": run_local, "inprocess_no_ledger": run_plain,
                 "server_show": run_show}
        for fn in paths.values():  # warm up: connections, analysis memo, DuckDB caches
            fn(param("small", WARMUP), False)
        cached_p = param("small", LATENCY_CACHED)
        run_server(cached_p, False)
        run_local(cached_p, False)
        out: dict[str, Any] = {}
        for mode in ("uncached", "cached"):
            cached = mode == "cached"
            # nothing to cache without a ledger; the floor (SHOW) is measured once
            names = ["server", "inprocess", "server_show" if cached else "inprocess_no_ledger"]
            times: dict[str, list[float]] = {n: [] for n in names}
            load = load_average()
            for i in range(rounds):
                p = cached_p if cached else param("small", i)
                for name in names[i % 3:] + names[: i % 3]:
                    start = time.perf_counter()
                    paths[name](p, cached)
                    times[name].append(time.perf_counter() - start)
            diffs = [s - q for s, q in zip(times["server"], times["inprocess"], strict=True)]
            entry = {f"{n}_ms": median_ms(t) for n, t in times.items() if t}
            entry.update({
                "added_ms": median_ms(diffs),
                "added_ms_p10_p90": [percentile(diffs, 0.1) * 1e3, percentile(diffs, 0.9) * 1e3],
                "added_ms_ci95": _median_ci95(diffs),
                "rounds": rounds,
                "load_average_start": load, "load_average_end": load_average(),
            })
            if not cached:
                entry["ledger_adds_ms"] = median_ms(
                    [q - p for q, p in zip(times["inprocess"], times["inprocess_no_ledger"],
                                           strict=True)])
            out[mode] = entry
    out["goal_ms"] = LATENCY_GOAL_MS
    out["met"] = out["uncached"]["added_ms"] <= LATENCY_GOAL_MS
    return out


def _tmpfs() -> Path | None:
    """/dev/shm when it is a tmpfs (where fsync costs nothing), else None."""
    try:
        mounts = Path("/proc/mounts").read_text().split("\n")
    except OSError:
        return None
    ok = any(m.split()[1:3] == ["/dev/shm", "tmpfs"] for m in mounts if m.strip())
    return Path("/dev/shm") if ok else None


def run(settings: Settings, data_dir: Path, log=print) -> dict[str, Any]:
    size = SMOKE if settings.smoke else FULL
    clients, duration = int(size["clients"]), float(size["duration"])
    data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="server-", dir=data_dir) as tmp:
        shop = prepare(settings, data_dir, Path(tmp), log)
        commit_before = durable_commit_ms(Path(tmp), 5 if settings.smoke else 50)
        server = launch(shop)
        try:
            log(f"server: latency, {size['rounds']} interleaved rounds")
            lat = latency(shop, server, int(size["rounds"]))
            runs = []
            for query, mode in (("small", "uncached"), ("small", "cached"), ("scan", "uncached")):
                log(f"server: throughput {query} {mode}, {clients} clients, {duration:g} s")
                runs.append(throughput(server, clients, duration, mode, query))
        finally:
            server.stop()
        commit_after = durable_commit_ms(Path(tmp), 5 if settings.smoke else 50)
    diagnostic = None
    shm = _tmpfs()
    if shm is not None and not settings.smoke:
        # Not the goal's figure: the same uncached run with the ledger on a tmpfs, where
        # fsync is free, shows what the ledger's durable commits cost the throughput.
        with tempfile.TemporaryDirectory(prefix="dpsql-server-", dir=shm) as tmp:
            log(f"server: diagnostic, uncached with the ledger on {shm} (no real fsync)")
            server = launch(prepare(settings, data_dir, Path(tmp), log))
            try:
                diagnostic = throughput(server, clients, duration, "uncached")
            finally:
                server.stop()
    uncached = runs[0]["queries_per_s"]
    env = environment(settings, None)
    del env["scale"], env["delta"]
    env.update({"load_average_end": load_average(), "uptime_end": uptime(),
                "shared_machine": "2 CPUs shared with other agents' work (see load averages)"})
    return {
        "summary": {
            "query": QUERIES["small"].format("<p>"), "epsilon": EPSILON, "rows": shop.rows,
            "server_workers": WORKERS, "client_kind": "processes (psycopg 3, one connection each)",
            "latency_added_ms": lat["uncached"]["added_ms"], "latency_goal_ms": LATENCY_GOAL_MS,
            "latency_met": lat["met"],
            "uncached_per_s": uncached, "cached_per_s": runs[1]["queries_per_s"],
            "throughput_goal_per_s": THROUGHPUT_GOAL, "throughput_met": uncached >= THROUGHPUT_GOAL,
            "durable_commit_ms": [commit_before, commit_after],
        },
        "latency": lat, "throughput": runs, "ledger_on_tmpfs": diagnostic, "environment": env,
    }


def write(settings: Settings, data_dir: Path, out: Path, log=print) -> list[Path]:
    """Run the part and write ``<out>/server.json``; returns its path."""
    from .common import importable

    if not importable("psycopg"):
        print("server: skipped: psycopg is not installed", flush=True)
        return []
    start = time.perf_counter()
    data = run(settings, data_dir, log)
    data["environment"]["part_seconds"] = round(time.perf_counter() - start, 2)
    return [write_json(out / "server.json", data)]
