"""`dpsql metadata build --unit` and `dpsql metadata check -m M -d D` (dpsql/cli/metadata.py) on
a real DuckDB file: the draft, the warnings, the report and the exit statuses."""

from __future__ import annotations

import dataclasses

import pytest

from dpsql.cli.main import main
from dpsql.demo import create_demo
from dpsql.metadata import UnitPath, load_metadata
from tests.metadata.helpers import ROOT, write
from tests.metadata.unit_db import METADATA, make_db

CLEAN = ("DELETE FROM orders WHERE o_custkey IS NULL OR o_custkey = 9;"
         "DELETE FROM lineitem WHERE l_orderkey IS NULL OR l_orderkey = 99;")


def test_build_with_a_unit_writes_a_draft_that_loads(tmp_path, capsys):
    db = make_db(tmp_path, CLEAN)
    out, schema = tmp_path / "m.yaml", tmp_path / "analyst.yaml"
    assert main(["metadata", "build", "-d", str(db), "--public", "supplier", "--public",
                 "nation", "--unit", "customer.c_custkey", "-o", str(out),
                 "--analyst-schema", str(schema)]) == 0
    err = capsys.readouterr().err
    assert f"wrote {out} (5 tables)" in err and "warning" not in err
    md = load_metadata(out)
    assert md.table("lineitem").unit == UnitPath("l_orderkey", "orders", "o_orderkey")
    analyst = load_metadata(schema)
    assert analyst.privacy_unit == md.privacy_unit
    assert analyst.table("orders").unit == UnitPath("o_custkey")


def test_build_without_a_path_warns_and_writes_no_analyst_schema(tmp_path, capsys):
    db = make_db(tmp_path, CLEAN)
    out, schema = tmp_path / "m.yaml", tmp_path / "analyst.yaml"
    assert main(["metadata", "build", "-d", str(db), "--public", "nation", "--unit",
                 "customer.c_custkey", "-o", str(out), "--analyst-schema", str(schema)]) == 0
    err = capsys.readouterr().err
    assert "warning: the draft does not load until you fix it:" in err
    assert "table 'supplier': has no path to the privacy unit 'customer'" in err
    assert f"not written: {schema}" in err and not schema.exists()
    assert f"wrote {out} (5 tables)" in err
    assert "  supplier:\n    # NO PATH" in out.read_text()


@pytest.mark.parametrize("clean, public, fixture", [
    (True, ["supplier", "nation"], "unit_draft_clean.yaml"),
    (False, ["nation"], "unit_draft_unclean.yaml"),
])
def test_one_unit_draft_is_unchanged_byte_for_byte(tmp_path, capsys, clean, public, fixture):
    # the drafts of one --unit as they were before --unit became repeatable (several units:
    # dpsql.metadata.build_multi): a paths-found draft, and one with NO PATH notes
    db = make_db(tmp_path, CLEAN if clean else "")
    args = [a for name in public for a in ("--public", name)]
    assert main(["metadata", "build", "-d", str(db), *args, "--unit", "customer.c_custkey"]) == 0
    out = capsys.readouterr().out.replace(f"from {db}.", "from DATABASE.", 1)
    assert out == (ROOT / "tests" / "metadata" / "fixtures" / fixture).read_text()


def test_build_unit_errors_are_one_line(tmp_path, capsys):
    db = make_db(tmp_path)
    assert main(["metadata", "build", "-d", str(db), "--unit", "customer"]) == 1
    assert "error: --unit 'customer': write TABLE.COLUMN" in capsys.readouterr().err


def test_check_reports_keys_paths_orphans_and_nulls(tmp_path, capsys):
    db = make_db(tmp_path)
    md = write(tmp_path, METADATA)
    assert main(["metadata", "check", "-m", str(md), "-d", str(db)]) == 0
    out, err = capsys.readouterr()
    assert "privacy unit: customer.c_custkey (max_contribution 1048576, max_groups 1, " \
           "max_rows_per_group 1)" in out
    assert "orders: private, unit o_custkey -> customer.c_custkey, 3 columns" in out
    assert "lineitem: private, unit via l_orderkey -> orders.o_orderkey" in out
    assert "customer: private, the privacy unit's table (id c_custkey)" in out
    assert f"checked on {db} (OWNER-ONLY: counts of private rows):" in out
    assert "  unit id customer.c_custkey: unique, 4 values, 0 NULL\n" in out
    assert "  key orders.o_orderkey: unique, 5 values, 0 NULL\n" in out
    # order 14's customer 9 has no row: a direct path's value is the unit id, so unit 9
    assert "  path orders.o_custkey -> customer.c_custkey: 5 rows, 1 NULL, 1 orphans, 1 of no " \
           "unit\n" in out
    assert "  path lineitem.l_orderkey -> orders.o_orderkey: 6 rows, 1 NULL, 1 orphans, 2 of no " \
           "unit\n" in out
    assert "warning: orders: 1 of 5 rows belong to no unit" in err
    assert "warning: orders: 1 of 5 rows have a o_custkey value not in customer.c_custkey: " \
           "each such id is a unit of its own" in err
    assert "warning: lineitem: 2 of 6 rows belong to no unit" in err
    assert "error" not in err


def test_check_fails_when_a_key_repeats(tmp_path, capsys):
    db = make_db(tmp_path, "INSERT INTO orders VALUES (10, 3, 'F');")
    md = write(tmp_path, METADATA)
    assert main(["metadata", "check", "-m", str(md), "-d", str(db)]) == 1
    out, err = capsys.readouterr()
    assert "  key orders.o_orderkey: NOT UNIQUE (1 repeated values), 6 values, 0 NULL" in out
    assert "error: orders.o_orderkey is not unique (1 values repeat)" in err


def test_check_reads_sources_declared_in_the_metadata(tmp_path, capsys):
    # a table backed by a CSV file is checked through the same read-only backend as queries
    db = make_db(tmp_path)
    csv = tmp_path / "extra.csv"
    csv.write_text("e_custkey\n1\n4\n7\n", encoding="utf-8")
    md = write(tmp_path, METADATA + f"  extra: {{source: {csv.name}, unit: e_custkey, "
                                    "columns: {e_custkey: {}}}\n")
    assert main(["metadata", "check", "-m", str(md), "-d", str(db)]) == 0
    assert "  path extra.e_custkey -> customer.c_custkey: 3 rows, 0 NULL, 1 orphans, 0 of no " \
           "unit\n" in capsys.readouterr().out


def test_check_names_the_failing_check(tmp_path, capsys):
    # a direct path stored as VARCHAR against BIGINT unit ids: its check query once failed
    # as "the database could not run the query"; since the acceptance audit of #17 the
    # types are compared first (dpsql.units.identity), so the check names the path and fix
    db = make_db(tmp_path, "ALTER TABLE orders ALTER o_custkey TYPE VARCHAR;"
                           "UPDATE orders SET o_custkey = 'x' WHERE o_custkey = '9';")
    md = write(tmp_path, METADATA)
    assert main(["metadata", "check", "-m", str(md), "-d", str(db)]) == 1
    err = capsys.readouterr().err
    assert "error: the unit path orders.o_custkey -> customer.c_custkey (the unit's id) " \
           "compares VARCHAR with BIGINT: declare both columns with the same type" in err
    assert "could not run the query" not in err


def test_check_names_a_path_comparing_two_types_before_running_it(tmp_path, capsys):
    # found by the units QA: a via path whose key is VARCHAR against an INTEGER column failed
    # in the path query as an opaque ConversionException; a query under the unit already
    # refused it by name (dpsql.units.identity), and now so does the check, from the types a
    # session reads (undeclared here: from the database)
    db = make_db(tmp_path, "ALTER TABLE orders ALTER o_orderkey TYPE VARCHAR;")
    md = write(tmp_path, METADATA)
    assert main(["metadata", "check", "-m", str(md), "-d", str(db)]) == 1
    err = capsys.readouterr().err
    assert "error: the unit path lineitem.l_orderkey -> orders.o_orderkey compares BIGINT " \
           "with VARCHAR: declare both columns with the same type" in err
    assert "could not run the query" not in err


def test_check_without_database_or_unit(tmp_path, capsys):
    db = make_db(tmp_path)
    md = write(tmp_path, METADATA)
    assert main(["metadata", "check", str(md)]) == 0
    assert "checked on" not in capsys.readouterr().out
    plain = write(tmp_path, "tables:\n  customer: {columns: {c_custkey: {}}}\n", "p.yaml")
    assert main(["metadata", "check", "-m", str(plain), "-d", str(db)]) == 0
    assert "no privacy_unit declared: nothing to check on the database" in \
        capsys.readouterr().out


@pytest.mark.parametrize("args", [[], ["PATH", "-m", "PATH"]])
def test_check_names_the_file_once(tmp_path, capsys, args):
    md = write(tmp_path, METADATA)
    assert main(["metadata", "check", *[str(md) if a == "PATH" else a for a in args]]) == 2
    assert "name the metadata file once" in capsys.readouterr().err


def test_tpch_units_schema_checks_on_tpch(capsys, tiny_tpch):
    db = tiny_tpch
    assert main(["metadata", "check", "-m", str(ROOT / "schemas" / "tpch-units.yaml"), "-d",
                 str(db)]) == 0
    out, err = capsys.readouterr()
    assert "unit id customer.c_custkey: unique" in out
    assert "key orders.o_orderkey: unique" in out
    assert "warning" not in err and "error" not in err


def test_shop_units_schema_matches_the_demo(tmp_path, capsys):
    # schemas/shop-units.yaml is the demo's metadata with a unit: the same tables, columns and
    # decisions; build proposes its paths, and check finds them clean on the demo's data
    shop = load_metadata(ROOT / "schemas" / "shop-units.yaml")
    assert shop.privacy_unit is not None
    assert (shop.privacy_unit.table, shop.privacy_unit.column) == ("customers", "customer_id")
    demo = create_demo(tmp_path / "demo", customers=50, orders=500, products=20)
    plain = load_metadata(demo.metadata)

    def decisions(md):
        return {n: (t.public, [dataclasses.replace(c, max_freq=None)
                               for c in t.columns.values()])
                for n, t in md.tables.items()}

    assert decisions(shop) == decisions(plain)
    draft = tmp_path / "draft.yaml"
    assert main(["metadata", "build", "-d", str(demo.database), "--public", "products",
                 "--unit", "customers.customer_id", "-o", str(draft)]) == 0
    assert {n: t.unit for n, t in load_metadata(draft).tables.items()} == \
        {n: t.unit for n, t in shop.tables.items()}
    capsys.readouterr()
    assert main(["metadata", "check", "-m", str(ROOT / "schemas" / "shop-units.yaml"), "-d",
                 str(demo.database)]) == 0
    out, err = capsys.readouterr()
    assert "path orders.customer_id -> customers.customer_id: 500 rows, 0 NULL, 0 orphans, " \
           "0 of no unit" in out
    assert "warning" not in err and "error" not in err
