"""Under two declared units, a refusal found on one unit's view names that unit (QA round 2 of
issue #17).

On unit U's view the private tables with no path to U are public, so the one-unit wording
("the rows counted come from public tables only") told an analyst who reads the unit table
``people`` that it was public. The refusal is the same, at the same point (before the charge);
the text names the unit and says why."""

from __future__ import annotations

import random

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import UnsupportedConstructError
from dpsql.metadata import loads_metadata
from dpsql.metadata.unit_multi import unit_view
from dpsql.units.refusals import fix_text, path_joins, refusal_text
from tests.db_files import writing
from tests.ledgers import charged, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise
from tests.units import tiny_multi

MD = loads_metadata("""
privacy_unit:
  - {table: people, column: pid, max_contribution: 8}
  - {table: stores, column: sid}
tables:
  people: {columns: {pid: {type: INTEGER}, age: {type: INTEGER, bounds: [0, 120]}}}
  stores: {columns: {sid: {type: INTEGER}}}
  visits: {unit: {people: v_pid, stores: v_sid},
           columns: {v_pid: {type: INTEGER}, v_sid: {type: INTEGER}}}
""", "<two units>")


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM people p WHERE EXISTS (SELECT 1 FROM visits v WHERE v.v_pid = p.pid)",
    "SELECT COUNT(*) FROM people p WHERE p.pid IN (SELECT v.v_pid FROM visits v)",
])
def test_counted_rows_of_one_unit_filtered_by_rows_of_both_name_the_other_unit(sql):
    with pytest.raises(UnsupportedConstructError) as err:
        analyze_request(sql, MD)
    text = str(err.value)
    assert "two privacy units (people and stores)" in text
    assert "link to no stores unit" in text and "stores.sid" in text
    assert "public tables only" in text  # the one-unit wording's reason, kept as a phrase


def test_other_refusals_on_a_view_name_its_unit():
    with pytest.raises(UnsupportedConstructError,
                       match=r"under the privacy unit stores\.sid \(one of people and stores\), "
                             r"a row of visits \(w\) may belong to another unit"):
        analyze_request("SELECT COUNT(*) FROM visits v JOIN visits w ON v.v_pid = w.v_pid", MD)


def test_the_same_query_under_one_unit_is_the_one_row_release():
    """The premise: with people the only unit, the EXISTS is released (one row per unit)."""
    one = loads_metadata("""
privacy_unit: {table: people, column: pid, max_contribution: 8}
tables:
  people: {columns: {pid: {type: INTEGER}}}
  visits: {unit: v_pid, columns: {v_pid: {type: INTEGER}}}
""", "<one unit>")
    analysis = analyze_request(
        "SELECT COUNT(*) FROM people p WHERE EXISTS (SELECT 1 FROM visits v WHERE v.v_pid = p.pid)",
        one)
    assert analysis.unit is not None and analysis.unit.alone is not None


# ------------------------------------------------------- through the session, two units

def test_a_refusal_on_a_units_view_is_worded_once_naming_that_unit(tmp_path):
    """dpsql.units.refusals: the proof on supplier's view words its refusal with the unit
    among the declared ones where it is raised (no prefix cut off and written again), as an
    UnsupportedConstructError, and nothing is charged."""
    md = tiny_multi.metadata()
    path = tmp_path / "two.duckdb"
    with writing(path) as con:
        tiny_multi.load(tiny_multi.random_database(random.Random(1)), con)
    backend = DuckDBBackend(path, md)
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=10.0, delta=0.0)
    session = ledger_session(md, backend, ledger, sampler=ZeroNoise())
    try:
        with pytest.raises(UnsupportedConstructError) as err:
            session.run("SELECT COUNT(*) AS n FROM items a JOIN items b "
                        "ON a.i_order = b.i_order", epsilon=1.0)
        assert charged(session) == []
    finally:
        backend.close()
        ledger.close()
    what = ("a row of items (b) may belong to another unit than the rows counted (a result "
            "row would belong to two units)")
    assert str(err.value) == (
        f"under the privacy unit supplier.s_id (one of customer and supplier), {what}: every "
        "private table the query reads must belong to the same unit as the rows it counts "
        "(join the tables along their unit paths, e.g. a.i_supp = b.i_supp)")
    assert type(err.value) is UnsupportedConstructError
    assert str(err.value) == refusal_text(
        what, "supplier.s_id", ("customer", "supplier"),
        fix_text(path_joins(unit_view(md, "supplier")), "items", "a.i_supp = b.i_supp"))
