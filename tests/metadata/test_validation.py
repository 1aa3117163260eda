"""Every metadata problem is a ProgrammingError naming the file, line, table and column
(dpsql/metadata/reader.py, ours.py, flex.py, yaml_io.py)."""

from __future__ import annotations

import pytest

from dpsql.errors import ProgrammingError
from dpsql.metadata import load_metadata

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
    "max_freq past 2^63": (  # more rows than a table holds; past the doubles, an analysis error
        "tables:\n  t:\n    columns:\n      c: {max_freq: 9223372036854775809}\n",
        ["column 'c'", "at most 2^63", "9223372036854775809"],
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
    "bounds in exponent notation": (  # YAML 1.1 reads these as strings
        "tables:\n  t:\n    columns:\n      c: {bounds: [-1e17, 1e17]}\n",
        ["column 'c'", "two finite numbers", "write 1.0e+17"],
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
