"""`dpsql explain` end to end: the JSON of docs/design.md ("Interfaces"), the text derivation,
errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dpsql.cli.main import main
from tests.db_files import writing

ROOT = Path(__file__).resolve().parents[2]
FLEX = str(ROOT / "schemas" / "flex_test.yaml")
JOIN = ("SELECT COUNT(*) AS n FROM orders JOIN recommendations "
        "ON orders.customer_id = recommendations.customer_id")


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_matches_design_example(capsys):
    code, out, _ = run(capsys, "explain", "--metadata", FLEX, "--epsilon", "0.1",
                       "--delta", "1e-8", "--json", JOIN)
    assert code == 0
    report = json.loads(out)
    assert report["columns"] == [{
        "name": "n", "kind": "aggregate", "function": "COUNT",
        "elastic_sensitivity": 250.0, "smooth_sensitivity": pytest.approx(270.581567882961, 1e-12),
        "k_max": 133, "mechanism": "laplace",
        "noise_scale": pytest.approx(5411.63135765923, 1e-12), "epsilon": 0.1, "delta": 1e-08,
    }]


def test_distance_reports_es_at_k(capsys):
    code, out, _ = run(capsys, "explain", "-m", FLEX, "--distance", "2", "--json", JOIN)
    assert code == 0
    assert json.loads(out)["columns"][0]["elastic_sensitivity"] == 252.0


def test_text_derivation_shows_tree_and_scale(capsys):
    code, out, _ = run(capsys, "explain", "-m", FLEX, JOIN)
    assert code == 0
    assert "JOIN recommendations" in out
    assert "private table orders" in out
    assert "orders.customer_id: (100+k)" in out
    assert "S = 270.581567883 at k = 133" in out
    assert "5411.63135766" in out


def test_error_json_and_exit_status(capsys):
    code, out, _ = run(capsys, "explain", "-m", FLEX, "--json",
                       "SELECT COUNT(*) FROM orders o JOIN recommendations r "
                       "ON o.customer_id < r.customer_id")
    assert code == 1
    err = json.loads(out)["error"]
    assert err["type"] == "UnsupportedConstructError"
    assert "non-equijoin" in err["message"]


def test_error_readable_line_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "dpsql.cli.main", "explain", "-m", FLEX, "SELECT * FROM orders"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert "raw rows" in proc.stderr


def test_untyped_keys_are_listed_as_unchecked(capsys):
    # FLEX's schema declares no types: explain still analyses, and says what it did not check
    code, out, _ = run(capsys, "explain", "-m", FLEX, "--json", JOIN)
    assert code == 0
    assert json.loads(out)["unchecked_key_types"] == [
        "orders.customer_id (type unknown) = recommendations.customer_id (type unknown)"]
    code, out, _ = run(capsys, "explain", "-m", FLEX, JOIN)
    assert code == 0
    assert "key types NOT checked" in out and "--database" in out


def test_database_option_fills_and_checks_key_types(capsys, tmp_path):

    db = tmp_path / "flex.duckdb"
    with writing(db) as con:
        con.execute("CREATE TABLE orders (order_id INTEGER, order_date DATE, customer_id INTEGER, "
                    "product_id INTEGER, quantity INTEGER, order_cost DOUBLE)")
        con.execute("CREATE TABLE recommendations (customer_id BIGINT, product_id VARCHAR)")
    code, out, _ = run(capsys, "explain", "-m", FLEX, "--database", str(db), "--json", JOIN)
    assert code == 0
    report = json.loads(out)
    assert report["unchecked_key_types"] == [] and report["columns"][0]["k_max"] == 133
    mismatched = ("SELECT COUNT(*) FROM orders JOIN recommendations "
                  "ON orders.product_id = recommendations.product_id")
    code, out, _ = run(capsys, "explain", "-m", FLEX, "-d", str(db), "--json", mismatched)
    assert code == 1
    error = json.loads(out)["error"]
    assert error["type"] == "MissingMetricError"
    assert "(INTEGER)" in error["message"] and "(VARCHAR)" in error["message"]
