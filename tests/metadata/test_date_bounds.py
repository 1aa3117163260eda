"""Day bounds of date columns (dpsql/metadata/reader.py date_bounds, ours.py): read as
YAML dates or ISO text, validated, dumped back, kept in the analyst-facing schema."""

from __future__ import annotations

import datetime

import pytest

from dpsql.errors import ProgrammingError
from dpsql.metadata import dump_metadata, loads_metadata
from dpsql.metadata.analyst import analyst_metadata

D = datetime.date


def _column(spec: str):
    md = loads_metadata(f"tables:\n  t:\n    columns:\n      c: {spec}\n", "m.yaml")
    return md, md.tables["t"].columns["c"]


@pytest.mark.parametrize("spec", [
    "{bounds: ['1992-01-01', '1998-12-31'], type: DATE}",
    "{bounds: [1992-01-01, 1998-12-31]}",
    "{bounds: ['1992-01-01', 1998-12-31], type: TIMESTAMP}",
])
def test_days_are_read_as_date_bounds(spec):
    md, col = _column(spec)
    assert col.date_bounds == (D(1992, 1, 1), D(1998, 12, 31))
    assert col.bounds is None
    assert loads_metadata(dump_metadata(md)) == md
    assert "bounds: ['1992-01-01', '1998-12-31']" in dump_metadata(md)
    assert analyst_metadata(md).tables["t"].columns["c"].date_bounds == col.date_bounds


def test_a_single_day_and_numbers_stay_numbers():
    assert _column("{bounds: ['2020-02-29', '2020-02-29']}")[1].date_bounds == (
        D(2020, 2, 29), D(2020, 2, 29))
    _, col = _column("{bounds: [0, 10]}")
    assert (col.bounds, col.date_bounds) == ((0, 10), None)


@pytest.mark.parametrize(("spec", "words"), [
    ("{bounds: ['1992-01-01', 'later']}", ["m.yaml:4", "column 'c'", "two days"]),
    ("{bounds: ['1992-01-01', 5]}", ["two finite numbers"]),
    ("{bounds: ['1999-01-01', '1998-12-31']}", ["after upper", "['1998-12-31', '1999-01-01']"]),
    ("{bounds: ['1992-01-01 10:00:00', '1998-12-31']}", ["two days"]),
    ("{bounds: ['1992-01-01', '1998-12-31'], type: INTEGER}", ["DATE or TIMESTAMP"]),
    ("{bounds: ['1992-01-01', '1998-12-31'], type: TIMESTAMPTZ}", ["DATE or TIMESTAMP"]),
    ("{bounds: ['1992-02-30', '1998-12-31']}", ["two days"]),
])
def test_bad_day_bounds_are_refused(spec, words):
    with pytest.raises(ProgrammingError) as err:
        _column(spec)
    for word in words:
        assert word in str(err.value), str(err.value)


@pytest.mark.parametrize("first, last", [
    ("DATE '2020-01-02'", "DATE '2021-03-04'"),
    # QA round 6: a TIMESTAMP column got no drafted bounds; its first and last days, which
    # the metadata accepts as a TIMESTAMP's date bounds
    ("TIMESTAMP '2020-01-02 00:00:01'", "TIMESTAMP '2021-03-04 23:59:59'"),
])
def test_metadata_build_suggests_day_bounds_as_a_comment(first, last):
    import duckdb

    from dpsql.metadata.build import build_metadata

    con = duckdb.connect()
    con.execute(f"CREATE TABLE o AS SELECT * FROM (VALUES ({last}), ({first}), (NULL)) t(day)")
    text = build_metadata(con)
    con.close()
    assert loads_metadata(text).tables["o"].columns["day"].date_bounds is None
    assert "# bounds: ['2020-01-02', '2021-03-04']  # observed first/last day" in text
    accepted = loads_metadata(text.replace("# bounds:", "bounds:"))
    assert accepted.tables["o"].columns["day"].date_bounds == (D(2020, 1, 2), D(2021, 3, 4))
