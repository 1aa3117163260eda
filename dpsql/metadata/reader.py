"""What both format readers share: error reporting, the scalar checks, and the cross-table checks
that turn the readers' specs into the frozen model.

Two formats are accepted and produce the same model:

* ours (README.md, "Metadata"; :mod:`dpsql.metadata.ours`): ``{ledger?, data_version?,
  privacy_unit?, tables: {name: {public?, rows?, source?, unit?, columns: {name: {max_freq?,
  bounds?, releasable?, domain?, type?}}}}}`` (the unit and the paths:
  :mod:`dpsql.metadata.unit_paths`)
* FLEX's schema.yaml (uber/sql-differential-privacy, src/test/resources/schema.yaml;
  :mod:`dpsql.metadata.flex`): ``{databases: [{database, dialect?, namespace?, tables: [{table,
  isPublic?, approxRowCount?, columns: [{name, maxFreq?, isUnique?, canRelease?, domainSet?,
  isTainted?, fields?}]}]}]}``

Every problem is a ProgrammingError "FILE:LINE: table 't', column 'c': what is wrong; what to do".
"""

from __future__ import annotations

import datetime as _dt
import difflib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from dpsql.errors import ProgrammingError
from dpsql.metadata import sample_aggregate
from dpsql.metadata.model import (
    MAX_FREQ,
    Column,
    Domain,
    Metadata,
    SampleAggregate,
    Table,
    UnitPath,
    _has_scheme,
)
from dpsql.metadata.unit_multi import resolve_multi
from dpsql.metadata.unit_paths import _PathSpec, _UnitSpec, resolve_paths
from dpsql.metadata.yaml_io import _line_of

# The same setting under the other format's spelling, to point users at the right key.
_OURS_TO_FLEX = {
    "max_freq": "maxFreq",
    "releasable": "canRelease",
    "domain": "domainSet",
    "public": "isPublic",
    "rows": "approxRowCount",
}
_FLEX_TO_OURS = {v: k for k, v in _OURS_TO_FLEX.items()}


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _as_day(value: object) -> _dt.date | None:
    """A YAML date or ISO day text as a date; None for anything else (times of day too)."""
    if isinstance(value, _dt.datetime):
        return None
    if isinstance(value, _dt.date):
        return value
    if isinstance(value, str):
        try:
            return _dt.date.fromisoformat(value.strip()) if len(value.strip()) == 10 else None
        except ValueError:
            return None
    return None


def _yaml_float_text(text: str) -> bool:
    """Whether ``text`` is exponent notation YAML 1.1 left as a string (``1e17``, ``-2E5``:
    without a dot and a signed exponent it is not a float there)."""
    if "e" not in text.lower():
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_number(value: object) -> bool:
    # bool is an int subclass; ``true`` is never a number here.
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass
class _ColSpec:
    name: str
    where: str
    node: object
    max_freq: int | None = None
    bounds: tuple[float, float] | None = None
    releasable: bool | None = None
    domain: Domain | None = None
    domain_key: str = "domain"
    type: str | None = None
    date_bounds: tuple[_dt.date, _dt.date] | None = None
    partition_selection: bool | None = None


@dataclass
class _TableSpec:
    name: str
    where: str
    node: object
    key: str
    public: bool = False
    rows: int | None = None
    source: str | None = None
    columns: dict[str, _ColSpec] = field(default_factory=dict)
    unit: _PathSpec | None = None
    sample_aggregate: SampleAggregate | None = None
    #: per unit table, with several units (dpsql.metadata.unit_multi)
    unit_paths: dict[str, _PathSpec] | None = None


class _Reader:
    """Validates one parsed document (either format) into the model."""

    def __init__(self, origin: str, base: Path | None) -> None:
        self.origin = origin
        self.base = base

    # -- error reporting ---------------------------------------------------------------------

    def fail(
        self, where: str, message: str, node: object = None, key: str | None = None
    ) -> NoReturn:
        line = _line_of(node, key)
        loc = f"{self.origin}:{line}" if line else self.origin
        raise ProgrammingError(f"{loc}: {where + ': ' if where else ''}{message}")

    def check_keys(
        self, node: Mapping, known: Sequence[str], where: str, other: Mapping[str, str]
    ) -> None:
        for key in node:
            if not isinstance(key, str):
                self.fail(where, f"key {_short(key)} is not a name; quote it", node)
            if key in known:
                continue
            if key in other:
                hint = f"; {key!r} is the other format's spelling, here write {other[key]!r}"
            else:
                close = difflib.get_close_matches(key.lower(), known, n=1, cutoff=0.5)
                close = close or [k for k in known if k.lower() == key.lower()]
                hint = f"; did you mean {close[0]!r}?" if close else ""
            self.fail(
                where,
                f"unknown key {key!r}{hint} (known keys: {', '.join(known)})",
                node,
                key,
            )

    # -- scalar validators -------------------------------------------------------------------

    def mapping(
        self, value: object, where: str, what: str, node: object, key: str | None
    ) -> Mapping:
        if not isinstance(value, Mapping):
            self.fail(where, f"{what} must be a mapping of keys to values, got {_short(value)}",
                      node, key)
        return value

    def name(self, value: object, where: str, what: str, node: object, key: str | None) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(where, f"{what} must be a non-empty name, got {_short(value)}", node, key)
        return value

    def flag(self, node: Mapping, key: str, where: str) -> bool | None:
        value = node.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            self.fail(where, f"{key} must be true or false, got {_short(value)}", node, key)
        return value

    def max_freq(self, node: Mapping, key: str, where: str) -> int | None:
        value = node.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_FREQ:
            self.fail(
                where,
                f"{key} must be a positive integer (the largest number of rows sharing one "
                f"value of this column) of at most 2^63, got {_short(value)}; remove it if "
                "unknown",
                node,
                key,
            )
        return value

    def rows(self, node: Mapping, key: str, where: str) -> int | None:
        value = node.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            self.fail(where, f"{key} must be a non-negative integer, got {_short(value)}",
                      node, key)
        return value

    def bounds(self, node: Mapping, key: str, where: str) -> tuple[float, float] | None:
        value = node.get(key)
        if value is None:
            return None
        ok = (
            isinstance(value, list | tuple)
            and len(value) == 2
            and all(_is_number(v) and math.isfinite(v) for v in value)
        )
        if not ok:
            hint = ""
            if isinstance(value, list | tuple) and any(
                    isinstance(v, str) and _yaml_float_text(v) for v in value):
                # YAML 1.1 reads 1e17 (no dot, no exponent sign) as a string
                hint = "; YAML reads 1e17 as text: write 1.0e+17"
            self.fail(
                where,
                f"{key} must be two finite numbers [lower, upper], got {_short(value)}{hint}",
                node,
                key,
            )
        lower, upper = value
        if lower > upper:
            self.fail(
                where,
                f"{key} lower {lower} is greater than upper {upper}; write [{upper}, {lower}]",
                node,
                key,
            )
        return (lower, upper)

    def date_bounds(self, node: Mapping, key: str,
                    where: str) -> tuple[_dt.date, _dt.date] | None:
        """``bounds`` of a date column: two days, as YAML dates or ISO text ('1992-01-01');
        None when the bounds are not dates (numbers are read by :meth:`bounds`)."""
        value = node.get(key)
        if not isinstance(value, list | tuple) or len(value) != 2 or any(
                _is_number(v) for v in value):
            return None
        days = [_as_day(v) for v in value]
        if all(day is None for day in days):
            return None
        for day in days:
            if day is None:
                self.fail(
                    where,
                    f"{key} must be two finite numbers [lower, upper] or, for a date column, "
                    f"two days ['1992-01-01', '1998-12-31'], got {_short(value)}",
                    node,
                    key,
                )
        assert days[0] is not None and days[1] is not None
        if days[0] > days[1]:
            self.fail(where, f"{key} lower {days[0]} is after upper {days[1]}; write "
                      f"['{days[1]}', '{days[0]}']", node, key)
        return (days[0], days[1])

    def path(self, node: Mapping, key: str, where: str) -> str | None:
        value = node.get(key)
        if value is None:
            return None
        value = self.name(value, where, key, node, key)
        # Relative paths mean "next to this metadata file", not "next to wherever dpsql runs".
        if self.base is not None and not _has_scheme(value):
            expanded = os.path.expanduser(value)
            if not os.path.isabs(expanded):
                expanded = os.path.join(self.base, expanded)
            value = os.path.normpath(expanded)
        return value

    def values(self, value: object, where: str, key: str, node: object) -> tuple[object, ...]:
        if not isinstance(value, list | tuple) or not value:
            self.fail(where, f"{key} must be a non-empty list of values, got {_short(value)}",
                      node, key)
        kinds = set()
        for v in value:
            if isinstance(v, float) and not math.isfinite(v):
                self.fail(where, f"{key} contains {v}; domain values must be finite", node, key)
            if v is None:
                continue  # NULL is a group of its own; it may be listed with any other kind
            if isinstance(v, bool):
                kinds.add("boolean")
            elif _is_number(v):
                kinds.add("number")
            elif isinstance(v, str):
                kinds.add("string")
            elif isinstance(v, _dt.datetime):
                kinds.add("timestamp")
            elif isinstance(v, _dt.date):
                kinds.add("date")
            else:
                self.fail(where, f"{key} contains {_short(v)}; list plain values only",
                          node, key)
        if len(kinds) > 1:
            self.fail(
                where,
                f"{key} mixes {' and '.join(sorted(kinds))} values; quote the values so they "
                "all have the column's type",
                node,
                key,
            )
        seen: list[object] = []
        for v in value:
            # compare with the kind so that 1 and true are not "the same" value
            if any(type(v) is type(s) and v == s for s in seen):
                self.fail(where, f"{key} lists {_short(v)} twice; list each value once", node, key)
            seen.append(v)
        return tuple(value)

    def add_column(self, table: _TableSpec, col: _ColSpec, node: object, key: str) -> None:
        if col.name in table.columns:
            self.fail(
                table.where,
                f"column {key!r} is declared twice (names are case-insensitive); "
                "keep one declaration",
                node,
                key,
            )
        table.columns[col.name] = col

    # -- cross-table checks and the frozen model ---------------------------------------------

    def finish(self, specs: list[_TableSpec], ledger: str | None, path: Path | None,
               data_version: str | None = None,
               privacy_unit: _UnitSpec | None = None,
               extra_units: tuple[_UnitSpec, ...] = ()) -> Metadata:
        by_name: dict[str, _TableSpec] = {}
        for t in specs:
            if t.name in by_name:
                first = by_name[t.name]
                self.fail(
                    t.where,
                    f"names the same table as {first.where} (names are case-insensitive and "
                    f"schema prefixes are dropped); rename or remove one",
                    t.node,
                    t.key,
                )
            by_name[t.name] = t
        multi: dict[str, dict[str, UnitPath]] = {}
        if extra_units:
            assert privacy_unit is not None
            multi = resolve_multi(self, by_name, (privacy_unit, *extra_units),
                                  {t.name: t.unit_paths for t in specs if t.unit_paths})
            unit_paths = {name: p[privacy_unit.unit.table] for name, p in multi.items()
                          if privacy_unit.unit.table in p}
        else:
            unit_paths = resolve_paths(self, by_name, privacy_unit,
                                       {t.name: t.unit for t in specs if t.unit is not None})

        tables: dict[str, Table] = {}
        for t in specs:
            columns: dict[str, Column] = {}
            for c in t.columns.values():
                if c.domain is not None and c.domain.table is not None:
                    self.check_domain_table(c, by_name)
                releasable = bool(c.releasable)
                domain = c.domain
                if t.public:
                    if c.releasable is False:
                        self.fail(c.where, "columns of public tables are always releasable; "
                                  "remove 'releasable: false' or make the table private",
                                  c.node, "canRelease" if c.domain_key == "domainSet"
                                  else "releasable")
                    releasable = True
                    # A public table's own values are public: they are the natural bins.
                    domain = domain or Domain(table=t.name, column=c.name)
                columns[c.name] = Column(
                    name=c.name,
                    max_freq=c.max_freq,
                    bounds=c.bounds,
                    releasable=releasable,
                    domain=domain,
                    type=c.type,
                    date_bounds=c.date_bounds,
                    partition_selection=self.partition_flag(c, t.public, releasable),
                )
            tables[t.name] = Table(
                name=t.name, columns=columns, public=t.public, rows=t.rows, source=t.source,
                unit=unit_paths.get(t.name), unit_paths=multi.get(t.name, {}),
                sample_aggregate=sample_aggregate.checked_setting(self, t),
            )
        return Metadata(tables=tables, ledger=ledger, data_version=data_version, path=path,
                        privacy_unit=None if privacy_unit is None else privacy_unit.unit,
                        extra_units=tuple(u.unit for u in extra_units))

    def partition_flag(self, c: _ColSpec, public: bool, releasable: bool) -> bool:
        """``partition_selection``, checked: only a releasable column of a private table may
        carry it (a public column's own values are its domain already)."""
        if not c.partition_selection:
            return False
        if public:
            self.fail(c.where, "partition_selection is for private columns: a public table's "
                      "column takes its bins from its own values; remove it", c.node,
                      "partition_selection")
        if not releasable:
            self.fail(c.where, "partition_selection needs 'releasable: true': it lets the "
                      "column's values be published when enough rows share them", c.node,
                      "partition_selection")
        return True

    def check_domain_table(self, c: _ColSpec, by_name: Mapping[str, _TableSpec]) -> None:
        assert c.domain is not None and c.domain.table is not None
        target = by_name.get(c.domain.table)
        if target is None:
            close = difflib.get_close_matches(c.domain.table, list(by_name), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.fail(c.where, f"{c.domain_key} names table {c.domain.table!r}, which is not "
                      f"declared{hint}", c.node, c.domain_key)
        if not target.public:
            self.fail(
                c.where,
                f"{c.domain_key} names table {c.domain.table!r}, which is private: its values "
                "would leak through the filled bins; use a public table or list the values",
                c.node,
                c.domain_key,
            )
        if c.domain.column not in target.columns:
            close = difflib.get_close_matches(c.domain.column or "", list(target.columns), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.fail(c.where, f"{c.domain_key} names column {c.domain.column!r}, which is not "
                      f"declared in table {c.domain.table!r}{hint}", c.node, c.domain_key)
