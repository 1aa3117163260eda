"""`dpsql budget`: the data owner's view of the privacy-budget ledger (set, show, reset, list).

Budgets are kept per (database, analyst); ``--database`` is the DuckDB file the analyst queries
(its realpath is the key, see :func:`dpsql.accounting.database_identity`), or ``spark://NAME``;
without it the database is taken from the metadata (``-m M.yaml``), keyed as connections key it
(:func:`dpsql.backends.ledger_identity`), or the command is a usage error: a budget is never
silently keyed to ":memory:". The ledger is ``--ledger``, else the metadata's ``ledger:`` line
(the ledger its connections charge), else ``$DPSQL_LEDGER``, else a usage error; a ``--ledger``
other than the metadata's is a usage error too (the budget would sit in a ledger no connection
reads). ``show`` for an analyst without a budget says so (not zeros); ``list`` prints every
(database, analyst) budget of the ledger. In ``set``, ``-e/--epsilon`` and ``--delta`` are the
analyst's totals (:func:`dpsql.cli.options.total_delta_option`: delta 0 unless granted); in
every other command they are per-query amounts. Ledger problems raise dpsql errors, which
``dpsql.cli.main.main`` prints as one line with exit status 1.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from dpsql.accounting import BudgetStatus, CompositionReport, Ledger, database_identity
from dpsql.accounting.filters import FILTERS, BudgetFilter
from dpsql.cli.options import (
    analyst_option,
    database_option,
    format_option,
    ledger_option,
    ledger_path,
    metadata_option,
    total_delta_option,
    total_epsilon_option,
)

# The history is printed newest last; older entries are summarised so `show` stays readable.
_TEXT_HISTORY_LIMIT = 20



def _database_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """-d/--database, -m/--metadata and --backend: which database's budget (see the module)."""
    f = click.option("--backend", type=click.Choice(["duckdb", "spark"]), default="duckdb",
                     show_default=True, help="The backend the analyst's queries run on.")(f)
    f = metadata_option(help="Take the database (when -d is not given) and the ledger (its "
                        "ledger: line) from this metadata file.")(f)
    return database_option(help="The DuckDB database file the budget applies to "
                           "(spark://NAME for Spark; ':memory:' only if you mean it).")(f)


def database_key(database: str | None, metadata: Path | None, backend: str) -> str:
    """The database identity a budget command acts on: ``database`` as connections key it,
    else the metadata's; a click.UsageError when neither names one (never ":memory:" by
    default)."""
    from dpsql.backends import ledger_identity  # light: no backend is imported
    from dpsql.metadata import load_metadata

    md = load_metadata(metadata) if metadata is not None else None  # a broken file says so
    if database is not None:
        return ledger_identity(backend, database, md)
    if md is None:
        raise click.UsageError(
            "name the database the budget applies to: --database D.duckdb (spark://NAME for "
            "Spark), or -m M.yaml to take it from the metadata"
        )
    # The identity a connection without a database file gets for this metadata: its sources'
    # files, or Spark's default catalog database.
    identity = ledger_identity(backend, None, md)
    if identity == ":memory:":
        raise click.UsageError(
            f"the metadata {metadata} does not say which database file its tables live in, so "
            "the budget's database cannot be taken from it; pass --database D.duckdb"
        )
    return identity


def _open_unit_interval(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not 0 < value < 1:
        raise click.BadParameter("must be in (0, 1)")
    return value


@click.group("budget")
def command() -> None:
    """Set, show and reset analysts' privacy budgets (data owner)."""


@command.command("set")
@ledger_option()
@analyst_option(required=True, help="The analyst granted the budget (default: $DPSQL_ANALYST).")
@_database_options
@total_epsilon_option()
@total_delta_option()
@click.option("--filter", "budget_filter", type=click.Choice(FILTERS), default="basic",
              show_default=True,
              help="How charges are composed: basic (sum of epsilons and deltas), renyi "
                   "(Rényi filter: many small Laplace queries fit), zcdp (zCDP filter: many "
                   "small Gaussian queries fit), gdp (Gaussian DP filter: Gaussian releases "
                   "only, composed exactly; the most Gaussian queries fit). renyi, zcdp and "
                   "gdp need a delta total > 0 and refuse releases without a privacy curve "
                   "(joins of private tables; under gdp also Laplace releases).")
@click.option("--alpha", type=float, default=None,
              help="The Rényi filter's order, one of dpsql's grid (default: the one that "
                   "fits the most small queries under these totals).")
def set_budget(ledger: str | None, analyst: str, database: str | None, metadata: Path | None,
               backend: str, epsilon: float, delta: float, budget_filter: str,
               alpha: float | None) -> None:
    """Grant ANALYST a total (epsilon, delta) budget on DATABASE; earlier charges still count."""
    identity = database_key(database, metadata, backend)
    ledger = ledger_path(ledger, metadata)
    with Ledger(ledger) as book:
        book.set_budget(identity, analyst, epsilon, delta, filter=budget_filter, alpha=alpha)
        status = book.status(identity, analyst)
    click.echo(
        f"budget for {analyst} on {identity}: epsilon {status.epsilon_total!r}, "
        f"delta {status.delta_total!r}, {_filter_name(status)} (spent so far: epsilon "
        f"{status.epsilon_spent!r}, delta {status.delta_spent!r})"
    )
    over = " and ".join(status.overspent)
    if over:
        click.echo(f"warning: the {over} total is below what was already spent, so every "
                   "query is refused until it is raised or the spending reset ('dpsql budget "
                   "reset')", err=True)


def _over_note(status: BudgetStatus) -> str:
    """``budget show``'s words for totals set below the spending (every query refused)."""
    over = " and ".join(status.overspent)
    return f"  (the {over} total is below the spending: every query is refused)" if over else ""


def _filter_name(status: BudgetStatus) -> str:
    if status.filter == "renyi":
        return f"Rényi filter at alpha {status.alpha:g}"
    return {"zcdp": "zCDP filter", "gdp": "GDP filter (Gaussian releases only)"}.get(
        status.filter, "basic composition")


def _filter_view(status: BudgetStatus) -> dict[str, Any]:
    """The filter's state, converted to (epsilon, delta) for display: the epsilon at the
    budget's delta that the spending so far would certify were it the whole interaction,
    and what remains of the filter's total."""
    view: dict[str, Any] = {"filter": status.filter, "alpha": status.alpha}
    if status.filter == "basic":
        return view
    rule = BudgetFilter(status.filter, status.alpha, status.epsilon_total, status.delta_total)
    spent = status.filter_spent
    view.update(
        unit={"renyi": "Rényi divergence", "gdp": "mu^2"}.get(status.filter, "rho"),
        total=status.filter_total, spent=spent, remaining=status.filter_remaining,
        epsilon_spent_equivalent=(rule.epsilon_at(spent) if math.isfinite(spent)
                                  else math.inf),
        delta=status.delta_total,
        largest_laplace_epsilon=status.epsilon_remaining,
    )
    if status.filter == "gdp":  # no Laplace release fits a GDP filter
        view.update(largest_laplace_epsilon=0.0, largest_gaussian_epsilon=status.epsilon_remaining)
    return view


def _bound_json(report: CompositionReport) -> dict:
    # JSON has no infinity (Python would write the non-standard Infinity, which strict parsers
    # reject): an unbounded epsilon -- the advanced bound past a charge of epsilon ~709.78 --
    # is null, and the note says why
    return {
        key: {"epsilon": b.epsilon if math.isfinite(b.epsilon) else None, "delta": b.delta,
              "note": b.note if math.isfinite(b.epsilon) else
              "; ".join(x for x in (b.note, "unbounded (infinite)") if x)}
        for key, b in (
            ("basic", report.basic),
            ("advanced", report.advanced),
            ("kov_bound", report.kov_bound),
            ("kov_optimal", report.kov_optimal),
        )
    }


def _status_json(
    ledger: str, identity: str, analyst: str, status: BudgetStatus, report: CompositionReport
) -> dict:
    return {
        "ledger": ledger,
        "database": identity,
        "analyst": analyst,
        "epsilon_total": status.epsilon_total,
        "delta_total": status.delta_total,
        "epsilon_spent": status.epsilon_spent,
        "delta_spent": status.delta_spent,
        "epsilon_remaining": status.epsilon_remaining,
        "delta_remaining": status.delta_remaining,
        "charges": len(status.history),
        "filter": _filter_view(status),
        "composition": {
            "delta_prime": report.delta_prime,
            "homogeneous": report.homogeneous,
            **_bound_json(report),
        },
        "history": [
            {
                "id": c.id, "at": c.at, "fingerprint": c.fingerprint, "epsilon": c.epsilon,
                "delta": c.delta, "mechanism": c.mechanism,
            }
            for c in status.history
        ],
    }


def _status_text(
    ledger: str, identity: str, analyst: str, status: BudgetStatus, report: CompositionReport
) -> str:
    lines = [
        f"ledger:    {ledger}",
        f"database:  {identity}",
        f"analyst:   {analyst}",
        f"budget:    epsilon {status.epsilon_total!r}  delta {status.delta_total!r}",
        f"filter:    {_filter_name(status)}",
        f"spent:     epsilon {status.epsilon_spent!r}  delta {status.delta_spent!r}"
        f"  ({len(status.history)} charges{'' if status.filter == 'basic' else ', summed'})",
        f"remaining: epsilon {status.epsilon_remaining!r}  delta {status.delta_remaining!r}"
        + _over_note(status),
    ]
    view = _filter_view(status)
    if status.filter != "basic":
        lines[-1] += ("  (the epsilon, at the delta total, of the largest Gaussian query "
                      "that fits)" if status.filter == "gdp"
                      else "  (the largest epsilon one Laplace query surely fits)")
        lines.append(
            f"{view['unit']}: spent {view['spent']:.6g} of {view['total']:.6g}, "
            f"{view['remaining']:.6g} remain; were this the whole interaction it would be "
            f"(epsilon {view['epsilon_spent_equivalent']:.6g}, delta {view['delta']:g})-DP")
    lines.append(f"composition of {report.k} charges (delta' = {report.delta_prime:g}):")
    for bound in report.bounds():
        note = bound.note
        if bound is report.basic and status.filter != "basic":
            note = "sum of epsilons and deltas; not enforced (the budget's filter is)"
        lines.append(
            f"  {bound.method:<15} epsilon {bound.epsilon:<12.6g} delta {bound.delta:<12.6g}"
            f" {note}"
        )
    if status.history:
        lines.append("history:")
        shown = status.history[-_TEXT_HISTORY_LIMIT:]
        if len(shown) < len(status.history):
            lines.append(f"  ... {len(status.history) - len(shown)} earlier charges (see --json)")
        for c in shown:
            lines.append(
                f"  #{c.id:<6} {c.at}  epsilon {c.epsilon!r}  delta {c.delta!r}  "
                f"{c.mechanism}  {c.fingerprint}"
            )
    return "\n".join(lines)


@command.command("show")
@ledger_option()
@analyst_option(required=True, help="Whose budget (default: $DPSQL_ANALYST).")
@_database_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option(
    "--delta-prime", type=float, default=1e-6, show_default=True, callback=_open_unit_interval,
    help="Slack delta' for the advanced and KOV composition bounds.",
)
def show(ledger: str | None, analyst: str, database: str | None, metadata: Path | None,
         backend: str, as_json: bool, delta_prime: float) -> None:
    """Show ANALYST's budget, spending, composition bounds and charge history on DATABASE
    (the charges that count; `dpsql audit log` shows refunded and reset ones too)."""
    identity = database_key(database, metadata, backend)
    ledger = ledger_path(ledger, metadata)
    with Ledger(ledger, create=False) as book:
        granted = (database_identity(identity), analyst) in book.budgets()
        status = book.status(identity, analyst)
    if not granted and not status.history:
        # Not zeros: "no budget" (nothing may be spent) is not "a budget of 0, all spent".
        if as_json:
            click.echo(json.dumps({"ledger": ledger, "database": identity, "analyst": analyst,
                                   "budget": None}, indent=2))
        else:
            click.echo(f"{analyst} has no budget on {identity} in {ledger}: every query is "
                       f"refused; grant one with 'dpsql budget set -a {analyst} -e EPSILON'")
        return
    report = status.composition(delta_prime)
    if as_json:
        payload = _status_json(ledger, identity, analyst, status, report)
        click.echo(json.dumps(payload, indent=2))
    else:
        click.echo(_status_text(ledger, identity, analyst, status, report))


@command.command("reset")
@ledger_option()
@analyst_option(required=True, help="Whose spending (default: $DPSQL_ANALYST).")
@_database_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def reset(ledger: str | None, analyst: str, database: str | None, metadata: Path | None,
          backend: str, yes: bool) -> None:
    """Clear ANALYST's spending on DATABASE (the budget stays; the charges stay in the audit
    log, marked with this reset)."""
    identity = database_key(database, metadata, backend)
    ledger = ledger_path(ledger, metadata)
    with Ledger(ledger, create=False) as book:
        if not yes:
            click.confirm(
                f"Clear the spending of {analyst} on {identity}? Their full budget becomes "
                "available again (the charges stay in the audit log)",
                abort=True,
            )
        reset_id = book.reset(identity, analyst)
        status = book.status(identity, analyst)
    click.echo(
        f"spending of {analyst} on {identity} cleared (reset #{reset_id}; the charges stay in "
        f"the audit log); remaining: epsilon {status.epsilon_remaining!r}, delta "
        f"{status.delta_remaining!r}"
    )


@command.command("list")
@ledger_option()
@metadata_option(help="Take the ledger from this metadata file's ledger: line.")
@database_option(help="Only budgets on this database (DuckDB file or spark://NAME).")
@analyst_option(help="Only this analyst's budgets (default: $DPSQL_ANALYST, else all).")
@format_option()
def list_budgets(ledger: str | None, metadata: Path | None, database: str | None,
                 analyst: str | None, fmt: str) -> None:
    """List every analyst's budget on the ledger, per database: totals, spent, remaining."""
    from dpsql.cli.output import render_rows

    ledger = ledger_path(ledger, metadata)
    wanted = None if database is None else database_identity(database)
    rows = []
    with Ledger(ledger, create=False) as book:
        for db, who in book.budgets():
            if (wanted is not None and db != wanted) or (analyst and who != analyst):
                continue
            st = book.status(db, who)
            rows.append([db, who, st.epsilon_total, st.epsilon_spent, st.epsilon_remaining,
                         st.delta_total, st.delta_spent, st.delta_remaining, len(st.history),
                         st.filter])
    if not rows and fmt == "table":
        click.echo("no budgets" + (" matching the filters" if wanted or analyst else "")
                   + f" in {ledger}; grant one with 'dpsql budget set'")
        return
    names = ["database", "analyst", "epsilon_total", "epsilon_spent", "epsilon_remaining",
             "delta_total", "delta_spent", "delta_remaining", "charges", "filter"]
    click.echo(render_rows(names, rows, fmt))
