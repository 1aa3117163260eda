"""``partition_selection: true``: read, validated, written back, and shown to analysts."""

from __future__ import annotations

import pytest

from dpsql.errors import ProgrammingError
from dpsql.metadata import dump_metadata, loads_metadata
from dpsql.metadata.analyst import analyst_metadata

TEXT = """
tables:
  people:
    columns:
      age: {releasable: true, partition_selection: true, type: INTEGER}
      city: {releasable: true, partition_selection: true, domain: {values: [x, y]}}
      income: {bounds: [0, 10]}
"""


def test_read_and_round_trip():
    md = loads_metadata(TEXT)
    age = md.table("people").column("age")
    assert age.partition_selection and age.domain is None and age.releasable
    assert md.table("people").column("income").partition_selection is False
    # a declared domain keeps priority, but the flag is kept as written
    city = md.table("people").column("city")
    assert city.partition_selection and city.domain is not None
    assert loads_metadata(dump_metadata(md)) == md
    assert "partition_selection: true" in dump_metadata(md)


def test_analysts_see_the_flag():
    md = analyst_metadata(loads_metadata(TEXT))
    assert md.table("people").column("age").partition_selection


@pytest.mark.parametrize(("column", "message"), [
    ("{partition_selection: true}", "needs 'releasable: true'"),
    ("{releasable: true, partition_selection: yes please}", "must be true or false"),
])
def test_invalid_flags_are_refused(column, message):
    with pytest.raises(ProgrammingError, match=message):
        loads_metadata(f"tables:\n  t:\n    columns:\n      a: {column}\n")


def test_public_columns_need_no_flag():
    with pytest.raises(ProgrammingError, match="for private columns"):
        loads_metadata("tables:\n  t:\n    public: true\n    columns:\n"
                       "      a: {partition_selection: true}\n")
