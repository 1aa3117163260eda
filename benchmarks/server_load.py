"""The load side of the ``server`` part (:mod:`benchmarks.server`): concurrent client processes
and the cost of one durable SQLite commit on the ledger's disk."""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import ServerProcess

#: The queries; ``{}`` is the parameter marker (``%s`` for psycopg, ``?`` for dpsql). "small":
#: the goals' small count, over the 50,000 customers; "scan": a count over the 1M orders, where
#: DuckDB's scan dominates. Parameter ``i`` of a query is :func:`param`: a distinct value for
#: every ``i`` (so a new ``i`` is a new release, never a cache hit), always strictly inside
#: the column's stored range, so DuckDB's zone maps cannot answer the filter without a scan.
QUERIES = {
    "small": "SELECT COUNT(*) AS n FROM customers WHERE age > {}",
    "scan": "SELECT COUNT(*) AS n FROM orders WHERE order_cost > {}",
}
#: (lowest value, values per step): age 18-100, order_cost 3.33-763.04 in the demo shop
_PARAMS = {"small": (18.5, 80), "scan": (4.5, 700)}
# Parameter numbers used: latency rounds 0..rounds-1 (both sides the same: the same work);
# latency's cached request LATENCY_CACHED; client w: warm-up WARM + w, cached CACHED + w,
# uncached (w + 1) * PER_CLIENT + i.
LATENCY_CACHED, WARM, CACHED, PER_CLIENT = 999_999, 800_000, 900_000, 1_000_000


def param(query: str, i: int) -> float:
    """The ``i``-th parameter of ``query`` (see QUERIES)."""
    low, step = _PARAMS[query]
    return low + i % step + (i // step) * 1e-6


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _client(dsn: str, worker: int, mode: str, query: str, duration: float, barrier: Any,
            results: Any) -> None:
    """One throughput client process (module doc): warm up, wait for the others, then send
    queries back to back for ``duration`` seconds and report what completed in the window."""
    import psycopg

    cached_p = param(query, CACHED + worker)
    sql = QUERIES[query].format("%s")
    count, errors, wrong_cache = 0, 0, 0
    latencies: list[float] = []
    first_error = ""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            notices: list[str] = []
            conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            cur = conn.cursor()
            for p in (cached_p, param(query, WARM + worker)):  # the memo, the cached entry
                cur.execute(sql, [p])
                cur.fetchall()
            barrier.wait(120)
            start = time.perf_counter()
            deadline = start + duration
            cpu = time.process_time()
            i = 1
            while True:
                p = cached_p if mode == "cached" else param(query, (worker + 1) * PER_CLIENT + i)
                i += 1
                notices.clear()
                t0 = time.perf_counter()
                ok = True
                try:
                    cur.execute(sql, [p])
                    cur.fetchall()
                except psycopg.Error as exc:
                    ok = False
                    errors += 1
                    first_error = first_error or str(exc)
                t1 = time.perf_counter()
                if t1 > deadline:
                    break
                if not ok:
                    continue
                count += 1
                latencies.append(t1 - t0)
                if ("repeated query" in " ".join(notices)) != (mode == "cached"):
                    wrong_cache += 1
            cpu = time.process_time() - cpu
    except Exception as exc:  # reported to the parent, which fails the part
        results.put({"worker": worker, "fatal": f"{type(exc).__name__}: {exc}"})
        barrier.abort()
        return
    results.put({"worker": worker, "count": count, "errors": errors,
                 "first_error": first_error, "wrong_cache": wrong_cache,
                 "latencies": latencies, "cpu_seconds": cpu})


def throughput(server: ServerProcess, clients: int, duration: float, mode: str,
               query: str = "small") -> dict[str, Any]:
    """``clients`` processes sending ``query`` (QUERIES), ``mode`` uncached or cached, back to
    back for ``duration`` seconds."""
    ctx = mp.get_context("spawn")  # no fork of a parent holding DuckDB and psycopg state
    barrier = ctx.Barrier(clients + 1)
    results = ctx.Queue()
    procs = [ctx.Process(target=_client, daemon=True,
                         args=(server.dsn(), w, mode, query, duration, barrier, results))
             for w in range(clients)]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(120)
    except threading.BrokenBarrierError:
        fatal = [results.get(timeout=5) for _ in range(results.qsize())]
        raise RuntimeError(f"server throughput ({mode}): the clients did not start: "
                           f"{fatal[:1]} {''.join(list(server.log)[-5:])}") from None
    load, cpu0, t0 = load_average(), server.cpu_seconds(), time.perf_counter()
    time.sleep(duration)
    cpu1, t1 = server.cpu_seconds(), time.perf_counter()
    got = [results.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(30)
    fatal = [g["fatal"] for g in got if "fatal" in g]
    if fatal:
        raise RuntimeError(f"server throughput ({mode}): a client failed: {fatal[0]}")
    total = sum(g["count"] for g in got)
    lat = [x for g in got for x in g["latencies"]]
    window = t1 - t0
    return {
        "mode": mode, "query": query, "sql": QUERIES[query].format("<p>"), "clients": clients,
        "duration_s": round(window, 3), "queries": total,
        "queries_per_s": total / duration,
        "per_client_queries": [g["count"] for g in sorted(got, key=lambda g: g["worker"])],
        "latency_ms": {"median": median_ms(lat) if lat else None,
                       "p90": percentile(lat, 0.9) * 1e3 if lat else None,
                       "p99": percentile(lat, 0.99) * 1e3 if lat else None},
        "server_cpu_s": round(cpu1 - cpu0, 3),
        "server_cpu_ms_per_query": (cpu1 - cpu0) * 1e3 / total if total else None,
        "clients_cpu_ms_per_query": (sum(g["cpu_seconds"] for g in got) * 1e3 / total
                                     if total else None),
        "errors": sum(g["errors"] for g in got),
        "first_error": next((g["first_error"] for g in got if g["first_error"]), ""),
        "wrong_cache_state": sum(g["wrong_cache"] for g in got),
        "load_average_start": load, "load_average_end": load_average(),
    }


def durable_commit_ms(folder: Path, n: int) -> float:
    """Median ms of a one-row ``BEGIN IMMEDIATE ... COMMIT`` in a scratch SQLite file in
    ``folder`` with the ledger's pragmas (WAL, synchronous=FULL): what each of the ledger's
    durable writes costs on that disk now (an uncached release makes two)."""
    import sqlite3

    path = folder / "commit-probe.sqlite"
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
        con.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        times = []
        for i in range(n):
            start = time.perf_counter()
            con.execute("BEGIN IMMEDIATE")
            con.execute("INSERT INTO t VALUES (?)", (i,))
            con.execute("COMMIT")
            times.append(time.perf_counter() - start)
    finally:
        con.close()
    return median_ms(times)
