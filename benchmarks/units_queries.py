"""The ``units`` part's queries and privacy-unit metadata (issue #17, "Measured").

**R2T's TPC-H queries** (:data:`R2T`): hkustDB/Race-to-the-Top's ``Query/Q*.txt`` (the SIGMOD
2022 paper's experiment), rewritten into dpsql's SQL over the same joins. Their queries join an
``ids`` table (``id1.i_id = supplier.s_id AND id2.i_id = customer.c_id``) only to mark which
relations are their *primary private relations*; the ids are not TPC-H columns and the join
does not filter, so it is dropped (the exact answers on dbgen's SF1 are the ones their
``Result/TPCH/R2T_Q*.txt`` list). Everything else is their text, lower-cased.

Their primary private relations (``Query/*_key.txt``, ``sc.txt``, ``so.txt``): customer (Q3,
Q10, Q18), orders (Q12), supplier (Q11, Q20), customer AND supplier (Q5, Q7, Q8) and orders AND
supplier (Q21). Every query runs with **customer** as the unit and supplier, partsupp public
(``schemas/tpch-units.yaml``): for the queries that touch supplier that protects less than R2T
did (a supplier's rows are released as public data), and Q11, which reads supplier, partsupp
and nation only, reads no private row at all (exact, free). Every query whose R2T private
relations are not customer alone also runs under exactly R2T's: one other table (Q11, Q12, Q20;
:func:`unit_metadata`) or two unit tables (Q5, Q7, Q8, Q21; :func:`units_metadata`,
dpsql.units.multi's max-flow truncation).

**R2T's published errors** (:data:`R2T_FIGURES`): epsilon 0.8, beta 0.1, GS 10^6 at SF1, as
quoted in issue #17 (``Result/TPCH/R2T_Q*.txt``'s epsilon-0.8 lines divided by the answer).
Their statistic: over 10 runs, the mean absolute error of the 6 runs left after dropping the 2
smallest and the 2 largest (``Script/CollectResultsTPCH.py``).

**FLEX's five** (:data:`benchmarks.queries.FLEX`) run with customer as the unit, with the
owner's kappa (``max_groups``) and C (``max_rows_per_group``) of :data:`FLEX_UNIT`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dpsql.metadata import Metadata, PrivacyUnit, UnitPath, dump_metadata, loads_metadata

#: R2T's published relative errors at epsilon 0.8, SF1 (issue #17)
R2T_FIGURES = {"Q3": 0.0025, "Q5": 0.0163, "Q7": 0.0061, "Q8": 0.0192, "Q10": 0.0017,
               "Q11": 0.0182, "Q12": 0.00023, "Q18": 0.0013, "Q20": 0.0058, "Q21": 0.0065}
R2T_EPSILON = 0.8
R2T_BETA = 0.1  # dpsql.units.noise.BETA: the same
#: GS: R2T used 10^6; dpsql's default levels are powers of two, so 2^20
#: (schemas/tpch-units.yaml)
GS = 2**20
#: The grid R2T's code races (hkustDB/Race-to-the-Top, ``Code/R2TSJF.py``, ``RunAlgorithm``:
#: ``base = 5.5``, ``tau = 5.5^i`` for ``i = 1..int(log_5.5(G))``, G = 10^6 by default): 8
#: levels, the top one 5.5^8 ~ 837,339 (below G). dpsql declares exactly that grid, floored to
#: whole rows: ``levels: {base: 5.5}`` with max_contribution = floor(5.5^8), so its levels are
#: 5, 30, 166, 915, 5032, 27680, 152243, 837339 (times b for a SUM).
R2T_CODE_BASE = 5.5
R2T_CODE_GS = 837339


@dataclass(frozen=True)
class R2TQuery:
    name: str
    sql: str
    #: R2T's primary private relations for this query
    r2t_private: tuple[str, ...]


R2T: tuple[R2TQuery, ...] = (
    R2TQuery("Q3", "SELECT COUNT(*) FROM customer, orders, lineitem "
             "WHERE o_custkey = c_custkey AND l_orderkey = o_orderkey "
             "AND o_orderdate < DATE '1997-01-01' AND l_shipdate > DATE '1994-01-01'",
             ("customer",)),
    R2TQuery("Q5", "SELECT COUNT(*) FROM supplier, lineitem, orders, customer, nation, region "
             "WHERE s_suppkey = l_suppkey AND l_orderkey = o_orderkey "
             "AND o_custkey = c_custkey AND c_nationkey = n_nationkey "
             "AND n_nationkey = s_nationkey AND r_regionkey = n_regionkey",
             ("customer", "supplier")),
    R2TQuery("Q7", "SELECT SUM(l_extendedprice * (1 - l_discount) / 1000) "
             "FROM nation AS n1, nation AS n2, customer, orders, lineitem, supplier "
             "WHERE n1.n_nationkey = c_nationkey AND n2.n_nationkey = s_nationkey "
             "AND c_custkey = o_custkey AND o_orderkey = l_orderkey AND l_suppkey = s_suppkey",
             ("customer", "supplier")),
    R2TQuery("Q8", "SELECT COUNT(*) "
             "FROM nation AS n1, nation AS n2, customer, orders, lineitem, supplier, region "
             "WHERE n1.n_nationkey = c_nationkey AND n2.n_nationkey = s_nationkey "
             "AND c_custkey = o_custkey AND o_orderkey = l_orderkey AND l_suppkey = s_suppkey "
             "AND n1.n_regionkey = r_regionkey "
             "AND o_orderdate >= DATE '1995-01-01' AND o_orderdate <= DATE '1996-12-31'",
             ("customer", "supplier")),
    R2TQuery("Q10", "SELECT COUNT(*) FROM orders, customer, nation "
             "WHERE c_custkey = o_custkey AND c_nationkey = n_nationkey", ("customer",)),
    R2TQuery("Q11", "SELECT SUM(ps_supplycost * ps_availqty / 1000000) "
             "FROM nation, supplier, partsupp "
             "WHERE ps_suppkey = s_suppkey AND s_nationkey = n_nationkey", ("supplier",)),
    R2TQuery("Q12", "SELECT COUNT(*) FROM orders, lineitem WHERE o_orderkey = l_orderkey",
             ("orders",)),
    R2TQuery("Q18", "SELECT SUM(l_quantity) FROM customer, orders, lineitem "
             "WHERE c_custkey = o_custkey AND o_orderkey = l_orderkey", ("customer",)),
    R2TQuery("Q20", "SELECT COUNT(*) FROM supplier, nation, partsupp, lineitem "
             "WHERE l_partkey = ps_partkey AND l_suppkey = ps_suppkey "
             "AND s_nationkey = n_nationkey AND s_suppkey = ps_suppkey", ("supplier",)),
    R2TQuery("Q21", "SELECT COUNT(*) FROM nation, supplier, lineitem, orders "
             "WHERE s_suppkey = l_suppkey AND o_orderkey = l_orderkey "
             "AND s_nationkey = n_nationkey", ("orders", "supplier")),
)

#: unit table -> (its id column, every other private table's path to it): TPC-H's foreign keys
UNITS: dict[str, tuple[str, dict[str, UnitPath]]] = {
    "customer": ("c_custkey", {"orders": UnitPath("o_custkey"),
                               "lineitem": UnitPath("l_orderkey", "orders", "o_orderkey")}),
    "orders": ("o_orderkey", {"lineitem": UnitPath("l_orderkey")}),
    "supplier": ("s_suppkey", {"partsupp": UnitPath("ps_suppkey"),
                               "lineitem": UnitPath("l_suppkey")}),
}


def unit_metadata(metadata: Metadata, table: str, **bounds: int) -> Metadata:
    """``metadata`` (row-level TPC-H metadata, e.g. schemas/tpch.yaml) with ``table`` as the
    privacy unit (:data:`UNITS`: its id and every path to it); every other private table is made
    public. ``bounds``: PrivacyUnit's max_contribution (default :data:`GS`), max_groups,
    max_rows_per_group. Written and read back as YAML, so dpsql's loader validates the paths.
    With ``table="customer"`` on schemas/tpch.yaml this is schemas/tpch-units.yaml (a test
    holds that)."""
    column, paths = UNITS[table]
    tables = {}
    for name, t in metadata.tables.items():
        if name == table:
            t = dataclasses.replace(t, public=False, unit=UnitPath(column))
        elif name in paths:
            t = dataclasses.replace(t, public=False, unit=paths[name])
        elif not t.public:
            t = dataclasses.replace(t, public=True, unit=None)
        tables[name] = t
    bounds.setdefault("max_contribution", GS)
    unit = PrivacyUnit(table, column, **bounds)
    out = dataclasses.replace(metadata, tables=tables, privacy_unit=unit)
    return loads_metadata(dump_metadata(out), f"<TPC-H metadata with {table} as the unit>")


def units_metadata(metadata: Metadata, tables: tuple[str, ...], **bounds: int) -> Metadata:
    """``metadata`` (row-level TPC-H metadata) with several unit tables (R2T's private relations
    of Q5, Q7, Q8: customer and supplier; Q21: orders and supplier): each table in
    :data:`UNITS` that links to one of them gets its path to each, every other private table is
    made public. One table is :func:`unit_metadata`. Written and read back as YAML, so dpsql's
    loader validates the paths (dpsql.metadata.unit_multi)."""
    if len(tables) == 1:
        return unit_metadata(metadata, tables[0], **bounds)
    paths: dict[str, dict[str, UnitPath]] = {}
    for unit in tables:
        column, linked = UNITS[unit]
        paths.setdefault(unit, {})[unit] = UnitPath(column)
        for name, path in linked.items():
            paths.setdefault(name, {})[unit] = path
    tables_out = {}
    for name, t in metadata.tables.items():
        if name in paths:
            own = paths[name]
            t = dataclasses.replace(t, public=False, unit=own.get(tables[0]), unit_paths=own)
        elif not t.public:
            t = dataclasses.replace(t, public=True, unit=None)
        tables_out[name] = t
    bounds.setdefault("max_contribution", GS)
    first = PrivacyUnit(tables[0], UNITS[tables[0]][0], **bounds)
    extra = tuple(dataclasses.replace(first, table=u, column=UNITS[u][0]) for u in tables[1:])
    out = dataclasses.replace(metadata, tables=tables_out, privacy_unit=first, extra_units=extra)
    return loads_metadata(dump_metadata(out), f"<TPC-H metadata with units {tables}>")


def with_r2t_grid(metadata: Metadata) -> Metadata:
    """``metadata`` (with a privacy unit) racing R2T's code's levels (:data:`R2T_CODE_BASE`,
    :data:`R2T_CODE_GS`), written and read back so the loader validates the grid. R2T's GS
    bounds a unit's SUM in value units too (its code truncates each unit's summed value at
    5.5^i), so ``max_sum`` is the same top: a SUM's levels are 5, 30, .., 837,339 value units
    (dpsql.units.grid)."""
    assert metadata.privacy_unit is not None
    unit = dataclasses.replace(metadata.privacy_unit, max_contribution=R2T_CODE_GS,
                               level_base=R2T_CODE_BASE, max_sum=R2T_CODE_GS)
    extra = tuple(dataclasses.replace(unit, table=u.table, column=u.column)
                  for u in metadata.extra_units)
    out = dataclasses.replace(metadata, privacy_unit=unit, extra_units=extra)
    return loads_metadata(dump_metadata(out), "<TPC-H metadata on R2T's level grid>")


def with_bounds(metadata: Metadata, max_groups: int, max_rows_per_group: int) -> Metadata:
    """``metadata`` (with a privacy unit) with the owner's kappa and C for one GROUP BY."""
    assert metadata.privacy_unit is not None
    unit = dataclasses.replace(metadata.privacy_unit, max_groups=max_groups,
                               max_rows_per_group=max_rows_per_group)
    return dataclasses.replace(metadata, privacy_unit=unit)


@dataclass(frozen=True)
class UnitChoice:
    """The owner's kappa (max_groups) and C (max_rows_per_group) for one grouped query, and
    why: from the TPC-H specification (clause 4.2.3: 1.5M orders per SF on the 2/3 of the
    customers that order, so ~15 orders and ~60 lineitems per ordering customer over the
    ~79 months of order dates; 1-7 lines per order, uniform; 25 nations), never from the data."""

    max_groups: int
    max_rows_per_group: int
    why: str
    #: other (kappa, C) measured beside it, in hindsight (a choice read off the data is not
    #: private: shown to size the trade-off only)
    sweep: tuple[tuple[int, int], ...] = ()


FLEX_UNIT: dict[str, UnitChoice] = {
    "Q1": UnitChoice(4, 64, "kappa 4: the specification allows 4 (returnflag, linestatus) "
                     "pairs (R and A only with F; N with O or F); C 64: the ~60 lineitems of an "
                     "average ordering customer, rounded up to a power of two, so only an "
                     "above-average customer concentrated in one group is cut",
                     ((4, 32), (4, 128), (4, 256))),
    "Q4": UnitChoice(5, 2, "kappa 5: the 5 order priorities (a customer's orders may have any); "
                     "C 2: ~15 orders over ~26 quarters is ~0.6 per quarter, ~0.12 per priority, "
                     "so 3 or more of one priority in one quarter is rare (Poisson tail ~2e-4)",
                     ((5, 1), (1, 1), (5, 4))),
    "Q13": UnitChoice(1, 1, "kappa 1, C 1: one customer is one row of the c_orders derived "
                      "table, so one group (its order count), once"),
    "Q16": UnitChoice(1, 1, "reads partsupp, part and supplier only: public under customer as "
                      "the unit (no bound is used)"),
    "Q21": UnitChoice(1, 1, "kappa 1, C 1: ~60 lineitems per customer, 1 in 25 from a Saudi "
                      "supplier, and only lines that were the one late supplier of a "
                      "multi-supplier F order count: most customers have none",
                      ((1, 2), (2, 1), (2, 2))),
}
