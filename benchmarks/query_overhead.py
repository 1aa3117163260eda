"""One overhead query, raw vs dpsql, with CPU times: for a machine that is not quiet.

``python -m benchmarks.query_overhead --data benchmarks/data/sf10-tpchgen --query Q21``

The overhead part (:mod:`benchmarks.overhead`) runs every query of its corpus and reports wall
clock only, which other processes' load inflates. This times one query of that corpus the same
way (raw DuckDB, ``Session.run`` with its memo emptied, the exact read alone, and the fixed
overhead over a replaying backend), interleaved with the order rotating each round, and reports
for each the median wall time, the median CPU time of the whole process
(``time.process_time``: DuckDB's worker threads included) and of the calling thread
(``time.thread_time``: Python's own work, what dpsql adds outside DuckDB).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.replay import ReplayBackend
from dpsql.execute.exact import read_exact
from dpsql.metadata import load_metadata
from dpsql.session import Session

from .common import DELTA, EPSILON
from .queries import overhead_corpus

#: (wall, process CPU, thread CPU) seconds of one call
Sample = tuple[float, float, float]


def sample(fn: Callable[[], Any]) -> Sample:
    """Wall, process CPU and thread CPU seconds of one call of ``fn``."""
    w, p, t = time.perf_counter(), time.process_time(), time.thread_time()
    fn()
    return time.perf_counter() - w, time.process_time() - p, time.thread_time() - t


def medians(samples: list[Sample]) -> dict[str, float]:
    """Median wall / process / thread milliseconds."""
    return {name: statistics.median(s[i] for s in samples) * 1e3
            for i, name in enumerate(("wall_ms", "cpu_ms", "thread_ms"))}


def measure(data: Path, query: str, runs: int, fixed_runs: int) -> dict[str, Any]:
    """The query's timings on the database and metadata in ``data`` (see module docstring)."""
    sql = dict(overhead_corpus())[query]
    db, md = str(data / "tpch.duckdb"), load_metadata(data / "tpch.yaml")
    raw = duckdb.connect(db, read_only=True)
    raw.execute("SET enable_progress_bar=false")
    backend = DuckDBBackend(db, md)
    engine = Session(md, backend)
    compiled = engine.prepare(sql).compiled

    def run_dpsql() -> None:
        engine._prepared.clear()
        engine.run(sql, epsilon=EPSILON, delta=DELTA)

    fns: dict[str, Callable[[], Any]] = {
        "raw": lambda: raw.execute(sql).fetchall(),
        "dpsql": run_dpsql,
        "exact": lambda: read_exact(backend, compiled, []),
    }
    for fn in fns.values():  # warm-up
        fn()
    samples: dict[str, list[Sample]] = {name: [] for name in fns}
    names = list(fns)
    for i in range(runs):
        for name in names[i % len(names):] + names[: i % len(names)]:
            samples[name].append(sample(fns[name]))
    replay = ReplayBackend(backend)
    fixed = Session(md, replay)
    fixed.run(sql, epsilon=EPSILON, delta=DELTA)  # warm-up: the replay reads once

    def run_fixed() -> None:
        fixed._prepared.clear()
        fixed.run(sql, epsilon=EPSILON, delta=DELTA)

    samples["fixed"] = [sample(run_fixed) for _ in range(fixed_runs)]
    out: dict[str, Any] = {"query": query, "data": str(data), "runs": runs,
                           "load_before": os.getloadavg()[0]}
    out.update({name: medians(s) for name, s in samples.items()})
    out["ratio_wall"] = out["dpsql"]["wall_ms"] / out["raw"]["wall_ms"]
    out["ratio_cpu"] = out["dpsql"]["cpu_ms"] / out["raw"]["cpu_ms"]
    out["load_after"] = os.getloadavg()[0]
    backend.close()
    raw.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="a directory holding tpch.duckdb and tpch.yaml")
    parser.add_argument("--query", default="Q21", help="a name of the overhead corpus")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--fixed-runs", type=int, default=15)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.data, args.query, args.runs, args.fixed_runs), indent=1))


if __name__ == "__main__":
    main()
