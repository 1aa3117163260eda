"""What owners (explain) and analysts (the CLI footer, the server's NOTICE) see of a release
under a privacy unit."""

from __future__ import annotations

import json
import random

import pytest

from dpsql.analysis.explain import explain, explain_text
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.cli.output import release_line
from dpsql.release.avg_rows import GROUPED_AVG
from dpsql.release.record import NOT_PUBLISHABLE, R2T_AVG, ColumnRelease, Release
from dpsql.server.statements import release_notice
from tests.db_files import writing
from tests.ledgers import ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise
from tests.units import tiny, tiny_multi


def test_explain_reports_the_unit_the_lookup_and_r2t_scales():
    report = explain("SELECT COUNT(*) FROM items", tiny.metadata(), epsilon=1.0, delta=0.0)
    unit = report["privacy_unit"]
    assert unit["unit"] == "customer.c_id" and unit["mechanism"] == "r2t"
    assert unit["unit_of_each_row"] == "items.i_order"
    assert unit["lookups"] == ["orders.o_id -> o_cust"]
    (m,) = report["measurements"]
    # GS 8: levels 2, 4, 8 at epsilon 1/3 each, released as noised increments 2, 2, 4
    # (dpsql.noise.r2t): each draw's scale 3 * (tau_j - tau_(j-1)) / 1
    assert m["mechanism"] == "r2t" and m["parts"][0]["level_scales"] == [6.0, 6.0, 12.0]
    text = explain_text("SELECT COUNT(*) FROM items", tiny.metadata(), epsilon=1.0, delta=0.0)
    assert "privacy unit: customer.c_id" in text and "-> orders[o_id].o_cust" in text
    assert "level scales 6, 6, 12" in text
    assert "rows of no unit (a NULL path, or a via key matching no row): the same in both " \
        "neighbours, counted in full" in text


def test_explain_does_not_call_a_direct_paths_missing_id_a_row_of_no_unit():
    # orders.o_cust = 9 with no customer 9 is unit 9 (tiny.units: a direct path's value is the
    # unit id), truncated like one: explain must not tell the owner it is counted in full
    text = explain_text("SELECT COUNT(*) FROM orders", tiny.metadata(), epsilon=1.0, delta=0.0)
    assert "unit of each aggregated row: orders.o_cust" in text
    assert "orphan path" not in text
    assert "an id missing from the unit table, on a direct path or a via to the unit's id, is " \
        "still that unit, bounded like any other" in text


def test_explain_of_a_grouped_query_gives_kappa_c_over_epsilon():
    md = tiny.metadata(max_groups=2, max_rows_per_group=3)
    report = explain("SELECT kind, COUNT(*) FROM items GROUP BY kind", md, epsilon=0.5, delta=0)
    assert report["privacy_unit"]["mechanism"] == "two-stage"
    (m,) = report["measurements"]
    assert m["elastic_sensitivity"] == 6.0 and m["noise_scale"] == 12.0
    assert "two-stage: each unit keeps 2 group(s)" in explain_text(
        "SELECT kind, COUNT(*) FROM items GROUP BY kind", md, epsilon=0.5, delta=0)


def _record() -> Release:
    col = ColumnRelease("n", "r2t", 1.0, 0.0, None, interval_95=(90.0, 130.5))
    return Release(1.0, 0.0, "r2t", (col,), "f", privacy_unit="customer.c_id")


def test_the_cli_footer_shows_the_unit_and_the_interval():
    line = release_line(_record())
    assert "privacy unit customer.c_id" in line
    assert "95% interval: n in [90, 130.5]" in line


def test_the_server_notice_names_the_unit_and_carries_the_interval():
    text, detail = release_notice(_record())
    assert "protecting each customer.c_id" in text
    assert json.loads(detail)["columns"][0]["interval_95"] == [90.0, 130.5]


# ------------------------------- AVG under R2T: its interval, said (QA round 3 of issue #17)

AVG_SQL = "SELECT AVG(amount) AS a, COUNT(*) AS n FROM orders"
AVG_TWO_UNITS = ("SELECT AVG(qty) AS a, COUNT(*) AS n FROM items i JOIN orders o "
                 "ON o.o_id = i.i_order")
AVG_NOTE = "95% interval from the SUM's and COUNT's 97.5% intervals"


def _session_run(tmp_path, md, db, load, sql):
    path = tmp_path / "shop.duckdb"
    with writing(path) as con:
        load(db, con)
    backend = DuckDBBackend(path, md)
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=10.0, delta=0.0)
    try:
        return ledger_session(md, backend, ledger, sampler=ZeroNoise()).run(sql, epsilon=1.0)
    finally:
        backend.close()
        ledger.close()


def _write_tiny(db, con):
    for table, columns in tiny.COLUMNS.items():
        con.execute(f"CREATE TABLE {table} ({', '.join(c + ' INTEGER' for c in columns)})")
        if db[table]:
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' for _ in columns)})",
                            [list(r) for r in db[table]])


@pytest.mark.parametrize("two_units", [False, True], ids=["one unit", "two units"])
def test_an_r2t_avg_shows_its_interval_in_the_record_footer_notice_and_explain(
        tmp_path, two_units):
    if two_units:
        md, sql, bounds = tiny_multi.metadata(max_contribution=16), AVG_TWO_UNITS, (-2.0, 4.0)
        db = tiny_multi.random_database(random.Random(1))
        result = _session_run(tmp_path, md, db, tiny_multi.load, sql)
    else:
        md, sql, bounds = tiny.metadata(), AVG_SQL, tiny.AMOUNT_BOUNDS
        db = tiny.random_database(random.Random(2))
        result = _session_run(tmp_path, md, db, _write_tiny, sql)
    a, n = result.release.columns
    assert a.mechanism == "r2t" and a.half_width_95 is None
    assert a.interval_95 is not None
    low, high = a.interval_95
    assert bounds[0] <= low <= high <= bounds[1]  # within the AVG's clamp bounds
    assert a.accuracy_note == R2T_AVG and R2T_AVG.startswith(AVG_NOTE)
    assert "no interval" not in a.accuracy_note
    assert n.interval_95 is not None and n.accuracy_note is None  # a bare COUNT keeps its own
    line = release_line(result.release)
    assert "95% interval: " in line and f"a in [{low:.6g}, {high:.6g}]" in line
    assert f"a: {AVG_NOTE} (the range of their ratio, within the bounds)" in line
    # the server's NOTICE detail (psql) and the DB-API record carry the same record
    _, detail = release_notice(result.release)
    avg = json.loads(detail)["columns"][0]
    assert avg["interval_95"] == [low, high] and avg["accuracy_note"] == R2T_AVG
    # explain (owner): the text names the column, the JSON carries the same words
    text = explain_text(sql, md, epsilon=1.0, delta=0.0)
    assert f"column a: {AVG_NOTE}" in text
    (avg, count) = explain(sql, md, epsilon=1.0, delta=0.0)["columns"]
    assert avg["mechanism"] == "r2t" and avg["accuracy_note"] == R2T_AVG
    assert "accuracy_note" not in count


def test_arithmetic_of_r2t_releases_says_so_too():
    text = explain_text("SELECT COUNT(*) * 2 AS m FROM orders", tiny.metadata(), epsilon=1.0,
                        delta=0.0)
    assert "column m: no interval: computed from R2T releases (each truncated per unit)" in text


def test_the_smoothed_note_keeps_its_footer_words():
    col = ColumnRelease("s", "smoothed_snapped_laplace", 1.0, 1e-6, None,
                        accuracy_note=NOT_PUBLISHABLE)
    line = release_line(Release(1.0, 1e-6, "smoothed_snapped_laplace", (col,), "f"))
    assert line.endswith("s: accuracy not publishable (data-dependent noise)")


def test_a_grouped_release_says_its_values_are_of_what_the_units_keep(tmp_path):
    # QA round 5: a count per group under kappa = C = 1 read as all rows, and its half-width
    # as its accuracy; the record, the footer and the NOTICE now say what it is of
    md = tiny.metadata(max_groups=1, max_rows_per_group=1)
    db = tiny.random_database(random.Random(3))
    result = _session_run(tmp_path, md, db, _write_tiny,
                          "SELECT kind, COUNT(*) AS n, SUM(qty) AS s, AVG(qty) AS a FROM items "
                          "GROUP BY kind")
    key, *values = result.release.columns
    assert key.accuracy_note is None
    note = "of what each unit keeps: at most 1 group(s) and 1 row(s)' worth per group"
    assert all(c.accuracy_note.startswith(note) for c in values), values
    assert "the 95% interval covers the noise, not this truncation" in values[0].accuracy_note
    assert values[0].half_width_95 is not None  # the noise's interval stays
    # the AVG (noisy SUM / noisy COUNT per group) has no half-width: a 95% interval per row
    # instead (dpsql.release.avg_rows), and its note says so
    avg = values[2]
    assert avg.half_width_95 is None and avg.interval_95 is None
    assert avg.row_intervals_95 is not None and len(avg.row_intervals_95) == len(result.rows)
    assert avg.accuracy_note.endswith(GROUPED_AVG)
    line = release_line(result.release)
    assert f"n, s: {note}" in line and f"a: {note}" in line
    # the footer shows the public noise scales the record carries (issue #17: the shell shows
    # the unit and the public noise scale): the COUNT's and SUM's, and the AVG's two
    # measurements' (the acceptance audit of #17: the AVG had none)
    assert values[0].noise_scale and values[1].noise_scale and avg.noise_scale is None
    n, total = values[0], values[1]
    (sum_label, (sum_scale,)), (count_label, (count_scale,)) = avg.component_scales
    assert sum_label == "SUM(items.qty)" and count_label == "COUNT(items.qty)"
    assert (f"noise scale: n {n.mechanism} {n.noise_scale:.4g}, "
            f"s {total.mechanism} {total.noise_scale:.4g}, a from SUM(items.qty) "
            f"{sum_scale:.4g} and COUNT(items.qty) {count_scale:.4g};") in line
    _, detail = release_notice(result.release)
    assert json.loads(detail)["columns"][1]["accuracy_note"].startswith(note)
    # R2T (no GROUP BY) keeps its own words: a bare COUNT has none
    (tmp_path / "r2t").mkdir()
    plain = _session_run(tmp_path / "r2t", md, db, _write_tiny, "SELECT COUNT(*) FROM items")
    assert plain.release.columns[0].accuracy_note is None
    # and its footer the range of its per-level scales
    levels = plain.release.columns[0].level_scales
    assert levels and (f"noise scale: {plain.release.columns[0].name} r2t {min(levels):.4g} "
                       f"to {max(levels):.4g} over {len(levels)} levels") \
        in release_line(plain.release)
