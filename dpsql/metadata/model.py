"""The metadata model: the validated, frozen description of tables the analysis reads.

Names are stored lower-case (DuckDB identifiers are case-insensitive); a schema prefix such as
``public.orders`` names the same table as ``orders``. Columns of public tables are always
releasable, with the column itself as their domain unless another is declared (the readers,
:mod:`dpsql.metadata.reader`, apply this when they build the model).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dpsql.errors import ProgrammingError


@dataclass(frozen=True)
class Domain:
    """The declared set of values a group key may take: a literal list or a public table's column.

    Exactly one of ``values`` or (``table``, ``column``) is set.
    """

    values: tuple[object, ...] | None = None
    table: str | None = None
    column: str | None = None


#: the largest max frequency metadata may declare: more rows than a table can hold (DuckDB and
#: Spark count rows in 64 bits), and small enough that every sensitivity built from it is a
#: finite double or a refusal read from the bounds (a larger one was an OverflowError in the
#: analysis: an error that depended on a private max frequency)
MAX_FREQ = 2**63


@dataclass(frozen=True)
class Column:
    """One column. ``max_freq`` is mf(a): the most rows sharing one value (None: unknown).

    ``bounds`` = (lower, upper) clamps SUM/AVG arguments. ``releasable`` lets the column be a
    GROUP BY key (columns of public tables are always releasable). ``date_bounds`` = (first,
    last day) of a DATE / TIMESTAMP column (written ``bounds: ['1992-01-01', '1998-12-31']``):
    public, like every bound; group keys computed from the column (``EXTRACT(year FROM d)``)
    take their bins from the days in it (dpsql.analysis.derived_keys), nothing is clamped.
    ``partition_selection`` (a releasable private column without a domain): the owner's
    statement that a value may be published when enough rows share it; GROUP BY takes its bins
    from the data by DP partition selection (dpsql.noise.partition). A declared domain keeps
    priority (it needs no delta and fills empty bins).
    """

    name: str
    max_freq: int | None = None
    bounds: tuple[float, float] | None = None
    releasable: bool = False
    domain: Domain | None = None
    type: str | None = None
    date_bounds: tuple[datetime.date, datetime.date] | None = None
    partition_selection: bool = False

    def __post_init__(self) -> None:
        mf = self.max_freq
        if mf is not None and not (isinstance(mf, int) and 1 <= mf <= MAX_FREQ):
            raise ValueError(f"column {self.name!r}: max_freq must be an integer in "
                             f"[1, 2^63], got {mf!r}")


@dataclass(frozen=True)
class UnitPath:
    """How a private table's rows reach the privacy unit (issue #17, docs/privacy.md "Privacy
    units"): ``column`` holds the unit's id itself (``to_table`` None: ``unit: o_custkey``), or
    references ``to_table.to_column``, a key of a table with its own path (``unit: {via:
    l_orderkey, to: orders.o_orderkey}``). A row belongs to the unit its path reaches: a
    direct path's non-NULL value is that unit's id (whether or not the unit table has the
    row); a row whose path is NULL, or whose via key matches no row, belongs to none."""

    column: str
    to_table: str | None = None
    to_column: str | None = None

    @property
    def direct(self) -> bool:
        return self.to_table is None


@dataclass(frozen=True)
class PrivacyUnit:
    """What dpsql protects when declared: one row of ``table`` (its id is ``column``) with every
    row linked to it through the tables' unit paths (FK cascade), instead of one row.

    The bounds are public parameters of the mechanisms, never facts the privacy rests on:
    ``max_contribution`` is R2T's GS and ``level_base`` (B >= 2) its grid (the truncation levels
    are floor(B^j) rows up to the first >= GS: 2, 4, .., 2^ceil(log2 GS) by default; a unit
    contributing more is truncated, not trusted); ``max_groups`` (kappa) is how many
    groups of one GROUP BY a unit may contribute to and ``max_rows_per_group`` how many rows
    it may contribute to one group (both enforced in the executed query). ``max_sum`` is R2T's
    GS for a SUM, in value units (its levels are floor(B^j) value units up to the first >= it;
    None: max_contribution times the SUM's per-row bound; dpsql.units.grid)."""

    table: str
    column: str
    max_contribution: int = 2**20
    max_groups: int = 1
    max_rows_per_group: int = 1
    level_base: float = 2.0
    max_sum: int | None = None


@dataclass(frozen=True)
class SampleAggregate:
    """The owner's permission to answer ``SAMPLE_AGGREGATE(expr, lo, hi)`` over this private
    table (dpsql.sample_aggregate; docs/privacy.md, "Sample-and-aggregate"): its rows are
    split into ``blocks`` disjoint blocks by a keyed hash of column ``by`` (None: of every
    declared column), the query runs per block, and the clamped block answers are averaged
    with Laplace noise. Both are public decisions (they set the noise, not its privacy)."""

    blocks: int
    by: str | None = None


@dataclass(frozen=True)
class Table:
    """One table. Public tables have stability 0. ``source`` is a CSV/Parquet path or glob the
    owner-side backend registers as a view (None: the table lives in the database). ``unit``
    is the table's path to the privacy unit (private tables, with a declared unit only).
    ``sample_aggregate``: the owner enabled sample-and-aggregate on it (None: not enabled)."""

    name: str
    columns: Mapping[str, Column]
    public: bool = False
    rows: int | None = None
    source: str | None = None
    unit: UnitPath | None = None
    sample_aggregate: SampleAggregate | None = None
    #: with several privacy units (``Metadata.extra_units``): the table's path to each unit
    #: table it links to, keyed by that table's name (``unit`` is then the path to the first
    #: unit, None when it has none); empty with one unit (dpsql.metadata.unit_multi)
    unit_paths: Mapping[str, UnitPath] = field(default_factory=dict)

    def column(self, name: str) -> Column:
        try:
            return self.columns[name.lower()]
        except KeyError:
            raise ProgrammingError(
                f"column {name!r} is not declared for table {self.name!r}; "
                f"declared columns: {', '.join(self.columns)}"
            ) from None


@dataclass(frozen=True)
class Metadata:
    """All declared tables. Only these tables and columns are reachable by queries."""

    tables: Mapping[str, Table]
    #: path of the privacy ledger every query against this database is charged to (optional)
    ledger: str | None = None
    #: the owner's version of the data, bumped by hand when the data change (optional; part of
    #: the answer-cache key, with the files' identities: see dpsql.backends.data_version)
    data_version: str | None = None
    #: the file this metadata came from (for error messages and relative paths)
    path: Path | None = field(default=None, compare=False)
    #: with a privacy unit declared, neighbouring databases differ in one unit with its FK
    #: cascade (dpsql.units); None: in one row (the default, elastic sensitivity)
    privacy_unit: PrivacyUnit | None = None
    #: further unit tables (R2T's several private relations, dpsql.metadata.unit_multi):
    #: neighbours differ in one unit of ANY declared unit table with its FK cascade; their
    #: bounds are ``privacy_unit``'s (only table and column are their own)
    extra_units: tuple[PrivacyUnit, ...] = ()

    def table(self, name: str) -> Table:
        """The table named ``name`` (case-insensitive; a ``schema.`` prefix is ignored)."""
        key = name.lower().rsplit(".", 1)[-1]
        try:
            return self.tables[key]
        except KeyError:
            raise ProgrammingError(
                f"table {name!r} is not declared in the metadata; "
                f"declared tables: {', '.join(self.tables) or '(none)'}"
            ) from None

    def sqlglot_schema(self) -> dict[str, dict[str, str]]:
        """{table: {column: type}} for sqlglot's qualify / annotate_types."""
        return {
            t.name: {c.name: (c.type or "UNKNOWN") for c in t.columns.values()}
            for t in self.tables.values()
        }


def _table_key(name: str) -> str:
    """Canonical table name: lower-case, schema/namespace prefix dropped (as Metadata.table)."""
    return name.lower().rsplit(".", 1)[-1]


def _has_scheme(path: str) -> bool:
    return "://" in path
