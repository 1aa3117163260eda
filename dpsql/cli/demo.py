"""`dpsql demo`: build the demo shop once (:mod:`dpsql.demo`) and run a guided tour.

The tour plays both roles side by side. The data owner's TRUE answers come from a plain
read-only DuckDB connection (the owner may see the data); the analyst's NOISY answers come
through :func:`dpsql.connect` as analyst ``demo``, charged to the demo ledger. Tour queries are
cached by the ledger, so running the tour again shows the same noisy answers and spends
nothing: asking again cannot average the noise away.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

import dpsql
from dpsql.cli.output import release_line, render_rows
from dpsql.errors import Error

if TYPE_CHECKING:
    from dpsql.demo import DemoFiles

# dpsql.demo (DuckDB, numpy) and duckdb are imported by the functions that use them, so that
# `dpsql --help` does not load them.


@dataclass(frozen=True)
class Step:
    """One stop of the tour: a query the analyst asks, and what it shows."""

    title: str
    sql: str
    note: str
    epsilon: float = 0.5
    delta: float = 0.0


STEPS: tuple[Step, ...] = (
    Step("1. A count",
         "SELECT COUNT(*) AS orders FROM orders",
         "One order more or less changes a count by 1, so the noise is small: the 95% interval "
         "is a few units on a million."),
    Step("2. A join count",
         "SELECT COUNT(*) AS french_orders FROM orders o JOIN customers c "
         "ON o.customer_id = c.customer_id WHERE c.country = 'FR'",
         "Joining two private tables multiplies what one row can change (one customer has many "
         "orders); dpsql bounds it with smoothed elastic sensitivity, which needs a delta. Its "
         "error bar would depend on the data, so none is shown.",
         delta=1e-7),
    Step("3. A histogram over a public domain",
         "SELECT p.category, COUNT(*) AS orders FROM orders o JOIN products p "
         "ON o.product_id = p.product_id GROUP BY p.category ORDER BY p.category",
         "products is a public table, so its categories may be published as bins; every bin "
         "gets its own noise."),
    Step("4. A bounded SUM and AVG",
         "SELECT SUM(order_cost) AS revenue, AVG(order_cost) AS avg_cost FROM orders",
         "The owner declared order_cost bounds [0, 1000]: each order's cost is clamped to them, "
         "which bounds what one order adds to the sum.",
         epsilon=1.0),
)

REJECTED = Step(
    "5. A raw-row query is rejected",
    "SELECT customer_id, order_cost FROM orders LIMIT 5",
    "Raw rows are never released. The query is refused before it runs and spends nothing.",
)


def _heading(title: str) -> None:
    click.echo("")
    click.echo(click.style(title, bold=True))


def _display(value: Any) -> Any:
    return round(value, 2) if isinstance(value, float) else value


def _owner_truths(files: DemoFiles, steps: Sequence[Step]) -> list[list[tuple[Any, ...]]]:
    """The exact answers, computed the way the data owner can: a plain read-only connection.

    Computed before the analyst's connection opens: DuckDB shares one database instance per
    file within a process, and dpsql locks that instance's configuration down.
    """
    import duckdb

    with duckdb.connect(str(files.database), read_only=True) as con:
        return [con.execute(step.sql).fetchall() for step in steps]


def _compare(names: Sequence[str], keys: int, truth: Sequence[tuple[Any, ...]],
             noisy: Sequence[tuple[Any, ...]]) -> str:
    """Key columns, then "true" and "noisy" for each aggregate, matched on the keys."""
    by_key = {tuple(row[:keys]): row for row in truth}
    headers = list(names[:keys])
    for name in names[keys:]:
        headers += [f"{name} (true, owner)", f"{name} (noisy, analyst)"]
    rows = []
    for row in noisy:
        exact = by_key.get(tuple(row[:keys]), (None,) * len(names))
        line = [_display(v) for v in row[:keys]]
        for i in range(keys, len(names)):
            line += [_display(exact[i]), _display(row[i])]
        rows.append(line)
    return render_rows(headers, rows, "table")


def run_tour(files: DemoFiles) -> int:
    """Print the tour; 0 if every step behaved as described, else 1."""
    from dpsql.demo import DEMO_ANALYST

    failures = 0
    click.echo(
        "You are the data owner here. 'true' values come from a plain read-only DuckDB "
        "connection,\nwhich only the owner has; the analyst 'demo' sees only the 'noisy' "
        "values, through\ndpsql.connect(). Each query spends part of demo's budget; "
        "asking the same query again\nreturns the cached answer and spends nothing."
    )
    truths = _owner_truths(files, STEPS)
    with dpsql.connect(str(files.database), str(files.metadata), analyst=DEMO_ANALYST) as conn:
        for step, truth in zip(STEPS, truths, strict=True):
            _heading(step.title)
            click.echo(f"  {step.sql}")
            try:
                cur = conn.cursor()
                cur.execute(step.sql, epsilon=step.epsilon, delta=step.delta)
                names = [d[0] for d in cur.description or ()]
                rows = cur.fetchall()
                release = cur.release
                assert release is not None  # execute() succeeded
            except Error as err:
                click.echo(click.style(f"error: {err.message}", fg="red"), err=True)
                failures += 1
                continue
            keys = sum(1 for c in release.columns if c.mechanism is None)
            click.echo(_compare(names, keys, truth, rows))
            status = conn.budget
            click.echo(release_line(release, (status.epsilon_remaining,
                                              status.delta_remaining)))
            click.echo(step.note)

        _heading(REJECTED.title)
        click.echo(f"  {REJECTED.sql}")
        before = conn.budget
        try:
            conn.cursor().execute(REJECTED.sql, epsilon=REJECTED.epsilon)
        except Error as err:
            click.echo(f"rejected ({type(err).__name__}): {err.message}")
        else:
            click.echo(click.style("error: the raw-row query was answered", fg="red"), err=True)
            failures += 1
        after = conn.budget
        spent = after.epsilon_spent - before.epsilon_spent
        click.echo(f"epsilon spent by the rejected query: {spent:g}")
        click.echo(REJECTED.note)

        _heading("6. The budget left")
        click.echo(
            f"analyst {DEMO_ANALYST}: budget epsilon {after.epsilon_total:g}, delta "
            f"{after.delta_total:g}; spent epsilon {after.epsilon_spent:g}, delta "
            f"{after.delta_spent:g} in {len(after.history)} charges; remaining epsilon "
            f"{after.epsilon_remaining:g}, delta {after.delta_remaining:g}"
        )
    click.echo("")
    click.echo("Next: `dpsql shell --demo` to ask your own questions (\\help lists the "
               "commands), or `dpsql shell --demo --owner` to use \\explain.")
    return 1 if failures else 0


@click.command("demo")
@click.option("--rebuild", is_flag=True,
              help="Build the demo files again from scratch (this also resets demo's budget).")
def command(rebuild: bool) -> int:
    """Build the demo shop database (once) and run a guided tour: true vs noisy answers.

    Files live in $DPSQL_HOME/demo (default ~/.cache/dpsql/demo): shop.duckdb, its metadata
    shop.yaml and ledger.sqlite, with a budget of epsilon 10, delta 1e-6 for analyst 'demo'.
    """
    from dpsql.demo import create_demo, demo_home, existing_demo

    folder = demo_home()
    if rebuild or existing_demo(folder) is None:
        click.echo(f"building the demo shop in {folder} (once; `dpsql demo --rebuild` redoes "
                   "it)...")
        start = time.perf_counter()
        files = create_demo(folder, rebuild=True)
        click.echo(f"built {files.customers:,} customers, {files.orders:,} orders and "
                   f"{files.products:,} products in {time.perf_counter() - start:.1f} s")
    else:
        files = create_demo(folder)
        click.echo(f"using the demo shop in {folder} (`dpsql demo --rebuild` starts over)")
    return run_tour(files)
