"""Totality of the SQL dpsql executes: no expression may raise an error that depends on rows.

An error while the exact query runs would tell the analyst that some row makes it fail, so every
expression that reaches the database is, by construction, one of:

* on the positive list below, of operations that cannot fail for any value of their operands'
  types (docs/privacy.md, "Totality: the positive list");
* wrapped in DuckDB's ``TRY(...)`` (a failure becomes NULL), or, in a boolean position, cast with
  ``TRY_CAST(... AS BOOLEAN)``;
* or it was rejected before (dpsql.analysis.parse, dpsql.analysis.hygiene).

The positive list (everything else counts as failing):

* a column, or a constant that :func:`.safe_compare.constant_kind` validated (never a
  parameter: DuckDB casts its bound value to the context's type once a row reaches it);
* a comparison :func:`.safe_compare.comparison_is_total` proves total from its operands'
  declared types, or a key equality of two bare columns whose types the analysis proved
  injectively comparable (:data:`dpsql.analysis.keytypes.COMPARABLE_KEY`: kept plain so the
  database can hash-join);
* AND / OR / NOT, CASE / IF, COALESCE, TRY_CAST and the three aggregates, when every operand is
  itself total and every operand in a boolean position (AND / OR / NOT operands, CASE WHEN and IF
  conditions, the operand of ``IS [NOT] TRUE/FALSE``, WHERE / ON / HAVING) is provably boolean.
  CASE, IF and COALESCE mix their branches' types, but DuckDB refuses every mix that needs a cast
  at bind time (``Cannot mix values of type VARCHAR and INTEGER``), which does not depend on data.

Precondition for the plain forms: the metadata's column types are the database's (the Engine
fills and checks them, dpsql.backends.types). Unknown types are never on the list.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.keytypes import is_marked_comparable
from dpsql.analysis.trees import copy_tree
from dpsql.metadata import Metadata
from dpsql.rewrite.context import RewriteContext
from dpsql.rewrite.literal_casts import check_literal_casts, operand_types
from dpsql.rewrite.safe_compare import (
    BOOL,
    ColumnKind,
    Kind,
    column_kinds,
    comparison_is_total,
    constant_kind,
    fold_date_intervals,
)
from dpsql.rewrite.set_operations import cast_set_operations

AGGREGATES = (exp.Count, exp.Sum, exp.Avg)
#: (unary minus too: -x overflows on the least integer of x's type; a negated literal is a
#: validated constant, see can_fail)
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod, exp.Pow, exp.Cast,
               exp.Neg)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between,
                exp.Like, exp.ILike, exp.NullSafeEQ, exp.NullSafeNEQ)
#: boolean-valued forms (whether they can fail is a separate question)
_PREDICATES = (*_COMPARISONS, exp.Is, exp.Exists, exp.Boolean, exp.Null, exp.Not,
               exp.Connector)
_SAFE_FUNCS = (*AGGREGATES, exp.Coalesce, exp.Case, exp.If, exp.TryCast, exp.Connector)
_BOOLEAN = exp.DataType.build("BOOLEAN")


def _unknown_kinds(_column: exp.Column) -> Kind | None:
    return None


def is_key_equality(node: exp.Expression) -> bool:
    """``a.x = b.y`` between bare columns whose types the analysis proved comparable."""
    return (isinstance(node, exp.EQ) and is_marked_comparable(node)
            and all(isinstance(side.unnest(), exp.Column) for side in (node.left, node.right)))


def is_boolean(node: exp.Expression, column_kind: ColumnKind) -> bool:
    """Whether ``node`` provably has type BOOLEAN (so using it as a condition casts nothing)."""
    node = node.unnest()
    if isinstance(node, exp.Try):  # TRY(p) is p, or NULL
        return is_boolean(node.this, column_kind)
    if isinstance(node, _PREDICATES):
        return True
    if isinstance(node, exp.Column):
        return column_kind(node) == BOOL
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return node.to.this == exp.DataType.Type.BOOLEAN
    return False


def _boolean_operands(node: exp.Expression) -> list[exp.Expression]:
    """The operands ``node`` evaluates as conditions (DuckDB casts them to BOOLEAN)."""
    if isinstance(node, exp.Connector):
        return [node.left, node.right]
    if isinstance(node, exp.Not):
        return [node.this]
    if isinstance(node, exp.If):  # also each WHEN of a searched CASE
        # a simple CASE's WHEN (CASE x WHEN v ...) holds a value compared with x, not a
        # condition (QA round 6: CASE s WHEN 'a' was cast to BOOLEAN and matched nothing)
        return [] if _simple_case_branch(node) else [node.this]
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Boolean):
        return [node.this]
    return []


def _simple_case_branch(node: exp.Expression) -> bool:
    """Whether ``node`` is a WHEN branch of a simple CASE (``CASE x WHEN v THEN ...``)."""
    parent = node.parent
    return (isinstance(node, exp.If) and isinstance(parent, exp.Case)
            and parent.this is not None and node.arg_key == "ifs")


def simple_case_comparisons(node: exp.Case) -> list[exp.EQ]:
    """The comparisons ``x = v`` a simple CASE makes, one per WHEN value (copies, for judging
    them: DuckDB casts as it would for ``x = v``)."""
    if node.this is None:
        return []
    return [exp.EQ(this=copy_tree(node.this), expression=copy_tree(branch.this))
            for branch in node.args.get("ifs") or []]


def can_fail(node: exp.Expression, column_kind: ColumnKind) -> bool:
    """Could evaluating ``node`` raise an error that depends on the rows? (module contract)

    Precondition: ``node`` contains no subquery (:func:`make_total` recurses around them).
    """
    if isinstance(node, exp.Placeholder):
        # its value's type is known only when it is bound, and DuckDB casts it to the type the
        # context wants when a row reaches it ('' as INTEGER fails on a non-empty table only)
        return True
    if isinstance(node, exp.Column) or constant_kind(node) is not None:
        return False
    if isinstance(node, _COMPARISONS):
        return not (is_key_equality(node) or comparison_is_total(node, column_kind))
    if isinstance(node, exp.Case) and any(
            can_fail(eq, column_kind) for eq in simple_case_comparisons(node)):
        return True  # a WHEN value the operand's type cannot read fails once a row comes
    if (isinstance(node, _ARITHMETIC) and not isinstance(node, exp.TryCast)) or (
            isinstance(node, exp.Func) and not isinstance(node, _SAFE_FUNCS)):
        return True  # (TRY_CAST is a Cast in sqlglot, but yields NULL instead of failing)
    if any(not is_boolean(o, column_kind) for o in _boolean_operands(node)):
        return True
    return any(can_fail(child, column_kind) for child in node.iter_expressions())


def _as_condition(node: exp.Expression, column_kind: ColumnKind) -> exp.Expression:
    """``node`` in a boolean position: itself when provably boolean, else cast with TRY_CAST."""
    if is_boolean(node, column_kind):
        return node
    return exp.TryCast(this=node, to=copy_tree(_BOOLEAN))


def make_total(node: exp.Expression, column_kind: ColumnKind = _unknown_kinds, *,
               condition: bool = False) -> exp.Expression:
    """Wrap maximal risky scalar sub-expressions in TRY(...), keeping predicates' structure.

    ``condition``: ``node`` is evaluated as a condition (WHERE, ON, HAVING, an operand of
    AND / OR / NOT), so a value that is not provably boolean is cast with TRY_CAST.
    Subqueries are left alone: :func:`total_query` visits every SELECT itself.
    """
    if isinstance(node, (exp.Query, exp.Subquery)):
        return node
    if isinstance(node, exp.Alias):
        node.set("this", make_total(node.this, column_kind))
        return node
    if isinstance(node, exp.Paren):
        node.set("this", make_total(node.this, column_kind, condition=condition))
        return node
    if isinstance(node, exp.Distinct):
        # COUNT(DISTINCT x): TRY around the DISTINCT node would read as COUNT(TRY(x)) and
        # count duplicates; each value is made total inside it instead
        node.set("expressions", [make_total(e, column_kind) for e in node.expressions])
        return node
    if isinstance(node, (exp.Connector, exp.Not)):
        for key, child in list(node.args.items()):
            if isinstance(child, exp.Expression):
                node.set(key, make_total(child, column_kind, condition=True))
        return node
    if node.find(exp.Subquery, exp.Select, exp.Exists, *AGGREGATES) is not None:
        operands = {id(o) for o in _boolean_operands(node)}
        for key, child in list(node.args.items()):
            if isinstance(child, exp.Expression):
                node.set(key, make_total(child, column_kind, condition=id(child) in operands))
            elif isinstance(child, list):
                node.set(key, [make_total(c, column_kind, condition=id(c) in operands)
                               if isinstance(c, exp.Expression) else c for c in child])
        return node
    node = _cast_conditions(node, column_kind)
    if can_fail(node, column_kind):
        node = exp.func("TRY", node, copy=False)
    return _as_condition(node, column_kind) if condition else node


def _cast_conditions(node: exp.Expression, column_kind: ColumnKind) -> exp.Expression:
    """Every operand in a boolean position inside ``node`` that is not provably boolean, cast
    with TRY_CAST (in place), so that only what can really fail is left for TRY: Spark refuses
    ``CASE WHEN s`` for a STRING s at analysis, while it takes ``CASE WHEN TRY_CAST(s ...)``."""
    for inner in list(node.walk()):
        for operand in _boolean_operands(inner):
            if not is_boolean(operand, column_kind):
                operand.replace(exp.TryCast(this=copy_tree(operand), to=copy_tree(_BOOLEAN)))
    return node


def cte_names(query: exp.Expression) -> frozenset[str]:
    """The (lower-case) names of every CTE defined anywhere in ``query``."""
    return frozenset(cte.alias_or_name.lower() for cte in query.find_all(exp.CTE))


def total_query(query: exp.Expression, metadata: Metadata | None = None,
                ctes: frozenset[str] | None = None) -> None:
    """Make every SELECT in ``query`` total (see :func:`make_total`), in place.

    With ``metadata``, comparisons of declared-type base-table columns that cannot fail stay
    unwrapped (dpsql.rewrite.safe_compare); without it, every comparison of a column is wrapped.
    ``ctes``: :func:`cte_names` of ``query``, when the caller knows them.
    """
    ctes = cte_names(query) if ctes is None else ctes
    cast_set_operations(query, metadata, ctes)  # before TRY hides the branches' types
    for select in list(query.find_all(exp.Select)):
        kind = column_kinds(select, metadata, ctes)
        check_literal_casts(select, operand_types(select, metadata, ctes))
        for join in select.args.get("joins") or []:
            if join.args.get("on") is not None:
                fold_date_intervals(join.args["on"], kind)
                join.set("on", make_total(join.args["on"], kind, condition=True))
        for clause in (select.args.get("where"), select.args.get("having")):
            if clause is not None:
                fold_date_intervals(clause.this, kind)
                clause.set("this", make_total(clause.this, kind, condition=True))
        select.set("expressions", [make_total(e, kind) for e in select.expressions])
        group = select.args.get("group")
        if group is not None:
            group.set("expressions", [make_total(e, kind) for e in group.expressions])


def check_literals_pass(query: exp.Expression, *, ctx: RewriteContext) -> exp.Expression:
    """Pass: :func:`check_literal_casts` on every SELECT of the analyst's query as written,
    before :func:`exact_shape` moves HAVING, ORDER BY and the outer query of a release block
    into post-processing, which runs after the charge (QA round 6: ``HAVING COUNT(*) >
    'lots'`` was charged, then failed there). :func:`total_query` checks again what the exact
    query keeps (and sample-and-aggregate's inner query)."""
    ctes = ctx.cte_names()
    for select in query.find_all(exp.Select):
        check_literal_casts(select, operand_types(select, ctx.metadata, ctes))
    return query


def make_total_pass(query: exp.Expression, *, ctx: RewriteContext) -> exp.Expression:
    """Pass: :func:`total_query` (in place; CTE bodies included)."""
    total_query(query, ctx.metadata, ctx.cte_names())
    return query
