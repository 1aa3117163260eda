"""The Spark backend's compile step: dpsql's generated SQL (DuckDB dialect) as Spark SQL.

sqlglot transpiles; on top of that, everything the rewrite wraps in ``TRY(...)`` must give NULL
where DuckDB's TRY does, and sums must be exact (see :mod:`dpsql.backends.spark` for the
session configuration that goes with it):

* integer ``+ - *`` inside TRY become ``try_add``/``try_subtract``/``try_multiply``, ``/``
  ``try_divide``, casts ``TRY_CAST``; date functions Spark evaluates with exact arithmetic even
  without ANSI mode (add_months, timestampadd) over a column inside TRY are refused;
* every SUM argument is typed (sqlglot's annotate_types over the registered tables' schemas)
  and integer or DECIMAL arguments are summed as DECIMAL(38, s), as DuckDB's 128-bit sums; a
  SUM argument of unknown type fails closed;
* quantiles (QUANTILE_CONT / QUANTILE_DISC / QUANTILE / MEDIAN) of integer or floating-point
  values become Spark's exact ``percentile`` / ``percentile_disc``
  (:mod:`dpsql.backends.spark_quantiles`); other argument types fail closed;
* floating-point aggregates ordered by their arguments (sample-and-aggregate's) become folds over
  their sorted values (:mod:`dpsql.backends.spark_ordered`);
* scalar functions and operators Spark computes differently under the same name (the day of
  the week, ``log``, division by zero, ``substring``, ``date_diff``, ...) are rewritten to
  DuckDB's values first (:mod:`dpsql.backends.spark_functions`).

A construct that cannot be expressed faithfully raises NotSupportedError before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.schema import MappingSchema

from dpsql.backends.spark_functions import duckdb_functions
from dpsql.backends.spark_ordered import translate_ordered
from dpsql.backends.spark_quantiles import translate_quantiles
from dpsql.errors import NotSupportedError

SOURCE_DIALECT = "duckdb"  # what dpsql.rewrite generates
TARGET_DIALECT = "spark"

# Inside TRY(...): Spark operators whose non-ANSI behaviour is not NULL-on-error.
_TRY_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.Add: "try_add",
    exp.Sub: "try_subtract",
    exp.Mul: "try_multiply",
    exp.Div: "try_divide",
}


# Date functions Spark evaluates with exact arithmetic even without ANSI mode (add_months,
# timestampadd raise on overflow); try_add/try_subtract cover ``d + INTERVAL ...`` instead.
_UNTRAPPED_DATE_FUNCTIONS: tuple[type[exp.Expression], ...] = (
    exp.DateAdd, exp.DateSub, exp.AddMonths, exp.TimestampAdd, exp.TimestampSub,
    exp.DatetimeAdd, exp.DatetimeSub, exp.TsOrDsAdd, exp.TimeAdd, exp.TimeSub,
)


def _post_order(node: exp.Expression) -> list[exp.Expression]:
    """Every node under ``node`` (itself last), each after all of its descendants."""
    return list(reversed(list(node.walk(bfs=False))))


def _total_operators(node: exp.Expression) -> exp.Expression:
    """The body of one TRY(...): arithmetic as try_* functions, casts as TRY_CAST."""
    for n in node.walk():
        if isinstance(n, _UNTRAPPED_DATE_FUNCTIONS) and n.find(exp.Column) is not None:
            # Spark has no general TRY: an overflow here would raise, depending on the data
            raise NotSupportedError(
                f"{n.sql(dialect=SOURCE_DIALECT)[:60]} cannot be made error-free on Spark: "
                "write date arithmetic as column + INTERVAL ..., or use the DuckDB backend"
            )
    holder = exp.Paren(this=node)  # a parent, so that the body's root can be replaced too
    for n in _post_order(node):  # children first: their replacements move into the new parent
        name = _TRY_FUNCTIONS.get(type(n))
        if name is not None:
            n.replace(exp.Anonymous(this=name, expressions=[n.left, n.right]))
        elif type(n) is exp.Cast:
            n.replace(exp.TryCast(this=n.this, to=n.args["to"], safe=True))
        elif isinstance(n, exp.Neg) and not isinstance(n.this, exp.Literal):
            # -x wraps around on the least integer without ANSI mode; DuckDB's TRY gives NULL
            n.replace(exp.Anonymous(this="try_subtract",
                                    expressions=[exp.Literal.number(0), n.this]))
    return holder.this


def _translate_try(tree: exp.Expression) -> exp.Expression:
    """Replace every ``TRY(x)`` by ``x`` with NULL-on-error operators (module docstring)."""
    for node in _post_order(tree):
        if isinstance(node, exp.Try):
            node.replace(_total_operators(node.this))
    return tree


def _sum_type(node: exp.Sum) -> exp.DataType | None:
    """The DECIMAL(38, s) an integer or DECIMAL SUM argument is summed in; None for floats."""
    arg_type = node.this.type
    if arg_type is None or arg_type.is_type(exp.DataType.Type.UNKNOWN):
        raise NotSupportedError(
            f"the type of SUM argument {node.this.sql(dialect=SOURCE_DIALECT)[:60]} is unknown, "
            "so dpsql cannot make Spark sum it exactly: declare the column's type"
        )
    if arg_type.is_type(*exp.DataType.FLOAT_TYPES):
        return None
    if arg_type.is_type(*exp.DataType.INTEGER_TYPES):
        return exp.DataType.build("DECIMAL(38, 0)")
    if arg_type.is_type(exp.DataType.Type.DECIMAL):
        params = arg_type.expressions
        scale = int(params[1].name) if len(params) > 1 else 0
        return exp.DataType.build(f"DECIMAL(38, {scale})")
    raise NotSupportedError(
        f"SUM over {arg_type.sql(dialect=SOURCE_DIALECT)} is not supported on Spark: sum a "
        "numeric column"
    )


def _exact_sums(tree: exp.Expression, schema: MappingSchema) -> exp.Expression:
    """Sum integer and DECIMAL arguments in DECIMAL(38, s), as DuckDB does (module docstring)."""
    annotate_types(tree, schema=schema, dialect=SOURCE_DIALECT)
    for node in list(tree.find_all(exp.Sum)):
        wide = _sum_type(node)
        if wide is not None:
            node.set("this", exp.Cast(this=node.this, to=wide))
    return tree


def _sorted_on_one_partition(tree: exp.Expression) -> exp.Expression:
    """A SELECT ordered by its own output columns (the groups query of a partition selection,
    dpsql.execute.layout.write_selected), sorted on one partition: ``SELECT /*+
    REPARTITION(1) */ * FROM (..) AS __sorted ORDER BY ..``. Spark's global sort otherwise
    range-partitions, and its range partitioner first collects a sample of the keys to the
    driver: a job result under ``spark.driver.maxResultSize`` whose size grows with the rows,
    so the read could fail on the number of groups (a refunded, data-dependent error; the red
    team's break, tests/redteam/test_spark_collect_attacks.py). One partition needs no sample
    and gives the same rows in the same order. Anything else is left as it is."""
    order = tree.args.get("order")
    if (order is None or not isinstance(tree, exp.Select)
            or any(tree.args.get(k) for k in ("limit", "offset", "fetch"))):
        return tree  # a LIMIT applies after the ORDER BY: not moved apart
    outputs = {e.alias_or_name for e in tree.expressions}
    if not all(isinstance(o, exp.Ordered) and isinstance(o.this, exp.Column)
               and not o.this.table and o.this.name in outputs for o in order.expressions):
        return tree
    ctes = tree.args.get("with")
    tree.set("order", None)
    tree.set("with", None)
    wrapper = exp.select("*").from_(exp.alias_(exp.Subquery(this=tree), "__sorted", table=True))
    wrapper.set("hint", exp.Hint(expressions=[
        exp.Anonymous(this="REPARTITION", expressions=[exp.Literal.number(1)])]))
    wrapper.set("order", order)
    wrapper.set("with", ctes)
    return wrapper


def to_spark_sql(sql: str, schema: MappingSchema | Mapping[str, Mapping[str, str]]) -> str:
    """``sql`` (DuckDB dialect, as dpsql.rewrite generates it) as Spark SQL, given the
    {table: {column: DuckDB type}} ``schema`` of the tables it reads.

    Guarantees: the same result set on Spark with :data:`SESSION_CONF` as on DuckDB, NULL
    wherever DuckDB's ``TRY`` gives NULL, sums exact (module docstring); named parameters
    ``$p`` become ``:p``; comments are dropped; a result ordered by its output columns is
    sorted on one partition (:func:`_sorted_on_one_partition`). A construct that cannot be
    expressed faithfully raises NotSupportedError (fail closed) rather than running a
    different query.
    """
    if not isinstance(schema, MappingSchema):
        schema = MappingSchema(dict(schema), dialect=SOURCE_DIALECT)
    try:
        tree = sqlglot.parse_one(sql, read=SOURCE_DIALECT)
        tree = translate_quantiles(_exact_sums(translate_ordered(_translate_try(
            duckdb_functions(tree, schema))), schema))
        tree = _sorted_on_one_partition(tree)
        return tree.sql(dialect=TARGET_DIALECT, comments=False,
                        unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as err:
        raise NotSupportedError(
            f"the generated query cannot be translated to Spark SQL ({err}); run it on the "
            "DuckDB backend"
        ) from None
