"""R2T's level grid in the privacy unit (``privacy_unit: {.., levels: {base: B}}``, read by
dpsql/metadata/unit_paths.py): what loads, every refusal with its line, writing back, the
digest and the analyst schema."""

from __future__ import annotations

import re

import pytest

from dpsql.cli.main import main
from dpsql.errors import ProgrammingError
from dpsql.metadata import dump_metadata, load_metadata, loads_metadata
from dpsql.metadata.analyst import analyst_schema, dumps_analyst_schema
from dpsql.metadata.digest import metadata_digest
from tests.metadata.helpers import write

BASE = """\
privacy_unit: {table: customer, column: c_custkey}
tables:
  customer:
    columns:
      c_custkey: {type: BIGINT}
  orders:
    unit: o_custkey
    columns:
      o_custkey: {type: BIGINT}
"""


def _with(unit: str) -> str:
    return BASE.replace("{table: customer, column: c_custkey}", unit)


def _load(tmp_path, text: str):
    return load_metadata(write(tmp_path, text))


def _error(tmp_path, text: str) -> str:
    with pytest.raises(ProgrammingError) as info:
        _load(tmp_path, text)
    return str(info.value)


def _line(message: str) -> int:
    found = re.match(r".*m\.yaml:(\d+): ", message)
    assert found, message
    return int(found.group(1))


def test_the_default_grid_is_the_papers(tmp_path):
    unit = _load(tmp_path, BASE).privacy_unit
    assert unit is not None and unit.level_base == 2.0


@pytest.mark.parametrize(("text", "base"), [("5.5", 5.5), ("3", 3.0), ("2", 2.0),
                                            ("2.0", 2.0), ("100", 100.0)])
def test_a_declared_base_loads(tmp_path, text, base):
    md = _load(tmp_path, _with("{table: customer, column: c_custkey, max_contribution: 837339, "
                               f"levels: {{base: {text}}}}}"))
    assert md.privacy_unit is not None and md.privacy_unit.level_base == base
    assert isinstance(md.privacy_unit.level_base, float)


def test_block_style_loads(tmp_path):
    text = BASE.replace("privacy_unit: {table: customer, column: c_custkey}\n",
                        "privacy_unit:\n  table: customer\n  column: c_custkey\n"
                        "  levels:\n    base: 5.5\n")
    md = _load(tmp_path, text)
    assert md.privacy_unit is not None and md.privacy_unit.level_base == 5.5


@pytest.mark.parametrize(("levels", "needle"), [
    ("{base: 1.5}", "levels base must be a number >= 2"),
    ("{base: 0}", "levels base must be a number >= 2"),
    ("{base: -2}", "levels base must be a number >= 2"),
    ("{base: .nan}", "levels base must be a number >= 2"),
    ("{base: .inf}", "levels base must be a number >= 2"),
    ("{base: true}", "levels base must be a number >= 2"),
    ("{base: '5.5'}", "levels base must be a number >= 2"),
    ("{}", "levels needs 'base'"),
    ("{top: 8}", "top"),
    ("{bse: 3}", "bse"),
    ("5.5", "levels (write {base: B}"),
])
def test_bad_levels_are_refused_with_their_line(tmp_path, levels, needle):
    text = BASE.replace("privacy_unit: {table: customer, column: c_custkey}\n",
                        f"# the unit\nprivacy_unit:\n  table: customer\n  column: c_custkey\n"
                        f"  levels: {levels}\n")
    message = _error(tmp_path, text)
    assert needle in message, message
    assert "privacy_unit" in message
    assert _line(message) in (2, 5), message  # the levels line (or the block when empty)


def test_a_grid_past_2_to_62_rows_is_refused(tmp_path):
    message = _error(tmp_path, _with("{table: customer, column: c_custkey, "
                                     f"max_contribution: {2**62}, levels: {{base: 3}}}}"))
    assert "2^62" in message and "max_contribution" in message, message


def test_round_trip_writes_a_non_default_base_only(tmp_path):
    md = _load(tmp_path, _with("{table: customer, column: c_custkey, levels: {base: 5.5}}"))
    text = dump_metadata(md)
    assert "levels: {base: 5.5}" in text
    assert loads_metadata(text, md.path) == md
    md3 = _load(tmp_path, _with("{table: customer, column: c_custkey, levels: {base: 3}}"))
    assert "levels: {base: 3}" in dump_metadata(md3)
    assert loads_metadata(dump_metadata(md3), md3.path) == md3
    assert "levels" not in dump_metadata(_load(tmp_path, BASE))


def test_the_grid_is_public_in_the_analyst_schema_and_the_digest(tmp_path):
    md = _load(tmp_path, _with("{table: customer, column: c_custkey, levels: {base: 5.5}}"))
    assert analyst_schema(md)["privacy_unit"]["levels"] == {"base": 5.5}
    assert "levels: {base: 5.5}" in dumps_analyst_schema(md)
    assert metadata_digest(md) != metadata_digest(_load(tmp_path, BASE))


def test_metadata_check_shows_the_grid(tmp_path, capsys):
    path = write(tmp_path, _with("{table: customer, column: c_custkey, max_contribution: 837339, "
                                 "levels: {base: 5.5}}"))
    assert main(["metadata", "check", "-m", str(path)]) == 0
    out = capsys.readouterr().out
    assert "privacy unit: customer.c_custkey (max_contribution 837339, levels base 5.5, " in out


# ``max_sum``: R2T's GS for a SUM, in value units (dpsql.units.grid)


def test_max_sum_loads_round_trips_and_is_public(tmp_path):
    md = _load(tmp_path, _with("{table: customer, column: c_custkey, max_sum: 1000000}"))
    assert md.privacy_unit is not None and md.privacy_unit.max_sum == 1000000
    assert _load(tmp_path, BASE).privacy_unit.max_sum is None
    text = dump_metadata(md)
    assert "max_sum: 1000000" in text
    assert loads_metadata(text, md.path) == md
    assert "max_sum" not in dump_metadata(_load(tmp_path, BASE))
    assert analyst_schema(md)["privacy_unit"]["max_sum"] == 1000000
    assert metadata_digest(md) != metadata_digest(_load(tmp_path, BASE))


@pytest.mark.parametrize(("value", "needle"), [
    ("0", "max_sum must be an integer >= 1"),
    ("-5", "max_sum must be an integer >= 1"),
    ("2.5", "max_sum must be an integer >= 1"),
    ("true", "max_sum must be an integer >= 1"),
    ("'10'", "max_sum must be an integer >= 1"),
    (str(2**63), "2^62"),
])
def test_a_bad_max_sum_is_refused_with_its_line(tmp_path, value, needle):
    text = BASE.replace("privacy_unit: {table: customer, column: c_custkey}\n",
                        f"# the unit\nprivacy_unit:\n  table: customer\n  column: c_custkey\n"
                        f"  max_sum: {value}\n")
    message = _error(tmp_path, text)
    assert needle in message and "privacy_unit" in message, message
    assert _line(message) in (2, 5), message
