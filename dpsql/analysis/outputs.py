"""Duplicate output names in subqueries and CTEs, renamed the way DuckDB binds them.

``WITH j AS (SELECT * FROM orders o JOIN customers c ON ...)`` outputs ``customer_id`` twice.
DuckDB keeps the first name and renames each later duplicate (case-insensitively) to
``name_1``, ``name_2``, ... (the first suffix no earlier output of the list uses), so
``j.customer_id`` reads the FIRST column. :func:`rename_duplicate_outputs` writes those
names into the qualified tree as explicit aliases: the analysis then sees one column per name,
with the facts of the column DuckDB binds, and the SQL dpsql generates (DuckDB or Spark) says
the same thing explicitly. A reference to a renamed column (``j.customer_id_1``) is not in
sqlglot's view of the subquery and is refused by qualify, so no outer reference is ever
ambiguous.

Contract: only SELECTs below the top level are changed (the top level's names are the result's
column names); a list without duplicates is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp


def duckdb_names(names: Iterable[str]) -> list[str]:
    """The output names DuckDB gives a subquery whose select list is named ``names``."""
    seen: set[str] = set()
    out = []
    for name in names:
        if name.lower() in seen:
            k = 1
            while f"{name}_{k}".lower() in seen:
                k += 1
            name = f"{name}_{k}"
        seen.add(name.lower())
        out.append(name)
    return out


def rename_duplicate_outputs(root: exp.Expression, nodes: Iterable[exp.Expression]) -> None:
    """Alias every later duplicate output of every SELECT in ``nodes`` but ``root`` (module
    docstring), in place."""
    for node in nodes:
        if not isinstance(node, exp.Select) or node is root:
            continue
        names = [e.alias_or_name for e in node.expressions]
        if len({n.lower() for n in names}) == len(names):
            continue
        for i, (old, new) in enumerate(zip(names, duckdb_names(names), strict=True)):
            if old == new:
                continue
            item = node.expressions[i]
            if isinstance(item, exp.Alias):
                item.set("alias", exp.to_identifier(new))
            else:
                item.replace(exp.alias_(item.copy(), new))
