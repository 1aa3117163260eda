"""The owner's R2T grid (``levels: {base: B}``) through the engine: explain shows it, and the
executed query truncates at exactly its levels."""

from __future__ import annotations

from dpsql.analysis.explain import explain, explain_text
from tests.units import tiny


def test_explain_shows_the_grid_and_its_scales():
    md = tiny.metadata(max_contribution=8, level_base=3)
    report = explain("SELECT COUNT(*) FROM items", md, epsilon=1.0, delta=0.0)
    assert report["privacy_unit"]["level_base"] == 3.0
    (m,) = report["measurements"]
    # levels 3, 9 (GS 8) at epsilon 1/2 each, noised increments 3, 6: scales 2 * 3, 2 * 6
    assert m["parts"][0]["level_scales"] == [6.0, 12.0]
    text = explain_text("SELECT COUNT(*) FROM items", md, epsilon=1.0, delta=0.0)
    assert "2 truncation levels floor(3^j) = 3..9 rows for a COUNT (max_contribution 8;" in text
    assert "level scales 6, 12" in text


def test_the_default_grid_is_shown_as_powers_of_two():
    text = explain_text("SELECT COUNT(*) FROM items", tiny.metadata(), epsilon=1.0, delta=0.0)
    assert "3 truncation levels floor(2^j) = 2..8 rows for a COUNT (max_contribution 8;" in text
