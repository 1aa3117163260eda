"""What the rewrite passes share: the analysis, the metadata, the backend's promises about
stored data, and what the passes record for the plan (removable clamps, bound domains)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from sqlglot import exp

from dpsql.analysis.elastic import QueryAnalysis
from dpsql.metadata import Metadata, Table


class StoredData(Protocol):
    """What the backend promises about the stored data for as long as a plan is in use (the
    engine's view of :meth:`Backend.value_range` and :meth:`Backend.domain_table`)."""

    def in_bounds(self, table: str, column: str, bounds: tuple[float, float]) -> bool:
        """True only when every value ``column`` of declared base table ``table`` holds lies
        inside ``bounds``."""
        ...

    def domain_table(self, table: str, column: str) -> str | None:
        """The name of a table the backend registered (its name starts with ``__``) holding
        exactly what :func:`dpsql.rewrite.domains.scan_relation` computes for a public
        table's column, ``(__v, __o)``, and will hold while the plan is in use; None when not
        promised."""
        ...

#: a SUM clamp the data make the identity, and what it may be replaced by (the bare column; for
#: a fixed-point sum, the rounding without the CASE: dpsql.rewrite.fixed_point)
Removable = tuple[exp.Expression, exp.Expression]


@dataclass
class RewriteContext:
    """One query's rewrite: its inputs, and what the passes record along the way."""

    analysis: QueryAnalysis
    #: declared column types: let provably total comparisons go without TRY and SUM clamp in
    #: the column's own type (None: both stay conservative)
    metadata: Metadata | None = None
    stored: StoredData | None = None
    #: SUM clamps the stored data make the identity (clamps pass)
    removable: list[Removable] = field(default_factory=list)
    #: per SUM measurement summed in fixed-point steps 2^-k (dpsql.rewrite.fixed_point): its k
    #: (clamps pass; the privacy-unit pass converts its own sums with it)
    sum_exponents: dict[int, int] = field(default_factory=dict)
    #: per group key: the relation (__v, __o) of its domain (domains pass); None for a
    #: partition-selected key, whose groups come from the data (dpsql.noise.partition)
    domains: list[exp.Expression | None] = field(default_factory=list)
    #: the domain relations read no table but registered ones (domains pass): their result
    #: depends on the query text and parameters alone while the backend is open
    domains_fixed: bool = False
    #: the query with numbered parameters (parameters pass): what post-processing reads
    numbered: exp.Select | None = None
    #: table alias -> (table node, declared table) of the outer query (clamps pass)
    sources: dict[str, tuple[exp.Table, Table]] = field(default_factory=dict)
    #: the node classes of ``analysis.query`` (:meth:`may_contain`), listed on first use
    _classes: frozenset[type] | None = field(default=None, repr=False)
    #: :meth:`may_contain`'s answers, by the classes asked about
    _answers: dict[tuple[type[exp.Expression], ...], bool] = field(default_factory=dict,
                                                                   repr=False)
    #: the CTE names of ``analysis.query`` (:meth:`cte_names`), listed on first use
    _cte_names: frozenset[str] | None = field(default=None, repr=False)

    def may_contain(self, *types: type[exp.Expression]) -> bool:
        """False only when the analysed query has no node of any of ``types``: a pass looking
        for them may then skip its walk, provided no pass before it creates such nodes (the
        exact-query passes work on a copy of that query, minus its ORDER BY / LIMIT / OFFSET /
        HAVING / DISTINCT). One walk per query, shared by every pass."""
        hit = self._answers.get(types)
        if hit is None:
            if self._classes is None:
                self._classes = frozenset(type(node) for node in self.analysis.query.walk())
            hit = self._answers[types] = any(issubclass(cls, types) for cls in self._classes)
        return hit

    def cte_names(self) -> frozenset[str]:
        """The lower-case names of every CTE of the analysed query (the passes add none)."""
        if self._cte_names is None:
            self._cte_names = frozenset(
                cte.alias_or_name.lower() for cte in self.analysis.query.find_all(exp.CTE)
            ) if self.may_contain(exp.CTE) else frozenset()
        return self._cte_names
