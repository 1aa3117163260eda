"""What the privacy ledger costs a DB-API query: uncharged vs charged vs cached, side by side.

    python -m benchmarks.dbapi_overhead [--n 300] [--rows 10000] [--dir DIR] [--json]

One run, one database, one query shape (``SELECT COUNT(*) ... WHERE age > ?``), three paths:

* uncharged: a connection without a ledger (analysis + DuckDB + noise; nothing durable);
* charged: a connection with a ledger; every execution is a cache miss (distinct parameter), so
  it pays a durable ``charge`` (BEGIN IMMEDIATE, synchronous=FULL) before running and a durable
  ``cache_put`` after;
* cached: the same request repeated: one ``cache_get`` and a JSON decode, no DuckDB, no charge.

Targets (the driver's issue): cached <= 1 ms median; charged - uncharged <= 3 ms median.
The charged path is dominated by two fsyncs, so ``--dir`` picks the filesystem that matters.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import duckdb

import dpsql
from benchmarks.common import each_call_seconds
from dpsql.accounting import MAX_EPSILON, Ledger

SQL = "SELECT COUNT(*) AS n FROM people WHERE age > ?"
METADATA = """\
tables:
  people:
    columns:
      id: {max_freq: 1, type: BIGINT}
      age: {bounds: [0, 120], type: BIGINT}
"""


def median_ms(fn: Callable[[int], object], n: int) -> float:
    """Median wall time of fn(0..n-1) in milliseconds."""
    return statistics.median(each_call_seconds(fn, n)) * 1e3


def run(n: int, rows: int, directory: Path) -> dict[str, float]:
    """Build the database and ledger in ``directory`` and time the three paths."""
    db = directory / "bench.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE people AS SELECT i AS id, (i * 7919) % 100 AS age "
                f"FROM range({int(rows)}) t(i)")
    con.close()
    metadata = directory / "bench.yaml"
    metadata.write_text(METADATA)
    ledger = directory / "ledger.sqlite"
    with Ledger(ledger) as book:
        book.set_budget(db, "bench", MAX_EPSILON, 0.0)

    with (dpsql.connect(db, metadata, analyst="bench", ledger=None, epsilon=0.01) as plain,
          dpsql.connect(db, metadata, analyst="bench", ledger=ledger, epsilon=0.01) as charged):
        plain_cur, charged_cur = plain.cursor(), charged.cursor()
        for cur in (plain_cur, charged_cur):  # warm up: analysis memo, DuckDB caches
            cur.execute(SQL, [-1])
        charged_cur.execute(SQL, [-2])  # the request the cached path repeats
        assert charged_cur.execute(SQL, [-2]).release.cached

        # The same distinct parameters on both paths, so only the ledger differs; on the
        # charged connection each one is a cache miss.
        results = {
            "uncharged_ms": median_ms(lambda i: plain_cur.execute(SQL, [i]), n),
            "charged_ms": median_ms(lambda i: charged_cur.execute(SQL, [i]), n),
            "cached_ms": median_ms(lambda i: charged_cur.execute(SQL, [-2]), n),
        }
        history = charged.budget.history
        assert len(history) == n + 2, "every charged execution must be exactly one charge"
    results["ledger_adds_ms"] = results["charged_ms"] - results["uncharged_ms"]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="samples per path")
    parser.add_argument("--rows", type=int, default=10_000, help="rows in the table")
    parser.add_argument("--dir", default=None, help="directory for the database and ledger")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = run(args.n, args.rows, Path(tmp))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    lines = [
        ("uncharged (no ledger)", results["uncharged_ms"], ""),
        ("charged (durable charge + cache put)", results["charged_ms"], ""),
        ("  ledger adds", results["ledger_adds_ms"], "<= 3"),
        ("cached hit", results["cached_ms"], "<= 1"),
    ]
    print(f"{'path':<38} {'median ms':>10}  target")
    for name, value, target in lines:
        print(f"{name:<38} {value:>10.4f}  {target}")


if __name__ == "__main__":
    main()
