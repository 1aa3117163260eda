"""Loading metadata in both formats (dpsql/metadata/load.py, ours.py, flex.py, model.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dpsql.errors import ProgrammingError
from dpsql.metadata import Column, Domain, dump_metadata, load_metadata, loads_metadata
from tests.metadata.helpers import FLEX_OURS, FLEX_THEIRS, PUMS, write
from tests.shared_data import PUMS_CSV, needs_pums

# -- the two formats ------------------------------------------------------------------------


def test_our_format_flex_schema():
    md = load_metadata(FLEX_OURS)
    assert list(md.tables) == ["orders", "products", "customers", "recommendations"]
    orders = md.table("orders")
    assert orders.rows == 1_000_000 and not orders.public
    assert orders.column("order_id").max_freq == 1
    assert orders.column("customer_id").max_freq == 100
    assert md.table("recommendations").column("customer_id").max_freq == 250
    assert orders.column("quantity") == Column(name="quantity")
    pid = orders.column("product_id")
    assert pid.releasable and pid.domain == Domain(table="products", column="product_id")
    # releasable without a domain is allowed (the analysis rejects grouping on it)
    assert orders.column("order_date").releasable and orders.column("order_date").domain is None
    assert md.path == FLEX_OURS


def test_flex_format_equals_ours():
    ours, theirs = load_metadata(FLEX_OURS), load_metadata(FLEX_THEIRS)
    assert theirs == ours
    # FLEX's isUnique means max frequency 1; approxRowCount is the row count
    assert theirs.table("customers").column("customer_id").max_freq == 1
    assert theirs.table("orders").rows == 1_000_000


def test_public_table_columns_are_releasable_with_their_own_domain():
    products = load_metadata(FLEX_OURS).table("products")
    assert products.public
    for col in products.columns.values():
        assert col.releasable
        assert col.domain == Domain(table="products", column=col.name)


def test_flex_several_databases_merge(tmp_path):
    path = write(
        tmp_path,
        """\
        databases:
        - database: a
          namespace: public
          tables:
          - table: public.t1
            columns:
            - {name: X, maxFreq: 3}
        - database: b
          dialect: postgres
          namespace: ""
          tables:
          - table: subschema.T2
            columns:
            - name: s
              fields: [{name: f1}]
            - {name: v, canRelease: true, domainSet: [x, y]}
        """,
    )
    md = load_metadata(path)
    assert list(md.tables) == ["t1", "t2"]
    assert md.table("t1").column("x").max_freq == 3
    assert md.table("t2").column("v").domain == Domain(values=("x", "y"))


def test_flex_databases_with_colliding_tables(tmp_path):
    path = write(
        tmp_path,
        """\
        databases:
        - database: a
          tables:
          - {table: orders, columns: []}
        - database: b
          tables:
          - {table: public.Orders, columns: []}
        """,
    )
    with pytest.raises(ProgrammingError) as exc:
        load_metadata(path)
    msg = str(exc.value)
    assert "m.yaml:7" in msg and "database 'b'" in msg and "database 'a'" in msg
    assert "'public.Orders'" in msg


def test_schema_prefix_and_case_insensitivity():
    md = load_metadata(
        {
            "tables": {
                "public.Orders": {"columns": {"Customer_ID": {"max_freq": 7}}},
                "PRODUCTS": {"public": True, "columns": {"ID": {}}},
            }
        }
    )
    assert list(md.tables) == ["orders", "products"]
    for name in ("orders", "ORDERS", "public.orders", "Public.Orders"):
        assert md.table(name).column("CUSTOMER_id").max_freq == 7
    assert md.table("products").column("id").domain == Domain(table="products", column="id")
    with pytest.raises(ProgrammingError, match="not declared"):
        md.table("customers")


def test_domain_names_are_normalized():
    md = load_metadata(
        {
            "tables": {
                "o": {"columns": {"p": {"releasable": True,
                                        "domain": {"table": "Public.P", "column": "ID"}}}},
                "p": {"public": True, "columns": {"id": None}},
            }
        }
    )
    assert md.table("o").column("p").domain == Domain(table="p", column="id")


def test_yaml_keys_are_names_not_booleans(tmp_path):
    path = write(
        tmp_path,
        """\
        tables:
          yes:
            columns:
              no: {max_freq: 2}
              2020: {}
              null: {}
        """,
    )
    md = load_metadata(path)
    assert list(md.table("yes").columns) == ["no", "2020", "null"]


@needs_pums
def test_pums_schema():
    md = load_metadata(PUMS)
    pums = md.table("pums")
    assert pums.source == str(PUMS_CSV)
    assert Path(pums.source).is_file()
    assert pums.column("age").bounds == (0, 100)
    assert pums.column("income").bounds == (0, 500000)
    for name in ("sex", "educ", "race", "married"):
        col = pums.column(name)
        assert col.releasable and col.domain is not None and col.domain.values
    assert all(c.max_freq for c in pums.columns.values())


# -- relative paths -------------------------------------------------------------------------


def test_relative_paths_resolve_against_the_file(tmp_path):
    (tmp_path / "schemas").mkdir()
    path = write(
        tmp_path,
        """\
        ledger: ledger.sqlite
        tables:
          a: {source: ../data/a.parquet, columns: {}}
          b: {source: "data/*.csv", columns: {}}
          c: {source: /abs/c.csv, columns: {}}
          d: {source: "s3://bucket/d.parquet", columns: {}}
        """,
        "schemas/m.yaml",
    )
    md = load_metadata(path)
    assert md.ledger == str(tmp_path / "schemas" / "ledger.sqlite")
    assert md.table("a").source == str(tmp_path / "data" / "a.parquet")
    assert md.table("b").source == str(tmp_path / "schemas" / "data" / "*.csv")
    assert md.table("c").source == "/abs/c.csv"
    assert md.table("d").source == "s3://bucket/d.parquet"
    # dumped relative to the file again, so the file can move with its data
    text = dump_metadata(md)
    assert "ledger: ledger.sqlite" in text and "source: ../data/a.parquet" in text
    assert "source: /abs/c.csv" in text
    assert loads_metadata(text, path) == md


def test_relative_path_from_another_working_directory(tmp_path, monkeypatch):
    path = write(tmp_path, "ledger: l.sqlite\ntables: {t: {columns: {}}}\n")
    monkeypatch.chdir(tmp_path)
    rel = load_metadata("m.yaml")
    monkeypatch.chdir("/")
    assert rel.ledger == str(tmp_path / "l.sqlite")
    assert load_metadata(path).ledger == rel.ledger


def test_mapping_keeps_paths_as_written():
    md = load_metadata({"ledger": "l.sqlite", "tables": {"t": {"columns": {}}}})
    assert md.ledger == "l.sqlite" and md.path is None


# -- the model -----------------------------------------------------------------------------


def test_metadata_path_not_part_of_equality(tmp_path):
    a = load_metadata(FLEX_OURS)
    copy = tmp_path / "copy.yaml"
    copy.write_text(FLEX_OURS.read_text())
    b = load_metadata(copy)
    assert a == b and a.path != b.path
    assert os.path.isabs(b.path)
