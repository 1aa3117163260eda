"""Where a relation starts: declared tables (memoised per metadata), the CTE each table
reference reads (sqlglot's scope module), and the facts a computed projection carries out of a
subquery (its interval bounds). dpsql.analysis.relations builds every other relation on these.
"""

from __future__ import annotations

import weakref
from dataclasses import replace

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from dpsql.analysis import rules
from dpsql.analysis.bounds import bounds_of
from dpsql.analysis.checks import sql_text
from dpsql.analysis.model import ColumnFacts, Derivation, Relation
from dpsql.errors import Error, UnsupportedConstructError
from dpsql.metadata import Metadata


def derived_bounds(node: exp.Expression, rel: Relation) -> tuple[float, float] | None:
    """The interval bounds of a computed projection (dpsql.analysis.bounds), or None.

    Bounds carried out of a subquery only size a later SUM's clamp and sensitivity: the
    executed query clamps the summed per-row value itself (dpsql.rewrite.clamps), so, as for
    an expression summed in place, a wrong bound costs accuracy, never privacy. No refusal
    here: a column that cannot be bounded is refused only if something sums it.
    """
    try:
        interval = bounds_of(node, lambda c: rel.columns.get((c.table, c.name)))
    except Error:
        return None
    if interval is None or not interval.bounded:
        return None
    return float(interval.lo), float(interval.hi)


def cte_references(query: exp.Query) -> dict[int, exp.CTE]:
    """The CTE each table reference reads, by sqlglot's scope resolution: id(Table) -> CTE.

    A reference names a CTE when sqlglot.optimizer.scope resolves its source to a CTE scope:
    the innermost WITH around it that defines that name before it (a CTE sees the CTEs before
    it in its own WITH, not itself nor later ones), never a schema-qualified name. Anything
    else is a table (dpsql.analysis.hygiene forbids CTEs named like a declared table).
    """
    refs: dict[int, exp.CTE] = {}
    for scope in traverse_scope(query):
        for table in scope.tables:
            source = scope.sources.get(table.alias_or_name)
            if not (isinstance(source, Scope) and source.is_cte):
                continue
            node: exp.Expression | None = source.expression
            while node is not None and not isinstance(node, exp.CTE):
                node = node.parent
            if node is None or table.db or node.alias_or_name.lower() != table.name.lower():
                # Not reachable after qualify (which rejects duplicate aliases); never guess.
                raise UnsupportedConstructError(
                    f"the table reference {sql_text(table)} could not be resolved: give each "
                    "table and CTE reference a distinct alias"
                )
            refs[id(table)] = node
    return refs


def _base_table(metadata: Metadata, name: str) -> Relation:
    meta = metadata.table(name)
    rule = rules.public_table if meta.public else rules.private_table
    stability = rule(None)[0]
    cols: dict[tuple[str, str], ColumnFacts] = {}
    for col in meta.columns.values():
        cols[("", col.name)] = ColumnFacts(
            mf=rule(col.max_freq)[1], bounds=col.bounds, origin=(name, col.name),
            type=col.type,
        )
    kind = "public" if meta.public else "private"
    return Relation(
        stability, cols, frozenset() if meta.public else frozenset({name}),
        Derivation(f"{kind} table {name}", stability),
    )


#: id(metadata) -> (weak reference to it, {(table name, alias or None): its base relation}).
#: A declared table's relation depends on the metadata alone (immutable), and building it (a
#: ColumnFacts per column) was ~5% of the analysis; the relations are frozen and only read
#: (joins and projections build new column dicts), so one per Metadata object suffices.
_BASE_TABLES: dict[int, tuple[weakref.ref, dict[tuple[str, str | None], Relation]]] = {}


def base_table(metadata: Metadata, name: str, alias: str | None = None) -> Relation:
    """The relation of declared table ``name`` (lower-case): S = 1 (private) or 0 (public),
    each column's facts from ``metadata`` (rules.private_table / rules.public_table), keyed
    ``("", column)``, or ``(alias, column)`` with an ``alias``. Kept per Metadata object for
    ``alias`` None or ``name`` (what qualify gives an unaliased table): the analyst's other
    aliases are not kept, so the memo stays as small as the metadata."""
    key = id(metadata)
    hit = _BASE_TABLES.get(key)
    if hit is None or hit[0]() is not metadata:
        def forget(_ref: object, key: int = key) -> None:
            _BASE_TABLES.pop(key, None)

        hit = _BASE_TABLES[key] = (weakref.ref(metadata, forget), {})
    tables = hit[1]
    rel = tables.get((name, alias))
    if rel is None:
        if alias is None:
            rel = _base_table(metadata, name)
        else:
            rel = keyed(base_table(metadata, name), alias)
        if alias is None or alias == name:
            tables[(name, alias)] = rel
    return rel


def keyed(rel: Relation, alias: str) -> Relation:
    """``rel`` with its columns keyed ``(alias, column)``."""
    cols = {(alias, name): facts for (_, name), facts in rel.columns.items()}
    return replace(rel, columns=cols)
