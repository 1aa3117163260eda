"""The interactive `dpsql shell`, driven in a pseudo-terminal as a person would use it."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pexpect
import pytest

from dpsql.demo import DemoFiles
from tests.system.demo_copies import demo_copy, demo_template

PROMPT = "dpsql>"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> DemoFiles:
    return demo_template(tmp_path_factory.mktemp("template"))


@pytest.fixture
def shop(template: DemoFiles, tmp_path: Path) -> DemoFiles:
    """A fresh copy of the small shop per test, with demo's full budget."""
    return demo_copy(template, tmp_path)


def spawn(shop: DemoFiles, *extra: str) -> pexpect.spawn:
    env = dict(
        os.environ,
        TERM="xterm",
        PAGER="less",
        LESS="-R",
        DPSQL_HOME=str(shop.folder.parent),
        # pexpect does not answer prompt_toolkit's cursor-position request as a terminal would
        PROMPT_TOOLKIT_NO_CPR="1",
    )
    child = pexpect.spawn(
        sys.executable,
        ["-m", "dpsql.cli.main", "shell", str(shop.database), "--metadata", str(shop.metadata),
         "--analyst", "demo", *extra],
        env=env, encoding="utf-8", timeout=20, dimensions=(40, 160),
    )
    child.expect(PROMPT)
    return child


def type_slowly(child: pexpect.spawn, text: str) -> None:
    """Type like a person: completion runs in the background between keystrokes."""
    child.send(text)
    time.sleep(0.3)


def plain(text: str) -> str:
    return ANSI.sub("", text).replace("\r", "")


def spent_line(child: pexpect.spawn) -> str:
    child.sendline("\\budget")
    child.expect(r"spent: +epsilon [^\r\n]+")
    line = child.after
    child.expect(PROMPT)
    return line


def test_session(shop: DemoFiles) -> None:
    child = spawn(shop)
    # the banner said who pays and how much is left
    assert "analyst demo" in plain(child.before) and "epsilon 10" in plain(child.before)

    # a statement over two lines: Enter continues until the ';'
    child.send("SELECT COUNT(*) AS n\r")
    child.expect(r"\.\.\.>")
    child.send("FROM orders;\r")
    child.expect(r"spent epsilon=0\.1 delta=0; remaining epsilon=9\.9 delta=1e-06; "
                 r"95% interval: n ±[0-9.]+")
    table = plain(child.before).splitlines()
    assert table[-1] == "(1 row)"  # psql's footer, then the release line
    assert table[-4].strip() == "n" and set(table[-3].strip()) == {"-"}
    assert abs(int(table[-2]) - 5_000) < 500
    child.expect(PROMPT)

    assert spent_line(child) == "spent:     epsilon 0.1  delta 0  (1 charges)"

    # a rejected query: one red line with the fix, and nothing spent
    child.sendline("SELECT customer_id FROM orders;")
    child.expect(r"\x1b\[31merror: column 'customer_id' is neither aggregated nor a GROUP BY "
                 r"key, so it would release raw values: aggregate it")
    child.expect(PROMPT)
    assert "Traceback" not in child.before
    assert spent_line(child) == "spent:     epsilon 0.1  delta 0  (1 charges)"

    # Ctrl-C throws the half-typed line away; the session goes on
    type_slowly(child, "SELECT garbage FROM")
    child.sendcontrol("c")
    child.expect(PROMPT)
    child.sendline("\\epsilon")
    child.expect("epsilon per query: 0.1")
    child.expect(PROMPT)

    # Ctrl-D leaves with status 0
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    history = (shop.folder.parent / "shell_history").read_text(encoding="utf-8")
    assert "+SELECT COUNT(*) AS n\n+FROM orders;" in history
    assert "garbage" not in history


def test_tab_completion_owner_commands_and_history_search(shop: DemoFiles) -> None:
    """One shell (a real process costs ~1 CPU-s to start): Tab completes table names; the
    owner's \\explain is refused to an analyst; Ctrl-R, then typed text, finds an earlier
    statement (the text goes to the search, not to the line), Enter takes it and Enter runs it
    (a repeat: the cached answer)."""
    child = spawn(shop)
    type_slowly(child, "\\describe cust")
    type_slowly(child, "\t")
    child.send("\r")
    child.expect(r"customers \(private table")  # the completed name was run
    child.expect(PROMPT)

    type_slowly(child, "SELECT COUNT(*) AS n FROM ord")
    type_slowly(child, "\t")
    child.send(";\r")
    child.expect(r"spent epsilon=0\.1")
    child.expect(PROMPT)

    child.sendline("\\explain SELECT COUNT(*) FROM orders")
    child.expect(r"error: \\explain is for the data owner only")
    child.expect(PROMPT)

    child.send("\\budget\r")
    child.expect("change with")
    child.expect(PROMPT)
    child.sendcontrol("r")
    child.expect("reverse-i-search")
    type_slowly(child, "AS n")
    child.send("\r")
    time.sleep(0.3)
    child.send("\r")
    child.expect("cached answer, spent nothing")
    child.expect(PROMPT)

    child.sendline("\\q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_tall_results_go_through_the_pager(shop: DemoFiles) -> None:
    """50 product rows in a 20-line terminal: less shows them and waits; q returns to the
    prompt. \\pager off prints them straight."""
    child = spawn(shop, "--format", "table")
    child.setwinsize(20, 160)
    child.send("SELECT product_id, COUNT(*) AS n FROM orders GROUP BY product_id;\r")
    child.expect(r"\r\n:\x1b\[K")  # less shows the first screen and waits at its ":" prompt
    child.send("q")
    child.expect(r"\(50 rows\)")
    child.expect(PROMPT)
    child.send("\\pager off\r")
    child.expect("pager is off")
    child.expect(PROMPT)
    child.send("SELECT product_id, COUNT(*) AS m FROM orders GROUP BY product_id;\r")
    child.expect(r"\(50 rows\)")
    assert "(END)" not in child.before
    child.expect(PROMPT)
    child.sendcontrol("d")
    child.expect(pexpect.EOF)
