"""Pass: parameters. Each ``?`` gets a name carrying its position in the analyst's SQL, so the
exact, domain and post-processing queries can each bind the ones they use."""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp

from dpsql.analysis.parse import DIALECT
from dpsql.analysis.trees import copy_tree

PARAM_PREFIX = "__dpsql_param_"
_USED = re.compile(rf"{PARAM_PREFIX}(\d+)")
_NUMBERED = re.compile(rf"\$?{PARAM_PREFIX}tmp(\d+)")


def number_parameters(query: exp.Expression, *, ctx: Any = None) -> exp.Expression:
    """Give each ``?`` a name carrying its position in the analyst's SQL text.

    Returns ``query`` itself (not a copy) when it has no ``?``: callers copy before mutating.
    With ``ctx`` (a :class:`~dpsql.rewrite.context.RewriteContext` whose analysed query
    ``query`` is), a query without any parameter is not walked again.
    """
    if ctx is not None and not ctx.may_contain(exp.Placeholder):
        return query
    if query.find(exp.Placeholder) is None:
        return query
    query = copy_tree(query)
    placeholders = [p for p in query.find_all(exp.Placeholder) if not p.this]
    for i, p in enumerate(placeholders):
        p.set("this", f"{PARAM_PREFIX}tmp{i}")
    # The generator writes clauses in textual order, which is the order DuckDB binds ``?``.
    text = query.sql(dialect=DIALECT)
    order = [int(m) for m in _NUMBERED.findall(text)]
    position = {tmp: pos for pos, tmp in enumerate(order)}
    for i, p in enumerate(placeholders):
        p.set("this", f"{PARAM_PREFIX}{position[i]}")
    return query


def used_params(sql: str) -> tuple[int, ...]:
    return tuple(sorted({int(m) for m in _USED.findall(sql)}))


def bind_params(positions: tuple[int, ...], params: Any) -> dict[str, object]:
    """The named parameters one generated query needs, from the analyst's qmark sequence."""
    if not positions:
        return {}
    return {f"{PARAM_PREFIX}{i}": params[i] for i in positions}
