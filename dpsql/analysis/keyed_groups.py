"""Grouped subqueries keyed by every private table's join key: a constant stability of 2.

TPC-H Q13 counts each customer's orders, zeros included, and then histograms those counts::

    SELECT c_count, COUNT(*) FROM (
        SELECT c_custkey, COUNT(o_orderkey) AS c_count
        FROM customer LEFT JOIN orders ON c_custkey = o_custkey AND o_comment NOT LIKE '...'
        GROUP BY c_custkey) AS c_orders
    GROUP BY c_count

The general rule gives the inner GROUP BY 2·S(join), and the join's S grows with the max
frequency of ``o_custkey`` (and with the distance k). But every joined row that holds a given
private row has that row's key in ``c_custkey``, so one changed row touches only the groups of
its old and new key: the grouped output changes in at most two rows, whatever the max
frequencies (:func:`dpsql.analysis.rules.keyed_group_stability`).

Contract of :func:`keyed_group`: it reads the qualified SELECT, the column facts of its FROM /
WHERE relation (types: declared or filled from the database) and the metadata only, and
returns a description of the shape when all of these hold, else None (the caller keeps the
general rule; nothing is refused here):

* one GROUP BY expression, a plain column k of a FROM table (no ROLLUP / CUBE / GROUPING SETS);
* every FROM item is a declared table (no CTE reference, derived table or nested join),
  joined by inner joins (``JOIN ... ON``, or a comma join with its condition in WHERE) or
  ``LEFT JOIN`` (``OUTER`` allowed); no RIGHT / FULL / CROSS / NATURAL / USING;
* k's table is not the right side of a LEFT JOIN (it is never null-extended);
* the set K of columns *linked to k* (k; the other side of an equality ``x = y`` between two
  columns that is an AND-ed conjunct of an inner join's ON or of the WHERE, one side in K;
  a column of a LEFT-joined table B equal, in a conjunct of B's own ON, to a column in K of
  an earlier table) holds a column of every occurrence of a private table;
* each equality used has two columns of known types that compare stored values
  (:func:`dpsql.analysis.keytypes.comparable`) on the positive list
  :data:`dpsql.units.identity.EXACT_ID_TYPES` (integers, DECIMAL, strings without a
  collation, DATE, UUID), and so has k: a row's key is then determined by its private row;
* no subquery anywhere in the SELECT (ON, WHERE, HAVING and the select list are row-local:
  they read the row's own columns, constants and parameters).

Why the shape gives S = 2 (docs/privacy.md, "Grouped by the join key"): by induction over the
derivation of K, in every row of the joined, filtered relation J, each column of K whose table's
part is not NULL equals k (an inner / WHERE equality holds in every row of J, non-NULL; a LEFT
JOIN ON equality holds whenever B's part is not NULL; k's own table is never NULL). So a row of
J holding a private row r lies in the group of r's key. And the group of key v is a function of
the rows with key v (plus public rows): its rows' parts have key v, and a part of B is NULL iff
no row of B satisfies B's ON with the row's earlier parts, which needs the B row's linked column
to equal a non-NULL linked column of those parts, i.e. v. Changing r (key x) into r' (key y)
therefore leaves every group but x and y unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from dpsql.analysis.checks import conjuncts
from dpsql.analysis.derived_keys import INPUT, DerivedDomain
from dpsql.analysis.keytypes import comparable, normalise
from dpsql.analysis.model import ColumnFacts
from dpsql.metadata import Domain, Metadata
from dpsql.units.identity import EXACT_ID_TYPES

__all__ = ["MAX_CLAMP", "clamped_count", "column_pair", "exact_columns", "join_items",
           "keyed_group", "linked"]

#: the largest n of ``LEAST(COUNT(...), n)`` taken as the bins 0..n (a public limit)
MAX_CLAMP = 100_000

Col = tuple[str, str]


def keyed_group(select: exp.Select, columns: Mapping[Col, ColumnFacts], metadata: Metadata,
                cte_refs: Mapping[int, object]) -> str | None:
    """The shape's description ("GROUP BY c.k: every private table joined on it") when
    ``select`` (qualified, grouped, aggregating; ``columns`` its FROM / WHERE relation's facts,
    ``cte_refs`` the analyzer's CTE references) has the shape of the module contract, else
    None."""
    group = select.args.get("group")
    if group is None or len(group.expressions) != 1 or any(
            group.args.get(a) for a in ("rollup", "cube", "grouping_sets", "totals")):
        return None
    key = group.expressions[0]
    if not isinstance(key, exp.Column) or not key.table:
        return None
    if any(isinstance(n, exp.Query) for n in select.walk() if n is not select):
        return None
    tables = _tables(select, metadata, cte_refs)
    if tables is None:
        return None
    aliases, nullable, inner, left_on = tables
    k = (key.table, key.name)
    if key.table not in aliases or key.table in nullable or not _exact(columns, k):
        return None
    linked = _linked(k, inner, left_on, columns)
    if not all(any(c[0] == alias for c in linked) for alias, private in aliases.items()
               if private):
        return None
    return (f"GROUP BY {key.table}.{key.name}: every private table is joined on it, so one "
            "changed row touches the groups of its old and new key only")


def _tables(select: exp.Select, metadata: Metadata, cte_refs: Mapping[int, object]):
    """({alias: private?}, nullable aliases, inner equality conjuncts, {alias: its LEFT
    JOIN's ON conjuncts}), or None when a FROM item or join is outside the shape."""
    from_ = select.args.get("from_")
    if from_ is None:
        return None
    items: list[tuple[exp.Expression, exp.Join | None]] = [(from_.this, None)]
    items += [(j.this, j) for j in select.args.get("joins") or []]
    private: dict[str, bool] = {}
    nullable: set[str] = set()
    inner: list[exp.Expression] = []
    left_on: dict[str, list[exp.Expression]] = {}
    for node, join in items:
        if (not isinstance(node, exp.Table) or id(node) in cte_refs or node.args.get("joins")
                or node.args.get("db")):
            return None
        table = metadata.tables.get(node.name.lower())
        alias = node.alias_or_name
        if table is None or alias in private:
            return None
        private[alias] = not table.public
        if join is None:
            continue
        side = (join.side or "").upper()
        kind = (join.kind or "").upper()
        if join.args.get("method") or join.args.get("using"):
            return None
        on = conjuncts(join.args.get("on")) if join.args.get("on") is not None else []
        if side == "" and kind in ("", "INNER"):
            inner.extend(on)
        elif side == "LEFT" and kind in ("", "OUTER"):
            nullable.add(alias)
            left_on[alias] = on
        else:
            return None
    where = select.args.get("where")
    inner.extend(conjuncts(where.this) if where is not None else [])
    return private, nullable, inner, left_on


def _linked(k: Col, inner: list[exp.Expression], left_on: dict[str, list[exp.Expression]],
            columns: Mapping[Col, ColumnFacts]) -> set[Col]:
    """K of the module contract: the columns linked to ``k`` (a fixpoint over the
    equalities; each used only with both column types exact and comparable)."""
    linked = {k}
    pairs = [p for p in map(_column_pair, inner) if p is not None]
    directed: list[tuple[Col, Col]] = []  # (earlier column, LEFT-joined column)
    for alias, on in left_on.items():
        for pair in filter(None, map(_column_pair, on)):
            a, b = pair
            if a[0] == alias and b[0] != alias:
                directed.append((b, a))
            elif b[0] == alias and a[0] != alias:
                directed.append((a, b))
    changed = True
    while changed:
        changed = False
        for a, b in pairs:
            for x, y in ((a, b), (b, a)):
                if x in linked and y not in linked and _same_values(columns, x, y):
                    linked.add(y)
                    changed = True
        for x, y in directed:
            if x in linked and y not in linked and _same_values(columns, x, y):
                linked.add(y)
                changed = True
    return linked


def _column_pair(cond: exp.Expression) -> tuple[Col, Col] | None:
    if not isinstance(cond, exp.EQ):
        return None
    left, right = cond.left.unnest(), cond.right.unnest()
    if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)
            and left.table and right.table):
        return None
    return (left.table, left.name), (right.table, right.name)


def _exact(columns: Mapping[Col, ColumnFacts], col: Col) -> bool:
    """The column's type is known and its equality and grouping are the stored value's."""
    facts = columns.get(col)
    dtype = normalise(facts.type) if facts is not None else None
    return dtype is not None and dtype.this in EXACT_ID_TYPES


def _same_values(columns: Mapping[Col, ColumnFacts], a: Col, b: Col) -> bool:
    """``a = b`` holds only between equal stored values (both types exact, comparable)."""
    fa, fb = columns.get(a), columns.get(b)
    return (fa is not None and fb is not None and _exact(columns, a) and _exact(columns, b)
            and comparable(fa.type, fb.type) is True)


def clamped_count(node: exp.Expression) -> tuple[DerivedDomain, int] | None:
    """The bins 0..n, and n, of ``LEAST(COUNT(...), n)`` (either order; n an integer literal,
    0 <= n <= MAX_CLAMP) computed per group of a subquery, else None.

    Contract: reads the SQL only. A COUNT is an integer >= 0 (never NULL), so the clamped
    value is one of 0..n: a GROUP BY outside may take those bins (declared-domain histogram,
    no delta, empty bins filled) and a SUM / AVG outside the bounds [0, n]. The analyst's
    clamp, like ``LEAST(GREATEST(x, 0), 100)`` for a SUM's argument.
    """
    if not isinstance(node, exp.Least) or len(node.expressions) != 1:
        return None
    pair = (node.this, node.expressions[0])
    for count, limit in (pair, pair[::-1]):
        if (isinstance(count, exp.Count) and isinstance(limit, exp.Literal) and limit.is_int
                and 0 <= int(limit.this) <= MAX_CLAMP):
            n = int(limit.this)
            bins = DerivedDomain(exp.column(INPUT), values=Domain(values=tuple(range(n + 1))),
                                 input_type="BIGINT", label=f"LEAST(COUNT(...), {n}): 0..{n}")
            return bins, n
    return None


# The pieces dpsql.units.derived reuses (a derived table grouped by the privacy unit).
join_items = _tables
linked = _linked
column_pair = _column_pair
exact_columns = _exact
