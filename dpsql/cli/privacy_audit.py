"""`dpsql audit -m M.yaml -d D.duckdb [-e EPS] [--delta D] [--neighbours change|remove|unit]
[--tries N] "SQL"`: the owner's privacy audit.

Runs :func:`dpsql.privacy_audit.audit` and prints what the samples prove: the neighbouring
database used, the lower bounds on the max divergence and the Rényi divergences, and the
verdict. Exit status 0 for pass, 2 for fail (1 stays "dpsql refused or failed").
`dpsql audit log` (the ledger's audit log) is a subcommand of the same group: the group sends
any first argument that is not a subcommand name to this command.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dpsql.cli.options import database_option, delta_option, epsilon_option, metadata_option

if TYPE_CHECKING:  # the audit (DuckDB, the engine) is imported when the command runs
    from dpsql.privacy_audit import AuditReport


class AuditGroup(click.Group):
    """`dpsql audit SUBCOMMAND ...`, or `dpsql audit [OPTIONS] SQL` for the privacy audit."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        help_only = args in (["-h"], ["--help"])
        if args and not help_only and args[0] not in self.commands:
            args = ["privacy", *args]
        return super().parse_args(ctx, args)


def _text(report: AuditReport) -> str:
    b = report.bounds
    renyi = ", ".join(f"order {order:g}: {value:.3f}" for order, value in b.renyi.items())
    return "\n".join([
        f"query:      {report.sql}",
        f"claimed:    epsilon {report.epsilon:g}, delta {report.delta:g}"
        + (f" (what the release plan spends; {report.requested_delta:g} allowed)"
           if report.delta != report.requested_delta else ""),
        f"neighbour:  {report.neighbour.describe()} (the largest of {report.neighbours_tried} "
        f"tried; exact measurements move by {report.exact_change:g} in L1)",
        f"releases:   {report.runs} on each database; statistic over {report.cells} output "
        "cell(s)",
        f"max divergence >= {b.max_divergence:.3f} ({b.worst_event}), at confidence "
        f"{b.confidence:g} over {b.events} intervals",
        f"Rényi divergence >= {renyi}",
        f"verdict:    {report.verdict.upper()}"
        + (" (the samples prove a loss above the claimed epsilon)" if report.verdict == "fail"
           else " (the samples do not contradict the claim; a lower bound cannot prove it)"),
    ])


def _relation(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from dpsql.privacy_audit.neighbours import RELATIONS

    if value is None or value in RELATIONS:
        return value
    hint = (" (the number of neighbours to try is now --tries N)" if value.isdigit() else "")
    raise click.BadParameter(f"{value!r} is not one of {', '.join(RELATIONS)}{hint}")


@click.command("privacy")
@metadata_option(required=True, help="The owner's metadata YAML.")
@database_option(required=True, help="DuckDB database file (copied once per neighbour tried: "
                 "use a test database or a sample).")
@epsilon_option(help="The epsilon each release claims.")
@delta_option(help="The delta each release may spend; the report claims the delta the "
              "release plan does spend (0 for a pure release, such as R2T's).")
@click.option("--neighbours", "relation", default=None, callback=_relation,
              help="The neighbouring relation: change (one row replaced by another's values, "
                   "dpsql's own), remove (one row deleted), or unit (one privacy unit removed "
                   "with every row linked to it; needs privacy_unit in the metadata). "
                   "Default: unit under a privacy_unit, else change.")
@click.option("--tries", default=8, show_default=True, type=click.IntRange(min=1),
              help="How many neighbouring databases to try per private table, or units in "
                   "all with --neighbours unit (the one moving the answer most is audited).")
@click.option("--runs", default=4000, show_default=True, type=click.IntRange(min=50),
              help="Releases drawn on each of the two databases.")
@click.option("--confidence", default=0.99, show_default=True,
              type=click.FloatRange(0.5, 1.0, max_open=True),
              help="Confidence of the lower bounds.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.argument("sql")
def privacy(metadata: Path, database: str, epsilon: float, delta: float, relation: str | None,
            tries: int, runs: int, confidence: float, as_json: bool, sql: str) -> int:
    """Audit a query's privacy empirically (data owner): lower bounds, pass or fail."""
    from dpsql.metadata import load_metadata
    from dpsql.privacy_audit import audit

    if not Path(database).is_file():
        raise click.BadParameter(f"no such file: {database}", param_hint="'-d' / '--database'")
    report = audit(Path(database), load_metadata(metadata), sql, epsilon=epsilon, delta=delta,
                   neighbours=tries, runs=runs, confidence=confidence, relation=relation)
    if as_json:
        b = report.bounds
        click.echo(json.dumps({
            "sql": report.sql, "epsilon": report.epsilon, "delta": report.delta,
            "requested_delta": report.requested_delta,
            "neighbour": report.neighbour.describe(), "relation": report.neighbour.relation,
            "neighbours_tried": report.neighbours_tried,
            "exact_change": report.exact_change, "runs": report.runs, "cells": report.cells,
            "max_divergence_lower_bound": b.max_divergence, "worst_event": b.worst_event,
            "renyi_lower_bounds": {str(k): v for k, v in b.renyi.items()},
            "confidence": b.confidence, "verdict": report.verdict,
        }, indent=2))
    else:
        click.echo(_text(report))
    return 2 if report.verdict == "fail" else 0
