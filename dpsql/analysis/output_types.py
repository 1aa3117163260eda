"""Which "honest numbers" rule finishes each output column (dpsql.execute.typed applies them),
chosen at prepare time from the SQL and the public metadata alone, never from a value: a bare
COUNT is a count, a bare SUM of an integer or DECIMAL base column keeps that type, a plain key
is described with its declared type, everything else is left as computed (docs/privacy.md,
section 2's "honest numbers" row)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from sqlglot import exp
from sqlglot.optimizer.scope import build_scope

from dpsql.analysis.checks import key_of
from dpsql.analysis.keytypes import normalise
from dpsql.analysis.model import OutputColumn, QueryAnalysis
from dpsql.metadata import Metadata

#: DuckDB's widest DECIMAL, the type of SUM over a DECIMAL column
DECIMAL_DIGITS = 38


@dataclass(frozen=True)
class OutputRule:
    """How one output column is finished: ``kind`` is "count", "integer_sum",
    "decimal_sum", "key" or "as_is"; ``type`` the type name it is described with (None: the
    post-processing's); ``scale`` a decimal sum's places."""

    kind: str = "as_is"
    type: str | None = None
    scale: int = 0


AS_IS = OutputRule()


def _base_type(column: exp.Expression, query: exp.Select, metadata: Metadata) -> str | None:
    """The declared type of ``column`` when it reads a base table of the top-level FROM
    directly (not a CTE or a derived table), else None."""
    if not isinstance(column, exp.Column) or not column.table:
        return None
    try:
        scope = build_scope(query)
    except Exception:  # sqlglot's scope builder on an unusual tree: no rule
        return None
    source = None if scope is None else scope.sources.get(column.table)
    if not isinstance(source, exp.Table):
        return None
    table = metadata.tables.get(source.name.lower())
    if table is None:
        return None
    col = table.columns.get(column.name.lower())
    return None if col is None else col.type


def _rule(col: OutputColumn, analysis: QueryAnalysis, metadata: Metadata,
          keys: dict[tuple[str, str] | str, str | None]) -> OutputRule:
    inner = col.node.this if isinstance(col.node, exp.Alias) else col.node
    if inner is None:
        return AS_IS
    if col.kind == "group_key":
        declared = keys.get(key_of(inner))
        return OutputRule("key", declared) if declared else AS_IS
    if col.kind != "aggregate" or not col.bare_aggregate or len(col.measurements) != 1:
        return AS_IS
    agg = inner.this if isinstance(inner, exp.Filter) else inner
    if isinstance(agg, exp.Count):
        return OutputRule("count", "BIGINT")
    if not isinstance(agg, exp.Sum) or agg.args.get("distinct"):
        return AS_IS
    return _sum_rule(_base_type(agg.this, analysis.query, metadata))


@lru_cache(maxsize=256)
def _sum_rule(type_text: str | None) -> OutputRule:
    """The rule of a bare SUM over a column declared ``type_text``: a pure function of the
    text (memoised; the rules are frozen)."""
    dtype = normalise(type_text)
    if dtype is None:
        return AS_IS
    if dtype.this in exp.DataType.INTEGER_TYPES:
        return OutputRule("integer_sum", "BIGINT")
    if dtype.this == exp.DataType.Type.DECIMAL:
        sizes = [e.sql() for e in dtype.expressions]
        scale = int(sizes[1]) if len(sizes) > 1 and sizes[1].isdigit() else 0
        return OutputRule("decimal_sum", f"DECIMAL({DECIMAL_DIGITS},{scale})", scale)
    return AS_IS


def _key_type(declared: str | None) -> str | None:
    """A plain key's description: its declared type as written (upper case), when it is a
    readable type without a collation; else None (the post-processing's)."""
    if declared is None or normalise(declared) is None:
        return None
    return declared.strip().upper()


def output_rules(analysis: QueryAnalysis, metadata: Metadata) -> tuple[OutputRule, ...]:
    """One rule per output column of ``analysis`` (module docstring): a function of the SQL
    and the metadata only. ``metadata`` should be the session's (types filled from the
    database)."""
    keys: dict[tuple[str, str] | str, str | None] = {
        key_of(k.node): _key_type(k.type) for k in analysis.group_keys
            if isinstance(k.node, exp.Column) and k.derived_domain is None}
    return tuple(_rule(c, analysis, metadata, keys) for c in analysis.columns)
