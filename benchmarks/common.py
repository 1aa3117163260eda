"""Shared pieces of the benchmark parts: settings, the database handles, timing, environment."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import sqlglot

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.metadata import Metadata, load_metadata

from .tpch_data import Dataset

#: FLEX's accuracy setting: epsilon 0.1, delta = 1/n^2 for n = 2,000,000 rows.
EPSILON = 0.1
N_ROWS_FOR_DELTA = 2_000_000
DELTA = 1.0 / N_ROWS_FOR_DELTA**2


@dataclass(frozen=True)
class Settings:
    """How much work each part does (``--smoke`` shrinks everything)."""

    scale: float
    runs: int = 7  # end-to-end runs per query (median), >= 5
    analysis_reps: int = 30  # uncached analyses per query (median)
    draws: int = 100  # noise draws per output cell (accuracy)
    noise_size: int = 5_000_000
    noise_repeats: int = 5
    profile: bool = True
    memory: bool = True  # tracemalloc peak per query (slow: ~6x a run for 187,500 bins)
    epsilon: float = EPSILON
    delta: float = DELTA
    smoke: bool = False

    def at_least(self, n: int, floor: int) -> int:
        """``n`` repetitions, raised to ``floor`` for a steadier median -- except in a smoke
        run, which checks that the pipeline runs, not its numbers."""
        return n if self.smoke else max(n, floor)


@dataclass
class Handles:
    """The dataset plus the connections the parts share (opened once)."""

    dataset: Dataset
    metadata: Metadata
    backend: DuckDBBackend
    raw: duckdb.DuckDBPyConnection
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, dataset: Dataset) -> Handles:
        metadata = load_metadata(dataset.metadata_path)
        # The plain connection and dpsql's backend share one DuckDB database instance (same
        # file, same read-only configuration), so both read the same buffer pool with the same
        # thread count. The plain one is opened first, to switch its progress bar off before
        # the backend locks the instance's configuration.
        raw = duckdb.connect(dataset.db_path, read_only=True)
        raw.execute("SET enable_progress_bar=false")
        backend = DuckDBBackend(dataset.db_path, metadata)
        return cls(dataset, metadata, backend, raw)

    def close(self) -> None:
        self.raw.close()
        self.backend.close()


def importable(name: str) -> bool:
    """Whether an optional package can be imported, without importing it (snsql takes ~1 s).
    ``sys.modules[name] = None`` makes it unimportable (how the tests play a CI without it)."""
    if name in sys.modules and sys.modules[name] is None:
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


#: the most rounds :func:`interleaved` runs to fill its ``min_seconds``
MAX_ROUNDS = 301


def interleaved(fns: Mapping[str, Callable[[], Any]], runs: int, min_seconds: float = 0.0
                ) -> dict[str, list[float]]:
    """Seconds of ``runs`` calls of each function after one warm-up of each (not counted);
    the calls are interleaved and their order rotates each round, so all see the same cache
    state and the same background load. ``min_seconds``: more rounds (up to
    :data:`MAX_ROUNDS`) when ``runs`` rounds would take less, as the warm-up round timed
    them: a few-millisecond query's median over 7 runs moved by 10% from run to run."""
    names = list(fns)
    warm = sum(timed(fns[name])[0] for name in names)
    if min_seconds > 0 and warm > 0:
        runs = max(runs, min(MAX_ROUNDS, math.ceil(min_seconds / warm)))
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(runs):
        for name in names[i % len(names):] + names[: i % len(names)]:
            times[name].append(timed(fns[name])[0])
    return times


def median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


def each_call_seconds(fn: Callable[[int], object], n: int) -> list[float]:
    """Seconds of ``fn(0), ..., fn(n - 1)``, each call timed alone."""
    return [timed(lambda i=i: fn(i))[0] for i in range(n)]


def rates(fn: Callable[[], object], size: int, repeats: int) -> tuple[float, float]:
    """(best, median) items per second of ``fn``, which handles ``size`` items per call, over
    ``repeats`` calls after one untimed warm-up."""
    fn()
    seconds = [timed(fn)[0] for _ in range(repeats)]
    return size / min(seconds), size / statistics.median(seconds)


def rejection(err: BaseException) -> dict[str, str]:
    """How dpsql refused a query: the error class (and its PEP 249 parent) and message."""
    parents = [c.__name__ for c in type(err).__mro__[1:] if c.__module__.startswith("dpsql")]
    return {"class": type(err).__name__, "parent": parents[0] if parents else "",
            "message": str(err)}


def clean_float(x: float | None) -> float | None:
    """JSON-safe float (NaN/inf become None)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def environment(settings: Settings, dataset: Dataset | None) -> dict[str, Any]:
    """What the numbers were measured on."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=Path(__file__).resolve().parent, check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "duckdb": duckdb.__version__,
        "sqlglot": sqlglot.__version__,
        "numpy": np.__version__,
        "git_commit": commit,
        "scale": settings.scale,
        "smoke": settings.smoke,
        "epsilon": settings.epsilon,
        "delta": settings.delta,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # other processes' load skews timings on a shared 2-core machine: keep it on record
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }
    if dataset is not None:
        env["generator"] = dataset.generator
        env["generate_seconds"] = round(dataset.generate_seconds, 2)
        env["metadata_seconds"] = round(dataset.metadata_seconds, 2)
        env["rows"] = dict(dataset.rows)
    return env


def write_json(path: Path, data: Mapping[str, Any]) -> Path:
    """Write ``data`` as indented JSON (numpy values and NaN made JSON-safe); returns path."""
    path.write_text(json.dumps(to_jsonable(data), indent=2) + "\n", encoding="utf-8")
    return path


def uptime() -> str | None:
    """The ``uptime`` line (load averages over 1, 5 and 15 minutes) for the record."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False,
                              timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def to_jsonable(value: Any) -> Any:
    """Recursively turn numpy scalars and tuples into plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float):
        return clean_float(value)
    return value
