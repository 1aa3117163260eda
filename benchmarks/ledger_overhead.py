"""Per-query overhead of the privacy ledger: a durable charge and a cache hit, vs a no-op.

    python -m benchmarks.ledger_overhead [--n 500] [--dir DIR] [--json]

Targets (docs/design.md, "Budget and accounting"): charge <= 3 ms, cache hit <= 1 ms
(median).
``--dir`` chooses the filesystem (the charge cost is dominated by its fsync); default: a temp dir.
Also reports how long opening a ledger with many charges takes (it runs PRAGMA quick_check).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import each_call_seconds
from dpsql.accounting import Ledger

DB = "/bench/shop.duckdb"


def median_ms(fn: Callable[[int], object], n: int) -> float:
    """Median wall time of fn(0..n-1) in milliseconds."""
    return statistics.median(each_call_seconds(fn, n)) * 1e3


def run(n: int, directory: str) -> dict[str, float]:
    path = Path(directory) / "ledger-bench.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    with Ledger(path) as ledger:
        ledger.set_budget(DB, "alice", 1_000_000.0, 1e-3)
        payload = b"x" * 256  # a typical pickled one-row answer
        ledger.cache_put(DB, "alice", "hit", payload)

        def charge(i: int) -> object:
            return ledger.charge(DB, "alice", fingerprint=f"q{i}", epsilon=0.01, delta=1e-12,
                                 mechanism="laplace")

        def cache_hit(i: int) -> object:
            return ledger.cache_get(DB, "alice", "hit")

        def noop(i: int) -> object:
            return None

        results = {
            "noop_ms": median_ms(noop, n),
            "charge_ms": median_ms(charge, n),
            "cache_hit_ms": median_ms(cache_hit, n),
            "cache_put_ms": median_ms(
                lambda i: ledger.cache_put(DB, "alice", f"k{i}", payload), n
            ),
        }
        for i in range(10_000 - n):  # grow the ledger to 10k charges, then time opening it
            charge(n + i)
        results["status_10k_ms"] = median_ms(lambda i: ledger.status(DB, "alice"), 5)
    start = time.perf_counter()
    Ledger(path).close()
    results["open_10k_ms"] = (time.perf_counter() - start) * 1e3
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="samples per measurement")
    parser.add_argument("--dir", default=None, help="directory for the ledger file")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = run(args.n, args.dir or tmp)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'operation':<28}{'median ms':>12}{'target':>10}")
    rows = [
        ("no-op baseline", results["noop_ms"], ""),
        ("charge (durable commit)", results["charge_ms"], "<= 3"),
        ("cache hit", results["cache_hit_ms"], "<= 1"),
        ("cache put (durable commit)", results["cache_put_ms"], ""),
        ("status, 10k charges", results["status_10k_ms"], ""),
        ("open, 10k charges (once)", results["open_10k_ms"], ""),
    ]
    for name, value, target in rows:
        print(f"{name:<28}{value:>12.4f}{target:>10}")


if __name__ == "__main__":
    main()
