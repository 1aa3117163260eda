"""Spark local[2] against DuckDB on the same Parquet files: a join count and a grouped SUM.

    python -m benchmarks.spark_vs_duckdb [--rows 2000000,10000000,30000000] [--runs 3]
                                         [--out DIR] [--data DIR] [--smoke]

Needs the ``spark`` extra (pyspark, Java 17+). For each size it writes a synthetic shop once
(``benchmarks/data/spark-<rows>/``: ``orders`` with ROWS rows, ``customers`` with ROWS/10,
Parquet; costs are multiples of 1/4, so every sum is exact in any order), then times, side by
side in one run, on the same files:

* the exact query dpsql generates, on DuckDB (in-memory, the Parquet files as views) and on
  Spark local[2] (``SparkBackend``): where the backends differ;
* the whole private query (``Engine.run``: analysis, exact query, noise) on both;

and checks that both backends return identical exact aggregates. ``--smoke`` uses 20,000 rows
and one run (tests/system/test_spark_benchmark_smoke.py runs it). Results go to
``<out>/spark-local2.json`` (default ``benchmarks/results``), with a linear fit of time
against rows per query and backend (``fit``); benchmarks/README.md discusses the crossover.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.execute.exact import compile_plan, read_exact
from dpsql.metadata import Metadata, loads_metadata
from dpsql.session import Session

HERE = Path(__file__).resolve().parent
QUERIES = {
    "join_count": "SELECT COUNT(*) AS n FROM orders o JOIN customers c "
                  "ON o.customer_id = c.customer_id",
    "grouped_sum": "SELECT status, SUM(cost) AS s FROM orders GROUP BY status",
}
EPSILON, DELTA = 1.0, 1e-9
SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",
    "spark.sql.shuffle.partitions": "8",
}


def build_data(rows: int, folder: Path) -> dict[str, Any]:
    """Write orders (``rows``) and customers (``rows // 10``) as Parquet, once; their facts."""
    folder.mkdir(parents=True, exist_ok=True)
    info_path = folder / "info.json"
    if info_path.exists():
        return json.loads(info_path.read_text())
    n_customers = max(rows // 10, 1)
    con = duckdb.connect(":memory:")
    # deterministic pseudo-random columns from hashes of the row number
    con.execute(f"""
        CREATE TABLE orders AS SELECT
          range AS order_id,
          (hash(range * 3 + 1) % {n_customers})::BIGINT AS customer_id,
          ['new', 'shipped', 'returned'][1 + (hash(range * 3 + 2) % 3)::INTEGER] AS status,
          ((hash(range * 3 + 3) % 4000) / 4.0)::DOUBLE AS cost
        FROM range({rows})""")
    con.execute(f"CREATE TABLE customers AS SELECT range AS customer_id FROM "
                f"range({n_customers})")
    sources = {}
    for table in ("orders", "customers"):
        path = folder / f"{table}.parquet"
        con.execute(f"COPY {table} TO '{path}' (FORMAT parquet)")
        sources[table] = str(path)
    (mf,) = con.execute("SELECT max(c) FROM (SELECT count(*) AS c FROM orders "
                        "GROUP BY customer_id)").fetchone()
    con.close()
    info = {"rows": rows, "customers": n_customers, "orders_customer_id_mf": int(mf),
            "sources": sources}
    info_path.write_text(json.dumps(info, indent=2))
    return info


def metadata(info: dict[str, Any]) -> Metadata:
    s = info["sources"]
    return loads_metadata(f"""
tables:
  orders:
    source: {s["orders"]}
    columns:
      order_id: {{max_freq: 1, type: BIGINT}}
      customer_id: {{max_freq: {info["orders_customer_id_mf"]}, type: BIGINT}}
      status: {{releasable: true, type: VARCHAR, domain: {{values: [new, shipped, returned]}}}}
      cost: {{bounds: [0, 1000], type: DOUBLE}}
  customers:
    source: {s["customers"]}
    columns:
      customer_id: {{max_freq: 1, type: BIGINT}}
""")


def _plain(value: Any) -> Any:
    """Numbers as floats (DuckDB's HUGEINT and Spark's DECIMAL sums compare equal)."""
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return float(value)
    return value


def _median_seconds(fn, runs: int) -> tuple[float, Any]:
    result = fn()  # warm-up (file cache, JIT, Spark's first job), not timed
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def measure(rows: int, spark, runs: int, data: Path) -> dict[str, Any]:
    from dpsql.backends.spark import SparkBackend

    info = build_data(rows, data / f"spark-{rows}")
    md = metadata(info)
    duck = DuckDBBackend(None, md)
    sparkb = SparkBackend(md, spark)
    engines = {"duckdb": Session(md, duck), "spark": Session(md, sparkb)}
    out: dict[str, Any] = {"rows": rows, "customers": info["customers"], "queries": {}}
    try:
        for name, sql in QUERIES.items():
            # the plan a Session over Spark builds (no promises about stored data), run on both
            plan = engines["spark"].prepare(sql).plan
            entry: dict[str, Any] = {"sql": sql}
            exact = {}
            for backend_name, backend in (("duckdb", duck), ("spark", sparkb)):
                compiled = compile_plan(backend, plan)
                secs, bins = _median_seconds(
                    lambda b=backend, c=compiled: read_exact(b, c, []), runs)
                entry[f"{backend_name}_exact_s"] = round(secs, 4)
                exact[backend_name] = [[_plain(v) for v in column.tolist()]
                                       for column in [*bins.keys, *bins.exact]]
                secs, _ = _median_seconds(
                    lambda e=engines[backend_name], q=sql: e.run(q, epsilon=EPSILON, delta=DELTA),
                    runs)
                entry[f"{backend_name}_private_s"] = round(secs, 4)
            entry["same_exact_answer"] = exact["duckdb"] == exact["spark"]
            entry["spark_over_duckdb_exact"] = round(
                entry["spark_exact_s"] / entry["duckdb_exact_s"], 2)
            entry["spark_over_duckdb_private"] = round(
                entry["spark_private_s"] / entry["duckdb_private_s"], 2)
            out["queries"][name] = entry
            print(f"{rows:>11,} {name:<12} duckdb {entry['duckdb_exact_s']:8.3f} s   "
                  f"spark {entry['spark_exact_s']:8.3f} s   "
                  f"x{entry['spark_over_duckdb_exact']:<6} same={entry['same_exact_answer']}",
                  flush=True)
    finally:
        duck.close()
        sparkb.close()
    return out


def fit(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per query and backend, time = fixed + rows * per_row (least squares over the sizes)."""
    fits: dict[str, Any] = {}
    if len(results) < 2:
        return fits
    for name in QUERIES:
        fits[name] = {}
        for backend in ("duckdb", "spark"):
            xs = [r["rows"] for r in results]
            ys = [r["queries"][name][f"{backend}_exact_s"] for r in results]
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
                (x - mx) ** 2 for x in xs)
            fits[name][backend] = {"fixed_s": round(my - slope * mx, 4),
                                   "ns_per_row": round(slope * 1e9, 3)}
    return fits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="2000000,10000000,30000000",
                        help="comma-separated orders sizes (default: 2M, 10M and 30M)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per measurement")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--data", type=Path, default=HERE / "data",
                        help="where the generated Parquet files are kept")
    parser.add_argument("--smoke", action="store_true", help="20,000 rows, one run")
    args = parser.parse_args(argv)
    sizes = [20_000] if args.smoke else [int(x) for x in args.rows.split(",")]
    runs = 1 if args.smoke else args.runs

    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    owned = spark is None  # an active session (a test run's) is used, and left running
    if owned:
        builder = SparkSession.builder.master("local[2]").appName("dpsql-bench")
        for key, value in SPARK_CONF.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    master, spark_version = spark.sparkContext.master, spark.version
    try:
        results = [measure(rows, spark, runs, args.data) for rows in sizes]
    finally:
        if owned:
            spark.stop()
    doc = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_at_end": os.getloadavg(), "spark": spark_version,
                    "duckdb": duckdb.__version__},
        "spark_master": master, "runs": runs, "results": results, "fit": fit(results),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "spark-smoke.json" if args.smoke else "spark-local2.json"
    (args.out / name).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out / name}")
    return 0 if all(q["same_exact_answer"] for r in results for q in r["queries"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
