"""Reading the privacy unit and the tables' paths to it (issue #17; our format only)::

    privacy_unit: {table: customer, column: c_custkey, max_contribution: 1048576,
                   max_groups: 1, max_rows_per_group: 1, levels: {base: 2}}
    tables:
      customer: {columns: ...}                              # the unit table: path implied
      orders:   {unit: o_custkey, columns: ...}             # o_custkey holds the unit's id
      lineitem: {unit: {via: l_orderkey, to: orders.o_orderkey}, columns: ...}
      nation:   {public: true, columns: ...}                # public: no path

Precondition: the specs come from :class:`dpsql.metadata.ours._OursReader` (names lower-case,
columns collected), and :meth:`dpsql.metadata.reader._Reader.finish` has checked that table
names are distinct.

Guarantee (:func:`resolve_paths`): with a privacy unit declared, every private table gets a
:class:`~dpsql.metadata.model.UnitPath`: the unit table its own id column, every other
private table the path it declares; each path's column is a declared column, each ``to``
names a declared column of a declared private table that has a path itself, and following
``to`` from any table ends at the unit table (no cycles). Public tables have none. Anything
else is a ProgrammingError "FILE:LINE: table 't': what is wrong; what to do". What the paths
say about the data (keys unique, foreign keys resolving) is checked on the database by
``dpsql metadata check -d`` (:mod:`dpsql.metadata.unit_check`), not here: loading never reads
data.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dpsql.metadata.model import PrivacyUnit, UnitPath, _table_key
from dpsql.noise.r2t_levels import DEFAULT_BASE, MIN_BASE, levels

if TYPE_CHECKING:
    from dpsql.metadata.reader import _Reader, _TableSpec

_UNIT_KEYS = ("table", "column", "max_contribution", "max_groups", "max_rows_per_group",
              "levels", "max_sum")
#: other systems' names for dpsql's unit keys: a refusal names dpsql's key (before any fuzzy
#: match, which would pick a wrong one: max_groups_per_unit looks most like max_rows_per_group);
#: never accepted in its place, so one file has one spelling
_UNIT_KEY_ALIASES = {
    "max_groups_per_unit": "max_groups",            # issue #17's name for kappa
    "max_groups_contributed": "max_groups",         # BigQuery / ZetaSQL
    "max_partitions_contributed": "max_groups",     # PipelineDP
    "max_contributions_per_partition": "max_rows_per_group",  # PipelineDP
    "max_contributions": "max_contribution",        # PipelineDP
    "max_rows": "max_rows_per_group",               # short for it (the fuzzy match: max_groups)
}
_LEVELS_KEYS = ("base",)
_PATH_KEYS = ("via", "to")
#: the largest max_contribution: the truncation levels (2^j, or floor(B^j)) stay exact in BIGINT
MAX_CONTRIBUTION_LIMIT = 2**62

_PATH_FORMS = "unit: <column> or unit: {via: <column>, to: <table>.<key>}"


@dataclass
class _UnitSpec:
    """The ``privacy_unit`` mapping as read (checked against the tables in resolve_paths)."""

    unit: PrivacyUnit
    node: Mapping


@dataclass
class _PathSpec:
    """One table's ``unit`` as read; ``node``/``key`` locate it for error messages."""

    path: UnitPath
    node: Mapping
    key: str = "unit"


def _hint(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def read_privacy_unit(reader: _Reader, doc: Mapping) -> _UnitSpec | None:
    """The top-level ``privacy_unit`` (None when absent), with its bounds checked."""
    value = doc.get("privacy_unit")
    if value is None:
        return None
    where = "privacy_unit"
    spec = reader.mapping(value, where, "privacy_unit (write {table: T, column: C})", doc,
                          "privacy_unit")
    _check_unit_keys(reader, spec, where)
    if "table" not in spec or "column" not in spec:
        reader.fail(where, "needs 'table' and 'column': the table whose rows are the protected "
                    "units (e.g. customer) and its id column (e.g. c_custkey)", doc,
                    "privacy_unit")
    table = reader.name(spec["table"], where, "table", spec, "table")
    column = reader.name(spec["column"], where, "column", spec, "column")
    defaults = PrivacyUnit(table="", column="")
    bounds = {}
    for key, least, meaning in (
        ("max_contribution", 2, "the public bound GS on the rows one unit contributes to a "
         "count; R2T truncates at 2, 4, .., GS"),
        ("max_groups", 1, "how many groups of one GROUP BY a unit may contribute to"),
        ("max_rows_per_group", 1, "how many rows a unit may contribute to one group"),
    ):
        raw = spec.get(key)
        if raw is None:
            bounds[key] = getattr(defaults, key)
            continue
        if not isinstance(raw, int) or isinstance(raw, bool) or raw < least:
            reader.fail(where, f"{key} must be an integer >= {least} ({meaning}), got {raw!r}",
                        spec, key)
        if raw > MAX_CONTRIBUTION_LIMIT:
            reader.fail(where, f"{key} must be at most 2**62 = {MAX_CONTRIBUTION_LIMIT}, got "
                        f"{raw}", spec, key)
        bounds[key] = raw
    base = _read_levels(reader, spec, where, bounds["max_contribution"])
    max_sum = _read_max_sum(reader, spec, where, base)
    unit = PrivacyUnit(table=_table_key(table), column=column.lower(), level_base=base,
                       max_sum=max_sum, **bounds)
    return _UnitSpec(unit=unit, node=spec)


def _check_unit_keys(reader: _Reader, spec: Mapping, where: str) -> None:
    """Refuse unknown keys of ``privacy_unit``; another system's name for one of dpsql's keys
    (:data:`_UNIT_KEY_ALIASES`) is refused naming dpsql's key."""
    for key in spec:
        ours = _UNIT_KEY_ALIASES.get(key.lower()) if isinstance(key, str) else None
        if ours is not None:
            reader.fail(where, f"unknown key {key!r}; did you mean {ours!r}? (dpsql's name "
                        f"for that bound; known keys: {', '.join(_UNIT_KEYS)})", spec, key)
    reader.check_keys(spec, _UNIT_KEYS, where, {})


def _read_levels(reader: _Reader, spec: Mapping, where: str, gs: int) -> float:
    """``levels: {base: B}``: R2T's grid ``floor(B^j)`` rows up to the first level >= GS
    (dpsql.noise.r2t.levels); B a number >= 2 (default 2, the paper's), the grid's top within
    2^62 rows. Public: it sets the noise scales, never the privacy (any public grid is sound)."""
    value = spec.get("levels")
    if value is None:
        return DEFAULT_BASE
    node = reader.mapping(value, where, "levels (write {base: B}, B >= 2: R2T truncates at "
                          "floor(B^j) rows up to max_contribution)", spec, "levels")
    reader.check_keys(node, _LEVELS_KEYS, f"{where}, levels", {})
    raw = node.get("base")
    if raw is None:
        reader.fail(where, "levels needs 'base': R2T's truncation levels are floor(base^j) "
                    "rows, j = 1, 2, .. up to max_contribution (default base 2)", node)
    if (isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw)
            or raw < MIN_BASE):
        reader.fail(where, f"levels base must be a number >= {MIN_BASE:g} (R2T truncates at "
                    f"floor(base^j) rows; 2 is the paper's grid), got {raw!r}", node, "base")
    try:
        levels(gs, raw)
    except ValueError as err:
        reader.fail(where, f"levels base {raw!r} with max_contribution {gs}: {err}", node,
                    "base")
    return float(raw)


def _read_max_sum(reader: _Reader, spec: Mapping, where: str, base: float) -> int | None:
    """``max_sum: V``: R2T's GS for a SUM in value units (dpsql.units.grid): an integer in
    [1, 2^62] whose grid's top stays within 2^62. Public: it sets the levels, never the
    privacy (a unit summing to more is truncated, not trusted)."""
    raw = spec.get("max_sum")
    if raw is None:
        return None
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
        reader.fail(where, "max_sum must be an integer >= 1 (the public bound, in value units, "
                    f"on what one unit adds to a SUM; R2T truncates SUMs up to it), got {raw!r}",
                    spec, "max_sum")
    try:
        levels(raw, base)
    except ValueError as err:
        reader.fail(where, f"max_sum {raw}: {err}", spec, "max_sum")
    return int(raw)


def read_unit_path(reader: _Reader, spec: Mapping, where: str) -> _PathSpec | None:
    """A table's ``unit`` (None when absent): a column name, or {via: column, to: t.key}."""
    value = spec.get("unit")
    if value is None:
        return None
    if isinstance(value, str):
        column = reader.name(value, where, "unit", spec, "unit")
        return _PathSpec(UnitPath(column=column.strip().lower()), spec)
    if not isinstance(value, Mapping):
        reader.fail(where, f"unit must be a column name (the column holds the unit's id) or "
                    f"{{via: <column>, to: <table>.<key>}}, got {value!r}", spec, "unit")
    reader.check_keys(value, _PATH_KEYS, f"{where}, unit", {})
    if "via" not in value or "to" not in value:
        reader.fail(where, "unit: {via: .., to: ..} needs both 'via' (a column of this table) "
                    "and 'to' (<table>.<key> the column references, e.g. orders.o_orderkey)",
                    spec, "unit")
    via = reader.name(value["via"], where, "unit via", value, "via")
    to = reader.name(value["to"], where, "unit to", value, "to")
    target, dot, key = to.strip().rpartition(".")
    if not dot or not target.strip() or not key.strip():
        reader.fail(where, f"unit to must be <table>.<column>, such as orders.o_orderkey, got "
                    f"{to!r}", value, "to")
    path = UnitPath(column=via.strip().lower(), to_table=_table_key(target.strip()),
                    to_column=key.strip().lower())
    return _PathSpec(path, spec)


def resolve_paths(reader: _Reader, by_name: Mapping[str, _TableSpec],
                  unit_spec: _UnitSpec | None,
                  paths: Mapping[str, _PathSpec]) -> dict[str, UnitPath]:
    """Every private table's checked path (module docstring), keyed by table name."""
    if unit_spec is None:
        for name, p in paths.items():
            reader.fail(by_name[name].where, "'unit' needs a top-level privacy_unit: {table: T, "
                        "column: C} naming what the paths lead to; declare it or remove 'unit'",
                        p.node, p.key)
        return {}
    unit = unit_spec.unit
    home = by_name.get(unit.table)
    if home is None:
        reader.fail("privacy_unit", f"names table {unit.table!r}, which is not declared"
                    f"{_hint(unit.table, list(by_name))}", unit_spec.node, "table")
    if home.public:
        reader.fail("privacy_unit", f"names table {unit.table!r}, which is public: the unit "
                    "table holds the protected units (people, accounts); make it private or "
                    "name another table", unit_spec.node, "table")
    if unit.column not in home.columns:
        reader.fail("privacy_unit", f"names column {unit.column!r}, which is not declared in "
                    f"table {unit.table!r}{_hint(unit.column, list(home.columns))}",
                    unit_spec.node, "column")
    own = paths.get(unit.table)
    if own is not None and own.path != UnitPath(unit.column):
        reader.fail(home.where, f"is the privacy unit's table; its path is its id column "
                    f"{unit.column!r} (implied): remove 'unit' or write unit: {unit.column}",
                    own.node, own.key)
    resolved = {unit.table: UnitPath(unit.column)}
    for name, t in by_name.items():
        declared = paths.get(name)
        if t.public:
            if declared is not None:
                reader.fail(t.where, "is public and declares 'unit': public rows belong to no "
                            "unit; remove 'unit' or make the table private", declared.node,
                            declared.key)
            continue
        if name == unit.table:
            continue
        if declared is None:
            reader.fail(t.where, f"has no path to the privacy unit {unit.table!r}: declare "
                        f"{_PATH_FORMS} (or public: true if its rows are not private)",
                        t.node, t.key)
        p = declared
        if p.path.column not in t.columns:
            reader.fail(t.where, f"unit names column {p.path.column!r}, which is not declared "
                        f"in table {name!r}{_hint(p.path.column, list(t.columns))}",
                        p.node, p.key)
        resolved[name] = p.path
    for name, path in resolved.items():
        if path.direct:
            continue
        _check_target(reader, by_name, resolved, name, paths[name])
    for name in resolved:
        _check_acyclic(reader, by_name, resolved, name, unit, paths)
    return resolved


def _check_target(reader: _Reader, by_name: Mapping[str, _TableSpec],
                  resolved: Mapping[str, UnitPath], name: str, p: _PathSpec) -> None:
    """``to`` names a declared column of a declared private table with a path."""
    where = by_name[name].where
    target, column = p.path.to_table, p.path.to_column
    assert target is not None and column is not None
    node = p.node.get("unit", p.node)
    spec = by_name.get(target)
    if spec is None:
        reader.fail(where, f"unit to names table {target!r}, which is not declared"
                    f"{_hint(target, list(by_name))}", node, "to")
    if spec.public:
        reader.fail(where, f"unit to names table {target!r}, which is public: public rows "
                    f"belong to no unit; point 'to' at a private table on the way to the unit",
                    node, "to")
    if column not in spec.columns:
        reader.fail(where, f"unit to names column {column!r}, which is not declared in table "
                    f"{target!r}{_hint(column, list(spec.columns))}", node, "to")
    if target not in resolved:  # unreachable: every private table has a path by now
        reader.fail(where, f"unit to names table {target!r}, which has no path to the unit",
                    node, "to")


def _check_acyclic(reader: _Reader, by_name: Mapping[str, _TableSpec],
                   resolved: Mapping[str, UnitPath], start: str, unit: PrivacyUnit,
                   paths: Mapping[str, _PathSpec]) -> None:
    """Following ``to`` from ``start`` reaches a direct path (the unit's id) without a loop."""
    chain = [start]
    path = resolved[start]
    while not path.direct:
        assert path.to_table is not None
        if path.to_table in chain:
            loop = " -> ".join([*chain, path.to_table])
            p = paths[start]
            reader.fail(by_name[start].where, f"unit path {loop} is a cycle; a path must end "
                        f"at the privacy unit's table {unit.table!r} (a direct unit: <column> "
                        "holds the unit's id)", p.node.get("unit", p.node), "to")
        chain.append(path.to_table)
        path = resolved[path.to_table]
