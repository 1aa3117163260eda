"""``dpsql metadata build --unit T1.C1 --unit T2.C2 ..``: a draft with SEVERAL privacy units
(R2T's private relations, e.g. customer AND supplier; issue #17, owner-side).

The draft declares ``privacy_unit`` as the list of the unit tables, in the order given (the
first entry carries the bounds, :mod:`dpsql.metadata.unit_multi`), and maps each private table
onto its path to each unit table it links to. Each unit's paths are proposed exactly as one
unit's are (:func:`dpsql.metadata.build_units.find_paths`: a column named like a key, at least
99% of the rows with a value in it reaching a unit through it, never the data alone), one unit
at a time over every private table; a written path with orphans gets the same ``ORPHANS``
note as under one unit.

Precondition: ``md`` is the profiled draft (types and max frequencies), the ``units`` are
distinct tables being described, none public.

Guarantee: no path written fails to load, but a unit table's (below). A proposal the hop
rule refuses (:func:`dpsql.metadata.unit_multi.hop_conflicts`, the loader's own check: a
table reaching one unit through a hop table another unit's cascade can remove, not through
the very same hop for that unit) is not written: the table gets a
``CONFLICT`` comment naming the hop, the unit that removes it and the fix, and no ``unit`` at
all; so does every table whose proposed paths go through such a table (``NOT PROPOSED``). A
private table linked to no unit gets the ``NO PATH`` comment one unit gives it. Those tables
make the draft fail to load ("has no path to any privacy unit") until the owner decides:
linking rows to a unit, or not, is a privacy decision the draft never makes.

A private table linked to some units but not all would load without the others' paths, i.e.
outside their cascades. So when a name match to a missing unit was refuted by orphans only
(some of the column's values found there, under 99%: a link with dirty data), its paths are not
written either (``UNDECIDED``; the draft does not load until the owner declares the path, or
the proposed ones alone). With no such match it gets a note naming the units it does not link
to (to review; it loads): a match none of whose values occur is a coincidence of names.

A unit table needs no path to load, so withholding its links to other units would silently
leave it out of their cascades. Its links are the exception, on the side of the larger
cascade: a link refuted by orphans only is written all the same (``ORPHANS``: its rows of a key
not found belong to no unit there, as ``dpsql metadata check -d`` reports), and the paths
through it are proposed as through any; a conflicting link stays written too (the loader then
refuses it, naming the fix).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence

from dpsql.errors import ProgrammingError
from dpsql.metadata.build_units import (
    Candidate,
    Orphaned,
    Refuted,
    candidates,
    find_paths,
    orphans_note,
    unit_target,
    wrap,
)
from dpsql.metadata.model import Metadata, PrivacyUnit, UnitPath
from dpsql.metadata.unit_multi import Conflict, hop_conflicts
from dpsql.metadata.yaml_io import _flow, _one_path


def with_units(md: Metadata, units: Sequence[str], table_sql: Mapping[str, str],
               fetch: Callable[[str], list[tuple]]) -> tuple[Metadata, dict[str, list[str]]]:
    """The draft ``md`` with ``privacy_unit`` the list of ``units`` ("TABLE.COLUMN" each, two
    or more) and the proposed paths, and the notes per table (module docstring). ``table_sql``
    names each table in SQL. The result may not load (module docstring)."""
    targets = unit_targets({n: list(t.columns) for n, t in md.tables.items()},
                           {n for n, t in md.tables.items() if t.public}, units)
    ids = dict(targets)
    memo: dict[str, list[tuple]] = {}

    def cached(sql: str) -> list[tuple]:  # the units share hop tables: ask once
        if sql not in memo:
            memo[sql] = fetch(sql)
        return memo[sql]

    tables = candidates(md, table_sql)
    seeds: dict[str, dict[str, UnitPath]] = {}  # unit -> unit table -> its orphaned path
    kept: list[tuple[str, str]] = []  # (unit table, note)
    while True:
        linked, refuted, orphaned = _propose(tables, targets, cached, seeds)
        more = [(u, name, refs) for name in ids
                for u, refs in _partly(linked.get(name, {}), refuted.get(name, {})).items()]
        if not more:
            break
        for unit, name, refs in more:
            seeds.setdefault(unit, {})[name] = refs[0].path
            kept.append((name, _orphans_kept(unit, refs[0].text)))
    proposed = {name: dict(paths) for name, paths in linked.items()}
    undecided = {}
    for name, paths in linked.items():
        partly = _partly(paths, refuted.get(name, {}))
        if partly and name not in ids:
            undecided[name] = _undecided(partly)
    for name, line in kept:
        undecided.setdefault(name, []).append(line)
    notes = _withdraw(linked, ids, undecided)
    for c in tables:
        if c.name in ids or c.name in notes:
            continue
        missing = [u for u in ids if u not in linked.get(c.name, {})]
        if missing:
            notes[c.name] = _missing_note(missing, list(ids), c.name in linked,
                                          refuted.get(c.name, {}))
    out = {}
    for name, t in md.tables.items():
        if not t.public:
            paths = linked.get(name, {})
            t = dataclasses.replace(t, unit=paths.get(targets[0][0]), unit_paths=paths)
        out[name] = t
    for name, by_unit in orphaned.items():  # the written paths' orphans (dpsql.build_units)
        for unit, o in by_unit.items():
            if unit in linked.get(name, {}):
                notes.setdefault(name, []).append(orphans_note(o, unit))
    for name, note in notes.items():
        if name in proposed and name not in ids and not linked.get(name):
            note.append("Proposed: unit: " + _flow(_mapping(proposed[name])))
    first = PrivacyUnit(*targets[0])
    extra = tuple(PrivacyUnit(t, c) for t, c in targets[1:])
    return dataclasses.replace(md, tables=out, privacy_unit=first, extra_units=extra), {
        name: wrap(" ".join(note)) for name, note in notes.items()}


def _propose(tables: list[Candidate], targets: Sequence[tuple[str, str]],
             fetch: Callable[[str], list[tuple]], seeds: Mapping[str, Mapping[str, UnitPath]]
             ) -> tuple[dict[str, dict[str, UnitPath]], dict[str, dict[str, list[Refuted]]],
                        dict[str, dict[str, Orphaned]]]:
    """Each table's proposed path per unit table, the refuted name matches per table and
    unit table it got no path to, and the proposed paths with orphans per table and unit
    table (``seeds``: paths taken as found, per unit table)."""
    linked: dict[str, dict[str, UnitPath]] = {}
    refuted: dict[str, dict[str, list[Refuted]]] = {}
    orphaned: dict[str, dict[str, Orphaned]] = {}
    for table, column in targets:
        paths, refutes, orphans = find_paths(tables, table, column, fetch, seeds.get(table))
        for name, path in paths.items():
            linked.setdefault(name, {})[table] = path
        for name, lines in refutes.items():
            if lines:
                refuted.setdefault(name, {})[table] = lines
        for name, o in orphans.items():
            orphaned.setdefault(name, {})[table] = o
    return linked, refuted, orphaned


def _partly(paths: Mapping[str, UnitPath],
            refuted: Mapping[str, list[Refuted]]) -> dict[str, list[Refuted]]:
    """The refuted matches of a table with ``paths``, per unit it has no path to, that found
    some of their values (none: absent)."""
    out = {u: [r for r in refs if r.partly] for u, refs in refuted.items() if u not in paths}
    return {u: refs for u, refs in out.items() if refs}


def unit_targets(columns: Mapping[str, Sequence[str]], public: Collection[str],
                 units: Sequence[str]) -> list[tuple[str, str]]:
    """(table, id column) of each of ``units``, checked against the tables being described
    (``columns``: each one's column names) as one ``--unit`` is
    (:func:`~dpsql.metadata.build_units.unit_target`), and the tables distinct."""
    out: list[tuple[str, str]] = []
    for unit in units:
        table, column = unit_target(unit, columns, public)
        if any(table == t for t, _ in out):
            raise ProgrammingError(f"--unit {unit!r}: table {table!r} is named by another "
                                   "--unit already; name each unit table once")
        out.append((table, column))
    return out


def _withdraw(linked: dict[str, dict[str, UnitPath]], ids: Mapping[str, str],
              notes: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Take out of ``linked`` the paths of the tables ``notes`` calls undecided, those the
    hop rule refuses, and those going through a table whose paths were taken out, until none
    is left (a unit table's stay: module docstring); ``notes`` with those tables' added."""
    out = {name: list(note) for name, note in notes.items()}
    gone = {name for name in notes if name not in ids}
    marked = set(gone)
    changed = True
    while changed:
        for name in gone:
            linked[name] = {}
        changed = False
        for name, conflicts in hop_conflicts(linked, ids).items():
            if name not in marked:
                out.setdefault(name, []).extend([*_conflict_note(name, conflicts),
                                                 _outcome(name, ids)])
                changed = True
                marked.add(name)
        for name, paths in linked.items():
            through = sorted({p.to_table for p in paths.values() if p.to_table in gone})
            if through and name not in marked:
                out.setdefault(name, []).extend([
                    f"NOT PROPOSED: its paths go through {', '.join(through)}, whose proposed "
                    "paths are not written (see there): resolve that first.",
                    _outcome(name, ids)])
                changed = True
                marked.add(name)
        gone |= {name for name in marked if name not in ids}
    return out


def _undecided(partly: Mapping[str, list[Refuted]]) -> list[str]:
    units = ", ".join(partly)
    return [f"UNDECIDED: its column names say its rows also link to {units}, and some of the "
            "values are found there, not all: " + "; ".join(
                r.text for refs in partly.values() for r in refs) + ". Declare that path "
            "too (the rows of a key not found belong to no unit: `dpsql metadata check -d` "
            "counts them), or, if its rows are not in that unit's cascade, the proposed paths "
            "alone.", "No path is written; the file does not load until then."]


def _orphans_kept(unit: str, refuted: str) -> str:
    return (f"ORPHANS: its column names say it links to {unit}, and some of the values are "
            f"found there, not all: {refuted}. The path is written all the "
            "same (a unit table would load without it, outside that unit's cascade): its rows "
            "of a key not found belong to no unit there (`dpsql metadata check -d` counts "
            "them); drop it only if its rows are not in that unit's cascade.")


def _outcome(name: str, ids: Mapping[str, str]) -> str:
    if name in ids:
        return (f"The proposed paths are written: {name} is a unit table, which would load "
                "without them; the file does not load until then.")
    return "No path is written; the file does not load until then."


def _conflict_note(name: str, conflicts: list[Conflict]) -> list[str]:
    note = ["CONFLICT between the proposed paths (the hop rule, docs/privacy.md \"Several "
            "privacy units\"):"]
    for unit, hop, other, path in conflicts:
        same = {"via": path.column, "to": f"{hop}.{path.to_column}"}
        note.append(f"it reaches unit {unit} through {hop}, whose rows removing one {other} "
                    f"also removes, so its rows would change their {unit} instead of leaving "
                    f"with them. Fix: declare {other}: {_flow(same)} (the same hop), or give "
                    f"{name} a column holding the {unit} id.")
    return note


def _missing_note(missing: list[str], units: list[str], some: bool,
                  refuted: Mapping[str, list[Refuted]]) -> list[str]:
    if some:
        names = ", ".join(missing)
        note = [f"Not linked to the unit{'s' if len(missing) > 1 else ''} {names} (no column "
                "named like a key of a table with a path to it has at least 99% of its "
                f"non-NULL values there): if its rows belong to one, add {missing[0]}: <column> or "
                f"{missing[0]}: {{via: <column>, to: <table>.<key>}} to its unit mapping."]
    else:
        note = [f"NO PATH to any privacy unit ({', '.join(units)}) found (no column named like "
                "a key of a table with a path has at least 99% of its non-NULL values there). "
                f"Declare unit: {{{units[0]}: <column>}} or unit: {{{units[0]}: {{via: "
                "<column>, to: <table>.<key>}}, one entry per unit table its rows belong to, or "
                "public: true if its rows are not private: the file does not load until then."]
    lines = list(dict.fromkeys(r.text for u in missing for r in refuted.get(u, ())))
    if lines:
        note.append("Name matches the data refuted: " + "; ".join(lines) + ".")
    return note


def _mapping(paths: Mapping[str, UnitPath]) -> dict[str, object]:
    return {unit: _one_path(path) for unit, path in paths.items()}
