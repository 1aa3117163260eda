"""Writing metadata back in our format (dpsql/metadata/yaml_io.py): dumps load back equal."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.metadata import (
    Column,
    Domain,
    Metadata,
    Table,
    dump_metadata,
    load_metadata,
    loads_metadata,
)
from tests.metadata.helpers import FLEX_OURS, FLEX_THEIRS, PUMS

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
