"""`dpsql query` end to end on a CSV-backed table, with and without a ledger."""

import json

import pytest

from dpsql.accounting import Ledger
from dpsql.backends import ledger_identity
from dpsql.cli.main import main
from dpsql.metadata import load_metadata

N_PEOPLE = 1000


@pytest.fixture(scope="module")
def metadata(tmp_path_factory) -> str:
    """A 1,000-row CSV declared as table ``people`` (as the owner would declare a file)."""
    folder = tmp_path_factory.mktemp("people")
    rows = "".join(f"{i % 2},{18 + i % 70}\n" for i in range(N_PEOPLE))
    (folder / "people.csv").write_text("sex,age\n" + rows, encoding="utf-8")
    path = folder / "people.yaml"
    path.write_text("""\
tables:
  people:
    source: people.csv
    columns:
      sex: {max_freq: 500, releasable: true, type: BIGINT, domain: {values: [0, 1]}}
      age: {bounds: [0, 100], type: BIGINT}
""", encoding="utf-8")
    return str(path)


@pytest.fixture
def run(capsys, metadata):
    """`dpsql query -m METADATA ARGS`; uncharged (--no-ledger) unless ARGS name a ledger."""
    def run(*args, no_ledger: bool = True):
        flags = ["--no-ledger"] if no_ledger and "-l" not in args else []
        code = main(["query", "-m", metadata, *flags, *args])
        out = capsys.readouterr()
        return code, out.out, out.err
    return run


def identity(metadata: str) -> str:
    """The ledger key of the CSV-backed metadata (its sources, not ':memory:')."""
    return ledger_identity("duckdb", None, load_metadata(metadata))


def test_without_a_ledger_the_query_is_refused(run, metadata):
    code, out, err = run("-e", "1", "SELECT COUNT(*) FROM people", no_ledger=False)
    assert code == 2 and out == ""
    assert "no privacy ledger" in err and "--no-ledger" in err and "--ledger PATH" in err
    code, _, err = run("-l", "x.sqlite", "--no-ledger", "-e", "1", "SELECT COUNT(*) FROM people")
    assert code == 2 and "contradict" in err


def test_table_output_and_release_line(run):
    code, out, err = run("-e", "1", "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["sex", "n"]
    assert {line.split()[0] for line in lines[2:4]} == {"0", "1"}  # both declared bins
    assert len(lines) == 4  # the data alone on standard output, the footer on standard error
    assert "spent epsilon=1 delta=0" in err
    assert "95% interval: n ±" in err


def test_json_output_carries_the_release_record(run):
    code, out, _ = run("-e", "0.5", "-f", "json", "SELECT COUNT(*) AS n FROM people")
    assert code == 0
    doc = json.loads(out)
    assert doc["columns"] == ["n"]
    assert isinstance(doc["rows"][0][0], int)
    assert abs(doc["rows"][0][0] - N_PEOPLE) < 200  # scale 2: beyond 200 has probability e^-100
    assert doc["release"]["epsilon"] == 0.5
    assert doc["release"]["mechanism"] == "discrete_laplace"


def test_rejection_is_one_line_or_json(run):
    code, out, err = run("-e", "1", "SELECT age FROM people")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "raw values" in err
    code, out, _ = run("-e", "1", "-f", "json", "SELECT * FROM people")
    assert code == 1
    assert json.loads(out)["error"]["type"] == "UnsupportedQueryError"


def test_ledger_charges_and_refuses_overspending(tmp_path, run, metadata):
    ledger_path = tmp_path / "ledger.sqlite"
    with Ledger(ledger_path) as ledger:
        ledger.set_budget(identity(metadata), "ann", 1.0, 0.0)
    args = ("-a", "ann", "-l", str(ledger_path), "-e", "0.6", "SELECT COUNT(*) FROM people")
    assert run(*args)[0] == 0
    code, _, err = run("-a", "ann", "-l", str(ledger_path), "-e", "0.6",
                       "SELECT COUNT(*) FROM people WHERE age > 30")
    assert code == 1 and "BudgetExhausted" not in err and "budget" in err.lower()
    with Ledger(ledger_path) as ledger:
        assert ledger.status(identity(metadata), "ann").epsilon_spent == 0.6


def test_ledger_from_the_environment_and_analyst_required(tmp_path, run, metadata, monkeypatch):
    ledger_path = tmp_path / "env.sqlite"
    with Ledger(ledger_path) as ledger:
        ledger.set_budget(identity(metadata), "eve", 1.0, 0.0)
    monkeypatch.setenv("DPSQL_LEDGER", str(ledger_path))
    code, _, err = run("SELECT COUNT(*) FROM people", no_ledger=False)
    assert code == 2 and "missing --analyst NAME" in err  # who would be charged?
    monkeypatch.setenv("DPSQL_ANALYST", "eve")
    code, _, err = run("SELECT COUNT(*) FROM people", no_ledger=False)  # -e 0.1 by default
    assert code == 0, err
    assert "spent epsilon=0.1 delta=0" in err
    with Ledger(ledger_path) as ledger:
        assert ledger.status(identity(metadata), "eve").epsilon_spent == 0.1
    # --no-ledger still overrides the environment's default
    assert run("SELECT COUNT(*) FROM people")[0] == 0


def test_mechanism_option_releases_gaussian_noise(run):
    code, out, err = run("-e", "1", "--delta", "1e-6", "--mechanism", "gaussian", "-f", "json",
                         "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex")
    assert code == 0, err
    release = json.loads(out)["release"]
    assert release["mechanism"] == "discrete_gaussian" and release["delta"] == 1e-6
    assert release["columns"][1]["calibration"] == "analytic"
    code, out, err = run("-e", "1", "--delta", "0", "--mechanism", "gaussian", "-f", "json",
                         "SELECT COUNT(*) FROM people")
    assert code == 1 and "needs delta > 0" in out
    code, out, err = run("-e", "1", "--delta", "1e-6", "--mechanism", "gaussian",
                         "--calibration", "classical", "SELECT COUNT(*) FROM people")
    assert code != 0 and "epsilon < 1" in err


def test_counts_are_clamped_at_zero_unless_raw(run):
    """--raw reaches the connection (dpsql.connect(raw_counts=True)): the record says the count
    was clamped by default and not with --raw. At epsilon 0.001 (scale 1,000 per bin) a
    count of 0 rows is released below 0 about half the time: never by default."""
    sql = "SELECT sex, COUNT(*) AS n FROM people WHERE age > 200 GROUP BY sex"
    code, out, _ = run("-e", "0.001", "-f", "json", sql)
    assert code == 0
    clamped = json.loads(out)
    assert all(n >= 0 for _, n in clamped["rows"])
    (note,) = [c["post_processing"] for c in clamped["release"]["columns"] if c["name"] == "n"]
    assert note == "noisy count clamped at 0 (post-processing)"
    code, out, _ = run("--raw", "-e", "0.001", "-f", "json", sql)
    assert code == 0
    raw = json.loads(out)
    assert [c["post_processing"] for c in raw["release"]["columns"]] == [None, None]


def test_json_output_has_numbers_for_typed_sums(capsys, tmp_path):
    """A DECIMAL column's sum (a Decimal in Python) is a JSON number, not a string."""
    import duckdb

    db = tmp_path / "p.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE p AS SELECT 1.25::DECIMAL(15,2) AS price, 3 AS qty")
    md = tmp_path / "p.yaml"
    md.write_text("tables:\n  p:\n    columns:\n"
                  "      price: {bounds: [0, 10], type: 'DECIMAL(15,2)'}\n"
                  "      qty: {bounds: [0, 10], type: INTEGER}\n")
    code = main(["query", "-m", str(md), "-d", str(db), "--no-ledger", "-e", "100", "-f", "json",
                 "SELECT SUM(price) AS s, SUM(qty) AS q FROM p"])
    assert code == 0
    ((s, q),) = json.loads(capsys.readouterr().out)["rows"]
    assert isinstance(s, float) and isinstance(q, int)
    assert abs(s - 1.25) < 10 and abs(q - 3) < 10  # scale 0.2 per sum: fails w.p. e^-50


def test_a_grouped_avg_shows_its_interval_per_row(run):
    """Each row of a grouped AVG gets its 95% interval as two columns beside the value
    (dpsql.cli.output.with_interval_columns), in the table and in CSV; the JSON output carries
    the record's ``row_intervals_95`` itself."""
    code, out, err = run("-e", "1", "--format", "csv",
                         "SELECT sex, AVG(age) AS a FROM people GROUP BY sex ORDER BY a")
    assert code == 0
    header, *rows = out.splitlines()
    assert header == "sex,a,a low95,a high95"
    assert len(rows) == 2
    for line in rows:
        _, value, low, high = (float(x) for x in line.split(","))
        assert 0 <= low <= value <= high <= 100
    assert "a: 95% interval per row (all rows together)" in err
    code, out, _ = run("-e", "1", "--format", "table", "SELECT sex, AVG(age) AS a FROM people "
                       "GROUP BY sex")
    assert code == 0 and "a low95" in out.splitlines()[0]
    code, out, _ = run("-e", "1", "--format", "json", "SELECT sex, AVG(age) AS a FROM people "
                       "GROUP BY sex")
    doc = json.loads(out)
    assert doc["columns"] == ["sex", "a"]  # the data are the query's
    intervals = doc["release"]["columns"][1]["row_intervals_95"]
    assert len(intervals) == len(doc["rows"]) == 2
    for (_, value), (low, high) in zip(doc["rows"], intervals, strict=True):
        assert low <= value <= high
