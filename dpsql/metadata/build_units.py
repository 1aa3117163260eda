"""``dpsql metadata build --unit TABLE.COLUMN``: propose each private table's path to the unit
from key names and the data (owner-side; issue #17).

A proposal needs both signs, never the data alone (TPC-H's l_suppkey values 1..10,000 all occur
in c_custkey, and mean nothing of the kind):

* the column's name matches the key's: the same name or the same stem after a short table
  prefix (``o_custkey`` / ``c_custkey``), or the key's table and a generic key name
  (``customer_id`` for ``customers.id``); the types are of one kind (integers, strings, ...);
* the column has a non-NULL value, and at least :data:`MIN_RESOLVED_PERCENT` (99) percent of
  its rows with one find it in the key (:func:`dpsql.metadata.unit_check.orphan_sql`). Real
  data has a few orphans, and they are legal (rows of no unit, or a direct path's units of
  their own: docs/privacy.md "Privacy units"); a proposal with orphans carries an ``ORPHANS``
  comment counting them and saying what they are (:func:`orphans_note`), which ``dpsql
  metadata check -d`` reports too. More orphans than that refute the match: a coincidence of
  names, or a link the owner must look at.

Direct paths (the column holds the unit's id) are tried first, for every table; then, in
rounds, paths via a key column of a table that already has one, until no table gains a path.
A key column is unique (max frequency 1) and named like a key (:func:`key_like`: ``..id``,
``..key``, ``..uuid``, ``.._no``, ``.._code``, ...): a unique free-text column is not one
(TPC-H SF1's c_comment and s_comment, unique in their tables, share one value, which made a
two-unit draft link customer to supplier). A table with no proposal gets a comment saying
so, with the name matches the data refuted; the draft then does not load until the owner
declares its path or makes it public (a privacy decision the draft never makes).
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from dpsql.errors import ProgrammingError
from dpsql.metadata.model import Metadata, PrivacyUnit, UnitPath, _table_key
from dpsql.metadata.unit_check import orphan_sql
from dpsql.sql import quote_ident

_GENERIC = {"id", "key", "pk", "uuid"}
_INTEGERS = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
             "UINTEGER", "UBIGINT", "UHUGEINT", "INT", "LONG", "SHORT", "BYTE"}
_STRINGS = {"VARCHAR", "STRING", "TEXT", "CHAR"}
#: a name match is proposed when at least this percentage of its rows with a non-NULL value
#: find it in the key (module docstring); the rest are its orphans
MIN_RESOLVED_PERCENT = 99


@dataclass(frozen=True)
class Candidate:
    """One profiled table: its SQL name, its columns' types, and its key columns (unique)."""

    name: str
    sql: str
    types: Mapping[str, str]
    keys: tuple[str, ...]


class Refuted(NamedTuple):
    """A name match the data refuted: its text for the draft, whether some of the column's
    values were found (an orphan key: a link with dirty data, not a coincidence), and the path
    it would have given."""

    text: str
    partly: bool
    path: UnitPath


class Orphaned(NamedTuple):
    """A proposed path with orphans: ``orphans`` of the ``rows`` with a non-NULL ``column``
    find no ``target`` (``table.key``); ``direct``: the key is the unit's id."""

    column: str
    target: str
    orphans: int
    rows: int
    direct: bool


class Found(NamedTuple):
    """What :func:`find_paths` found: the path per table that got one, the name matches the
    data refuted per table, and the proposed paths with orphans per table."""

    paths: dict[str, UnitPath]
    refuted: dict[str, list[Refuted]]
    orphaned: dict[str, Orphaned]


def resolved_enough(rows: int, orphans: int) -> bool:
    """Whether a name match whose ``rows`` rows with a non-NULL value have ``orphans`` orphans
    among them is proposed: some rows, at least MIN_RESOLVED_PERCENT percent found (exact)."""
    return rows > 0 and 100 * (rows - orphans) >= MIN_RESOLVED_PERCENT * rows


def orphans_note(o: Orphaned, unit_table: str) -> str:
    """The ``ORPHANS`` comment of a proposed path with orphans (module docstring)."""
    what = (f"each belongs to the unit whose id it holds (a direct path's value is the unit "
            f"id), a unit with no row in {unit_table}" if o.direct else
            "they belong to no unit: no neighbour removes them, so they are as unprotected "
            "as a public table's rows, and every release counts them in full")
    found = o.target if o.direct else f"{o.target} that reaches a unit"
    return (f"ORPHANS on its path to {unit_table}: {o.orphans} of the {o.rows} rows with a "
            f"non-NULL {o.column} find no {found} (at most {100 - MIN_RESOLVED_PERCENT}%: "
            f"the path is proposed all the same); {what}. `dpsql metadata check -m FILE -d "
            "DATABASE` reports them; fix the data, or give such rows a unit, if they must be "
            "protected.")


def _stem(name: str) -> str:
    """``name`` without a short table prefix: ``o_custkey`` -> ``custkey``."""
    prefix, sep, rest = name.partition("_")
    return rest if sep and rest and len(prefix) <= 3 else name


def _kind(type_text: str) -> str:
    upper = type_text.upper().split("(")[0].strip()
    if upper in _INTEGERS:
        return "integer"
    if upper in _STRINGS:
        return "string"
    return upper


#: the endings of a key's name (:func:`key_like`)
_KEY_ENDINGS = ("id", "key", "uuid", "guid")
_KEY_WORDS = {"no", "nr", "num", "number", "code", "pk", "ref"}


def key_like(name: str) -> bool:
    """Whether a unique column's name says it is a key another table may reference: its stem
    is a generic key name, ends like one (``custkey``, ``customer_id``, ``userid``), or its
    last word is one (``order_no``, ``account_code``). Public: the name alone."""
    lower = name.lower()
    return (_stem(lower) in _GENERIC or lower.endswith(_KEY_ENDINGS)
            or lower.rpartition("_")[2] in _KEY_WORDS)


def names_match(column: str, key: str, key_table: str) -> bool:
    """Whether ``column``'s name says it references ``key_table.key`` (module docstring)."""
    stem = _stem(key)
    if stem not in _GENERIC and (column == key or _stem(column) == stem):
        return True
    tables = {key_table, key_table[:-1] if key_table.endswith("s") else key_table}
    return any(column in (f"{t}_{stem}", f"{t}{stem}") for t in tables)


def propose_paths(tables: list[Candidate], unit_table: str, unit_column: str,
                  fetch: Callable[[str], list[tuple]]
                  ) -> tuple[dict[str, UnitPath], dict[str, list[str]]]:
    """(path per table that got one, notes per table) for the private ``tables`` (the unit's
    table among them; its path is its id column): ``NO PATH`` for a table without one,
    ``ORPHANS`` for a proposed path with orphans."""
    paths, refuted, orphaned = find_paths(tables, unit_table, unit_column, fetch)
    notes = {name: wrap(orphans_note(o, unit_table)) for name, o in orphaned.items()}
    for t in tables:
        if t.name in paths:
            continue
        text = (f"NO PATH to the privacy unit {unit_table!r} found (no column named like a "
                f"key of a table with a path has at least {MIN_RESOLVED_PERCENT}% of its non-NULL "
                "values there). Declare unit: <column> "
                "or unit: {via: <column>, to: <table>.<key>}, or public: true if its rows are "
                "not private: the file does not load until then.")
        if refuted[t.name]:
            text += " Name matches the data refuted: " + "; ".join(
                r.text for r in refuted[t.name]) + "."
        notes[t.name] = wrap(text)
    return paths, notes


def wrap(text: str) -> list[str]:
    """``text`` as the lines of a draft's comment."""
    return textwrap.wrap(text, 84, break_long_words=False, break_on_hyphens=False)


def find_paths(tables: list[Candidate], unit_table: str, unit_column: str,
               fetch: Callable[[str], list[tuple]], seed: Mapping[str, UnitPath] | None = None
               ) -> Found:
    """The paths proposed for the private ``tables`` (the unit's table among them; its path is
    its id column), the name matches the data refuted, and the proposed paths with orphans
    (:class:`Found`); ``seed``: paths taken as found before the first round, never counted
    as orphaned here (dpsql.metadata.build_multi)."""
    by_name = {t.name: t for t in tables}
    unit = by_name[unit_table]
    paths: dict[str, UnitPath] = {unit_table: UnitPath(unit_column), **(seed or {})}
    refuted: dict[str, list[Refuted]] = {t.name: [] for t in tables}
    tried: dict[tuple[str, str, str, str], bool] = {}
    counts: dict[tuple[str, str, str, str], tuple[int, int]] = {}  # (orphans, non-NULL rows)

    def reaching(name: str, column: str) -> str:
        """SQL of the values of ``name.column`` in the rows whose path found so far reaches
        a unit (as :func:`dpsql.metadata.unit_check.reaching_sql` on the draft's paths)."""
        sql, col = by_name[name].sql, quote_ident(column)
        if name == unit_table:
            return f"SELECT {col} FROM {sql} WHERE {quote_ident(unit_column)} IS NOT NULL"
        p = paths[name]
        if p.to_table is None or p.to_column is None or (p.to_table, p.to_column) == (
                unit_table, unit_column):
            return f"SELECT {col} FROM {sql} WHERE {quote_ident(p.column)} IS NOT NULL"
        return (f"SELECT {col} FROM {sql} WHERE {quote_ident(p.column)} IN "
                f"({reaching(p.to_table, p.to_column)})")

    def resolves(t: Candidate, column: str, target: Candidate, key: str) -> bool:
        if _kind(t.types[column]) != _kind(target.types[key]):
            return False
        seen = tried.get((t.name, column, target.name, key))
        if seen is not None:  # tried in an earlier round
            return seen
        # a via path's orphans: rows whose value finds no row of the target that reaches a
        # unit (QA round 6: the target's own rows of no unit were not counted, so a chain of
        # 1.8% rows of no unit passed the 1% rule, and its comment said 0.9%)
        found_in = target.sql if target.name == unit_table and key == unit_column else \
            f"({reaching(target.name, key)}) AS __reaching"
        ((rows, nulls, orphans),) = fetch(orphan_sql(t.sql, column, found_in, key))
        counts[(t.name, column, target.name, key)] = (orphans, rows - nulls)
        ok = tried[(t.name, column, target.name, key)] = resolved_enough(rows - nulls, orphans)
        if not ok:
            refuted[t.name].append(Refuted(
                f"{column} -> {target.name}.{key} (" + (
                    f"{orphans} of {rows - nulls} rows not found" if rows - nulls
                    else "no non-NULL values") + ")", 0 < orphans < rows - nulls,
                UnitPath(column) if target.name == unit_table and key == unit_column
                else UnitPath(column, target.name, key)))
        return ok

    for t in tables:
        if t.name in paths:
            continue
        for column in t.types:
            if names_match(column, unit_column, unit_table) and resolves(
                    t, column, unit, unit_column):
                paths[t.name] = UnitPath(column)
                break
    grown = True
    while grown:
        grown = False
        reached = list(paths)  # the tables with a path before this round, nearest first
        for t in tables:
            if t.name in paths:
                continue
            found = _via(t, [by_name[r] for r in reached], unit_table, unit_column, resolves)
            if found is not None:
                paths[t.name] = found
                grown = True
    orphaned = {}
    for name, path in paths.items():
        if path.to_table is None or path.to_column is None:
            key = (name, path.column, unit_table, unit_column)
        else:
            key = (name, path.column, path.to_table, path.to_column)
        orphans, rows = counts.get(key, (0, 0))  # the unit table's own and seeds: untried
        if orphans:
            orphaned[name] = Orphaned(path.column, f"{key[2]}.{key[3]}", orphans, rows,
                                      path.direct)
    return Found(paths, refuted, orphaned)


def _via(t: Candidate, reached: list[Candidate], unit_table: str, unit_column: str,
         resolves: Callable[[Candidate, str, Candidate, str], bool]) -> UnitPath | None:
    for target in reached:
        for key in target.keys:
            if target.name == unit_table and key == unit_column:
                continue  # a direct path: tried already
            for column in t.types:
                if names_match(column, key, target.name) and resolves(t, column, target, key):
                    return UnitPath(column, target.name, key)
    return None


def unit_target(unit: str, columns: Mapping[str, Sequence[str]],
                public: Collection[str]) -> tuple[str, str]:
    """(table, column) named by ``unit`` ("TABLE.COLUMN"), checked against the tables being
    described (``columns``: each one's column names) before anything is profiled."""
    table, dot, column = unit.strip().rpartition(".")
    if not dot or not table or not column:
        raise ProgrammingError(f"--unit {unit!r}: write TABLE.COLUMN, such as "
                               "customer.c_custkey (the unit's table and its id column)")
    name, column = _table_key(table), column.lower()
    if name not in columns:
        raise ProgrammingError(f"--unit {unit!r}: table {table!r} is not one of the tables "
                               f"being described ({', '.join(columns)})")
    if name in public:
        raise ProgrammingError(f"--unit {unit!r}: table {name!r} is marked public; the unit's "
                               "table holds the protected units: drop it from --public")
    if column not in [c.lower() for c in columns[name]]:
        raise ProgrammingError(f"--unit {unit!r}: table {name!r} has no column {column!r} "
                               f"(its columns: {', '.join(columns[name])})")
    return name, column


def candidates(md: Metadata, table_sql: Mapping[str, str]) -> list[Candidate]:
    """The private tables of the profiled draft ``md``, with their key columns (max frequency
    1, named like a key: :func:`key_like`); ``table_sql`` names each table in SQL."""
    return [
        Candidate(t.name, table_sql[t.name],
                  {c.name: c.type or "" for c in t.columns.values()},
                  tuple(c.name for c in t.columns.values()
                        if c.max_freq == 1 and key_like(c.name)))
        for t in md.tables.values() if not t.public
    ]


def with_unit(md: Metadata, unit: str, table_sql: Mapping[str, str],
              fetch: Callable[[str], list[tuple]]) -> tuple[Metadata, dict[str, list[str]]]:
    """The draft ``md`` (profiled: types and max frequencies) with ``privacy_unit`` from
    ``unit`` ("TABLE.COLUMN") and the proposed paths, and the notes of the tables without one.
    ``table_sql`` names each table in SQL. The result may not load (module docstring)."""
    name, column = unit_target(unit, {n: list(t.columns) for n, t in md.tables.items()},
                               {n for n, t in md.tables.items() if t.public})
    paths, notes = propose_paths(candidates(md, table_sql), name, column, fetch)
    tables = {n: dataclasses.replace(t, unit=paths.get(n)) for n, t in md.tables.items()}
    return dataclasses.replace(md, tables=tables,
                               privacy_unit=PrivacyUnit(table=name, column=column)), notes
