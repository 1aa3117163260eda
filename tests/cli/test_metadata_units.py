"""`dpsql metadata build --unit .. --unit ..` and `dpsql metadata check -m M -d D` with several
privacy units (dpsql.metadata.build_multi, dpsql.metadata.unit_multi): the draft proposes every
unit's paths, and check verifies each unit's on the database, on that unit's view."""

from __future__ import annotations

import random

from dpsql.cli.main import main
from dpsql.metadata import UnitPath, load_metadata
from tests.db_files import writing
from tests.metadata.helpers import write
from tests.metadata.unit_db import make_db
from tests.units import tiny_multi


def test_check_verifies_every_units_paths(tmp_path, capsys):
    db = tmp_path / "two.duckdb"
    data = tiny_multi.random_database(random.Random(2))
    data["items"].append((99, 8, 1))  # an orphan of both units
    with writing(db) as con:
        tiny_multi.load(data, con)
    md = write(tmp_path, tiny_multi.YAML.format(gs=8, grid=""))
    assert main(["metadata", "check", "-m", str(md), "-d", str(db)]) == 0
    out, err = capsys.readouterr()
    assert "privacy unit: supplier.s_id (the same bounds)" in out
    assert ("items: private, unit customer: via i_order -> orders.o_id; unit supplier: i_supp"
            in out)
    assert "unit customer.c_id:" in out and "unit supplier.s_id:" in out
    assert "path items.i_order -> orders.o_id" in out
    assert "path items.i_supp -> supplier.s_id" in out
    assert "path stock.k_supp -> supplier.s_id" in out
    assert "warning: items:" in err  # the orphans, per unit


def test_build_proposes_every_units_paths_and_check_verifies_them(tmp_path, capsys):
    # NULL keys, no orphans: the paths are proposed, and check counts the NULLs
    db = make_db(tmp_path, "DELETE FROM orders WHERE o_custkey = 9;"
                           "DELETE FROM lineitem WHERE l_orderkey = 99;")
    out, schema = tmp_path / "m.yaml", tmp_path / "analyst.yaml"
    assert main(["metadata", "build", "-d", str(db), "--public", "nation", "--unit",
                 "customer.c_custkey", "--unit", "supplier.s_suppkey", "-o", str(out),
                 "--analyst-schema", str(schema)]) == 0
    err = capsys.readouterr().err
    assert f"wrote {out} (5 tables)" in err and "warning" not in err
    md = load_metadata(out)
    assert [u.table for u in (md.privacy_unit, *md.extra_units)] == ["customer", "supplier"]
    assert md.table("lineitem").unit_paths == {
        "customer": UnitPath("l_orderkey", "orders", "o_orderkey"),
        "supplier": UnitPath("l_suppkey")}
    assert load_metadata(schema).extra_units == md.extra_units
    assert main(["metadata", "check", "-m", str(out), "-d", str(db)]) == 0
    out_text, err = capsys.readouterr()
    assert "privacy unit: supplier.s_suppkey (the same bounds)" in out_text
    assert "unit customer.c_custkey:" in out_text and "unit supplier.s_suppkey:" in out_text
    assert "path lineitem.l_orderkey -> orders.o_orderkey" in out_text
    assert "path lineitem.l_suppkey -> supplier.s_suppkey" in out_text
    assert "warning: orders:" in err  # its NULL o_custkey: a row of no customer
    assert "warning: lineitem:" in err  # its NULL l_orderkey


def test_build_with_a_hop_conflict_warns_and_writes_no_analyst_schema(tmp_path, capsys):
    db = make_db(tmp_path, "DELETE FROM orders WHERE o_custkey IS NULL OR o_custkey = 9;"
                           "DELETE FROM lineitem WHERE l_orderkey IS NULL OR l_orderkey = 99;")
    out, schema = tmp_path / "m.yaml", tmp_path / "analyst.yaml"
    assert main(["metadata", "build", "-d", str(db), "--public", "nation", "--public",
                 "supplier", "--unit", "customer.c_custkey", "--unit", "orders.o_orderkey",
                 "-o", str(out), "--analyst-schema", str(schema)]) == 0
    err = capsys.readouterr().err
    assert "warning: the draft does not load until you fix it:" in err
    assert ("table 'lineitem': has no path to any privacy unit (customer, orders): declare "
            "unit: {customer: <column>} or {customer: {via: <column>, to: <table>.<key>}} (or "
            "public: true" in err)
    assert f"not written: {schema}" in err and not schema.exists()
    assert "  lineitem:\n    # CONFLICT between the proposed paths" in out.read_text()


def test_check_warns_of_a_sample_aggregate_by_another_column_than_the_unit(tmp_path, capsys):
    # QA round 5: check accepted it, and every SAMPLE_AGGREGATE over the table was then refused
    text = """
privacy_unit: {table: people, column: pid}
tables:
  people: {columns: {pid: {type: INTEGER}}}
  visits:
    unit: pid
    sample_aggregate: {blocks: 4, by: %s}
    columns:
      pid: {type: INTEGER}
      dept: {type: INTEGER}
"""
    wrong = write(tmp_path, text % "dept", "wrong.yaml")
    assert main(["metadata", "check", "-m", str(wrong)]) == 0
    err = capsys.readouterr().err
    assert "warning: table 'visits'" in err and "naming the table's own unit column" in err
    right = write(tmp_path, text % "pid", "right.yaml")
    assert main(["metadata", "check", "-m", str(right)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_build_help_says_the_analyst_schema_keeps_the_unit_paths(tmp_path, capsys):
    # audit of #17: the help said the analyst schema had no "paths", while it keeps the
    # privacy unit and every table's path to it (README, "Metadata"); it drops source paths
    db = make_db(tmp_path, "DELETE FROM orders WHERE o_custkey IS NULL OR o_custkey = 9;"
                           "DELETE FROM lineitem WHERE l_orderkey IS NULL OR l_orderkey = 99;")
    out, schema = tmp_path / "m.yaml", tmp_path / "analyst.yaml"
    assert main(["metadata", "build", "-d", str(db), "--public", "nation", "--public",
                 "supplier", "--unit", "customer.c_custkey", "-o", str(out),
                 "--analyst-schema", str(schema)]) == 0
    assert load_metadata(schema).table("lineitem").unit == load_metadata(out).table(
        "lineitem").unit == UnitPath("l_orderkey", "orders", "o_orderkey")
    capsys.readouterr()
    assert main(["metadata", "build", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "no max frequencies, row counts, source paths or ledger" in help_text
    assert "the privacy unit and its paths are kept" in help_text


def test_check_without_a_database_reports_mismatched_path_types(tmp_path, capsys):
    """The acceptance audit of #17: a via path from a BIGINT column to a VARCHAR key passed
    `dpsql metadata check` without -d (every query refused it later)."""
    md = write(tmp_path, tiny_multi.YAML.format(gs=8, grid="").replace(
        "i_order: {type: INTEGER", "i_order: {type: VARCHAR"))
    assert main(["metadata", "check", "-m", str(md)]) == 1
    err = capsys.readouterr().err
    assert ("error: the unit path items.i_order -> orders.o_id compares VARCHAR with INTEGER"
            in err)
    assert main(["metadata", "check", "-m", str(write(
        tmp_path, tiny_multi.YAML.format(gs=8, grid=""), "ok.yaml"))]) == 0
