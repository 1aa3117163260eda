"""Elastic stability and mf_k over a query's relational shape; ES(k) per released aggregate.

This implements docs/privacy.md section 2 (FLEX, Johnson-Near-Song 2018, with FLEX's bugs fixed).
Terminology: a *relation*'s stability S(k) bounds how many of its rows one changed base row
(at distance k from the real database) can remove, and how many it can add; mf_k(a) bounds how
many of its rows share one value of column a. ``None`` stands for an unknown (infinite) mf and
never enters arithmetic.

Contract of :func:`analyze`: for every measurement it returns ES(k) with
ES(k) >= max over databases y at distance <= k of the local sensitivity of that aggregate at y
(for SUM, of the sum clamped to the declared bounds), provided the metadata's max frequencies
and column types are true for the real database. Every join / IN / EXISTS key equality must
compare its stored values exactly (dpsql.analysis.keytypes). Queries no rule covers are
rejected with the error classes of dpsql.errors, before anything runs.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.analysis.measure import build_analysis
from dpsql.analysis.model import (
    ColumnFacts,
    Derivation,
    GroupKey,
    Measurement,
    OutputColumn,
    QueryAnalysis,
    Relation,
)
from dpsql.analysis.parse import parse_query
from dpsql.analysis.relations import Analyzer
from dpsql.metadata import Metadata

# The analysis lives in: model (data model), rules (one function per rule of
# docs/privacy.md section 2), relations (tables, CTEs, subqueries, UNION, FROM / WHERE), joins
# (joins, semi-joins, key types), measure (measurements, group keys, output columns), checks
# (shared syntax checks and their messages). This module is the entry point.
__all__ = [
    "ColumnFacts", "Derivation", "GroupKey", "Measurement", "OutputColumn", "QueryAnalysis",
    "Relation", "analyze", "analyze_query",
]


def analyze(
    sql: str, metadata: Metadata, *, allow_unknown_key_types: bool = False
) -> QueryAnalysis:
    """Analyse ``sql``: the measurements to noise, with ES(k) each, and the output columns.

    Precondition: ``metadata`` max frequencies and column types are true for the database
    queried (the Engine fills missing types from the database, see dpsql.backends.types).
    Guarantee: see the module docstring; raises a ``NotSupportedError`` subclass or
    ``ProgrammingError`` for anything without a sound rule, including a join / IN / EXISTS key
    whose type is unknown. ``allow_unknown_key_types=True`` (owner-only explain without a
    database, never a release) lists such keys in ``unchecked_key_types`` instead.
    """
    query = parse_query(sql, metadata)
    return analyze_query(query, metadata, allow_unknown_key_types=allow_unknown_key_types)


def analyze_query(
    query: exp.Query, metadata: Metadata, *, allow_unknown_key_types: bool = False
) -> QueryAnalysis:
    """Analyse an already parsed and qualified query (see :func:`analyze`)."""
    analyzer = Analyzer(metadata, allow_unknown_key_types)
    rel = analyzer.outer_relation(query)
    assert isinstance(query, exp.Select)  # outer_relation rejects anything else
    return build_analysis(query, rel, analyzer, metadata)
