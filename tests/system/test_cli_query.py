"""`dpsql query` end to end on the CSV-backed PUMS sample, with and without a ledger."""

import json
from pathlib import Path

from dpsql.accounting import Ledger, database_identity
from dpsql.cli.main import main
from tests.shared_data import needs_pums

PUMS = str(Path(__file__).resolve().parents[2] / "schemas" / "pums.yaml")


def run(capsys, *args):
    code = main(["query", "-m", PUMS, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


pytestmark = needs_pums  # every test here queries schemas/pums.yaml


def test_table_output_and_release_line(capsys):
    code, out, _ = run(capsys, "-e", "1", "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["sex", "n"]
    assert {line.split()[0] for line in lines[2:4]} == {"0", "1"}  # both declared bins
    assert "spent epsilon=1 delta=0" in lines[-1]
    assert "95% interval: n ±" in lines[-1]


def test_json_output_carries_the_release_record(capsys):
    code, out, _ = run(capsys, "-e", "0.5", "-f", "json", "SELECT COUNT(*) AS n FROM pums")
    assert code == 0
    doc = json.loads(out)
    assert doc["columns"] == ["n"]
    assert isinstance(doc["rows"][0][0], int)
    assert abs(doc["rows"][0][0] - 1000) < 200  # scale 2: beyond 200 has probability e^-100
    assert doc["release"]["epsilon"] == 0.5
    assert doc["release"]["mechanism"] == "discrete_laplace"


def test_rejection_is_one_line_or_json(capsys):
    code, out, err = run(capsys, "-e", "1", "SELECT age FROM pums")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "raw values" in err
    code, out, _ = run(capsys, "-e", "1", "-f", "json", "SELECT * FROM pums")
    assert code == 1
    assert json.loads(out)["error"]["type"] == "UnsupportedQueryError"


def test_ledger_charges_and_refuses_overspending(tmp_path, capsys):
    ledger_path = tmp_path / "ledger.sqlite"
    with Ledger(ledger_path) as ledger:
        ledger.set_budget(database_identity(None), "ann", 1.0, 0.0)
    args = ("-a", "ann", "-l", str(ledger_path), "-e", "0.6", "SELECT COUNT(*) FROM pums")
    assert run(capsys, *args)[0] == 0
    code, _, err = run(capsys, "-a", "ann", "-l", str(ledger_path), "-e", "0.6",
                       "SELECT COUNT(*) FROM pums WHERE age > 30")
    assert code == 1 and "BudgetExhausted" not in err and "budget" in err.lower()
    with Ledger(ledger_path) as ledger:
        assert ledger.status(database_identity(None), "ann").epsilon_spent == 0.6
