"""One CLI convention (dpsql/cli/options.py): a shared flag means the same thing, with the same
parameter name, type and default, in every `dpsql` command that has it; introspected from the
click commands themselves (dpsql.cli.main.cli), so a copy that drifts fails here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click
import pytest

from dpsql.cli.main import cli
from dpsql.cli.options import DEFAULT_DELTA, DEFAULT_EPSILON


def _commands(group: click.Group = cli, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        path = f"{prefix}{name}"
        if isinstance(command, click.Group):
            yield from _commands(command, path + " ")
        if command.callback is not None and (not isinstance(command, click.Group)
                                              or path == "audit"):
            yield path, command


COMMANDS = dict(_commands())
# `dpsql audit SQL` is the `privacy` subcommand of the audit group
COMMANDS.pop("audit", None)

# flag -> (the option strings, the parameter name)
SHARED = {
    "--metadata": (("-m", "--metadata"), "metadata"),
    "--database": (("-d", "--database"), "database"),
    "--epsilon": (("-e", "--epsilon"), "epsilon"),
    "--delta": (("--delta",), "delta"),
    "--analyst": (("-a", "--analyst"), "analyst"),
    "--ledger": (("-l", "--ledger"), "ledger"),
    "--format": (("-f", "--format"), "fmt"),
    "--raw": (("--raw",), "raw_counts"),
}
# `budget set` grants totals: same flags and names, but required epsilon and a delta of 0
TOTALS = {"budget set"}

# Which commands must have which shared flag (the brief's list: query, shell, explain, budget,
# serve, audit, metadata build).
EXPECTED = {
    "--metadata": {"query", "shell", "explain", "audit privacy", "serve", "budget set",
                   "budget show", "budget reset", "budget list", "audit log",
                   "metadata analyst-schema", "metadata check"},
    "--database": {"query", "shell", "explain", "audit privacy", "serve", "budget set",
                   "budget show", "budget reset", "budget list", "audit log", "metadata build",
                   "metadata check"},
    "--epsilon": {"query", "shell", "explain", "audit privacy", "budget set"},
    "--delta": {"query", "shell", "explain", "audit privacy", "budget set"},
    "--analyst": {"query", "shell", "budget set", "budget show", "budget reset", "budget list",
                  "audit log"},
    "--ledger": {"query", "shell", "serve", "budget set", "budget show", "budget reset",
                 "budget list", "audit log", "metadata build", "analyst add", "analyst list"},
    "--format": {"query", "shell", "budget list"},
    "--raw": {"query", "shell"},  # counts as drawn (dpsql.connect(raw_counts=True))
}


def _option(command: click.Command, flag: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and flag in param.opts:
            return param
    return None


def _shape(option: click.Option) -> dict[str, Any]:
    info = option.to_info_dict()
    return {"opts": sorted(option.opts), "name": option.name, "type": info["type"],
            "default": option.default, "envvar": option.envvar, "multiple": option.multiple}


def _holders(flag: str) -> list[str]:
    return [name for name, command in COMMANDS.items() if _option(command, flag) is not None]


def test_the_commands_are_found() -> None:
    assert {"query", "shell", "explain", "audit privacy", "audit log", "serve", "budget set",
            "budget show", "budget reset", "budget list", "metadata build"} <= set(COMMANDS)


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_each_expected_command_has_the_flag(flag: str) -> None:
    missing = EXPECTED[flag] - set(_holders(flag))
    assert not missing, f"{flag} is missing from {sorted(missing)}"


@pytest.mark.parametrize(("flag", "command"),
                         [(f, c) for f in sorted(SHARED) for c in _holders(f)])
def test_a_shared_flag_means_the_same_everywhere(flag: str, command: str) -> None:
    opts, name = SHARED[flag]
    option = _option(COMMANDS[command], flag)
    assert option is not None
    shape = _shape(option)
    assert shape["opts"] == sorted(opts), f"{command}: {flag} is spelled {option.opts}"
    assert shape["name"] == name
    if command in TOTALS and flag in ("--epsilon", "--delta"):
        return  # checked by test_budget_set_grants_totals
    reference = _option(COMMANDS["query"], flag) if flag != "--format" else None
    if reference is None:
        reference = _option(COMMANDS["shell"], flag)
    assert reference is not None
    assert shape == _shape(reference), f"{command} {flag} differs from the other commands'"


def test_per_query_defaults() -> None:
    for command in EXPECTED["--epsilon"] - TOTALS:
        epsilon = _option(COMMANDS[command], "--epsilon")
        delta = _option(COMMANDS[command], "--delta")
        assert epsilon is not None and delta is not None
        assert (epsilon.default, delta.default) == (DEFAULT_EPSILON, DEFAULT_DELTA) == (0.1, 1e-8)
        assert not epsilon.required


def test_budget_set_grants_totals() -> None:
    epsilon = _option(COMMANDS["budget set"], "--epsilon")
    delta = _option(COMMANDS["budget set"], "--delta")
    assert epsilon is not None and epsilon.required
    assert delta is not None and delta.default == 0.0  # no delta unless the owner grants it


def test_short_flags_are_not_reused_for_something_else() -> None:
    """-e is epsilon everywhere (the shell's "run this" is psql's -c); -m, -d, -a, -l, -f
    likewise mean only their shared flag."""
    shorts = {opts[0]: flag for flag, (opts, _) in SHARED.items() if opts[0].startswith("-")
              and not opts[0].startswith("--")}
    for name, command in COMMANDS.items():
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            for short, flag in shorts.items():
                if short in param.opts:
                    assert flag in param.opts, f"{name}: {short} means {param.opts}"
    shell_command = _option(COMMANDS["shell"], "-c")
    assert shell_command is not None and "--command" in shell_command.opts


def test_execute_is_a_deprecated_spelling_of_c(tmp_path) -> None:
    from click.testing import CliRunner

    (tmp_path / "t.csv").write_text("x\n1\n2\n")
    (tmp_path / "t.yaml").write_text(
        "tables:\n  t:\n    source: t.csv\n    columns:\n      x: {max_freq: 1}\n")
    base = ["shell", "-m", str(tmp_path / "t.yaml"), "--no-ledger"]
    runner = CliRunner()
    done = runner.invoke(cli, [*base, "--execute", "\\tables"])
    assert done.exit_code == 0, done.output
    assert "--execute is deprecated; use -c/--command" in done.output
    assert runner.invoke(cli, [*base, "-c", "\\tables"]).exit_code == 0
    both = runner.invoke(cli, [*base, "--execute", "\\q", "-c", "\\q"])
    assert both.exit_code == 2 and "pass one" in both.output


def test_every_spark_master_option_is_spelled_spark_master():
    # `dpsql serve` spelled it --spark while query, shell, explain and metadata build (and the
    # README) say --spark-master: a new user's `serve --spark-master` was a usage error.
    found = []
    for path, command in COMMANDS.items():
        for param in command.params:
            if param.name == "spark_master":
                found.append(path)
                assert "--spark-master" in param.opts, (path, param.opts)
    assert "serve" in found
