"""`dpsql serve`: run the PostgreSQL-protocol server (the owner's command)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click

from dpsql.cli.options import database_option, ledger_option, ledger_path, metadata_option


def _listen(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise click.BadParameter("use HOST:PORT, e.g. 127.0.0.1:5433")
    return host.strip("[]") or "127.0.0.1", int(port)


@click.command("serve")
@metadata_option(required=True, help="The owner's metadata file.")
@database_option(help="The DuckDB database file (omit for tables backed by the metadata's "
                 "sources; with --backend spark, the catalog database).")
@ledger_option(help="The privacy ledger every release is charged to (mandatory). Default: the "
               "metadata's ledger: line, else $DPSQL_LEDGER.")
@click.option("--listen", default="127.0.0.1:5433", show_default=True, callback=_listen,
              help="Address to listen on.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False),
              help="PEM certificate: when given (with --tls-key), clients must use TLS.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False),
              help="PEM private key of --tls-cert.")
@click.option("--backend", type=click.Choice(["duckdb", "spark"]), default="duckdb",
              show_default=True)
@click.option("--spark-master", "--spark", "spark_master", default=None, metavar="URL",
              help="Spark master for --backend spark: local[2], spark://host:7077, yarn, ... "
                   "(default local[2]; --spark is the old spelling).")
@click.option("--workers", default=8, show_default=True, type=click.IntRange(1, 256),
              help="Threads answering queries.")
@click.option("--max-failed-logins", default=10, show_default=True, type=click.IntRange(1),
              help="Failed logins from one address per minute before it is refused.")
@click.option("--failed-login-delay", default=0.5, show_default=True,
              type=click.FloatRange(0, 10), help="Seconds a failed login waits before its error.")
def command(metadata: Path, database: str | None, ledger: str | None, listen: tuple[str, int],
            tls_cert: str | None, tls_key: str | None, backend: str, spark_master: str | None,
            workers: int, max_failed_logins: int, failed_login_delay: float) -> None:
    """Serve analysts over the PostgreSQL protocol; they authenticate with SCRAM-SHA-256
    (add them with `dpsql analyst add`) and see only noisy releases."""
    from dpsql.server.app import Server

    ledger = ledger_path(ledger, metadata)
    if not Path(ledger).is_file():
        raise click.BadParameter(f"no such ledger file: {ledger} (create it with 'dpsql "
                                 "analyst add' or 'dpsql budget set')",
                                 param_hint="'-l' / '--ledger'")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    spark = spark_master or ("local[2]" if backend == "spark" else None)
    server = Server(metadata, database, ledger, backend=backend, spark=spark,
                    tls_cert=tls_cert, tls_key=tls_key, workers=workers,
                    login_limit=max_failed_logins, failed_login_delay=failed_login_delay)

    def ready(bound: tuple[str, int]) -> None:
        click.echo(f"dpsql: serving {database or metadata} on {bound[0]}:{bound[1]} "
                   f"(ledger {ledger}{', TLS' if server.tls_context else ''})", err=True)

    try:
        asyncio.run(server.serve_forever(*listen, ready=ready))
    finally:
        server.close()
    click.echo("dpsql: stopped (SIGTERM or Ctrl-C); the ledger is closed", err=True)
