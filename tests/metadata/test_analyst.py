"""The analyst-facing schema (dpsql/metadata/analyst.py): everything a query author needs, and
no owner-only field (max frequencies, row counts, sources, ledger, data version)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
import yaml

from dpsql.metadata import Column, Domain, Metadata, Table, load_metadata, loads_metadata
from dpsql.metadata.analyst import (
    ANALYST_FIELDS,
    OWNER_ONLY_FIELDS,
    analyst_metadata,
    analyst_schema,
    dumps_analyst_schema,
    write_analyst_schema,
)
from tests.metadata.helpers import FLEX_OURS, FLEX_THEIRS, PUMS, write

MODEL = (Metadata, Table, Column, Domain)

OWNER = """\
    ledger: secret/ledger.sqlite
    data_version: 7
    tables:
      products:
        public: true
        rows: 4321
        source: secret/products.csv
        columns:
          product_id: {type: INTEGER, max_freq: 1}
          name: {type: VARCHAR}
      orders:
        rows: 98765
        source: secret/orders_*.parquet
        columns:
          customer_id: {max_freq: 8642, type: INTEGER}
          cost: {bounds: [0, 500], max_freq: 97531, type: DOUBLE}
          product_id: {releasable: true, domain: {table: products, column: product_id},
                       max_freq: 1357}
          status: {releasable: true, domain: {values: [open, shipped, "no"]}, type: VARCHAR}
          placed: {releasable: true, domain: {values: [2024-01-01, 2024-01-02]}, type: DATE}
"""

# Every owner-only value above, as it would appear in text (none is a substring of a
# releasable value, a type or a name).
SECRETS = ("secret", "ledger", "4321", "98765", "8642", "97531", "1357", "data_version",
           "max_freq", "rows", "source", "parquet", "products.csv")


def test_every_field_of_the_model_is_classified_exactly_once():
    # Fails when a field is added to the model without deciding whether analysts may see it.
    assert set(ANALYST_FIELDS) == set(OWNER_ONLY_FIELDS) == set(MODEL)
    for cls in MODEL:
        names = {f.name for f in dataclasses.fields(cls)}
        analyst, owner = set(ANALYST_FIELDS[cls]), set(OWNER_ONLY_FIELDS[cls])
        assert not analyst & owner, f"{cls.__name__}: classified twice: {analyst & owner}"
        assert analyst | owner == names, (
            f"{cls.__name__}: unclassified fields {names - analyst - owner}; add each to "
            "ANALYST_FIELDS or OWNER_ONLY_FIELDS in dpsql/metadata/analyst.py"
        )


def test_owner_only_fields_are_dropped_exhaustively(tmp_path):
    md = load_metadata(write(tmp_path, OWNER))
    view = analyst_metadata(md)
    # every owner-only field of every object is at its (None) default, whatever it held
    objects: list[object] = [view]
    for t in view.tables.values():
        objects.append(t)
        for c in t.columns.values():
            objects.append(c)
            if c.domain is not None:
                objects.append(c.domain)
    for obj in objects:
        defaults = {f.name: f.default for f in dataclasses.fields(obj)}  # type: ignore[arg-type]
        for name in OWNER_ONLY_FIELDS[type(obj)]:
            assert getattr(obj, name) == defaults[name], (type(obj).__name__, name)
    # and the originals did hold them: the test is not vacuous
    assert md.ledger and md.data_version == "7" and md.tables["orders"].rows == 98765
    assert md.tables["orders"].source and md.tables["orders"].columns["cost"].max_freq == 97531


def test_schema_text_and_mapping_hold_no_owner_value(tmp_path):
    md = load_metadata(write(tmp_path, OWNER))
    text = dumps_analyst_schema(md)
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    mapping = yaml.safe_dump(analyst_schema(md))
    for secret in SECRETS:
        assert secret not in body, secret
        assert secret not in mapping, secret
    assert str(tmp_path) not in text


def test_schema_keeps_what_analysts_need(tmp_path):
    md = load_metadata(write(tmp_path, OWNER))
    schema = analyst_schema(md)
    assert schema == {"tables": {
        "products": {"public": True, "columns": {
            "product_id": {"type": "INTEGER"}, "name": {"type": "VARCHAR"}}},
        "orders": {"columns": {
            "customer_id": {"type": "INTEGER"},
            "cost": {"bounds": [0, 500], "type": "DOUBLE"},
            "product_id": {"releasable": True,
                           "domain": {"table": "products", "column": "product_id"}},
            "status": {"releasable": True, "domain": {"values": ["open", "shipped", "no"]},
                       "type": "VARCHAR"},
            "placed": {"releasable": True,
                       "domain": {"values": [dt.date(2024, 1, 1), dt.date(2024, 1, 2)]},
                       "type": "DATE"},
        }},
    }}


@pytest.mark.parametrize("path", [FLEX_OURS, FLEX_THEIRS, PUMS])
def test_written_schema_loads_as_the_analyst_view(tmp_path, path):
    md = load_metadata(path)
    out = tmp_path / "deep" / "analyst.yaml"
    write_analyst_schema(md, out)
    again = load_metadata(out)
    assert again == analyst_metadata(md)
    assert again.ledger is None and all(t.rows is None and t.source is None
                                        for t in again.tables.values())
    assert all(c.max_freq is None for t in again.tables.values() for c in t.columns.values())
    # the text and the mapping describe the same schema
    assert loads_metadata(yaml.safe_dump(analyst_schema(md))) == again


def test_public_tables_say_public(tmp_path):
    text = dumps_analyst_schema(load_metadata(write(tmp_path, OWNER)))
    doc = yaml.safe_load(text)
    assert doc["tables"]["products"]["public"] is True
    assert "public" not in doc["tables"]["orders"]


def test_cli_writes_the_schema_of_an_existing_file(tmp_path, capsys):
    from dpsql.cli.main import main

    owner = write(tmp_path, OWNER)
    out = tmp_path / "analyst.yaml"
    assert main(["metadata", "analyst-schema", "-m", str(owner), "-o", str(out)]) == 0
    assert "share it" in capsys.readouterr().err
    assert load_metadata(out) == analyst_metadata(load_metadata(owner))
    assert main(["metadata", "analyst-schema", "-m", str(owner), "-o", str(out)]) == 1
    assert "--force" in capsys.readouterr().err
    assert main(["metadata", "analyst-schema", "-m", str(owner)]) == 0
    assert capsys.readouterr().out == out.read_text()
    assert main(["metadata", "analyst-schema", "-m", str(tmp_path / "none.yaml")]) == 1
    assert "does not exist" in capsys.readouterr().err
