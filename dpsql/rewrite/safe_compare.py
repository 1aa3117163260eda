"""Which comparisons in the exact query cannot raise, whatever the rows (rewrite.py's TRY rule).

The rewrite wraps every expression that *could* raise a data-dependent error in ``TRY(...)``
(an error would reveal that some row exists). Comparisons are risky in general because the
database casts implicitly: ``varchar_col = 5`` casts every VARCHAR value to INTEGER and fails on
the first non-numeric one. But TRY costs DuckDB ~10% on a scan-heavy filter, and most filters
compare a column with a constant or a column of a compatible type, where no cast can fail.

Contract of :func:`comparison_is_total`: True only when every operand is a bare column with a
known declared type, or a constant this module validated itself (see :func:`constant_kind`),
and every pair compared is one where DuckDB's implicit cast cannot fail for any stored value:

* string vs string (no cast); LIKE / ILIKE of a string column with a string pattern (no ESCAPE);
* DATE vs DATE column, a validated ``DATE 'yyyy-mm-dd'`` or ISO date string literal, or
  ``CAST(DATE '...' +/- INTERVAL 'n' unit AS DATE)`` (what :func:`fold_date_intervals` makes of
  a date-plus-whole-days/months/years constant);
* BOOLEAN vs BOOLEAN;
* numbers: integers of at most 64 bits, DECIMAL(p, s) and FLOAT/DOUBLE columns, and integer or
  decimal literals with at most 15 digits: any pair involving FLOAT/DOUBLE (casting a bounded
  number to DOUBLE cannot fail), integer vs integer (widening), and integer/decimal vs decimal
  when DuckDB's common DECIMAL type, max(integer digits) + max(scale), has at most 38 digits
  (DECIMAL(38,0) vs 0.5 needs 39 and fails; HUGEINT is excluded for the same reason).

Everything else -- parameters (their type is the caller's), functions, arithmetic, other types,
a type that is unknown (undeclared in the metadata, or a column of a CTE or derived table) --
stays risky. Constants are validated here rather than trusted: DuckDB folds a failing constant
only when some row reaches it (``CAST('x' AS DATE)`` errors on a non-empty table, not on an
empty one), so a constant that can fail is itself data-dependent.

Precondition: declared metadata types are the database's types (the engine checks them against
the backend when it can; a wrong declaration is as unsafe as a wrong max frequency).
Checked on DuckDB with extreme stored values by tests/rewrite/test_safe_compare.py.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from sqlglot import exp

from dpsql.analysis.keytypes import normalise
from dpsql.analysis.trees import copy_tree
from dpsql.metadata import Metadata, Table

T = exp.DataType.Type

#: integer types and the decimal digits DuckDB gives them in a DECIMAL common type
_INT_DIGITS = {T.TINYINT: 3, T.UTINYINT: 3, T.SMALLINT: 5, T.USMALLINT: 5, T.INT: 10,
               T.UINT: 10, T.BIGINT: 19, T.UBIGINT: 20}
_FLOATS = frozenset({T.FLOAT, T.DOUBLE})
_STRINGS = frozenset({T.VARCHAR, T.TEXT, T.CHAR, T.NCHAR, T.NVARCHAR})
_MAX_LITERAL_DIGITS = 15
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_WHOLE_DAY_UNITS = frozenset({"DAY", "DAYS", "WEEK", "WEEKS", "MONTH", "MONTHS", "YEAR", "YEARS",
                              "QUARTER", "QUARTERS"})


@dataclass(frozen=True)
class Kind:
    """What a comparison operand is, as far as implicit casts are concerned."""

    family: str  # "int" | "decimal" | "float" | "string" | "date" | "bool"
    digits: int = 0  # integer digits (int and decimal)
    scale: int = 0  # decimal scale


STRING = Kind("string")
DATE = Kind("date")
BOOL = Kind("bool")
FLOAT = Kind("float")


@lru_cache(maxsize=1024)
def declared_kind(type_text: str | None) -> Kind | None:
    """The Kind of a declared column type (metadata ``type``), or None when not provable."""
    dtype = normalise(type_text)
    if dtype is None:
        return None
    t = dtype.this
    if t in _INT_DIGITS:
        return Kind("int", _INT_DIGITS[t])
    if t in _FLOATS:
        return FLOAT
    if t in _STRINGS:
        return STRING
    if t == T.DATE:
        return DATE
    if t == T.BOOLEAN:
        return BOOL
    if t == T.DECIMAL:
        params = [p.this for p in dtype.expressions]
        try:
            precision = int(params[0].this) if params else 18
            scale = int(params[1].this) if len(params) > 1 else 3
        except (AttributeError, ValueError):
            return None
        if not 0 <= scale <= precision <= 38:
            return None
        return Kind("decimal", precision - scale, scale)
    return None


def _valid_date(text: str) -> bool:
    if not _ISO_DATE.fullmatch(text):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _number_kind(text: str) -> Kind | None:
    m = re.fullmatch(r"(\d*)(?:\.(\d*))?", text)
    if m is None or not (m.group(1) or m.group(2)):
        return None  # exponents (DOUBLE literals) and anything odd: not needed, stay risky
    whole, frac = m.group(1).lstrip("0"), m.group(2) or ""
    if len(whole) + len(frac) > _MAX_LITERAL_DIGITS:
        return None
    if m.group(2) is None:
        # DuckDB types an integer literal as INTEGER (or BIGINT when larger)
        return Kind("int", 10 if len(whole) <= 9 else 19)
    return Kind("decimal", max(len(whole), 1), len(frac))


def _date_literal(node: exp.Expression) -> bool:
    """``DATE 'yyyy-mm-dd'`` (sqlglot: CAST of a string literal to DATE), validated."""
    return (isinstance(node, exp.Cast) and node.to.this == T.DATE
            and isinstance(node.this, exp.Literal) and node.this.is_string
            and _valid_date(node.this.this))


def _whole_day_interval(node: exp.Expression) -> bool:
    if not isinstance(node, exp.Interval) or not isinstance(node.this, exp.Literal):
        return False
    unit = node.args.get("unit")
    unit_name = unit.name.upper() if unit is not None else ""
    return unit_name in _WHOLE_DAY_UNITS and re.fullmatch(r"\d{1,4}", node.this.name) is not None


def _is_date_shift(node: exp.Expression) -> bool:
    """``DATE '...' +/- INTERVAL 'n' DAY|WEEK|MONTH|QUARTER|YEAR`` with a small whole n."""
    return (isinstance(node, (exp.Add, exp.Sub)) and _date_literal(node.this)
            and _whole_day_interval(node.expression))


def constant_kind(node: exp.Expression) -> Kind | None:
    """The Kind of a constant that cannot fail to evaluate, or None."""
    node = node.unnest()
    if isinstance(node, exp.Literal):
        return STRING if node.is_string else _number_kind(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) \
            and not node.this.is_string:
        return _number_kind(node.this.this)
    if isinstance(node, exp.Boolean):
        return BOOL
    if _date_literal(node):
        return DATE
    if (isinstance(node, exp.Cast) and node.to.this == T.DATE
            and _is_date_shift(node.this.unnest())):
        return DATE
    return None


def _string_is_date(node: exp.Expression) -> bool:
    node = node.unnest()
    return isinstance(node, exp.Literal) and node.is_string and _valid_date(node.this)


def _pair_is_total(a: Kind, b: Kind, a_node: exp.Expression, b_node: exp.Expression) -> bool:
    if a.family == "date" or b.family == "date":
        # an ISO date string literal is cast to DATE once, and we checked that it parses
        return (a.family == b.family == "date" or (a.family == "date" and _string_is_date(b_node))
                or (b.family == "date" and _string_is_date(a_node)))
    if a.family in ("string", "bool") or b.family in ("string", "bool"):
        return a.family == b.family
    if "float" in (a.family, b.family):
        return True  # any bounded integer or decimal casts to DOUBLE/FLOAT
    if a.family == b.family == "int":
        return True
    return max(a.digits, b.digits) + max(a.scale, b.scale) <= 38


ColumnKind = Callable[[exp.Column], "Kind | None"]
#: a column's declared type text (metadata ``type``), or None when unknown
ColumnType = Callable[[exp.Column], "str | None"]


def _operand_kind(node: exp.Expression, column_kind: ColumnKind) -> Kind | None:
    node = node.unnest()
    if isinstance(node, exp.Column):
        return column_kind(node)
    return constant_kind(node)


def comparison_is_total(node: exp.Expression, column_kind: ColumnKind) -> bool:
    """True when the comparison ``node`` cannot raise for any row (module contract)."""
    if isinstance(node, (exp.Like, exp.ILike)):
        pairs = [(node.this, node.expression)]
        if node.args.get("escape") is not None:
            return False
    elif isinstance(node, exp.Between):
        pairs = [(node.this, node.args["low"]), (node.this, node.args["high"])]
    elif isinstance(node, exp.In):
        if node.args.get("query") is not None or node.args.get("unnest") is not None \
                or node.args.get("field") is not None:
            return False
        pairs = [(node.this, e) for e in node.expressions]
    elif isinstance(node, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                           exp.NullSafeNEQ)):
        pairs = [(node.this, node.expression)]
    else:
        return False
    strings_only = isinstance(node, (exp.Like, exp.ILike))
    for left, right in pairs:
        a, b = _operand_kind(left, column_kind), _operand_kind(right, column_kind)
        if a is None or b is None or not _pair_is_total(a, b, left, right):
            return False
        if strings_only and not a == b == STRING:
            return False
    return True


def scope_nodes(node: exp.Expression):
    """``node`` and its descendants, not entering subqueries (they are their own scope)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(c for c in n.iter_expressions()
                     if not isinstance(c, (exp.Query, exp.Subquery)))


def fold_date_intervals(node: exp.Expression, column_kind: ColumnKind) -> None:
    """``date_col op DATE 'd' +/- INTERVAL 'n' unit`` -> ``date_col op CAST(... AS DATE)``, in
    place, within ``node``'s own scope.

    DuckDB types ``DATE + INTERVAL`` as TIMESTAMP, so the comparison would cast every stored
    DATE to TIMESTAMP (which fails after 294247 AD). A whole number of days, weeks, months,
    quarters or years from a date is a midnight, and for a date x and a midnight t,
    ``x op t`` equals ``x op CAST(t AS DATE)`` for every comparison op: the same answer
    without casting stored values. Only done when the compared column is a DATE.
    """
    if node.find(exp.Interval) is None:
        return
    comparisons = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)
    for shift in list(scope_nodes(node)):
        if not _is_date_shift(shift):
            continue
        parent = shift.parent
        while isinstance(parent, exp.Paren):
            parent = parent.parent
        if not isinstance(parent, comparisons):
            continue
        operands = [parent.this] + ([] if isinstance(parent, (exp.Between, exp.In))
                                    else [parent.expression])
        columns = [o.unnest() for o in operands if isinstance(o.unnest(), exp.Column)]
        if len(columns) == 1 and column_kind(columns[0]) == DATE:
            shift.replace(exp.Cast(this=copy_tree(shift), to=exp.DataType.build(T.DATE)))


def scope_sources(select: exp.Select) -> list[exp.Expression]:
    """The relations ``select``'s FROM and JOINs name (tables, derived tables, ...)."""
    from_ = select.args.get("from_")
    sources = [from_.this] if from_ is not None else []
    sources.extend(j.this for j in select.args.get("joins") or [])
    return sources


def _base_table(source: exp.Expression, metadata: Metadata,
                cte_names: frozenset[str]) -> Table | None:
    """The declared table ``source`` reads directly, or None (a CTE, derived table, ...)."""
    if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier) \
            and source.name.lower() not in cte_names:
        return metadata.tables.get(source.name.lower())
    return None


def base_tables(select: exp.Select, metadata: Metadata | None,
                cte_names: frozenset[str]) -> dict[str, tuple[exp.Table, Table]]:
    """Alias -> (table node, declared table) for the metadata tables ``select`` reads directly
    in its FROM and JOINs (not CTEs or derived tables)."""
    out: dict[str, tuple[exp.Table, Table]] = {}
    if metadata is None:
        return out
    for source in scope_sources(select):
        table = _base_table(source, metadata, cte_names)
        if table is not None:
            assert isinstance(source, exp.Table)
            out[source.alias_or_name] = (source, table)
    return out


def enclosing_select(select: exp.Select) -> exp.Select | None:
    """The SELECT whose columns ``select`` may reference: the one it is an expression
    subquery of (EXISTS, IN, a scalar subquery in WHERE, SELECT, HAVING, ...), through set
    operations. None for a top-level SELECT, a CTE body, a derived table or a LATERAL source,
    which do not see an outer query's aliases (read as unknown: the safe side)."""
    node: exp.Expression = select
    while True:
        parent = node.parent
        if parent is None or isinstance(parent, (exp.CTE, exp.With, exp.From, exp.Join,
                                                 exp.Lateral)):
            return None
        if isinstance(parent, exp.Select):
            return parent
        node = parent


def column_types(select: exp.Select, metadata: Metadata | None,
                 cte_names: frozenset[str]) -> ColumnType:
    """Declared types, from the metadata, of the columns of the base tables ``select`` reads
    (FROM and JOINs) and of those of the SELECTs it is a correlated subquery of
    (:func:`enclosing_select`), each alias resolved to the innermost scope naming it, as SQL
    resolves it (the query is qualified, so every column names its scope's alias).

    Columns of CTEs and derived tables get None (unknown): their types would need type
    inference through projections, and unknown stays risky.
    """
    aliases: dict[str, Table | None] = {}
    scope: exp.Select | None = select
    while scope is not None and metadata is not None:
        for source in scope_sources(scope):
            # an inner alias hides an outer one, whatever the inner source is
            aliases.setdefault(source.alias_or_name,
                               _base_table(source, metadata, cte_names))
        scope = enclosing_select(scope)

    def declared_type(column: exp.Column) -> str | None:
        table = aliases.get(column.table)
        if table is None:
            return None
        declared = table.columns.get(column.name.lower())
        return declared.type if declared is not None else None

    return declared_type


def column_kinds(select: exp.Select, metadata: Metadata | None,
                 cte_names: frozenset[str]) -> ColumnKind:
    """The Kinds of :func:`column_types` (None: unknown, or a type no rule here reads)."""
    declared_type = column_types(select, metadata, cte_names)

    def kind(column: exp.Column) -> Kind | None:
        text = declared_type(column)
        return declared_kind(text) if text is not None else None

    return kind
