"""Rendering noisy results and release records for the terminal (table, CSV, JSON)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

FORMATS = ("table", "csv", "json")


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    return value


def json_value(value: Any) -> Any:
    """``json.dumps``'s ``default`` for result values: a Decimal (a DECIMAL column's sum) is a
    JSON number (its exact digits survive in Python's float only up to ~15 places; JSON
    readers parse numbers as doubles anyway), anything else its text (dates, bytes)."""
    import decimal

    if isinstance(value, decimal.Decimal) and value.is_finite():
        return float(value)
    return str(value)


def row_count(n: int) -> str:
    """psql's footer: ``(1 row)``, ``(3 rows)``."""
    return f"({n} row{'' if n == 1 else 's'})"


def _expanded(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """psql's ``\\x`` layout: one block per row, a name | value line per column."""
    width = max((len(n) for n in names), default=0)
    blocks = []
    for i, row in enumerate(rows, 1):
        lines = [f"-[ RECORD {i} ]"]
        lines += [f"{name.ljust(width)} | {'NULL' if v is None else _cell(v)}"
                  for name, v in zip(names, row, strict=True)]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def render_rows(names: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str, *,
                expanded: bool = False) -> str:
    """The rows as an aligned table (one block per row when ``expanded``), CSV with a header,
    or a JSON list of objects."""
    if fmt == "table" and expanded:
        return _expanded(names, rows)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(rows)
        return buf.getvalue().rstrip("\n")
    if fmt == "json":
        return json.dumps([dict(zip(names, row, strict=True)) for row in rows],
                          default=json_value)
    from tabulate import tabulate  # imported here: `dpsql --help` should not pay for it

    return tabulate([[_cell(v) for v in row] for row in rows], headers=list(names),
                    tablefmt="simple", floatfmt="g", disable_numparse=True)


def with_interval_columns(names: Sequence[str], rows: Sequence[Sequence[Any]], release: Any
                          ) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The rows with each per-row 95% interval of the record (a grouped AVG's,
    dpsql.release.avg_rows) as two columns after its own, ``<name> low95`` and
    ``<name> high95``: what a terminal shows of it (the driver's rows stay the query's)."""
    intervals = [getattr(c, "row_intervals_95", None) for c in release.columns]
    if not any(intervals) or len(intervals) != len(names):
        return list(names), [tuple(r) for r in rows]
    out_names: list[str] = []
    for name, rows_of in zip(names, intervals, strict=True):
        out_names += [name, f"{name} low95", f"{name} high95"] if rows_of else [name]
    out_rows = []
    for i, row in enumerate(rows):
        cells: list[Any] = []
        for value, rows_of in zip(row, intervals, strict=True):
            cells += [value, *rows_of[i]] if rows_of else [value]
        out_rows.append(tuple(cells))
    return out_names, out_rows


def _public_scales(columns: Any) -> list[str]:
    """Each column's public noise scale, as the record carries it (only for pure releases: a
    smoothed scale is data-dependent and never recorded): the Laplace b or Gaussian sigma of
    one measurement, or the range of R2T's per-level scales."""
    out = []
    for c in columns:
        levels = getattr(c, "level_scales", None)
        scale = getattr(c, "noise_scale", None)
        parts = getattr(c, "component_scales", None)
        if levels:
            out.append(f"{c.name} {c.mechanism} {_range(levels)}")
        elif scale:
            out.append(f"{c.name} {c.mechanism} {scale:.4g}")
        elif parts and any(max(scales) > 0 for _, scales in parts):
            # a column of several measurements (an AVG: its SUM's and its COUNT's)
            out.append(f"{c.name} from " + " and ".join(
                f"{label} {_range(scales)}" for label, scales in parts))
    return out


def _range(scales: Any) -> str:
    """One scale, or R2T's levels' range."""
    if len(scales) == 1:
        return f"{scales[0]:.4g}"
    return f"{min(scales):.4g} to {max(scales):.4g} over {len(scales)} levels"


def release_line(release: Any, remaining: tuple[float, float] | None = None) -> str:
    """One line: what the query spent, the budget left, publishable 95% intervals, the public
    noise scales, and why a column has none when the record says (its ``accuracy_note``)."""
    parts = [f"spent epsilon={release.epsilon:g} delta={release.delta:g}"]
    free = bool(getattr(release, "free", False))
    if free:  # public tables only: no noise, so no interval to show (QA round 6: "n ±0")
        parts[0] = "public tables only: exact, spent nothing"
    elif getattr(release, "cached", False):
        parts[0] = "cached answer, spent nothing"
    if remaining is not None:
        parts.append(f"remaining epsilon={remaining[0]:g} delta={remaining[1]:g}")
    if getattr(release, "privacy_unit", None):
        parts.append(f"privacy unit {release.privacy_unit}")
    widths = [f"{c.name} ±{c.half_width_95:.4g}" for c in release.columns
              if c.half_width_95 is not None and not free]
    # R2T (a privacy unit without GROUP BY): an interval from the noisy levels, not +-
    widths += [f"{c.name} in [{c.interval_95[0]:.6g}, {c.interval_95[1]:.6g}]"
               for c in release.columns if getattr(c, "interval_95", None) is not None]
    if widths:
        parts.append("95% interval: " + ", ".join(widths))
    scales = _public_scales(release.columns)
    if scales:
        parts.append("noise scale: " + ", ".join(scales))
    threshold = getattr(release, "selection_threshold", None)
    if threshold is not None:  # public: from epsilon, delta and the owner's bounds
        selection = getattr(release, "selection_scale", None)
        noise = f", Laplace scale {selection:.4g}" if selection else ""
        parts.append(f"groups kept past threshold {threshold:g} (partition selection{noise})")
    from dpsql.release.record import NOT_PUBLISHABLE

    # why a column has no interval (smoothed noise, arithmetic of R2T releases), or what an R2T
    # AVG's interval is ("95% interval from the SUM's and COUNT's 97.5% intervals ..",
    # dpsql.release.record.r2t_note)
    notes: dict[str, list[str]] = {}
    for c in release.columns:
        if getattr(c, "accuracy_note", None):
            notes.setdefault(c.accuracy_note, []).append(c.name)
    smoothed = "accuracy not publishable (data-dependent noise)"
    for note, names in notes.items():
        parts.append(f"{', '.join(names)}: {smoothed if note == NOT_PUBLISHABLE else note}")
    return "; ".join(parts)
