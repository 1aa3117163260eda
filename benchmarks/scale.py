"""Part ``scale``: time against rows for a two-table join count and a grouped SUM.

On the PUMS-shaped databases of :mod:`benchmarks.synthetic` (``pums`` and ``jobs``, both with
``rows`` rows) at 1M, 10M and 50M rows: raw DuckDB and dpsql end to end, timed exactly as in
the ``overhead`` part (:func:`benchmarks.overhead.one_query`: interleaved runs after a warm-up,
a fresh Engine per dpsql run so the analysis is uncached), median of ``runs`` (>= 3).
Writes ``scale.json`` and, when matplotlib is installed, ``scale.png`` beside it (log-log
time against rows, one panel per query).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import synthetic
from .common import Handles, Settings, environment, importable, uptime, write_json
from .overhead import one_query

QUERIES: tuple[tuple[str, str], ...] = (
    ("join_count", "SELECT COUNT(*) AS n FROM pums AS p JOIN jobs AS j ON p.pid = j.pid"),
    ("grouped_sum", "SELECT educ, SUM(income) AS total FROM pums GROUP BY educ"),
)
FULL_ROWS = (1_000_000, 10_000_000, 50_000_000)
SMOKE_ROWS = (10_000, 20_000)
MIN_RUNS = 3
PLOT_HINT = "matplotlib is not installed (pip install -e '.[bench]')"


def run(settings: Settings, data_dir: Path, log=print) -> dict[str, Any]:
    sizes = SMOKE_ROWS if settings.smoke else FULL_ROWS
    timing = replace(settings, runs=max(settings.runs, MIN_RUNS), memory=False,
                     analysis_reps=min(settings.analysis_reps, 5))
    points = []
    for rows in sizes:
        dataset = synthetic.ensure(rows, data_dir, log=log)
        log(f"scale: {rows:,} rows ({timing.runs} runs per query)")
        handles = Handles.open(dataset)
        load = os.getloadavg()
        try:
            for name, sql in QUERIES:
                q = one_query(name, sql, handles, timing, log)
                keep = ("name", "sql", "status", "raw_ms", "dpsql_ms", "ratio", "exact_ms",
                        "analysis_ms", "noise_ms", "mechanism", "raw_ms_all", "dpsql_ms_all",
                        "rejection")
                points.append({"rows": rows, **{k: q[k] for k in keep if k in q},
                               "generate_seconds": round(dataset.generate_seconds, 1),
                               "load_average_start": [round(x, 2) for x in load]})
        finally:
            handles.close()
    env = environment(timing, None)
    del env["scale"]  # rows are per point
    env["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    env["uptime_end"] = uptime()
    return {"summary": {"rows": list(sizes), "queries": [n for n, _ in QUERIES],
                        "runs": timing.runs},
            "points": points, "environment": env}


def plot(data: dict[str, Any], path: Path) -> Path:
    """Log-log time against rows, raw DuckDB and dpsql, one panel per query."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    def rows_label(x: float, _pos) -> str:
        return f"{x / 1e6:g}M" if x >= 1e6 else f"{x / 1e3:g}k" if x >= 1e3 else f"{x:g}"

    names = data["summary"]["queries"]
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        pts = [p for p in data["points"] if p["name"] == name and p["status"] == "ok"]
        rows = [p["rows"] for p in pts]
        ax.plot(rows, [p["raw_ms"] for p in pts], "o-", label="raw DuckDB")
        ax.plot(rows, [p["dpsql_ms"] for p in pts], "s-", label="dpsql (end to end)")
        for p in pts:
            ax.annotate(f"x{p['ratio']:.2f}", (p["rows"], p["dpsql_ms"]),
                        textcoords="offset points", xytext=(4, 6), fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(rows_label))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _pos: ""))
        ax.set_xticks(rows)
        ax.set_xlabel("rows per table")
        ax.set_ylabel("median ms")
        ax.set_title(name.replace("_", " "))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    env = data["environment"]
    fig.suptitle(f"dpsql vs raw DuckDB ({env['cpus']} CPUs, DuckDB {env['duckdb']}, "
                 f"median of {data['summary']['runs']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(settings: Settings, data_dir: Path, out: Path, log=print) -> list[Path]:
    """Run the part and write ``<out>/scale.json`` (+ ``scale.png``); returns the paths."""
    if synthetic.sample_missing():
        print(f"scale: skipped: {synthetic.sample_missing()}", flush=True)
        return []
    start = time.perf_counter()
    data = run(settings, data_dir, log)
    data["environment"]["part_seconds"] = round(time.perf_counter() - start, 2)
    paths = []
    if importable("matplotlib"):
        data["plot"] = "scale.png"
        paths.append(plot(data, out / "scale.png"))
    else:
        data["plot"] = None
        data["plot_skipped"] = PLOT_HINT
        print(f"scale: plot skipped: {PLOT_HINT}; the JSON is written", flush=True)
    paths.insert(0, write_json(out / "scale.json", data))
    return paths
