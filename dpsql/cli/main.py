"""Entry point of the `dpsql` command: one click group, one module per subcommand."""

from __future__ import annotations

import importlib
import sys

import click

from dpsql.errors import Error

# Subcommand modules; each defines ``command`` (a click command or group).
_SUBCOMMANDS: tuple[str, ...] = (
    "explain", "query", "metadata", "budget", "analyst", "audit", "shell", "demo", "serve")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dpsql")
def cli() -> None:
    """dpsql: differentially private SQL over DuckDB."""


for _name in _SUBCOMMANDS:
    cli.add_command(importlib.import_module(f"dpsql.cli.{_name}").command)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a dpsql error becomes one readable line and exit status 1, never a traceback."""
    try:
        # standalone_mode=False returns ctx.exit()'s code instead of calling sys.exit
        rv = cli.main(args=argv, prog_name="dpsql", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except Error as exc:
        click.echo(click.style(f"error: {exc.message}", fg="red"), err=True)
        return 1
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
