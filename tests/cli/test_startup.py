"""`dpsql --help` and `dpsql budget ...` start fast: the CLI imports its heavy dependencies
(sqlglot, DuckDB, numpy, prompt_toolkit, ...) only in the commands that run queries.

Asserted on what is imported, not on wall time: import lists do not depend on the machine's load.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("duckdb", "numpy", "sqlglot", "sqlglotc", "scipy", "prompt_toolkit", "pyspark", "pandas",
         "tabulate", "pygments")


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)


def _imported_by_importtime(stmt: str) -> set[str]:
    """Every module `python -X importtime` reports while running ``stmt``."""
    proc = _run(stmt, "-X", "importtime")
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":  # the header line
                names.add(name)
    return names


def _heavy(names: set[str]) -> list[str]:
    return sorted(n for n in names if n.split(".")[0] in HEAVY or n == "dpsql.dbapi")


def test_importing_the_cli_loads_no_heavy_dependency() -> None:
    names = _imported_by_importtime("import dpsql.cli.main")
    assert "dpsql.cli.main" in names and "click" in names  # the parse did see the imports
    assert _heavy(names) == []


def test_import_dpsql_is_lazy_about_the_driver() -> None:
    names = _imported_by_importtime("import dpsql")
    assert "dpsql.errors" in names
    assert _heavy(names) == []


def _modules_after(argv: list[str]) -> list[str]:
    """The heavy modules loaded after running `dpsql ARGV` in a fresh interpreter."""
    code = (
        "import json, sys\n"
        "from dpsql.cli.main import main\n"
        f"rv = main({argv!r})\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} "
        "or m == 'dpsql.dbapi')\n"
        "print(json.dumps([rv, heavy]))\n"
    )
    out = _run(code).stdout.strip().splitlines()[-1]
    rv, heavy = json.loads(out)
    assert rv == 0
    return heavy


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["budget", "--help"],
    ["budget", "show", "--help"],
    ["query", "--help"],
    ["shell", "--help"],
    ["explain", "--help"],
    ["metadata", "build", "--help"],
    ["demo", "--help"],
])
def test_help_loads_no_heavy_dependency(argv: list[str]) -> None:
    assert _modules_after(argv) == []


def test_budget_commands_touch_only_the_ledger(tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger.sqlite")
    common = ["--ledger", ledger, "--analyst", "alice", "--database", str(tmp_path / "d.duckdb")]
    assert _modules_after(["budget", "set", *common, "--epsilon", "1"]) == []
    assert _modules_after(["budget", "show", *common, "--json"]) == []
    assert _modules_after(["budget", "reset", *common, "--yes"]) == []
    assert _modules_after(["audit", "log", "--ledger", ledger, "--json"]) == []
    assert _modules_after(["analyst", "list", "--ledger", ledger]) == []


def test_lazy_pep249_names() -> None:
    code = (
        "import sys, dpsql\n"
        "assert 'dpsql.dbapi' not in sys.modules\n"
        "assert dpsql.apilevel == '2.0' and dpsql.threadsafety == 1\n"
        "assert dpsql.paramstyle == 'qmark' and issubclass(dpsql.ProgrammingError, dpsql.Error)\n"
        "assert set(dpsql.__all__) <= set(dir(dpsql))\n"
        "assert 'dpsql.dbapi' not in sys.modules\n"
        "from dpsql import dbapi\n"
        "for name in ('Connection', 'Cursor', 'connect', 'Date', 'Binary', 'STRING', 'NUMBER',\n"
        "             'DATETIME', 'BINARY', 'ROWID', 'Time', 'Timestamp', 'DateFromTicks',\n"
        "             'TimeFromTicks', 'TimestampFromTicks'):\n"
        "    assert getattr(dpsql, name) is getattr(dbapi, name), name\n"
        "    assert name in dpsql.__all__, name\n"
        "assert dpsql.session is sys.modules['dpsql.session']\n"
        "try:\n"
        "    dpsql.no_such_name\n"
        "except AttributeError as err:\n"
        "    assert 'no_such_name' in str(err)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
        "ns = {}\n"
        "exec('from dpsql import *', ns)\n"
        "assert {k for k in ns if not k.startswith('__')} == set(dpsql.__all__)\n"
    )
    _run(code)
