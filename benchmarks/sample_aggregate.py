"""Sample-and-aggregate's error against the exact answer and the direct mechanisms, on the demo
shop (1M orders, 50,000 customers), at epsilon = 1.

    python -m benchmarks.sample_aggregate [--demo-folder DIR] [--runs N] [--out DIR]
        [--mechanism laplace|gaussian|both]

For each query and each number of blocks m (``orders`` enabled with ``by: customer_id``), it
releases the query ``--runs`` times through the engine (no ledger, the secure sampler, a fresh
block key each time) and reports the exact answer (plain DuckDB), the mean released value, its
root-mean-square error and the release record's 95% half-width. The direct AVG (the elastic
path: a noisy SUM over a noisy COUNT) runs at the same epsilon. MEDIAN and a ratio of sums have
no direct rule: only S&A answers them. With the Gaussian (``mechanism='gaussian'``, analytic
sigma at delta = 1e-6) the MEDIAN is released once more (the row "..., Gaussian"). Writes
``<out>/sample_aggregate-demo.json`` and prints a markdown table (README,
"Sample-and-aggregate").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import duckdb
import numpy as np

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.demo import create_demo
from dpsql.metadata import load_metadata
from dpsql.metadata.model import Metadata, SampleAggregate
from dpsql.session import Session

EPSILON = 1.0
DELTA = 1e-6
BLOCKS = (100, 1000, 10000)
JOIN = "FROM orders o JOIN products p ON o.product_id = p.product_id WHERE p.category = 'books'"

#: (label, S&A expression and bounds, the exact SQL, the direct dpsql SQL or None)
QUERIES = [
    ("MEDIAN(order_cost)", "MEDIAN(order_cost), 0, 1000 FROM orders",
     "SELECT MEDIAN(order_cost) FROM orders", None),
    ("AVG(order_cost)", "AVG(order_cost), 0, 1000 FROM orders",
     "SELECT AVG(order_cost) FROM orders", "SELECT AVG(order_cost) FROM orders"),
    ("MEDIAN over a join (books)", f"MEDIAN(o.order_cost), 0, 1000 {JOIN}",
     f"SELECT MEDIAN(o.order_cost) {JOIN}", None),
    ("SUM(order_cost) / SUM(quantity)", "SUM(order_cost) / SUM(quantity), 0, 500 FROM orders",
     "SELECT SUM(order_cost) / SUM(quantity) FROM orders", None),
]
#: the queries also released with the Gaussian mechanism
GAUSSIAN = ("MEDIAN(order_cost)",)


def enabled(md: Metadata, blocks: int) -> Metadata:
    orders = dataclasses.replace(md.tables["orders"],
                                 sample_aggregate=SampleAggregate(blocks, "customer_id"))
    return dataclasses.replace(md, tables={**md.tables, "orders": orders})


def measure(session: Session, sql: str, exact: float, runs: int,
            mechanism: str = "laplace") -> dict[str, float]:
    values, width, started = [], None, time.perf_counter()
    for _ in range(runs):
        result = session.run(sql, epsilon=EPSILON, delta=DELTA, mechanism=mechanism)
        values.append(float(result.rows[0][0]))
        width = result.release.columns[0].half_width_95
    arr = np.array(values)
    return {"mean": float(arr.mean()), "rmse": float(math.sqrt(np.mean((arr - exact) ** 2))),
            "half_width_95": width if width is not None else math.nan,
            "seconds_per_run": (time.perf_counter() - started) / runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo-folder", default=None)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--mechanism", choices=("laplace", "gaussian", "both"), default="both")
    args = parser.parse_args()
    mechanisms = ("laplace", "gaussian") if args.mechanism == "both" else (args.mechanism,)
    demo = create_demo(args.demo_folder)
    base = load_metadata(demo.metadata)
    con = duckdb.connect(str(demo.database), read_only=True)
    rows = []
    for label, sa, exact_sql, direct_sql in QUERIES:
        exact = float(con.execute(exact_sql).fetchone()[0])
        for mechanism in mechanisms:
            if mechanism == "gaussian" and label not in GAUSSIAN:
                continue
            name = label if mechanism == "laplace" else f"{label}, Gaussian (δ = {DELTA:g})"
            row: dict[str, object] = {"query": name, "exact": exact, "mechanism": mechanism}
            for m in BLOCKS:
                md = enabled(base, m)
                session = Session(md, DuckDBBackend(demo.database, md))
                args_, source = sa.split(" FROM ", 1)
                row[f"sa_m{m}"] = measure(
                    session, f"SELECT SAMPLE_AGGREGATE({args_}) FROM {source}", exact,
                    args.runs, mechanism)
                session.close()
            if direct_sql is not None and mechanism == "laplace":
                session = Session(base, DuckDBBackend(demo.database, base))
                row["direct"] = measure(session, direct_sql, exact, args.runs)
                session.close()
            rows.append(row)
    con.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sample_aggregate-demo.json").write_text(json.dumps(
        {"epsilon": EPSILON, "runs": args.runs, "blocks": BLOCKS, "rows": rows}, indent=2))
    print(table(rows))


def table(rows: list[dict]) -> str:
    head = ("| query (demo shop, ε = 1) | exact | " + " | ".join(
        f"S&A m = {m}: RMSE (95% half-width)" for m in BLOCKS) + " | direct: RMSE |")
    lines = [head, "|" + "---|" * (3 + len(BLOCKS))]
    for r in rows:
        cells = [f"{r[f'sa_m{m}']['rmse']:.2f} ({r[f'sa_m{m}']['half_width_95']:.2f})"
                 for m in BLOCKS]
        direct = f"{r['direct']['rmse']:.3f}" if "direct" in r else "no rule"
        lines.append(f"| {r['query']} | {r['exact']:.2f} | " + " | ".join(cells)
                     + f" | {direct} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
