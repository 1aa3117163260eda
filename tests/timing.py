"""Measure the suite's cost in CPU time, which a shared machine's load does not inflate the way
it inflates wall time (not a test module; nothing loads it unless asked).

Run the suite with the plugin, then summarise::

    DPSQL_TIMING_DIR=/tmp/timing python -m pytest -q -n 2 -p tests.timing
    python -m tests.timing /tmp/timing

Per test it records wall time, the worker's own CPU time (every thread: DuckDB's too) and the
CPU time of the worker's child processes (the Spark JVM, servers, CLI runs), one JSON line per
test in ``<dir>/<worker>.jsonl``; the first line holds the worker's collection CPU time. The
summary gives CPU per folder (the Spark group apart), per worker, and the wall-time estimate
for two idle cores: collection + total / 2 (the run is CPU-bound and xdist balances it; the
Spark group, the largest xdist unit, is dispatched first). Measured on a loaded machine CPU time
inflates too, less than wall time: on 2026-11-26 the estimate was 210 s for a suite that took
194 s in a clean CI run.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

_TICKS = os.sysconf("SC_CLK_TCK")
_state: dict = {"pids": None, "scanned": 0.0, "out": None, "t0": 0.0}


def _children_cpu() -> float:
    """CPU seconds of the live child processes plus those already reaped."""
    me = str(os.getpid())
    now = time.monotonic()
    if _state["pids"] is None or now - _state["scanned"] > 5:  # children come and go
        pids = []
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                pids.append(name)
        _state["pids"], _state["scanned"] = pids, now
    total = 0.0
    for pid in _state["pids"]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / _TICKS
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total + reaped.ru_utime + reaped.ru_stime


def pytest_sessionstart(session: pytest.Session) -> None:
    _state["t0"] = time.perf_counter()


def pytest_collection_finish(session: pytest.Session) -> None:
    folder = Path(os.environ.get("DPSQL_TIMING_DIR", "timing"))
    folder.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _state["out"] = (folder / f"{worker}.jsonl").open("w")
    _state["out"].write(json.dumps({"collect_cpu": time.process_time()}) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    wall, cpu, child = time.perf_counter(), time.process_time(), _children_cpu()
    yield
    if _state["out"] is not None:
        _state["out"].write(json.dumps({
            "id": item.nodeid, "wall": time.perf_counter() - wall,
            "cpu": time.process_time() - cpu, "child": _children_cpu() - child}) + "\n")
        _state["out"].flush()


def summarise(folder: Path) -> str:
    groups: collections.Counter[str] = collections.Counter()
    workers: collections.Counter[str] = collections.Counter()
    collect = 0.0
    for path in sorted(folder.glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        collect = max(collect, lines[0]["collect_cpu"])
        for row in lines[1:]:
            cost = row["cpu"] + row["child"]
            parts = row["id"].split("::")[0].split("/")
            group = "spark group" if row["id"].endswith("@spark") else (
                parts[1] if len(parts) > 2 else "tests/*.py")
            groups[group] += cost
            workers[path.stem] += cost
    total = sum(groups.values())
    out = [f"{name:<20} {cost:7.1f} s" for name, cost in groups.most_common()]
    out += [f"{'TOTAL':<20} {total:7.1f} s CPU; collection {collect:.1f} s per worker",
            *(f"worker {w}: {c:.1f} s" for w, c in sorted(workers.items())),
            f"two idle cores: about {collect + total / 2:.0f} s"]
    return "\n".join(out)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1] if len(sys.argv) > 1 else "timing")))
