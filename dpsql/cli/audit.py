"""`dpsql audit log`: the data owner's view of the ledger's audit log (and, as
`dpsql audit [OPTIONS] SQL`, the privacy audit of :mod:`dpsql.cli.privacy_audit`).

Every charge with its SQL text, parameters, epsilon and delta, time, analyst, database and the
values it released (as the analyst got them), refunded and reset charges included and marked,
every ``budget reset``, every owner action on accounts and budgets, and every cache hit (a
repeated query answered free, with the charge that paid for it) (:mod:`dpsql.accounting.audit`).
Oldest first; ``--limit N`` keeps the newest N entries. Ledger problems raise dpsql errors,
which ``dpsql.cli.main.main`` prints as one line with exit status 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from dpsql.accounting import AuditCharge, AuditEntry, AuditEvent, Ledger, database_identity
from dpsql.cli.options import (
    analyst_option,
    database_option,
    ledger_option,
    ledger_path,
    metadata_option,
)
from dpsql.cli.privacy_audit import AuditGroup, privacy


@click.group("audit", cls=AuditGroup)
def command() -> None:
    """Audit a query's privacy (`dpsql audit -m M -d D "SQL"`) or read the audit log of
    queries, charges and releases (`dpsql audit log`). Data owner."""


command.add_command(privacy)


def _entry_json(entry: AuditEntry) -> dict[str, Any]:
    if isinstance(entry, AuditCharge):
        return {
            "kind": "charge", "id": entry.id, "at": entry.at, "analyst": entry.analyst,
            "database": entry.database, "sql": entry.sql, "params": entry.params,
            "epsilon": entry.epsilon, "delta": entry.delta, "mechanism": entry.mechanism,
            "fingerprint": entry.fingerprint, "state": entry.state, "counts": entry.counts,
            "released_at": entry.released_at, "released": entry.released,
            "refunded_at": entry.refunded_at, "reset_id": entry.reset_id,
        }
    if isinstance(entry, AuditEvent):
        return {"kind": entry.kind, "id": entry.id, "at": entry.at, "analyst": entry.analyst,
                "database": entry.database, "charge_id": entry.charge_id,
                "detail": entry.detail}
    return {
        "kind": "reset", "id": entry.id, "at": entry.at, "analyst": entry.analyst,
        "database": entry.database, "charges_cleared": entry.charges_cleared,
        "epsilon_cleared": entry.epsilon_cleared, "delta_cleared": entry.delta_cleared,
    }


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _event_text(entry: AuditEvent) -> list[str]:
    where = "  ".join(x for x in (entry.analyst, entry.database) if x is not None)
    lines = [f"{entry.kind} #{entry.id}  {entry.at}  {where}"]
    detail = entry.detail if isinstance(entry.detail, dict) else {}
    if entry.kind == "cache hit":
        paid = ("no charge" if entry.charge_id is None
                else f"the answer of charge #{entry.charge_id}")
        lines.append(f"    epsilon {detail.get('epsilon')!r}  delta {detail.get('delta')!r}  "
                     f"[{paid}, not charged again]")
        lines.append(f"    sql:      {detail.get('sql')}")
        if detail.get("params"):
            lines.append(f"    params:   {_compact(detail['params'])}")
    elif detail:
        lines.append(f"    {_compact(detail)}")
    return lines


def _entry_text(entry: AuditEntry) -> list[str]:
    if isinstance(entry, AuditEvent):
        return _event_text(entry)
    if not isinstance(entry, AuditCharge):
        return [f"reset #{entry.id}  {entry.at}  {entry.analyst}  {entry.database}",
                f"    cleared {entry.charges_cleared} charge(s): epsilon "
                f"{entry.epsilon_cleared!r}, delta {entry.delta_cleared!r}"]
    lines = [
        f"charge #{entry.id}  {entry.at}  {entry.analyst}  {entry.database}",
        f"    epsilon {entry.epsilon!r}  delta {entry.delta!r}  {entry.mechanism}  "
        f"[{entry.state}]",
        f"    sql:      {'(not recorded)' if entry.sql is None else entry.sql}",
    ]
    if entry.params is not None:
        lines.append(f"    params:   {_compact(entry.params)}")
    if entry.released is not None:
        columns = entry.released.get("columns")
        if columns is not None:
            lines.append(f"    columns:  {_compact(columns)}")
        rows = entry.released.get("rows", [])
        lines.append(f"    released: {len(rows)} row(s) at {entry.released_at}")
        lines.extend(f"      {_compact(row)}" for row in rows)
    return lines


@command.command("log")
@ledger_option()
@metadata_option(help="Take the ledger from this metadata file's ledger: line.")
@analyst_option(help="Only this analyst's entries (default: $DPSQL_ANALYST, else all).")
@database_option(help="Only entries on this database (DuckDB file or spark://NAME).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one array) instead of text.")
@click.option("--limit", type=click.IntRange(min=0), help="Only the newest N entries.")
def log(ledger: str | None, metadata: Path | None, analyst: str | None, database: str | None,
        as_json: bool, limit: int | None) -> None:
    """Print the audit log, oldest first."""
    ledger = ledger_path(ledger, metadata)
    identity = None if database is None else database_identity(database)
    with Ledger(ledger, create=False) as book:
        entries = book.audit(database=identity, analyst=analyst, limit=limit, events=True)
    if as_json:
        click.echo(json.dumps([_entry_json(e) for e in entries], indent=2, ensure_ascii=False))
    elif not entries:
        click.echo("the audit log has no entries" + (" matching the filters"
                                                      if analyst or database else ""))
    else:
        click.echo("\n".join(line for e in entries for line in _entry_text(e)))
