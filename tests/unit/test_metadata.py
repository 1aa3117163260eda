"""Metadata loading, validation and dumping (dpsql/metadata.py)."""

from __future__ import annotations

import datetime as dt
import os
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.errors import ProgrammingError
from dpsql.metadata import (
    Column,
    Domain,
    Metadata,
    Table,
    dump_metadata,
    load_metadata,
    loads_metadata,
)
from tests.shared_data import PUMS_CSV, needs_pums

ROOT = Path(__file__).resolve().parents[2]
FLEX_OURS = ROOT / "schemas" / "flex_test.yaml"
FLEX_THEIRS = ROOT / "tests" / "fixtures" / "flex_schema.yaml"
PUMS = ROOT / "schemas" / "pums.yaml"


def write(tmp_path: Path, text: str, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


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


# -- validation errors ----------------------------------------------------------------------

# (yaml text, substrings the message must contain). Every message names the file.
INVALID = {
    "unknown top key": (
        "tabels: {}\n",
        ["m.yaml:1", "unknown key 'tabels'", "did you mean 'tables'"],
    ),
    "unknown table key": (
        "tables:\n  t:\n    publik: true\n    columns: {}\n",
        ["m.yaml:3", "table 't'", "'publik'", "did you mean 'public'"],
    ),
    "unknown column key": (
        "tables:\n  t:\n    columns:\n      c: {max_frequency: 3}\n",
        ["m.yaml:4", "table 't', column 'c'", "did you mean 'max_freq'"],
    ),
    "flex key in our format": (
        "tables:\n  t:\n    columns:\n      c: {maxFreq: 3}\n",
        ["table 't', column 'c'", "'maxFreq'", "write 'max_freq'"],
    ),
    "unknown domain key": (
        "tables:\n  t:\n    columns:\n      c: {domain: {valuez: [1]}}\n",
        ["table 't', column 'c', domain", "did you mean 'values'"],
    ),
    "max_freq zero": (
        "tables:\n  t:\n    columns:\n      c: {max_freq: 0}\n",
        ["m.yaml:4", "table 't', column 'c'", "max_freq must be a positive integer", "got 0"],
    ),
    "max_freq negative": (
        "tables:\n  t:\n    columns:\n      c: {max_freq: -3}\n",
        ["column 'c'", "positive integer"],
    ),
    "max_freq float": (
        "tables:\n  t:\n    columns:\n      c: {max_freq: 1.5}\n",
        ["column 'c'", "positive integer", "1.5"],
    ),
    "max_freq bool": (
        "tables:\n  t:\n    columns:\n      c: {max_freq: true}\n",
        ["column 'c'", "positive integer", "True"],
    ),
    "max_freq string": (
        "tables:\n  t:\n    columns:\n      c: {max_freq: '100'}\n",
        ["column 'c'", "positive integer"],
    ),
    "bounds one number": (
        "tables:\n  t:\n    columns:\n      c: {bounds: [1]}\n",
        ["table 't', column 'c'", "two finite numbers"],
    ),
    "bounds infinite": (
        "tables:\n  t:\n    columns:\n      c: {bounds: [0, .inf]}\n",
        ["column 'c'", "two finite numbers"],
    ),
    "bounds nan": (
        "tables:\n  t:\n    columns:\n      c: {bounds: [.nan, 1]}\n",
        ["column 'c'", "two finite numbers"],
    ),
    "bounds bool": (
        "tables:\n  t:\n    columns:\n      c: {bounds: [false, 1]}\n",
        ["column 'c'", "two finite numbers"],
    ),
    "bounds string": (
        "tables:\n  t:\n    columns:\n      c: {bounds: ['0', 1]}\n",
        ["column 'c'", "two finite numbers"],
    ),
    "bounds reversed": (
        "tables:\n  t:\n    columns:\n      c: {bounds: [10, 0]}\n",
        ["m.yaml:4", "column 'c'", "greater than upper", "write [0, 10]"],
    ),
    "domain unknown table": (
        "tables:\n  t:\n    columns:\n      c: {domain: {table: prods, column: id}}\n"
        "  products:\n    public: true\n    columns: {id: {}}\n",
        ["m.yaml:4", "table 't', column 'c'", "'prods'", "not declared", "'products'"],
    ),
    "domain unknown column": (
        "tables:\n  t:\n    columns:\n      c: {domain: {table: p, column: idd}}\n"
        "  p:\n    public: true\n    columns: {id: {}}\n",
        ["table 't', column 'c'", "column 'idd'", "table 'p'", "did you mean 'id'"],
    ),
    "domain private table": (
        "tables:\n  t:\n    columns:\n      c: {domain: {table: p, column: id}}\n"
        "  p:\n    columns: {id: {}}\n",
        ["table 't', column 'c'", "'p'", "private", "leak"],
    ),
    "domain both forms": (
        "tables:\n  t:\n    columns:\n      c: {domain: {values: [1], table: p, column: id}}\n",
        ["column 'c'", "either"],
    ),
    "domain table without column": (
        "tables:\n  t:\n    columns:\n      c: {domain: {table: p}}\n",
        ["column 'c'", "{table: T, column: C}"],
    ),
    "domain empty values": (
        "tables:\n  t:\n    columns:\n      c: {domain: {values: []}}\n",
        ["column 'c'", "non-empty list"],
    ),
    "domain mixed values": (
        "tables:\n  t:\n    columns:\n      c: {domain: {values: [1, a]}}\n",
        ["column 'c'", "mixes number and string"],
    ),
    "domain duplicate values": (
        "tables:\n  t:\n    columns:\n      c: {domain: {values: [a, b, a]}}\n",
        ["column 'c'", "'a' twice"],
    ),
    "domain not a mapping": (
        "tables:\n  t:\n    columns:\n      c: {domain: [a, b]}\n",
        ["column 'c'", "must be a mapping"],
    ),
    "releasable not bool": (
        "tables:\n  t:\n    columns:\n      c: {releasable: 'yes'}\n",
        ["column 'c'", "releasable must be true or false"],
    ),
    "public releasable false": (
        "tables:\n  t:\n    public: true\n    columns:\n      c: {releasable: false}\n",
        ["m.yaml:5", "table 't', column 'c'", "always releasable"],
    ),
    "public not bool": (
        "tables:\n  t:\n    public: 1\n    columns: {}\n",
        ["table 't'", "public must be true or false"],
    ),
    "rows negative": (
        "tables:\n  t:\n    rows: -1\n    columns: {}\n",
        ["table 't'", "rows must be a non-negative integer"],
    ),
    "type not a string": (
        "tables:\n  t:\n    columns:\n      c: {type: 3}\n",
        ["column 'c'", "type must be a non-empty name"],
    ),
    "duplicate table key": (
        "tables:\n  t:\n    columns: {}\n  t:\n    columns: {}\n",
        ["m.yaml:4", "'t' appears twice", "line 2"],
    ),
    "duplicate table after normalization": (
        "tables:\n  t:\n    columns: {}\n  public.T:\n    columns: {}\n",
        ["m.yaml:4", "table 'public.T'", "same table as table 't'"],
    ),
    "duplicate column key": (
        "tables:\n  t:\n    columns:\n      c: {}\n      c: {max_freq: 1}\n",
        ["m.yaml:5", "'c' appears twice"],
    ),
    "duplicate column by case": (
        "tables:\n  t:\n    columns:\n      c: {}\n      C: {}\n",
        ["m.yaml:5", "table 't'", "column 'C' is declared twice"],
    ),
    "empty file": ("", ["m.yaml", "empty"]),
    "only comments": ("# nothing here\n", ["m.yaml", "empty"]),
    "top level list": ("- tables\n", ["m.yaml", "top level must be a mapping", "list"]),
    "top level scalar": ("hello\n", ["m.yaml", "top level must be a mapping", "str"]),
    "missing tables": ("ledger: x.sqlite\n", ["m.yaml", "missing 'tables'"]),
    "empty tables": ("tables: {}\n", ["m.yaml:1", "'tables' is empty"]),
    "tables a list": ("tables: [a, b]\n", ["m.yaml:1", "'tables' must be a mapping"]),
    "both formats": ("tables: {}\ndatabases: []\n", ["m.yaml", "use one format"]),
    "table without settings": ("tables:\n  t:\n", ["m.yaml:2", "table 't'", "columns"]),
    "table without columns": ("tables:\n  t: {rows: 3}\n", ["table 't'", "missing 'columns:'"]),
    "not yaml": ("tables: [\n", ["m.yaml:2", "not valid YAML"]),
    "flex unknown key": (
        "databases:\n- database: d\n  tables:\n  - table: t\n    columns:\n"
        "    - {name: c, max_freq: 3}\n",
        ["m.yaml:6", "database 'd', table 't', column 'c'", "write 'maxFreq'"],
    ),
    "flex bad maxFreq": (
        "databases:\n- database: d\n  tables:\n  - table: t\n    columns:\n"
        "    - {name: c, maxFreq: 0}\n",
        ["database 'd', table 't', column 'c'", "maxFreq must be a positive integer"],
    ),
    "flex bad domainSet": (
        "databases:\n- database: d\n  tables:\n  - table: t\n    columns:\n"
        "    - {name: c, domainSet: products}\n",
        ["column 'c'", "domainSet must be 'table.column'"],
    ),
    "flex private domainSet": (
        "databases:\n- database: d\n  tables:\n  - table: t\n    columns:\n"
        "    - {name: c, domainSet: u.c}\n  - table: u\n    columns: [{name: c}]\n",
        ["column 'c'", "domainSet names table 'u', which is private"],
    ),
    "flex unique contradiction": (
        "databases:\n- database: d\n  tables:\n  - table: t\n    columns:\n"
        "    - {name: c, maxFreq: 5, isUnique: true}\n",
        ["column 'c'", "contradicts maxFreq 5"],
    ),
    "flex empty databases": ("databases: []\n", ["m.yaml:1", "non-empty list"]),
    "flex table without name": (
        "databases:\n- database: d\n  tables:\n  - columns: []\n",
        ["database 'd', tables[0]", "'table' must be a non-empty name"],
    ),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_metadata(tmp_path, case):
    text, expected = INVALID[case]
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProgrammingError) as exc:
        load_metadata(path)
    msg = str(exc.value)
    assert msg.startswith(str(path))
    for part in expected:
        assert part in msg, (case, msg)
    assert "\n" not in msg


def test_invalid_mapping_names_the_mapping():
    with pytest.raises(ProgrammingError, match=r"^<metadata>: table 't', column 'c': max_freq"):
        load_metadata({"tables": {"t": {"columns": {"c": {"max_freq": 0}}}}})
    with pytest.raises(ProgrammingError, match="column name must be a non-empty name"):
        load_metadata({"tables": {"t": {"columns": {True: {}}}}})


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(ProgrammingError, match="does not exist"):
        load_metadata(tmp_path / "nope.yaml")
    with pytest.raises(ProgrammingError, match="is a folder"):
        load_metadata(tmp_path)


# -- dumping --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [FLEX_OURS, FLEX_THEIRS, PUMS])
def test_dump_load_dump_is_a_fixed_point(path):
    md = load_metadata(path)
    text = dump_metadata(md)
    again = loads_metadata(text, md.path)
    assert again == md
    assert dump_metadata(again) == text


def test_dump_of_awkward_names_and_values(tmp_path):
    md = Metadata(
        tables={
            "no": Table(
                name="no",
                columns={
                    "my col": Column(name="my col", max_freq=3, bounds=(-1.5, 2)),
                    'q"uote': Column(
                        name='q"uote',
                        releasable=True,
                        domain=Domain(
                            values=("a,b", "[x", "no", "", "multi\nline", "\x85", "\n\x7f",
                                    "\U0001f600", 'say "hi"\\', None)
                        ),
                        type="DECIMAL(10,2)",
                    ),
                    "d": Column(
                        name="d",
                        releasable=True,
                        domain=Domain(values=(dt.date(2020, 1, 1), dt.date(2021, 2, 3))),
                    ),
                    "2020": Column(name="2020", releasable=True, domain=Domain(values=(True,))),
                },
                rows=0,
            ),
        },
        ledger="/abs/ledger.sqlite",
    )
    text = dump_metadata(md)
    assert loads_metadata(text) == md
    assert dump_metadata(loads_metadata(text)) == text
    # written to a file it loads the same, absolute paths staying absolute
    path = tmp_path / "x.yaml"
    path.write_text(text)
    assert load_metadata(path) == md


NAMES = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
    min_size=1,
    max_size=8,
).map(str.lower).filter(lambda s: s.strip() and "." not in s and s == s.lower())
VALUES = st.one_of(
    st.lists(st.text(max_size=6), min_size=1, max_size=4, unique=True),
    st.lists(st.integers(-(10**12), 10**12), min_size=1, max_size=4, unique=True),
)
COLUMNS = st.builds(
    lambda mf, b, rel, vals, typ: dict(
        max_freq=mf,
        bounds=(min(b), max(b)) if b else None,
        releasable=rel,
        domain=Domain(values=tuple(vals)) if vals else None,
        type=typ,
    ),
    st.none() | st.integers(1, 10**9),
    st.none() | st.tuples(st.floats(-1e9, 1e9), st.integers(-(10**6), 10**6)),
    st.booleans(),
    st.none() | VALUES,
    st.none() | st.sampled_from(["INTEGER", "VARCHAR", "DECIMAL(10,2)"]),
)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(NAMES, st.dictionaries(NAMES, COLUMNS, max_size=4), min_size=1,
                       max_size=3))
def test_dump_round_trip_property(spec):
    md = Metadata(
        tables={
            t: Table(name=t, columns={c: Column(name=c, **kw) for c, kw in cols.items()})
            for t, cols in spec.items()
        }
    )
    text = dump_metadata(md)
    assert loads_metadata(text) == md
    assert dump_metadata(loads_metadata(text)) == text


def test_metadata_path_not_part_of_equality(tmp_path):
    a = load_metadata(FLEX_OURS)
    copy = tmp_path / "copy.yaml"
    copy.write_text(FLEX_OURS.read_text())
    b = load_metadata(copy)
    assert a == b and a.path != b.path
    assert os.path.isabs(b.path)
