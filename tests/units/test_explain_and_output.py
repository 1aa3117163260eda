"""What owners (explain) and analysts (the CLI footer, the server's NOTICE) see of a release
under a privacy unit."""

from __future__ import annotations

import json

from dpsql.analysis.explain import explain, explain_text
from dpsql.cli.output import release_line
from dpsql.release.record import ColumnRelease, Release
from dpsql.server.statements import release_notice
from tests.units import tiny


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
