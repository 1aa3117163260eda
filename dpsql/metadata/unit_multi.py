"""Several privacy units in one metadata file (issue #17: R2T's private relations, e.g.
customer AND supplier; our format only)::

    privacy_unit:
      - {table: customer, column: c_custkey, max_contribution: 1048576}   # bounds: first entry
      - {table: supplier, column: s_suppkey}                              # table, column only
    tables:
      customer: {columns: ...}                            # a unit table: its own path implied
      supplier: {columns: ...}
      orders:   {unit: {customer: o_custkey}, columns: ...}
      lineitem: {unit: {customer: {via: l_orderkey, to: orders.o_orderkey},
                        supplier: l_suppkey}, columns: ...}
      partsupp: {unit: {supplier: ps_suppkey}, columns: ...}

The neighbouring relation (R2T's, docs/privacy.md "Several privacy units"): two databases are
neighbours when one is the other with ONE row of ANY declared unit table removed, together with
every row linked to it along that unit's paths (FK cascade: one customer with its orders and
their lineitems, or one supplier with its lineitems and partsupps). A single-entry list is
exactly the one-unit form; the one-unit mapping form is unchanged.

Each path is read as :mod:`dpsql.metadata.unit_paths` reads one (``unit: <column>`` or
``{via: <column>, to: <table>.<key>}``), per unit table, and checked per unit exactly as the
one-unit paths are (:func:`~dpsql.metadata.unit_paths.resolve_paths` on the unit's view: the
private tables with no path to that unit play no part in it). Besides: every private table
reaches at least one unit; a ``to`` names a table with a path to the same unit; the unit
tables are distinct; and no path goes through a hop table another unit's cascade can remove
unless the table reaches that unit through the same hop (:func:`_check_hops`: else removing
that unit would move rows to no unit instead of removing them). The bounds (GS, the grid,
kappa, C) are public parameters of the mechanisms and shared: the first entry's.

:func:`unit_view` is the metadata one unit sees: that unit as ``privacy_unit``, every table's
path to it as ``unit``, and the private tables without one public -- sound for what reads
under that unit alone, since removing one of its units removes no row of those tables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dpsql.metadata.model import Metadata, PrivacyUnit, Table, UnitPath
from dpsql.metadata.unit_paths import (
    _PathSpec,
    _UnitSpec,
    read_privacy_unit,
    read_unit_path,
    resolve_paths,
)

if TYPE_CHECKING:
    from dpsql.metadata.reader import _Reader, _TableSpec

_OWN_KEYS = ("table", "column")


def read_unit_list(reader: _Reader, doc: Mapping) -> list[_UnitSpec] | None:
    """``privacy_unit`` written as a list (None when it is not one): each entry checked as the
    one-unit mapping; the bounds on the first entry only, shared by all."""
    value = doc.get("privacy_unit")
    if not isinstance(value, list):
        return None
    if not value:
        reader.fail("privacy_unit", "is an empty list: name at least one unit table, e.g. "
                    "[{table: customer, column: c_custkey}]", doc, "privacy_unit")
    out: list[_UnitSpec] = []
    for i, entry in enumerate(value):
        spec = read_privacy_unit(reader, {"privacy_unit": entry})
        assert spec is not None
        if i and isinstance(entry, Mapping):
            extra = [k for k in entry if k not in _OWN_KEYS]
            if extra:
                reader.fail("privacy_unit", f"entry {i + 1} ({spec.unit.table}) sets "
                            f"{', '.join(map(str, extra))}: the bounds are shared by every unit; "
                            "declare them on the first entry only", entry, extra[0])
        if any(s.unit.table == spec.unit.table for s in out):
            reader.fail("privacy_unit", f"names table {spec.unit.table!r} twice; each unit "
                        "table once", entry)
        if out:  # the first entry's bounds, shared
            spec = _UnitSpec(dataclasses.replace(out[0].unit, table=spec.unit.table,
                                                 column=spec.unit.column), spec.node)
        out.append(spec)
    return out


def read_unit_map(reader: _Reader, spec: Mapping, where: str,
                  units: Sequence[str]) -> dict[str, _PathSpec] | None:
    """A table's ``unit`` under several units: ``{<unit table>: <path>, ..}``, each path as
    :func:`~dpsql.metadata.unit_paths.read_unit_path` reads one (None when absent)."""
    value = spec.get("unit")
    if value is None:
        return None
    example = (f"unit: {{{units[0]}: <column>, {units[1]}: {{via: <column>, to: "
               "<table>.<key>}}")
    if not isinstance(value, Mapping) or "via" in value or "to" in value:
        reader.fail(where, "with several privacy units, 'unit' maps each unit table the rows "
                    f"link to onto its path: {example}", spec, "unit")
    out: dict[str, _PathSpec] = {}
    for raw, path in value.items():
        name = str(raw).strip().lower()
        if name not in units:
            reader.fail(where, f"unit names {raw!r}, which is not a privacy unit table (the "
                        f"units are {', '.join(units)}): {example}", value, raw)
        read = read_unit_path(reader, {"unit": path}, f"{where}, unit {name}")
        assert read is not None
        out[name] = _PathSpec(read.path, value, str(raw))
    return out


def resolve_multi(reader: _Reader, by_name: Mapping[str, _TableSpec],
                  units: Sequence[_UnitSpec],
                  paths: Mapping[str, Mapping[str, _PathSpec]]
                  ) -> dict[str, dict[str, UnitPath]]:
    """Every private table's checked path to each unit it links to (module docstring), keyed
    by table then unit table; a unit table's own implied path included."""
    names = [u.unit.table for u in units]
    for name, t in by_name.items():
        if t.public or name in names:
            continue
        if not paths.get(name):
            reader.fail(t.where, f"has no path to any privacy unit ({', '.join(names)}): "
                        f"declare unit: {{{names[0]}: <column>}} or {{{names[0]}: {{via: "
                        "<column>, to: <table>.<key>}} (or public: true if its rows are not "
                        "private)", t.node, t.key)
    out: dict[str, dict[str, UnitPath]] = {}
    for spec in units:
        unit = spec.unit.table
        own = {name: p[unit] for name, p in paths.items() if unit in p}
        for name, p in own.items():
            target = p.path.to_table
            if target is not None and target in by_name and not by_name[target].public and (
                    target != unit and unit not in paths.get(target, {})):
                reader.fail(by_name[name].where, f"unit {unit} goes to {target!r}, which "
                            f"declares no path to the unit {unit!r}: declare one in "
                            f"{target}'s unit mapping, or point 'to' at a table that has one",
                            p.node, p.key)
        view = {name: (t if t.public or name == unit or name in own
                       else dataclasses.replace(t, public=True))
                for name, t in by_name.items()}
        for name, path in resolve_paths(reader, view, spec, own).items():
            out.setdefault(name, {})[unit] = path
    _check_hops(reader, by_name, units, paths, out)
    return out


#: one refusal of the hop rule: (the unit reached, the hop table, the unit whose cascade can
#: remove the hop's rows, the path)
Conflict = tuple[str, str, str, UnitPath]


def hop_conflicts(linked: Mapping[str, Mapping[str, UnitPath]],
                  ids: Mapping[str, str]) -> dict[str, list[Conflict]]:
    """The paths of ``linked`` (table -> unit table -> path, a unit table's own path included)
    the hop rule refuses, per table, in ``linked``'s order; ``ids``: each unit table's id
    column. The rule (module docstring; the loader refuses the first, ``dpsql metadata build``
    marks them all): a path through hop table T to unit U is refused when another unit V's
    cascade can remove T's rows (T is V's table, or T links to V) and the table does not reach
    V through the very same hop. A ``via`` to U's own id column is no hop; a public T links to
    no unit and is no unit table, so it never conflicts.

    Why: a row of R reaching U through a hop row of T has U's id only while that T row exists.
    If removing one V can remove T rows, R's row would not be removed with them but would
    change its unit (to none): a result moves between units and the per-unit argument fails
    (found by the red team: levels moved by 3 tau). Reaching V through the very same hop puts
    the row in V's cascade with its T row (inductively, T's own hops obey this rule)."""
    out: dict[str, list[Conflict]] = {}
    for name, paths in linked.items():
        for unit, path in paths.items():
            hop = path.to_table
            if hop is None or (hop == unit and path.to_column == ids[unit]):
                continue
            for other in ids:
                removable = other != unit and (hop == other or other in linked.get(hop, {}))
                if removable and paths.get(other) != path:
                    out.setdefault(name, []).append((unit, hop, other, path))
    return out


def _check_hops(reader: _Reader, by_name: Mapping[str, _TableSpec], units: Sequence[_UnitSpec],
                paths: Mapping[str, Mapping[str, _PathSpec]],
                out: Mapping[str, Mapping[str, UnitPath]]) -> None:
    """Refuse the first path :func:`hop_conflicts` finds, at its declaration."""
    ids = {u.unit.table: u.unit.column for u in units}
    for name, conflicts in hop_conflicts(out, ids).items():
        unit, hop, other, path = conflicts[0]
        declared = paths.get(name, {}).get(unit)
        node, key = ((declared.node, declared.key) if declared is not None
                     else (by_name[name].node, by_name[name].key))
        reader.fail(by_name[name].where, f"reaches unit {unit} through {hop}, whose "
                    f"rows removing one {other} also removes: the {name} rows would "
                    f"change their {unit} instead of leaving with them. Declare "
                    f"{other}: {{via: {path.column}, to: {hop}.{path.to_column}}} "
                    f"for {name} (the same hop), or give {name} a column holding "
                    f"the {unit} id", node, key)


def all_units(md: Metadata) -> tuple[PrivacyUnit, ...]:
    """Every declared unit, the first (``privacy_unit``) first; () without one."""
    if md.privacy_unit is None:
        return ()
    return (md.privacy_unit, *md.extra_units)


def unit_view(md: Metadata, table: str) -> Metadata:
    """The metadata unit table ``table`` sees (module docstring); ``md`` itself with one unit."""
    if not md.extra_units:
        return md
    unit = next(u for u in all_units(md) if u.table == table)
    tables = {}
    for name, t in md.tables.items():
        path = t.unit_paths.get(table)
        if t.public:
            tables[name] = t
        elif path is None:
            tables[name] = dataclasses.replace(t, public=True, unit=None, unit_paths={})
        else:
            tables[name] = dataclasses.replace(t, unit=path, unit_paths={})
    return dataclasses.replace(md, tables=tables, privacy_unit=unit, extra_units=())


def reached_units(md: Metadata, tables: Sequence[str]) -> tuple[PrivacyUnit, ...]:
    """The declared units whose rows a query reading ``tables`` may read (those the read
    private tables link to), in declaration order. Unknown names are skipped (the analysis
    refuses them elsewhere)."""
    linked: set[str] = set()
    for name in tables:
        t = md.tables.get(name.lower().rsplit(".", 1)[-1])
        if t is not None and not t.public:
            linked.update(t.unit_paths or ({md.privacy_unit.table} if md.privacy_unit else ()))
    return tuple(u for u in all_units(md) if u.table in linked)


def path_text(t: Table, md: Metadata) -> str:
    """How private table ``t`` reaches the unit(s), for people (``metadata check``, the
    shell's ``\\describe``): "the privacy unit's table (id c)", "unit c -> customer.c_custkey"
    or "unit via c -> orders.o_orderkey"; with several units, each as "unit T: ..."."""
    if md.extra_units:  # several unit tables: every path
        return "; ".join(
            f"the privacy unit's table (id {p.column})" if u == t.name else
            f"unit {u}: {p.column}" if p.direct else
            f"unit {u}: via {p.column} -> {p.to_table}.{p.to_column}"
            for u, p in t.unit_paths.items())
    assert t.unit is not None
    unit = md.privacy_unit
    if unit is not None and t.name == unit.table:
        return f"the privacy unit's table (id {unit.column})"
    if t.unit.direct:
        target = f"{unit.table}.{unit.column}" if unit is not None else "the unit"
        return f"unit {t.unit.column} -> {target}"
    return f"unit via {t.unit.column} -> {t.unit.to_table}.{t.unit.to_column}"
