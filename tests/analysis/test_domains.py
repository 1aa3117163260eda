"""Domain values typed against their column, and collated keys (dpsql/analysis/domains.py,
dpsql/backends/duckdb.py collations; issue #12 classes 8 and 9)."""

from __future__ import annotations

import duckdb
import pytest

from dpsql.analysis.domains import check_domains
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.cli.main import main
from dpsql.errors import ProgrammingError
from dpsql.metadata import loads_metadata
from tests.neighbours import engine, neighbour_pair, same_outcome


def _metadata(column_type: str, values: str):
    return loads_metadata(f"""
tables:
  t:
    columns:
      k: {{type: "{column_type}", releasable: true, domain: {{values: {values}}}}}
""")


@pytest.mark.parametrize(("column_type", "values", "message"), [
    ("VARCHAR", "['a', 'b']", None),
    ("INTEGER", "[1, 2, 3]", None),
    ("INTEGER", "['1', '2']", None),
    ("DATE", "[2024-01-01, 2024-02-01]", None),
    ("DATE", "['2024-01-01']", None),
    ("DECIMAL(5,2)", "[1.25, 2]", None),
    ("INTEGER", "['1', 'other']", "'other'"),
    ("INTEGER", "['1', '01']", "same"),
    ("INTEGER", "[10000000000]", "10000000000"),
    ("DATE", "['2024-13-01']", "2024-13-01"),
    ("BOOLEAN", "['true', 'maybe']", "maybe"),
    ("VARCHAR", "[10001, 10002]", None),
    ("DECIMAL(5,2)", "['1.25', '1.250']", "same"),
])
def test_listed_values_must_cast_and_stay_distinct(column_type, values, message):
    metadata = _metadata(column_type, values)
    if message is None:
        check_domains(metadata)
    else:
        with pytest.raises(ProgrammingError, match=message):
            check_domains(metadata)


def _several(*columns: tuple[str, str]):
    lines = "".join(f'      k{i}: {{type: "{t}", releasable: true, domain: {{values: {v}}}}}\n'
                    for i, (t, v) in enumerate(columns))
    return loads_metadata(f"tables:\n  t:\n    columns:\n{lines}")


@pytest.mark.parametrize(("bad", "message"), [
    (("INTEGER", "['1', 'other']"), r"t\.k1 .*'other'"),
    (("INT4RANGE", "[1]"), r"t\.k1 .*cannot be read as INT4RANGE"),  # the batch query fails
    (("INTEGER", "['1', '01']"), r"t\.k1 .*same"),
])
def test_domains_checked_in_one_query_still_name_the_bad_one(bad, message):
    """The listed domains are cast in one query of the scratch instance; an unreadable type
    fails that query, and the column-by-column check then names it."""
    good = [("VARCHAR", "['a', 'b']"), ("DATE", "['2024-01-01']")]
    check_domains(_several(*good))
    with pytest.raises(ProgrammingError, match=message):
        check_domains(_several(good[0], bad, good[1]))


def test_a_table_domain_of_another_type_is_refused():
    metadata = loads_metadata("""
tables:
  t:
    columns:
      k: {type: VARCHAR, releasable: true, domain: {table: p, column: id}}
  p:
    public: true
    columns:
      id: {type: INTEGER}
""")
    with pytest.raises(ProgrammingError, match="another type"):
        check_domains(metadata)


def test_metadata_check_types_domain_values(tmp_path, capsys):
    path = tmp_path / "m.yaml"
    path.write_text("tables:\n  t:\n    columns:\n      k: {type: VARCHAR, releasable: true, "
                    "domain: {values: [10001, 10002]}}\n  u:\n    columns:\n      "
                    "k: {type: INTEGER, releasable: true, domain: {values: ['1', other]}}\n")
    assert main(["metadata", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "'other'" in err and "Traceback" not in err


def test_integer_values_on_a_text_column_bin_without_casting_stored_keys(tmp_path):
    """Class 9: before, the VALUES list held INTEGER literals, so the bin join cast the VARCHAR
    key to INTEGER and failed only where a row like 'x' exists. The values are now cast to
    VARCHAR once, so both neighbours release the same bins."""
    pair = neighbour_pair(tmp_path, ["CREATE TABLE t (k VARCHAR)"],
                          {"t": [("10001",), ("10002",), ("10001",)]}, ("t", ("x",)))
    metadata = _metadata("VARCHAR", "[10001, 10002]")
    a, b = same_outcome(pair, metadata, "SELECT k, COUNT(*) FROM t GROUP BY k")
    assert a == b == ("ok", [("10001", 2), ("10002", 1)])


# ----------------------------------------------------------------------------- collations


COLLATED = ["CREATE TABLE a (k VARCHAR COLLATE nocase, g VARCHAR COLLATE nocase, "
            "s VARCHAR COLLATE noaccent, n VARCHAR)",
            "CREATE TABLE b (k VARCHAR)"]


@pytest.fixture(scope="module")
def collated(tmp_path_factory):
    rows = {"a": [("k1", "x", "s", "n1")], "b": [("k1",), ("k2",)]}
    pair = neighbour_pair(tmp_path_factory.mktemp("collated"), COLLATED, rows,
                          ("b", ("K1",)))  # matches a.k = 'k1' only under NOCASE
    metadata = loads_metadata("""
tables:
  a:
    columns:
      k: {max_freq: 1, type: VARCHAR}
      g: {releasable: true, domain: {values: [x, X]}}
      s: {max_freq: 1}
      n: {max_freq: 1}
  b:
    columns:
      k: {max_freq: 1}
""")
    return pair, metadata


def test_collations_are_read_from_the_database(collated):
    pair, metadata = collated
    backend = DuckDBBackend(pair[0], metadata)
    try:
        schema = backend.table_schema("a")
    finally:
        backend.close()
    assert schema["k"] == schema["g"] == "VARCHAR COLLATE nocase"
    assert schema["s"].startswith("VARCHAR COLLATE noaccent")  # which also equates NFC forms
    assert schema["n"] == "VARCHAR"


@pytest.mark.parametrize(("sql", "error", "word"), [
    ("SELECT COUNT(*) FROM a JOIN b ON a.k = b.k", "MissingMetricError", "collation nocase"),
    ("SELECT COUNT(*) FROM b WHERE b.k IN (SELECT k FROM a)", "MissingMetricError",
     "collation nocase"),
    ("SELECT COUNT(*) FROM b WHERE EXISTS (SELECT 1 FROM a WHERE a.s = b.k)",
     "MissingMetricError", "collation noaccent"),
    ("SELECT g, COUNT(*) FROM a GROUP BY g", "ProtectedBinError", "collation nocase"),
])
def test_collated_keys_and_group_keys_are_refused_on_both(collated, sql, error, word):
    pair, metadata = collated
    con = duckdb.connect(str(pair[1]), read_only=True)
    try:  # the bound the metadata states is broken: 'K1' matches 'k1' (mf 1 each side)
        assert con.execute("SELECT COUNT(*) FROM a JOIN b ON a.k = b.k").fetchone() == (2,)
    finally:
        con.close()
    a, _ = same_outcome(pair, metadata, sql)
    assert a[0] == error and word in a[1] and "without a collation" in a[1]


def test_uncollated_columns_of_the_same_table_still_join(collated):
    pair, metadata = collated
    a, _ = same_outcome(pair, metadata, "SELECT COUNT(*) FROM a JOIN b ON a.n = b.k")
    assert a[0] == "ok"
    assert engine(pair[0], metadata).metadata.tables["a"].columns["n"].type == "VARCHAR"
