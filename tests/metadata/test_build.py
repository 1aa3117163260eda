"""Drafting metadata from a DuckDB database (dpsql/metadata/build.py), and the `dpsql metadata`
command."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import dpsql.metadata.build as mb
from dpsql.cli.main import main
from dpsql.errors import OperationalError, ProgrammingError
from dpsql.metadata import dump_metadata, load_metadata, loads_metadata
from dpsql.metadata.build import build_metadata
from tests.db_files import writing
from tests.shared_data import PUMS_CSV, needs_pums

ROOT = Path(__file__).resolve().parents[2]

# Hand-counted below each column.
SETUP = r'''
CREATE TABLE orders (order_id INTEGER, customer_id INTEGER, product_id INTEGER,
                     status VARCHAR, cost DOUBLE);
INSERT INTO orders VALUES
    (1, 1,    7, 'open',     10.5),
    (2, 1,    7, 'open',     20),
    (3, 2,    7, 'shipped',  0),
    (4, NULL, 8, 'returned', 99.25),
    (5, NULL, 8, 'open',     5),
    (6, NULL, 8, 'open',     5),
    (7, 3,    9, 'shipped',  5),
    (8, 3, NULL, NULL,       NULL);
-- order_id: all distinct -> mf 1
-- customer_id: 1 x2, 2 x1, NULL x3, 3 x2 -> mf 3, reached only by the NULL group
-- product_id: 7 x3, 8 x3 (a tie), 9 x1, NULL x1 -> mf 3
-- status: open x4, shipped x2, returned x1, NULL x1 -> mf 4, 4 distinct values
-- cost: 5 x3, others once -> mf 3, range [0, 99.25]
CREATE TABLE products (product_id INTEGER, name VARCHAR);
INSERT INTO products VALUES (7, 'a'), (8, 'b'), (9, 'c');
CREATE TABLE "Odd ""T"" x" ("my col" INTEGER, "Say ""hi""" VARCHAR);
INSERT INTO "Odd ""T"" x" VALUES (1, 'a'), (1, 'a'), (2, 'a');
CREATE TABLE empty (x INTEGER);
'''


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.duckdb"
    with writing(path) as con:
        con.execute(SETUP)
    return path


def test_exact_counts(db):
    text = build_metadata(db)
    md = loads_metadata(text)
    assert list(md.tables) == ["empty", 'odd "t" x', "orders", "products"]
    orders = md.table("orders")
    assert orders.rows == 8
    mf = {c.name: c.max_freq for c in orders.columns.values()}
    assert mf == {"order_id": 1, "customer_id": 3, "product_id": 3, "status": 4, "cost": 3}
    types = {c.name: c.type for c in orders.columns.values()}
    assert types == {"order_id": "INTEGER", "customer_id": "INTEGER", "product_id": "INTEGER",
                     "status": "VARCHAR", "cost": "DOUBLE"}
    odd = md.table('Odd "T" x')
    assert odd.rows == 3
    assert odd.column("my col").max_freq == 2
    assert odd.column('say "hi"').max_freq == 3
    assert md.table("products").rows == 3 and not md.table("products").public


def test_bounds_and_domains_are_only_comments(db):
    text = build_metadata(db)
    orders = loads_metadata(text).table("orders")
    for col in orders.columns.values():
        assert col.bounds is None and col.domain is None and not col.releasable
    assert "# bounds: [0.0, 99.25]  # observed min/max: review before use" in text
    assert "# domain: {values: [open, returned, shipped, null]}" in text
    assert "# releasable: true" in text
    assert "OWNER-ONLY" in text
    # uncommenting the suggestions gives valid metadata
    accepted = text.replace("# bounds:", "bounds:").replace("# domain:", "domain:")
    accepted = accepted.replace("# releasable:", "releasable:")
    status = loads_metadata(accepted).table("orders").column("status")
    assert status.releasable and status.domain.values == ("open", "returned", "shipped", None)
    assert loads_metadata(accepted).table("orders").column("cost").bounds == (0.0, 99.25)


def test_domain_max(db):
    text = build_metadata(db, ["orders"], domain_max=3)
    assert "domain:" not in text  # status has 4 distinct values (NULL included)
    text = build_metadata(db, ["orders"], domain_max=4)
    assert "# domain: {values: [open, returned, shipped, null]}" in text
    assert "# domain: {values: [1, 2, 3, 4" not in text  # order_id: 8 values


def test_empty_table(db):
    text = build_metadata(db, ["empty"])
    empty = loads_metadata(text).table("empty")
    assert empty.rows == 0 and empty.column("x").max_freq is None
    assert "set max_freq by hand" in text


def test_public_tables(db):
    md = loads_metadata(build_metadata(db, ["orders", "products"], public=["Products"]))
    assert md.table("products").public and not md.table("orders").public
    assert all(c.releasable for c in md.table("products").columns.values())
    with pytest.raises(ProgrammingError, match="--public 'customers' is not one of the tables"):
        build_metadata(db, ["orders"], public=["customers"])


def test_round_trip(db, tmp_path):
    md = loads_metadata(build_metadata(db, public=["products"]))
    text = dump_metadata(md)
    assert loads_metadata(text) == md
    assert dump_metadata(loads_metadata(text)) == text
    out = tmp_path / "built.yaml"
    out.write_text(build_metadata(db, public=["products"]))
    assert load_metadata(out) == md


def test_table_filter(db):
    md = loads_metadata(build_metadata(db, ["orders"]))
    assert list(md.tables) == ["orders"]
    md = loads_metadata(build_metadata(db, ["main.ORDERS", 'odd "t" x']))
    assert list(md.tables) == ["orders", 'odd "t" x']
    with pytest.raises(ProgrammingError, match=r"'customers' is not in the database.*orders"):
        build_metadata(db, ["customers"])


def test_same_name_in_two_schemas(tmp_path):
    path = tmp_path / "two.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t (a INT); CREATE SCHEMA s2; CREATE TABLE s2.t (b INT)")
    with pytest.raises(ProgrammingError, match="same name"):
        build_metadata(path)
    with pytest.raises(ProgrammingError, match="matches several tables"):
        build_metadata(path, ["t"])
    md = loads_metadata(build_metadata(path, ["s2.t"]))
    assert list(md.table("t").columns) == ["b"]


def test_opens_read_only(db):
    before = db.read_bytes()
    # DuckDB refuses a read-write connection to a file this process holds read-only
    holder = duckdb.connect(str(db), read_only=True)
    try:
        build_metadata(db)
    finally:
        holder.close()
    assert db.read_bytes() == before


@needs_pums
def test_connection_and_csv_view_match_pums_schema():
    con = duckdb.connect()
    con.execute(f"CREATE VIEW pums AS SELECT * FROM read_csv({str(PUMS_CSV)!r})")
    built = loads_metadata(build_metadata(con)).table("pums")
    declared = load_metadata(ROOT / "schemas" / "pums.yaml").table("pums")
    assert built.rows == declared.rows == 1000
    for col in declared.columns.values():
        assert built.column(col.name).max_freq == col.max_freq
        assert built.column(col.name).type == col.type
    con.execute("SELECT 1")  # a caller's connection is left open


def test_missing_and_invalid_database(tmp_path):
    with pytest.raises(OperationalError, match="does not exist"):
        build_metadata(tmp_path / "nope.duckdb")
    junk = tmp_path / "junk.duckdb"
    junk.write_text("not a database")
    with pytest.raises(OperationalError, match="cannot open"):
        build_metadata(junk)


def test_progress_bar(db, capsys, monkeypatch):
    build_metadata(db)
    assert capsys.readouterr().err == ""
    build_metadata(db, progress=True)
    assert "profiling columns" in capsys.readouterr().err
    monkeypatch.setattr(mb, "PROGRESS_ROWS", 5)  # "large": more rows than this in total
    build_metadata(db)
    assert "profiling columns" in capsys.readouterr().err


# -- the CLI --------------------------------------------------------------------------------


def test_cli_build_to_stdout(db, capsys):
    assert main(["metadata", "build", "--database", str(db), "--table", "orders"]) == 0
    out = capsys.readouterr().out
    assert list(loads_metadata(out).tables) == ["orders"]


def test_cli_build_output_and_check(db, tmp_path, capsys):
    out = tmp_path / "schemas" / "shop.yaml"
    args = ["metadata", "build", "-d", str(db), "-t", "orders", "-t", "products",
            "--public", "products", "-o", str(out)]
    assert main(args) == 0
    assert "wrote" in capsys.readouterr().err
    md = load_metadata(out)
    assert md.table("products").public and md.table("orders").column("status").max_freq == 4

    # an existing (perhaps hand-reviewed) file is not overwritten without --force
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "--force" in err and len(err.strip().splitlines()) == 1
    assert main([*args, "--force"]) == 0
    capsys.readouterr()

    assert main(["metadata", "check", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("orders: private, 5 columns, 5 with max_freq")
    assert "8 rows" in lines[0]
    assert lines[1].startswith("products: public, 2 columns")


def test_cli_check_flex_formats(capsys):
    for path in (ROOT / "schemas" / "flex_test.yaml", ROOT / "tests/fixtures/flex_schema.yaml"):
        assert main(["metadata", "check", str(path)]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert [line.split(":")[0] for line in lines] == [
            "orders", "products", "customers", "recommendations"]
        assert "no domain for order_date" in lines[0]


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert main(["metadata", "build", "--database", str(tmp_path / "missing.duckdb")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"error: database file {str(tmp_path / 'missing.duckdb')!r} does not exist; "
        "pass an existing DuckDB file"
    ]
    bad = tmp_path / "bad.yaml"
    bad.write_text("tables:\n  t:\n    columns:\n      c: {bounds: [3, 1]}\n")
    assert main(["metadata", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "bad.yaml:4: table 't', column 'c': bounds lower 3" in err
    assert main(["metadata", "check", str(tmp_path / "none.yaml")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_cli_build_writes_a_ledger_line_and_the_analyst_schema(db, tmp_path, capsys):
    out = tmp_path / "owner" / "shop.yaml"
    schema = tmp_path / "share" / "analyst.yaml"
    args = ["metadata", "build", "-d", str(db), "-t", "orders", "-t", "products",
            "--public", "products", "-o", str(out), "--analyst-schema", str(schema)]
    assert main(args) == 0
    capsys.readouterr()
    # the ledger line: ledger.sqlite beside the metadata file by default
    assert "\nledger: ledger.sqlite\n" in out.read_text()
    assert load_metadata(out).ledger == str(out.parent / "ledger.sqlite")
    shared = schema.read_text()
    for owner_only in ("max_freq", "rows", "ledger", "source", str(db)):
        assert owner_only not in shared.split("tables:", 1)[1], owner_only
    assert load_metadata(schema).table("products").public
    assert load_metadata(schema).table("orders").column("status").type == "VARCHAR"
    # an existing analyst schema is not overwritten without --force either
    assert main([*args[:-4], "-o", str(tmp_path / "other.yaml"), "--analyst-schema",
                 str(schema)]) == 1
    assert "--force" in capsys.readouterr().err
    # --ledger is written as given: relative to the metadata file
    assert main(["metadata", "build", "-d", str(db), "-t", "products", "--ledger",
                 "../books/l.sqlite"]) == 0
    text = capsys.readouterr().out
    assert "\nledger: ../books/l.sqlite\n" in text
    md = loads_metadata(text, tmp_path / "x" / "m.yaml")
    assert md.ledger == str(tmp_path / "books" / "l.sqlite")
