"""Phase 2 of a correlated subquery released as a histogram (dpsql.analysis.correlated;
docs/privacy.md section 2, "Correlated scalar subqueries"): the final query's exact SQL with
the subquery's parameter replaced by a lookup of the released (noisy, hence public) values.

The lookup is ``CASE c WHEN CAST(k1 AS T) THEN CAST(v1 AS DOUBLE) ... ELSE NULL END`` over the
outer column c (T the declared type both c and the histogram's key have): for each outer row it
gives the released value of the bin whose key equals c, as the subquery's ``k = c`` would
select it, and NULL when there is none (a key outside the released bins, NULL or non-finite
noisy value: an AVG over a noisy count <= 0 is NULL), so a comparison with it is NULL and the
WHERE drops the row, as SQL does for an empty subquery. A CASE, not a subquery over VALUES:
it is a plain expression, allowed inside the TRY the totality pass puts around the comparison,
and written alike by every backend.

Contract: :func:`with_lookups` changes only the parameters it is given (every other byte of the
plan's exact SQL, with its clamps and TRYs, is unchanged), and what it writes is a function of
the released values and the SQL alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeAlias

import numpy as np
import sqlglot
from sqlglot import exp

from dpsql.analysis.correlated import Lookup
from dpsql.analysis.domains import typed_value
from dpsql.analysis.parse import DIALECT
from dpsql.analysis.trees import copy_tree
from dpsql.rewrite.parameters import PARAM_PREFIX, used_params
from dpsql.rewrite.plan import ExecutionPlan

__all__ = ["MAX_LOOKUP", "lookup_case", "with_lookups"]

#: most bins a histogram read as a lookup may have (its CASE lists each): checked before the
#: charge on the domain's size (public data); restrict the outer query's public table instead
MAX_LOOKUP = 10_000

#: a released histogram as the CASE expression that replaces its parameter (what
#: :func:`lookup_case` builds and :func:`with_lookups` reads; opaque outside the rewrite)
LookupSQL: TypeAlias = exp.Expression


def _number(value: Any) -> exp.Expression:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool):
        return exp.Cast(this=exp.null(), to=exp.DataType.build("DOUBLE"))
    number = float(value)
    if not math.isfinite(number):
        return exp.Cast(this=exp.null(), to=exp.DataType.build("DOUBLE"))
    return exp.Cast(this=exp.Literal.number(repr(number)), to=exp.DataType.build("DOUBLE"))


def lookup_case(lookup: Lookup, rows: Sequence[Sequence[Any]]) -> LookupSQL:
    """The lookup of the histogram's released ``rows`` (key, value) for the outer column (module
    docstring); with no row (or only NULL keys), one branch on a NULL key, which nothing
    matches, so the expression is typed as the real one (the binder check before the charge
    uses it)."""
    ifs = []
    for key, value in rows:
        if isinstance(key, np.generic):
            key = key.item()
        if key is None:
            continue  # k = c is never true for a NULL key
        ifs.append(exp.If(this=typed_value(key, lookup.key_type), true=_number(value)))
    if not ifs:
        ifs.append(exp.If(this=exp.Cast(this=exp.null(),
                                        to=exp.DataType.build(lookup.key_type, dialect=DIALECT)),
                          true=_number(None)))
    return exp.Case(this=copy_tree(lookup.column), ifs=ifs, default=_number(None))


def with_lookups(plan: ExecutionPlan, lookups: Mapping[int, LookupSQL]) -> ExecutionPlan:
    """``plan`` with each parameter position in ``lookups`` replaced by its expression."""
    tree = sqlglot.parse_one(plan.exact_sql, dialect=DIALECT)
    names = {f"{PARAM_PREFIX}{i}": node for i, node in lookups.items()}
    for p in list(tree.find_all(exp.Placeholder)):
        node = names.get(p.this)
        if node is not None:
            p.replace(exp.Paren(this=copy_tree(node)))
    sql = tree.sql(dialect=DIALECT)
    return replace(plan, exact_sql=sql, exact_params=used_params(sql), canonical_sql="")
