"""Which translation rules of dpsql/backends/spark_sql.py a compiled Spark query uses (not a
test module).

Spark runs a query in ~0.4 CPU-s of JVM time, so the suites that run a corpus on both backends
(tests/backends/test_spark.py, tests/rewrite/test_totality.py) compile EVERY case for Spark (the
translation, no JVM job) but execute a fixed subset on Spark. :func:`rules_used` lets those
suites check that their subset still executes every rule the whole corpus's translation uses,
so a new case that brings a new rule fails until it joins the subset.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: rule -> a pattern of the Spark SQL it writes (dpsql/backends/spark_sql.py's docstring)
RULES: dict[str, re.Pattern[str]] = {
    # inside TRY(...): NULL-on-error operators instead of ANSI-off wrapping
    "try_add": re.compile(r"\bTRY_ADD\(", re.I),
    "try_subtract": re.compile(r"\bTRY_SUBTRACT\((?!0,)", re.I),
    "negation as try_subtract(0, x)": re.compile(r"\bTRY_SUBTRACT\(0,", re.I),
    "try_multiply": re.compile(r"\bTRY_MULTIPLY\(", re.I),
    "try_divide": re.compile(r"\bTRY_DIVIDE\(", re.I),
    "TRY_CAST": re.compile(r"\bTRY_CAST\(", re.I),
    # integer division and modulo: NULL on a zero divisor with ANSI mode off
    "integer division (DIV)": re.compile(r"\sDIV\s", re.I),
    "modulo": re.compile(r"\s%\s"),
    # exact sums: integer and DECIMAL arguments summed as DECIMAL(38, s)
    "exact integer SUM": re.compile(r"\bSUM\(CAST\(.*? AS DECIMAL\(38, 0\)\)\)", re.I),
    "exact DECIMAL SUM": re.compile(r"\bSUM\(CAST\(.*? AS DECIMAL\(38, [1-9]\d*\)\)\)", re.I),
    # named parameters $p become :p
    "named parameter": re.compile(r":__dpsql_param_\d"),
    # quantiles over the sorted values (dpsql/backends/spark_quantiles.py)
    "quantile": re.compile(r"\bTRANSFORM\(ARRAY\(ARRAY_SORT\(", re.I),
    # ordered floating-point aggregates as folds over sorted values (spark_ordered.py)
    "ordered aggregate": re.compile(r"\bAGGREGATE\(ARRAY_SORT\(", re.I),
}


def rules_used(texts: Iterable[str]) -> set[str]:
    """The names of the :data:`RULES` whose pattern occurs in any of the Spark SQL ``texts``."""
    return {name for name, pattern in RULES.items() for text in texts if pattern.search(text)}
