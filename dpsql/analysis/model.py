"""The analysis's data model: what a relation is known to be, and what a query releases.

A *relation* (:class:`Relation`) carries its elastic stability S(k), the facts known about each
of its columns (:class:`ColumnFacts`: mf_k, clamp bounds, origin, type), its private ancestor
tables and the derivation tree shown by ``dpsql explain``. A :class:`QueryAnalysis` is the
result of analysing one query: its :class:`Measurement` s (one noised COUNT or SUM each, with
ES(k)), :class:`GroupKey` s and :class:`OutputColumn` s. ``None`` stands for an unknown
(infinite) mf and never enters arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.analysis.kexpr import KExpr
from dpsql.metadata import Domain

if TYPE_CHECKING:
    from dpsql.analysis.derived_keys import DerivedDomain
    from dpsql.units.analysis import UnitRelease


@dataclass(frozen=True)
class ColumnFacts:
    """What the analysis knows about one column of a relation."""

    mf: KExpr | None  # mf_k; None = unknown (no max frequency, or derived)
    bounds: tuple[float, float] | None = None  # declared clamp bounds, kept by plain copies
    origin: tuple[str, str] | None = None  # (table, column) when an unmodified base column
    from_aggregate: bool = False  # computed by an aggregate inside a subquery
    type: str | None = None  # SQL type (declared or from the database); None = unknown
    #: a computed column whose values range over bins derivable from public metadata
    #: (dpsql.analysis.derived_keys): what a GROUP BY over it takes its bins from
    derived_domain: DerivedDomain | None = None
    #: a COUNT computed per group of a grouped subquery (an integer, no owner-held content):
    #: a GROUP BY outside may take its groups by DP partition selection (measure.py)
    count: bool = False

    @staticmethod
    def derived(from_aggregate: bool = False, type: str | None = None,
                count: bool = False) -> ColumnFacts:
        return ColumnFacts(mf=None, from_aggregate=from_aggregate, type=type, count=count)

    def with_mf(self, mf: KExpr | None) -> ColumnFacts:
        """These facts with mf_k ``mf`` (``dataclasses.replace`` without its generic cost;
        the same object when ``mf`` is already this one's)."""
        if mf is self.mf:
            return self
        return ColumnFacts(mf, self.bounds, self.origin, self.from_aggregate, self.type,
                           self.derived_domain, self.count)


@dataclass(frozen=True)
class Derivation:
    """One node of the owner-facing derivation tree (dpsql explain)."""

    label: str
    stability: KExpr
    details: tuple[str, ...] = ()
    children: tuple[Derivation, ...] = ()


@dataclass(frozen=True)
class Relation:
    """A relation's stability, column facts and private ancestor tables.

    ``columns`` keys are ``(alias, column)`` inside a FROM clause and ``("", column)`` for the
    output of a subquery.
    """

    stability: KExpr
    columns: Mapping[tuple[str, str], ColumnFacts]  # read-only (joins compute it lazily)
    ancestors: frozenset[str]
    tree: Derivation

    def facts(self, key: tuple[str, str]) -> ColumnFacts:
        return self.columns[key]


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Measurement:
    """One exact aggregate that receives noise: COUNT or SUM (AVG is split into both)."""

    index: int
    function: str  # "COUNT" or "SUM"
    node: exp.Expression  # the qualified aggregate, e.g. COUNT(DISTINCT o.x) or SUM(o.cost)
    sensitivity: KExpr  # ES(k)
    bounds: tuple[float, float] | None = None  # SUM: clamp bounds of the argument
    label: str = ""

    @property
    def integer(self) -> bool:
        return self.function == "COUNT"


@dataclass(frozen=True)
class GroupKey:
    """A GROUP BY key and the declared domain of values its bins are filled from.

    A computed key (``node`` not a plain base column) has ``derived_domain`` set and an empty
    ``domain``: its bins are computed from it by the domain query."""

    index: int
    node: exp.Expression
    domain: Domain
    name: str
    #: the declared (or database-filled) type of the base column the key comes from
    type: str | None = None
    derived_domain: DerivedDomain | None = None
    #: a column the owner marked ``partition_selection`` (no domain): its bins come from the
    #: data and are released by DP partition selection (dpsql.noise.partition)
    partition: bool = False


@dataclass(frozen=True)
class OutputColumn:
    """One column of the analyst's result, in SELECT order."""

    name: str
    kind: str  # "group_key" | "aggregate" | "expression"
    function: str | None  # COUNT / SUM / AVG for a single-aggregate column
    measurements: tuple[int, ...] = ()
    node: exp.Expression | None = None

    @property
    def bare_aggregate(self) -> bool:
        """True for a column that is one COUNT or SUM as written (``COUNT(*) AS n``), with or
        without a FILTER clause."""
        inner = self.node.this if isinstance(self.node, exp.Alias) else self.node
        if isinstance(inner, exp.Filter):
            inner = inner.this
        return isinstance(inner, (exp.Count, exp.Sum))


@dataclass(frozen=True)
class QueryAnalysis:
    """The privacy analysis of one query: what to measure, with which ES(k)."""

    query: exp.Select
    columns: tuple[OutputColumn, ...]
    measurements: tuple[Measurement, ...]
    group_keys: tuple[GroupKey, ...]
    tree: Derivation
    max_frequencies_used: tuple[str, ...] = field(default=())
    #: key equalities whose types were unknown (only with allow_unknown_key_types=True)
    unchecked_key_types: tuple[str, ...] = field(default=())
    #: with a partition-selected group key: the constant stability S of the grouped relation
    #: (what the selection's threshold depends on); None without one
    selection_stability: float | None = None
    #: under a privacy unit (dpsql.units): the unit, how each row's unit is computed, and
    #: R2T's truncated sums; None under row-level privacy
    unit: UnitRelease | None = None

    @property
    def partition_selection(self) -> bool:
        """Whether the released groups are chosen by DP partition selection."""
        return self.selection_stability is not None

