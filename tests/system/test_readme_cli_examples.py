"""Every `dpsql ...` command in the README's shell blocks runs as written (exit status 0), in
order, in the demo folder the README says to run them in (a small demo shop: shop.duckdb,
shop.yaml, ledger.sqlite, plus the report.sql a shell example reads). The few examples that
cannot run here are listed in SKIPPED with the reason, and the test fails if that list goes
stale, so a new example is run by default."""

from __future__ import annotations

import io
import shlex
import sys
from pathlib import Path

import pytest

from dpsql.cli.main import main
from dpsql.demo import create_demo

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# an example (its first words) -> why it is not run here
SKIPPED = {
    "dpsql demo": "builds the full-size demo and runs the tour (tests/system/test_demo.py); "
                  "the fixture builds a small one instead",
    "dpsql serve": "runs until stopped; tests/server start it as a process",
    "dpsql analyst add": "asks for a password on a hidden prompt (tests/cli/test_analyst.py "
                         "drives it with --password-stdin)",
    "dpsql audit -m": "needs the owner's sample.duckdb and draws 8000 releases "
                      "(tests/cli/test_privacy_audit.py)",
    "dpsql metadata build -d tpch.duckdb": "needs TPC-H (tests/metadata/test_build_multi.py "
                                           "drafts the same on SF 0.01)",
    "dpsql metadata check -m units2.yaml": "checks that TPC-H draft",
}
SPARK = "--backend spark"  # needs a Spark cluster (tests/system/test_spark_connect.py)


def readme_commands() -> list[list[str]]:
    """The `dpsql` lines of the README's unlabelled code blocks, split as a shell would (with
    comments dropped and backslash continuations joined)."""
    commands: list[list[str]] = []
    fence: str | None = None  # the open block's language ("" for a plain block)
    pending = ""
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            continue
        if fence != "":
            continue
        if pending or line.startswith("dpsql "):
            pending += line[:-1] + " " if line.endswith("\\") else line
            if not line.endswith("\\"):
                commands.append(shlex.split(pending, comments=True))
                pending = ""
    return commands


def _skip_reason(argv: list[str]) -> str | None:
    line = " ".join(argv)
    if SPARK in line:
        return "Spark"
    return next((why for head, why in SKIPPED.items() if line.startswith(head)), None)


def test_the_readme_has_cli_examples_and_skips_only_what_it_lists() -> None:
    commands = readme_commands()
    assert len(commands) >= 10
    for head in SKIPPED:
        assert any(" ".join(c).startswith(head) for c in commands), f"{head} is stale"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    demo = create_demo(home / "demo", customers=500, orders=5_000, products=50)
    work = demo.folder
    (work / "report.sql").write_text(
        "SELECT status, COUNT(*) AS n FROM orders GROUP BY status;\n\\budget\n")
    monkeypatch.setenv("DPSQL_HOME", str(home))
    for name in ("DPSQL_LEDGER", "DPSQL_ANALYST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(work)
    return work


def test_every_readme_example_runs(folder: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    failures, ran = [], 0
    for argv in readme_commands():
        if _skip_reason(argv) is not None:
            continue
        args, stdin = argv[1:], ""
        if "<" in args:  # `dpsql shell ... < report.sql`
            at = args.index("<")
            stdin = (folder / args[at + 1]).read_text(encoding="utf-8")
            args = args[:at] + args[at + 2:]
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(args)
        out = capsys.readouterr()
        ran += 1
        if code != 0:
            failures.append(f"{shlex.join(argv)}\n  exit {code}: {out.err.strip()[:300]}")
    assert not failures, "README examples that fail as written:\n" + "\n".join(failures)
    assert ran >= 10
