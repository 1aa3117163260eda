"""The ``sample_aggregate`` table setting (dpsql/metadata/sample_aggregate.py): read,
validated with file and line, written back, and shown to analysts (a public decision)."""

from __future__ import annotations

import pytest

from dpsql.errors import ProgrammingError
from dpsql.metadata import dump_metadata, load_metadata, loads_metadata
from dpsql.metadata.analyst import analyst_metadata, analyst_schema
from dpsql.metadata.digest import metadata_digest
from dpsql.metadata.model import SampleAggregate
from tests.metadata.helpers import write

DOC = """\
tables:
  orders:
    sample_aggregate: {blocks: 50, by: Customer}
    columns:
      customer: {max_freq: 7, type: INTEGER}
      price: {bounds: [0, 100], type: DOUBLE}
  lines:
    sample_aggregate: {blocks: 2}
    columns:
      qty: {type: INTEGER}
  products:
    public: true
    columns:
      id: {type: INTEGER}
"""


def test_setting_is_read_with_by_lower_cased():
    md = loads_metadata(DOC)
    assert md.tables["orders"].sample_aggregate == SampleAggregate(blocks=50, by="customer")
    assert md.tables["lines"].sample_aggregate == SampleAggregate(blocks=2, by=None)
    assert md.tables["products"].sample_aggregate is None


def test_setting_round_trips_through_the_writer(tmp_path):
    md = load_metadata(write(tmp_path, DOC))
    assert loads_metadata(dump_metadata(md), md.path) == md
    assert "sample_aggregate: {blocks: 50, by: customer}" in dump_metadata(md)


def test_analysts_see_the_setting_but_not_max_frequencies():
    md = loads_metadata(DOC)
    view = analyst_metadata(md)
    assert view.tables["orders"].sample_aggregate == SampleAggregate(50, "customer")
    schema = analyst_schema(md)
    assert schema["tables"]["orders"]["sample_aggregate"] == {"blocks": 50, "by": "customer"}
    assert schema["tables"]["lines"]["sample_aggregate"] == {"blocks": 2}
    assert "max_freq" not in str(schema)


def test_the_setting_is_part_of_the_cache_scope():
    md = loads_metadata(DOC)
    other = loads_metadata(DOC.replace("blocks: 50", "blocks: 51"))
    assert metadata_digest(md) != metadata_digest(other)


INVALID = {
    "one block": ("{blocks: 1}", ["m.yaml:3", "table 't'", "from 2 to 100000", "got 1"]),
    "too many": ("{blocks: 100001}", ["from 2 to 100000"]),
    "not an integer": ("{blocks: 2.5}", ["an integer", "got 2.5"]),
    "boolean": ("{blocks: true}", ["got True"]),
    "missing blocks": ("{by: c}", ["needs 'blocks:'", "got None"]),
    "unknown key": ("{blocks: 4, bye: c}", ["sample_aggregate", "did you mean 'by'"]),
    "undeclared by": ("{blocks: 4, by: zz}", ["'by' names column 'zz'", "one of: c"]),
    "empty by": ("{blocks: 4, by: ''}", ["non-empty name"]),
    "not a mapping": ("100", ["must be a mapping"]),
}


@pytest.mark.parametrize("setting", INVALID, ids=list(INVALID))
def test_invalid_settings_name_file_line_and_fix(tmp_path, setting):
    value, parts = INVALID[setting]
    path = write(tmp_path, f"tables:\n  t:\n    sample_aggregate: {value}\n"
                           "    columns:\n      c: {type: INTEGER}\n")
    with pytest.raises(ProgrammingError) as err:
        load_metadata(path)
    for part in parts:
        assert part in str(err.value)
    assert "m.yaml" in str(err.value)


def test_public_tables_cannot_enable_it(tmp_path):
    path = write(tmp_path, "tables:\n  p:\n    public: true\n    sample_aggregate: {blocks: 4}\n"
                           "    columns:\n      c: {}\n")
    with pytest.raises(ProgrammingError, match="is for private tables"):
        load_metadata(path)
