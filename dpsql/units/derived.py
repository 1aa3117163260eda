"""A derived table grouped by the privacy unit (issue #17; docs/privacy.md, "Privacy units: a
derived table grouped by the unit"): TPC-H Q13 under customer as the unit.

FLEX's Q13 counts each customer's orders, zeros included, then histograms the counts::

    SELECT c_count, COUNT(*) FROM (
        SELECT c_custkey, COUNT(o_orderkey) AS c_count
        FROM customer LEFT JOIN orders ON c_custkey = o_custkey AND o_comment NOT LIKE '..'
        GROUP BY c_custkey) AS c_orders
    GROUP BY c_count

Under customer as the unit, each row of the derived table D is ONE customer: adding or
removing a unit with its cascade adds or removes exactly one row of D (its own group) and
changes no other row. The outer query is then a one-table aggregate in which each unit is at
most one row: a two-stage aggregation with kappa = 1 and C = 1 that the SQL itself enforces
(nothing to bound in the executed query, which is the row-level one).

Contract of :func:`derived_unit_shape`: it reads the qualified query and the metadata only.
It returns None when the query has no aggregate below its top level (not this module's case),
a :class:`DerivedShape` when all of the following hold, and raises
:class:`~dpsql.errors.UnsupportedConstructError` naming the first that fails otherwise:

* the top level reads ONE FROM item, no join: a derived table D, or a CTE D (the query's only
  CTE) referenced once; no subquery anywhere else in the top level (its WHERE, HAVING and
  select list read D's row alone);
* D is ``SELECT .. FROM <tables> [WHERE ..] GROUP BY k [HAVING ..]`` with one plain-column key
  k, no subquery anywhere in it (ON, WHERE, HAVING and select list row-local), every FROM
  item a declared table joined by inner or LEFT joins
  (:func:`dpsql.analysis.keyed_groups.join_items`; no RIGHT / FULL / CROSS / NATURAL /
  USING, no nested join), k's table not the right side of a LEFT JOIN;
* (checked by the row-level analysis, :mod:`dpsql.analysis.aggregate_totality`) nothing in
  D's select list or HAVING applies an operation that can fail to an aggregate's exact value:
  TRY cannot wrap an aggregate, and such an error would depend on one unit's data;
* the unit ids and path keys have types whose equality is the stored value's
  (:func:`dpsql.units.identity.check_path_types`, as for every query under a unit);
* k IS a unit id: the unit table's id column (``c_custkey``) or a direct path column
  (``o_custkey``) of k's own table, which is private; its type is exact
  (:data:`dpsql.units.identity.EXACT_ID_TYPES`);
* every private reference in D is *tied* to k: a direct-path or unit-table reference has its
  unit column in K, the columns linked to k (:func:`dpsql.analysis.keyed_groups.linked`:
  AND-ed equalities of inner ONs and the WHERE, and of a LEFT-joined table's own ON to an
  earlier table's column; exact, comparable types); a via-path reference B (``lineitem``:
  ``l_orderkey -> orders.o_orderkey``) has an AND-ed equality ``B.via = A.key`` with A a tied
  reference of B's path's table, ``key`` the column B's path points to, the equality in an
  inner ON / the WHERE or in B's own LEFT JOIN ON (A earlier), with exactly comparable types.

Why (docs/privacy.md, the full argument): in every row r of D's joined, filtered relation J
with k = v, each non-NULL part of a private reference belongs to unit v (K's columns equal k
where their part is not NULL -- :mod:`dpsql.analysis.keyed_groups`; a via reference's key
equals a tied row's key, and keys are unique), and whether r is in J depends on unit v's rows
and public rows only (a LEFT-joined private B is NULL-extended in a row of J only when its tie
is in its own ON, and then the B rows that could match have unit v). k's table is private,
never NULL-extended, and k is its unit column: every row of group v holds a row of unit v, so
group v exists iff unit v has a row in k's table. Hence D(D + u) = D(D) plus at most one row
(u's group), and the outer aggregate over D sees each unit as at most one row.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.analysis.bounds import UnboundedAggregateValue
from dpsql.analysis.checks import has_aggregate, has_inner_aggregate
from dpsql.analysis.elastic import QueryAnalysis, analyze_query
from dpsql.analysis.keyed_groups import Col, column_pair, exact_columns, join_items, linked
from dpsql.analysis.keytypes import comparable
from dpsql.analysis.model import ColumnFacts
from dpsql.errors import AggregateArithmeticError, MissingMetricError, UnsupportedConstructError
from dpsql.metadata import Metadata, Table
from dpsql.units.identity import check_path_types

__all__ = ["DerivedShape", "analyze_derived", "derived_unit_shape"]

_SHAPE = ("(SELECT <unit id>, COUNT(..) .. FROM <tables joined on the unit id> GROUP BY "
          "<unit id>), e.g. TPC-H Q13's c_orders grouped by c_custkey")


@dataclass(frozen=True)
class DerivedShape:
    """A query over one derived table D grouped by the unit id (module contract)."""

    alias: str  # D's alias at the top level
    key: Col  # (alias, column) of D's GROUP BY key, inside D
    key_table: str  # the declared table of k
    description: str  # for explain: "GROUP BY customer.c_custkey: one row per customer"


def _refuse(what: str) -> UnsupportedConstructError:
    return UnsupportedConstructError(
        f"under a privacy unit, {what}: an aggregate in a derived table or CTE is supported "
        f"only as one row per unit, {_SHAPE}, aggregated by the outer query")


def _unbounded(err: UnboundedAggregateValue) -> AggregateArithmeticError:
    """The outer query sums a column of D that has no bounds (the row-level refusal, kept):
    what does get bounds in D, and the alternative."""
    return AggregateArithmeticError(
        f"under a privacy unit, {err.what}, which has no bounds: inside a derived "
        "table grouped by the unit only a count clamped there gets bounds, "
        f"LEAST(COUNT(..), n) AS {err.column} ([0, n]; a clamped SUM or another aggregate "
        f"does not). Clamp the count inside {err.alias}, or aggregate the rows without the "
        "derived table (a SUM over them is bounded per unit by R2T, or by the two-stage "
        "with GROUP BY)")


def derived_unit_shape(query: exp.Query, metadata: Metadata) -> DerivedShape | None:
    """The shape of ``query`` (qualified) under ``metadata.privacy_unit`` (module contract)."""
    if not has_inner_aggregate(query):
        return None
    check_path_types(metadata)  # unit ids and path keys compare stored values (identity.py)
    if not isinstance(query, exp.Select):
        raise _refuse("a set operation over aggregates has no unit-level rule")
    inner, alias = _derived(query)
    if any(isinstance(n, exp.Query) for n in inner.walk() if n is not inner):
        raise _refuse("the derived table has a subquery (its ON, WHERE, HAVING and select list "
                      "must read its own rows only)")
    group = inner.args.get("group")
    if group is None or len(group.expressions) != 1 or any(
            group.args.get(a) for a in ("rollup", "cube", "grouping_sets", "totals")):
        raise _refuse("the derived table is not grouped by one column")
    key = group.expressions[0]
    if not isinstance(key, exp.Column) or not key.table:
        raise _refuse(f"the derived table's GROUP BY {key.sql()} is not a column")
    items = join_items(inner, metadata, {})
    if items is None:
        raise _refuse("the derived table's FROM is not declared tables joined by inner or "
                      "LEFT joins")
    tables = _aliases(inner, metadata)
    private, nullable, on_inner, left_on = items
    k: Col = (key.table, key.name)
    table = tables.get(key.table)
    if table is None:
        raise _refuse(f"the derived table's key {key.sql()} is not a column of its FROM tables")
    if key.table in nullable:
        raise _refuse(f"the derived table's key {key.sql()} is on the nullable side of a LEFT "
                      "JOIN")
    facts = _facts(tables, metadata)
    if _unit_column(table, metadata) != key.name or not exact_columns(facts, k):
        raise _refuse(f"the derived table is grouped by {table.name}.{key.name}, which is not "
                      f"the unit id (GROUP BY {_unit_hint(table, metadata)})")
    k_linked = linked(k, on_inner, left_on, facts)
    tied = {a for a, t in tables.items()
            if private[a] and (a, _unit_column(t, metadata)) in k_linked}
    _tie_via(tables, private, on_inner, left_on, facts, tied, metadata)
    for a, t in tables.items():
        if private[a] and a not in tied:
            raise _refuse(f"the rows of {t.name} ({a}) are not joined to the unit id "
                          f"{table.name}.{key.name} along their unit path "
                          f"({_path_text(t, metadata)})")
    description = (f"GROUP BY {table.name}.{key.name} (the unit id) in {alias}: one row per "
                   "unit, every private table joined on it")
    return DerivedShape(alias, k, table.name, description)


def _derived(query: exp.Select) -> tuple[exp.Select, str]:
    """D and its alias: the top level's only FROM item (module contract)."""
    from_ = query.args.get("from_")
    if from_ is None or query.args.get("joins"):
        raise _refuse("the outer query joins the derived table to other tables")
    node = from_.this
    with_ = query.args.get("with_")
    ctes = list(with_.expressions) if with_ is not None else []
    if isinstance(node, exp.Subquery) and not ctes:
        inner: exp.Expression = node.this
    elif isinstance(node, exp.Table) and len(ctes) == 1 and not node.args.get("db") and (
            node.name == ctes[0].alias_or_name):
        inner = ctes[0].this
    else:
        nested = _aggregating_subquery(query) if not ctes else None
        if nested is not None:  # FROM a table: the aggregate is in a WHERE / SELECT subquery
            raise UnsupportedConstructError(
                f"under a privacy unit, the subquery {_snippet(nested)} aggregates inside the "
                "query: an aggregate in a scalar, IN or EXISTS subquery has no unit-level rule "
                "(run it as a query of its own and write its released value as a constant); "
                f"an aggregate below the top level is supported only as one derived table "
                f"with one row per unit, {_SHAPE}, aggregated by the outer query")
        raise _refuse("the outer query does not read exactly one derived table or CTE")
    if not isinstance(inner, exp.Select):
        raise _refuse("the derived table is not one SELECT")
    outside = [n for n in query.walk() if isinstance(n, (exp.Select, exp.SetOperation))
               and n is not query and not _within(n, inner)]
    if outside:
        raise _refuse("the outer query has a subquery besides the derived table")
    return inner, node.alias_or_name


def _aggregating_subquery(query: exp.Select) -> exp.Select | None:
    """The outermost nested SELECT of ``query`` that holds an aggregate of its own, outside
    the top level's FROM (a scalar, IN or EXISTS subquery), or None."""
    from_ = query.args.get("from_")
    for node in query.walk():
        if (isinstance(node, exp.Select) and node is not query
                and not (from_ is not None and _within(node, from_))
                and has_aggregate(node)):
            return node
    return None


def _snippet(node: exp.Expression, limit: int = 80) -> str:
    text = node.sql()
    return f"({text if len(text) <= limit else text[:limit - 3] + '...'})"


def _within(node: exp.Expression, root: exp.Expression) -> bool:
    while node is not None:
        if node is root:
            return True
        node = node.parent
    return False


def _aliases(select: exp.Select, metadata: Metadata) -> dict[str, Table]:
    out = {}
    for t in select.find_all(exp.Table):
        if t.find_ancestor(exp.Select) is select:
            out[t.alias_or_name] = metadata.table(t.name)
    return out


def _facts(tables: dict[str, Table], metadata: Metadata) -> dict[Col, ColumnFacts]:
    """The declared (or database-filled) types of D's columns, what the links compare."""
    return {(a, c): ColumnFacts(None, type=col.type)
            for a, t in tables.items() for c, col in t.columns.items()}


def _unit_column(table: Table, metadata: Metadata) -> str | None:
    """The column holding the unit id of ``table``'s rows: the unit table's id, a direct
    path's column; None for a via path or a public table."""
    unit = metadata.privacy_unit
    assert unit is not None
    if table.public:
        return None
    if table.name == unit.table:
        return unit.column
    if table.unit is not None and table.unit.direct:
        return table.unit.column
    return None


def _unit_hint(table: Table, metadata: Metadata) -> str:
    column = _unit_column(table, metadata)
    unit = metadata.privacy_unit
    assert unit is not None
    return f"{table.name}.{column}" if column else f"{unit.table}.{unit.column}"


def _path_text(table: Table, metadata: Metadata) -> str:
    path = table.unit
    unit = metadata.privacy_unit
    assert unit is not None
    if table.name == unit.table:
        return f"{unit.column} = the key"
    if path is None:
        return "none declared"
    if path.direct:
        return f"{path.column} = the key"
    return f"{path.column} = {path.to_table}.{path.to_column}"


def _tie_via(tables: dict[str, Table], private: dict[str, bool], on_inner: list[exp.Expression],
             left_on: dict[str, list[exp.Expression]], facts: dict[Col, ColumnFacts],
             tied: set[str], metadata: Metadata) -> None:
    """Add to ``tied`` the via-path references tied through a tied reference of the table
    their path points to (module contract), to a fixpoint."""
    order = list(tables)
    changed = True
    while changed:
        changed = False
        for b in order:
            t = tables[b]
            path = t.unit
            if not private[b] or b in tied or path is None or path.direct:
                continue
            conds = [(c, False) for c in on_inner] + [(c, True) for c in left_on.get(b, [])]
            for cond, own in conds:
                pair = column_pair(cond)
                if pair is None:
                    continue
                for x, y in (pair, pair[::-1]):
                    if x != (b, path.column) or y[0] not in tied or y[0] == b:
                        continue
                    if tables[y[0]].name != path.to_table or y[1] != path.to_column:
                        continue
                    if own and order.index(y[0]) > order.index(b):
                        continue
                    fx, fy = facts.get(x), facts.get(y)
                    if (fx is None or fy is None or not exact_columns(facts, x)
                            or not exact_columns(facts, y)
                            or comparable(fx.type, fy.type) is not True):
                        continue
                    tied.add(b)
                    changed = True



def analyze_derived(query: exp.Query, metadata: Metadata) -> QueryAnalysis:
    """Analyse ``query`` (qualified, with an aggregate below its top level) under
    ``metadata.privacy_unit``: the shape of :func:`derived_unit_shape` (refused otherwise),
    the outer query's shape from the row-level analysis, and the unit-level bounds.

    Guarantee: each private measurement of the result has sensitivity w under add / remove one
    unit -- w = 1 for a COUNT (one unit is at most one row of D, counted in at most one group,
    at most once), w = max(|l|, |u|) for a SUM clamped to [l, u]; a partition-selected key has
    ``selection_stability`` 1 (one unit is in at most one group); the release is a two-stage
    one with kappa = C = 1 (``unit`` replaced so, ``derived`` set), whose executed query is
    the row-level one (nothing to bound per unit). COUNT(DISTINCT ..) and aggregates other than
    COUNT / SUM (AVG split into both) are refused, and so is what the row-level analysis
    refuses (a join key from an earlier LEFT JOIN's null-extended side: with the message of
    this module)."""
    from dpsql.units.analysis import analyze_units, one_row_per_unit, structural_metadata
    from dpsql.units.paths import UnitSource

    unit = metadata.privacy_unit
    assert unit is not None
    shape = derived_unit_shape(query, metadata)
    if shape is None:
        return analyze_units(query, metadata)
    try:
        analysis = analyze_query(query, structural_metadata(metadata))
    except UnboundedAggregateValue as err:
        raise _unbounded(err) from None
    except MissingMetricError:
        # every max frequency is known here (structural_metadata): the join analysis refused
        # a shape (a key from an earlier LEFT JOIN's null-extended side, or computed); its
        # advice to declare a max frequency does not apply under a unit
        raise _refuse("a join key inside the derived table comes from the null-extended side "
                      "of an earlier LEFT JOIN, or is computed, which the join analysis does "
                      "not support yet (join that table with an inner JOIN, on plain "
                      "columns)") from None
    # each unit is at most one row of the derived table: kappa = C = 1
    k_alias, k_column = shape.key
    source = UnitSource(k_alias, k_column, (), f"{shape.key_table}.{k_column} (in {shape.alias})")
    return one_row_per_unit(analysis, unit, source, derived=shape.description)
