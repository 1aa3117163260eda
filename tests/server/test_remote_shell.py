"""`dpsql shell postgresql://...`: the shell as a client of a real server process."""

from __future__ import annotations

import os
import subprocess
import sys

import pexpect
import pytest

from tests.server.serving import ServerProcess

# one xdist worker runs this module: its server process is
# built once per run, not once per worker (issue #13)
pytestmark = pytest.mark.xdist_group("server-remote-shell")


def _env() -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1", "DPSQL_HOME": os.environ.get("DPSQL_HOME", "/tmp")}


def test_batch_remote_shell_queries_describes_and_reports_the_budget(
        server: ServerProcess) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dpsql.cli.main", "shell", server.url("bob"), "--epsilon", "0.3",
         "-c", "SELECT status, COUNT(*) AS n FROM orders GROUP BY status;\n\\d orders\n\\tables"],
        capture_output=True, text=True, env=_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "shipped" in out.stdout and "returned" in out.stdout
    assert "order_cost" in out.stdout  # \d orders, from the server's analyst-facing schema
    assert "customers" not in out.stdout  # bob is not granted customers
    assert "spent epsilon=0.3" in out.stderr  # footers on standard error
    assert "max_freq" not in out.stdout


def test_remote_shell_refuses_owner_flags(server: ServerProcess) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dpsql.cli.main", "shell", server.url(), "-m", "x.yaml",
         "-c", "SELECT 1"], capture_output=True, text=True, env=_env(), timeout=60)
    assert out.returncode != 0
    assert "server URL takes no --metadata" in out.stderr


def test_interactive_remote_shell_in_a_pseudo_terminal(server: ServerProcess) -> None:
    child = pexpect.spawn(sys.executable, ["-m", "dpsql.cli.main", "shell", server.url()],
                          env=_env(), encoding="utf-8", timeout=60, dimensions=(40, 200))
    try:
        child.expect(r"alice@")  # the banner names the server connection
        child.sendline("SELECT COUNT(*) AS n FROM orders WHERE quantity = 4;")
        child.expect(r"\bn\b")
        child.expect(r"epsilon")
        child.sendline("\\q")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
