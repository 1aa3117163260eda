"""`dpsql shell` in batch mode (-c and scripts on standard input), run as a real process on a
small demo shop: every backslash command, exit statuses, error lines, and the budget."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from dpsql.accounting import Ledger, database_identity
from dpsql.cli.commands import COMMANDS
from dpsql.cli.main import main
from dpsql.demo import DemoFiles
from dpsql.metadata import dump_metadata, load_metadata
from tests.system.demo_copies import demo_copy, demo_template

JOIN = ("SELECT COUNT(*) AS n FROM orders o JOIN customers c "
        "ON o.customer_id = c.customer_id")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> DemoFiles:
    return demo_template(tmp_path_factory.mktemp("template"))


@pytest.fixture
def shop(template: DemoFiles, tmp_path: Path) -> DemoFiles:
    """A fresh copy of the small shop per test, with demo's full budget."""
    return demo_copy(template, tmp_path)


@dataclass
class Run:
    """What one run of the shell did."""

    returncode: int
    stdout: str
    stderr: str


ShellRunner = Callable[..., Run]


@pytest.fixture
def sh(shop: DemoFiles, capsys: pytest.CaptureFixture[str],
       monkeypatch: pytest.MonkeyPatch) -> ShellRunner:
    """``sh(*args, stdin=None, owner=False, process=False)`` runs ``dpsql shell`` on ``shop``
    through its entry point in this process (``stdin``, when given, is the piped script), or as
    a real process with ``process=True`` (one test does: the file stays fast)."""
    monkeypatch.setenv("DPSQL_HOME", str(shop.folder.parent))  # history goes there

    def run(*args: str, stdin: str | None = None, owner: bool = False,
            process: bool = False) -> Run:
        argv = ["shell", str(shop.database), "--metadata", str(shop.metadata), "--analyst",
                "demo", *args, *(["--owner"] if owner else [])]
        if not process:
            # a piped script: standard input that is not a terminal
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin or ""))
            capsys.readouterr()
            code = main(argv)
            out = capsys.readouterr()
            assert "Traceback" not in out.out + out.err
            return Run(code, out.out, out.err)
        proc = subprocess.run([sys.executable, "-m", "dpsql.cli.main", *argv], input=stdin,
                              capture_output=True, text=True, env=dict(os.environ),
                              timeout=60)
        assert "Traceback" not in proc.stderr + proc.stdout
        return Run(proc.returncode, proc.stdout, proc.stderr)

    return run


def spent(shop: DemoFiles) -> tuple[float, float, int]:
    with Ledger(shop.ledger) as ledger:
        status = ledger.status(database_identity(shop.database), "demo")
    return status.epsilon_spent, status.delta_spent, len(status.history)


# -- SQL ----------------------------------------------------------------------------------------


def test_execute_option_prints_table_and_release_line(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "SELECT COUNT(*) AS n FROM orders")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].strip() == "n" and set(lines[1]) == {"-"}
    assert abs(int(lines[2]) - 5_000) < 500  # epsilon 0.1: the noise is tens, not hundreds
    assert len(lines) == 3  # the data alone on standard output; the footers on standard error
    footers = proc.stderr.splitlines()
    assert footers[0] == "(1 row)"
    assert footers[1].startswith("spent epsilon=0.1 delta=0; remaining epsilon=9.9 delta=1e-06; "
                                 "95% interval: n ±")
    assert spent(shop) == (0.1, 0.0, 1)


def test_repeated_command_options_run_in_order_as_in_psql(shop: DemoFiles,
                                                          sh: ShellRunner) -> None:
    # found by the units QA: only the last -c ran, silently (psql runs each, in order)
    proc = sh("-c", "SELECT COUNT(*) AS first FROM orders", "-c", "\\budget",
              "-c", "SELECT COUNT(*) AS second FROM customers")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.index("first") < out.index("budget:") < out.index("second")
    assert spent(shop)[2] == 2
    # the first error stops the rest, with status 1
    proc = sh("-c", "SELECT order_id FROM orders", "-c", "SELECT COUNT(*) AS third FROM orders")
    assert proc.returncode == 1 and "third" not in proc.stdout
    assert spent(shop)[2] == 2


def test_stdin_script_multiline_statements_and_comments(shop: DemoFiles, sh: ShellRunner) -> None:
    script = (
        "-- revenue by status\n"
        "SELECT status,\n"
        "       SUM(order_cost) AS revenue   -- clamped to the declared bounds\n"
        "FROM orders\n"
        "GROUP BY status; SELECT COUNT(*) AS n_customers FROM customers;\n"
        "/* a trailing comment; with a semicolon */\n"
    )
    proc = sh("--epsilon", "0.5", stdin=script, process=True)  # the one real process
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for status in ("delivered", "shipped", "processing", "cancelled", "returned"):
        assert status in out
    assert "n_customers" in out
    assert proc.stderr.count("spent epsilon=0.5") == 2
    assert proc.stderr.count("(5 rows)") == 1 and proc.stderr.count("(1 row)") == 1
    assert spent(shop)[0] == pytest.approx(1.0)


def test_first_error_stops_the_script_with_status_1(shop: DemoFiles, sh: ShellRunner) -> None:
    script = ("SELECT COUNT(*) AS first FROM orders;\n"
              "SELECT order_id FROM orders;\n"
              "SELECT COUNT(*) AS third FROM orders;\n")
    proc = sh(stdin=script)
    assert proc.returncode == 1
    assert "first" in proc.stdout and "third" not in proc.stdout
    err = proc.stderr.strip().splitlines()
    assert err[0] == "(1 row)" and err[1].startswith("spent epsilon=0.1")
    assert len(err) == 3  # the first query's footers, then one error line, no traceback
    assert err[2].startswith("error: column 'order_id' is neither aggregated nor a GROUP BY key")
    assert "aggregate it (COUNT/SUM/AVG) or add it to GROUP BY" in err[2]  # the fix
    assert spent(shop) == (0.1, 0.0, 1)  # only the first query was charged


def test_rejected_query_spends_nothing(shop: DemoFiles, sh: ShellRunner) -> None:
    for sql in ("SELECT customer_id, order_cost FROM orders",  # raw rows
                "SELECT SUM(price) AS s FROM orders",  # unknown column
                "SELECT country, COUNT(*) FROM customers c JOIN orders o "
                "ON o.customer_id < c.customer_id GROUP BY country",  # non-equijoin
                "DELETE FROM orders"):
        proc = sh("-c", sql)
        assert proc.returncode == 1
        assert proc.stderr.startswith("error: ") and proc.stdout == ""
    assert spent(shop) == (0.0, 0.0, 0)


def test_parse_error_reports_its_position_in_the_script(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh(stdin="\\budget\n\nSELECT COUNT(*)\n  FRM orders;\n")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: SQL syntax error")
    assert "(line 4, column " in proc.stderr  # line 2 of a statement starting on line 3
    proc = sh("-c", "SELECT COUNT(*) FROM orders WHERE")
    assert "(line 1, column " in proc.stderr
    # psql's two lines: the statement's line, and a caret under the offending token
    proc = sh("-c", "SELECT COUNT(*) FROM orders o WHRE o.status = 'new'")
    assert proc.stderr.splitlines() == [
        "error: SQL syntax error: unexpected 'WHRE'; did you mean WHERE instead of WHRE? "
        "(line 1, column 31)",
        "LINE 1: SELECT COUNT(*) FROM orders o WHRE o.status = 'new'",
        "                                      ^",
    ]


def test_budget_exhausted_is_one_line_and_spends_nothing(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("--epsilon", "11", "-c", "SELECT COUNT(*) FROM orders")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and len(proc.stderr.splitlines()) == 1
    assert spent(shop) == (0.0, 0.0, 0)


def test_repeated_query_is_cached_and_free(shop: DemoFiles, sh: ShellRunner) -> None:
    first = sh("-c", "SELECT COUNT(*) AS n FROM orders")
    second = sh("-c", "SELECT COUNT(*) AS n FROM orders")
    assert first.stdout.splitlines()[2] == second.stdout.splitlines()[2]  # same noisy answer
    assert second.stderr.splitlines()[1].startswith("cached answer, spent nothing")
    assert spent(shop)[2] == 1


# -- backslash commands --------------------------------------------------------------------------


def test_tables_lists_public_and_private(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "\\tables")
    assert proc.returncode == 0
    rows = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines()[2:]}
    assert rows == {"customers": "private", "orders": "private", "products": "public",
                    "recommendations": "private"}


def test_tables_and_describe_name_the_privacy_unit_and_each_path(shop: DemoFiles,
                                                                 sh: ShellRunner) -> None:
    # found by the units QA: under a privacy unit neither \\tables nor \\describe said what
    # a release protects or how a table reaches the unit (only each answer's footer did)
    text = shop.metadata.read_text()
    text = text.replace("  orders:\n", "  orders:\n    unit: customer_id\n", 1)
    text = text.replace("  recommendations:\n", "  recommendations:\n    unit: customer_id\n", 1)
    shop.metadata.write_text("privacy_unit: {table: customers, column: customer_id}\n" + text)
    proc = sh("-c", "\\tables", "-c", "\\describe orders", "-c", "\\describe customers",
              "-c", "\\describe products")
    assert proc.returncode == 0, proc.stderr
    protects = ("privacy unit: every release protects each customers.customer_id, with every "
                "row linked to it")
    out = proc.stdout.splitlines()
    assert f"{protects} (\\describe TABLE shows its path)" in out
    assert f"{protects}; this table: unit customer_id -> customers.customer_id" in out
    assert f"{protects}; this table: the privacy unit's table (id customer_id)" in out
    assert sum(line.startswith("privacy unit:") for line in out) == 3  # public: no line


def test_describe_shows_policy_never_max_frequencies(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "\\describe orders")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0] == "orders (private table: only noisy aggregates are released)"
    assert lines[1].split() == ["column", "type", "releasable", "bounds", "domain"]
    cells = {line.split()[0]: line.split()[1:] for line in lines[3:]}
    assert cells["order_cost"] == ["DOUBLE", "no", "[0,", "1000]"]
    assert cells["status"] == ["VARCHAR", "yes", "delivered,", "shipped,", "processing,",
                               "cancelled,", "returned"]
    assert cells["product_id"] == ["BIGINT", "yes", "products.product_id"]
    assert cells["customer_id"] == ["BIGINT", "no"]
    # the data-dependent numbers stay in the owner's metadata file
    md = load_metadata(shop.metadata)
    assert md.table("orders").column("customer_id").max_freq is not None
    assert "freq" not in proc.stdout.lower() and "rows" not in proc.stdout.lower()
    public = sh("-c", "\\d products")
    assert public.stdout.startswith("products (public table")
    assert "its own values" in public.stdout


def test_describe_unknown_table_is_an_error(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "\\describe order")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: table 'order' is not declared in the metadata; "
                                  "declared tables: customers, orders")
    assert sh("-c", "\\describe").returncode == 1


def test_budget_command(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "SELECT COUNT(*) FROM orders;\n\\budget\n")
    assert proc.returncode == 0
    tail = proc.stdout.splitlines()[-5:]
    assert tail == [
        "analyst:   demo",
        "budget:    epsilon 10  delta 1e-06",
        "spent:     epsilon 0.1  delta 0  (1 charges)",
        "remaining: epsilon 9.9  delta 1e-06",
        "per query: epsilon 0.1  delta 1e-08  (change with \\epsilon E, \\delta D)",
    ]


def test_budget_command_without_a_budget_says_so(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-a", "nobody", "-c", "\\budget")
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[:2] == [
        "analyst:   nobody",
        "budget:    none on this database: every query of private tables is refused; ask the "
        "data owner for one (dpsql budget set)",
    ]
    assert "spent:" not in proc.stdout


def test_epsilon_command_sets_the_per_query_spend(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "\\epsilon 0.25\nSELECT COUNT(*) FROM orders;\n\\epsilon\n")
    assert proc.returncode == 0
    assert "epsilon per query: 0.25" in proc.stdout
    assert "spent epsilon=0.25 delta=0" in proc.stderr
    assert spent(shop)[0] == 0.25
    for bad in ("0", "-1", "abc", "nan"):
        proc = sh("-c", f"\\epsilon {bad}")
        assert proc.returncode == 1 and proc.stderr.startswith("error: epsilon must be")


def test_delta_command_enables_joins_of_private_tables(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", f"\\delta 0\n{JOIN};\n")
    assert proc.returncode == 1
    assert "needs delta > 0" in proc.stderr
    proc = sh("-c", f"\\delta 1e-7\n{JOIN};\n")
    assert proc.returncode == 0, proc.stderr
    assert "delta per query: 1e-07" in proc.stdout
    assert "spent epsilon=0.1 delta=1e-07" in proc.stderr
    assert "95% interval" not in proc.stderr  # smoothed: its error bar would depend on the data
    assert spent(shop) == (0.1, 1e-7, 1)
    assert sh("-c", "\\delta 1").returncode == 1


def test_mechanism_command_switches_to_the_gaussian(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "\\mechanism\n\\mechanism gaussian\n\\delta 1e-7\n"
              "SELECT COUNT(*) FROM orders;\n")
    assert proc.returncode == 0, proc.stderr
    assert "mechanism: laplace" in proc.stdout and "mechanism: gaussian" in proc.stdout
    assert "spent epsilon=0.1 delta=1e-07" in proc.stderr
    with Ledger(shop.ledger) as ledger:
        (charge,) = ledger.status(database_identity(shop.database), "demo").history
    assert charge.mechanism == "discrete_gaussian"
    # a join of private tables is refused for the Gaussian, before the charge
    proc = sh("-c", f"\\mechanism gaussian\n\\delta 1e-7\n{JOIN};\n")
    assert proc.returncode == 1 and "mechanism='laplace'" in proc.stderr
    assert spent(shop)[2] == 1
    proc = sh("-c", "\\mechanism uniform")
    assert proc.returncode == 1 and proc.stderr.startswith("error: unknown mechanism")


def test_format_command(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "\\format csv\nSELECT status, COUNT(*) AS n FROM orders "
              "GROUP BY status ORDER BY status;\n")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0] == "format: csv"
    assert lines[1] == "status,n"
    assert [line.split(",")[0] for line in lines[2:]] == sorted(
        ["cancelled", "delivered", "processing", "returned", "shipped"])
    assert proc.stderr.startswith("(5 rows)\nspent epsilon=0.1")  # data alone on stdout
    proc = sh("-c", "\\format json\nSELECT COUNT(*) AS n FROM orders;\n")
    data = json.loads(proc.stdout.splitlines()[1])
    assert list(data[0]) == ["n"]
    bad = sh("-c", "\\format xml")
    assert bad.returncode == 1 and "use one of table, csv, json" in bad.stderr


def test_format_option(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-f", "csv", "-c", "SELECT COUNT(*) AS n FROM orders")
    assert proc.stdout.splitlines()[0] == "n"


def test_explain_is_refused_without_owner(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", f"\\explain {JOIN}")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: \\explain is for the data owner only")
    assert "--owner" in proc.stderr


def test_explain_works_for_the_owner(shop: DemoFiles, sh: ShellRunner) -> None:
    mf = load_metadata(shop.metadata).table("orders").column("customer_id").max_freq
    proc = sh("-c", f"\\explain {JOIN};", owner=True)
    assert proc.returncode == 0, proc.stderr
    assert f"mf_k(o.customer_id) = ({mf}+k)" in proc.stdout
    assert "smoothed: beta" in proc.stdout and "Laplace scale 2S/epsilon" in proc.stdout
    assert spent(shop) == (0.0, 0.0, 0)  # explaining runs nothing


def test_explain_checks_key_types_the_metadata_leaves_out(shop: DemoFiles,
                                                         sh: ShellRunner) -> None:
    # Without declared types the shell's \\explain sees the types the connection filled in
    # from the database, as the query itself would (dpsql.backends.types).
    md = load_metadata(shop.metadata)
    untyped = dataclasses.replace(md, tables={
        key: dataclasses.replace(t, columns={name: dataclasses.replace(c, type=None)
                                             for name, c in t.columns.items()})
        for key, t in md.tables.items()})
    shop.metadata.write_text(dump_metadata(untyped), encoding="utf-8")
    assert load_metadata(shop.metadata).table("orders").column("customer_id").type is None
    proc = sh("-c", f"\\explain {JOIN};", owner=True)
    assert proc.returncode == 0, proc.stderr
    assert "mf_k(o.customer_id)" in proc.stdout
    assert "NOT checked" not in proc.stdout


def test_help_lists_every_command(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "\\help")
    assert proc.returncode == 0
    for command in COMMANDS:
        assert command.usage in proc.stdout
    one = sh("-c", "\\help describe")
    assert one.stdout.startswith("\\describe TABLE\n  Columns of TABLE")


def test_every_registered_command_has_help_text() -> None:
    """Fails as soon as someone registers a command without explaining it."""
    commands = list(COMMANDS)
    assert len(commands) >= 9
    for command in commands:
        assert command.name.startswith("\\")
        assert command.usage.startswith(command.name), command.name
        assert len(command.help.strip()) >= 20, f"{command.name} has no real help text"


def test_quit_ends_the_script_successfully(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh(stdin="\\q\nSELECT COUNT(*) AS n FROM orders;\n")
    assert proc.returncode == 0 and proc.stdout == ""
    assert spent(shop)[2] == 0


def test_unknown_command_suggests_one(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "\\budgte")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: unknown command \\budgte; did you mean \\budget?")


# -- starting the shell --------------------------------------------------------------------------


def test_usage_errors(shop: DemoFiles, capsys: pytest.CaptureFixture[str]) -> None:
    def usage(*args: str) -> str:
        assert main(["shell", *args, "-c", "\\q"]) == 2
        return capsys.readouterr().err

    assert "missing --metadata" in usage(str(shop.database), "-a", "x")
    assert "missing --analyst" in usage(str(shop.database), "-m", str(shop.metadata))
    assert "--demo chooses" in usage("--demo", "-m", str(shop.metadata))
    assert "two databases" in usage(str(shop.database), "-d", "other.duckdb", "-m",
                                    str(shop.metadata), "-a", "x")
    # -d is the positional DATABASE's option spelling (as in every other command)
    assert main(["shell", "-d", str(shop.database), "-m", str(shop.metadata), "-a", "x",
                 "-c", "\\q"]) == 0


def test_another_ledger_than_the_metadata_s_is_refused(
    shop: DemoFiles, sh: ShellRunner, tmp_path: Path
) -> None:
    proc = sh("--ledger", str(tmp_path / "other.sqlite"), "-c", "\\q")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: the metadata") and "cannot replace it" in proc.stderr
    assert "--ledger on the command line" in proc.stderr  # the command line's own words


def test_no_ledger_is_refused_unless_chosen(
    shop: DemoFiles, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plain = tmp_path / "no-ledger.yaml"
    plain.write_text(dump_metadata(dataclasses.replace(load_metadata(shop.metadata), ledger=None)))
    base = ["shell", str(shop.database), "-m", str(plain), "-a", "x", "-f", "csv"]
    assert main([*base, "-c", "SELECT COUNT(*) AS n FROM customers;"]) == 2
    err = capsys.readouterr().err
    assert "no privacy ledger" in err and "--no-ledger" in err
    assert main([*base, "--no-ledger", "-c", "SELECT COUNT(*) AS n FROM customers;"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "n"
    # --no-ledger cannot bypass the metadata's ledger
    assert main(["shell", str(shop.database), "-m", str(shop.metadata), "-a", "x",
                 "--no-ledger", "-c", "\\q"]) == 2
    assert "drop --no-ledger" in capsys.readouterr().err


def test_demo_option_uses_the_demo_files(
    shop: DemoFiles, sh: ShellRunner, capsys: pytest.CaptureFixture[str]
) -> None:
    # ``sh`` set $DPSQL_HOME to the folder holding ``demo/``: --demo must find and reuse it
    assert main(["shell", "--demo", "-c", "SELECT COUNT(*) AS n FROM customers"]) == 0
    assert capsys.readouterr().out.splitlines()[0].strip() == "n"
    assert spent(shop) == (0.1, 0.0, 1)  # charged to analyst demo in the demo ledger


def test_expanded_display(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "\\x\nSELECT status, COUNT(*) AS n FROM orders GROUP BY status ORDER BY "
              "status;\n\\x off\n")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "expanded display is on" and lines[-1] == "expanded display is off"
    assert lines[1] == "-[ RECORD 1 ]"
    assert lines[2] == "status | cancelled" and lines[3].startswith("n      | ")
    assert lines.count("-[ RECORD 5 ]") == 1
    assert sh("-c", "\\x maybe").stderr.startswith("error: \\x takes on or off")


def test_output_to_a_file(shop: DemoFiles, sh: ShellRunner, tmp_path: Path) -> None:
    target = tmp_path / "results.txt"
    proc = sh("-c", f"\\o {target}\nSELECT COUNT(*) AS n FROM orders;\n\\o\n"
              "SELECT COUNT(*) AS m FROM customers;\n")
    assert proc.returncode == 0, proc.stderr
    written = target.read_text().splitlines()
    assert written[0].strip() == "n" and len(written) == 3  # only the results, no footers
    assert f"results are appended to {target}" in proc.stdout
    assert "m" in proc.stdout.splitlines()[-3] and " n" not in proc.stdout
    assert proc.stderr.count("spent epsilon=0.1") == 2  # footers stay on the terminal
    bad = sh("-c", f"\\o {tmp_path / 'no' / 'such' / 'dir.txt'}")
    assert bad.returncode == 1 and bad.stderr.startswith("error: cannot write")


def test_pager_command(shop: DemoFiles, sh: ShellRunner) -> None:
    proc = sh("-c", "\\pager\n\\pager on\n")
    assert proc.stdout.splitlines() == ["pager is off", "pager is on"]


def test_raw_switches_clamped_counts_to_counts_as_drawn(shop: DemoFiles, sh: ShellRunner) -> None:
    """\\raw on: noisy counts as drawn; off (the default): clamped at 0. Every bin below is
    empty and noised at scale 100, so about half its raw counts are negative (all 50 are
    non-negative with probability ~1e-15), none of its clamped ones."""
    sql = ("SELECT product_id, COUNT(*) AS n FROM orders WHERE quantity > 100 "
           "GROUP BY product_id;\n")
    proc = sh("-f", "json", "-e", "0.01", stdin=f"{sql}\\raw on\n{sql}\\raw\n")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    clamped, raw = json.loads(lines[0]), json.loads(lines[2])
    assert len(clamped) == len(raw) >= 30
    assert all(r["n"] >= 0 for r in clamped)
    assert any(r["n"] < 0 for r in raw)
    assert lines[1] == "raw counts are on" and lines[3] == "raw counts are off (clamped at 0)"
