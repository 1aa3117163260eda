"""The metadata's hash (dpsql/metadata/digest.py): any change to the loaded model changes it,
and nothing else does."""

from __future__ import annotations

import pytest

from dpsql.errors import ProgrammingError
from dpsql.metadata import dump_metadata, load_metadata, loads_metadata
from dpsql.metadata.digest import metadata_digest
from tests.metadata.helpers import PUMS, write

BASE = """\
data_version: 3
tables:
  t:
    rows: 10
    columns:
      k: {releasable: true, domain: {values: [1, 2]}, max_freq: 5}
      v: {bounds: [0, 10], type: INTEGER}
"""


def test_digest_is_stable_across_paths_and_formatting(tmp_path):
    md = load_metadata(write(tmp_path, BASE))
    again = loads_metadata(dump_metadata(md))  # no path, other formatting
    assert metadata_digest(md) == metadata_digest(again)
    assert len(metadata_digest(md)) == 64


@pytest.mark.parametrize("old, new", [
    ("bounds: [0, 10]", "bounds: [0, 11]"),
    ("bounds: [0, 10]", "bounds: [0.0, 10]"),
    ("values: [1, 2]", "values: [1, 3]"),
    ("values: [1, 2]", "values: ['1', '2']"),
    ("max_freq: 5", "max_freq: 6"),
    ("rows: 10", "rows: 11"),
    ("data_version: 3", "data_version: 4"),
    ("type: INTEGER", "type: BIGINT"),
    ("releasable: true, ", ""),
])
def test_each_change_of_the_model_changes_the_digest(tmp_path, old, new):
    assert old in BASE
    md = load_metadata(write(tmp_path, BASE))
    changed = load_metadata(write(tmp_path, BASE.replace(old, new), "changed.yaml"))
    assert metadata_digest(md) != metadata_digest(changed)


def test_data_version_round_trips_as_text(tmp_path):
    md = load_metadata(write(tmp_path, BASE))
    assert md.data_version == "3"
    assert loads_metadata(dump_metadata(md)) == md
    dated = load_metadata(write(tmp_path, "data_version: 2026-11-26\n" + BASE.split("\n", 1)[1]))
    assert dated.data_version == "2026-11-26"
    assert loads_metadata(dump_metadata(dated)).data_version == "2026-11-26"


@pytest.mark.parametrize("value", ["''", "[1]", "true"])
def test_bad_data_version_is_refused(tmp_path, value):
    with pytest.raises(ProgrammingError, match="data_version"):
        load_metadata(write(tmp_path, f"data_version: {value}\n" + BASE.split("\n", 1)[1]))


def test_digest_is_deterministic():
    assert metadata_digest(load_metadata(PUMS)) == metadata_digest(load_metadata(PUMS))
