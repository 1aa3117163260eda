"""Brute-force unit-level sensitivity over a query grammar (issue #17): for every query the
analysis accepts under a privacy unit, removing one unit with every row linked to it moves the
executed exact plan by no more than the bound the noise assumes.

The unit variant of ``tests/fuzz/test_grammar_bruteforce.py``. The universe is the tiny shop of
``tests/units/tiny.py`` (customer is the unit; orders reach it directly, items through orders;
regions is public; orphans and customer-less orders included) and the neighbours are its
:func:`~tests.units.tiny.remove_unit` (FK cascade). The grammar draws what
``dpsql.units.paths`` has to get right: joins on and off the unit paths (self-joins, public
tables, LEFT JOIN to a public table), equalities through public tables, EXISTS / NOT EXISTS /
IN / NOT IN bodies whose conditions mix inner-outer, outer-outer and inner-inner equalities
(negated as ``NOT (EXISTS ..)`` too, nested one level), OR-ed filters, COUNT / SUM / AVG /
FILTER aggregates and GROUP BY over declared domains, under two (kappa, C) settings. Most drawn
queries are refused; the accepted ones are checked with the bounds of
``tests/bruteforce/test_units.py``:

* without GROUP BY (R2T): every truncated sum Q(tau_j) moves by at most tau_j * bound (on the
  default grid 2^j and on the owner's grid floor(2.5^j));
* with GROUP BY (two-stage): every measurement's bins move by at most kappa * C * w in L1.

``DPSQL_FUZZ_EXAMPLES`` scales it (default 30; a deep run: ``DPSQL_FUZZ_EXAMPLES=2000
DPSQL_FUZZ_RANDOM=1``). A failure prints the query, the database and the unit: a privacy bug.
"""

from __future__ import annotations

import os
import random

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dpsql.analysis.blocks import analyze_request
from dpsql.errors import Error
from tests.bruteforce.test_units import bruteforce_one_row, bruteforce_r2t, bruteforce_two_stage
from tests.units import tiny

EXAMPLES = int(os.environ.get("DPSQL_FUZZ_EXAMPLES", "30"))
#: DPSQL_FUZZ_RANDOM=1 draws fresh queries (the default sample is fixed: reproducible)
DERANDOMIZE = not os.environ.get("DPSQL_FUZZ_RANDOM")

#: table -> its columns (all INTEGER)
TABLES = {name: cols for name, cols in tiny.COLUMNS.items()}
#: equalities along the unit paths (and the keys they point to), both ways
PATH_EQUALITIES = {
    ("items", "orders"): ("i_order", "o_id"),
    ("orders", "customer"): ("o_cust", "c_id"),
    ("items", "items"): ("i_order", "i_order"),
    ("orders", "orders"): ("o_cust", "o_cust"),
    ("customer", "customer"): ("c_id", "c_id"),
    ("customer", "regions"): ("region", "r"),
    ("orders", "regions"): ("o_cust", "r"),
}


def _path_equality(left: str, right: str) -> tuple[str, str] | None:
    if (left, right) in PATH_EQUALITIES:
        return PATH_EQUALITIES[(left, right)]
    if (right, left) in PATH_EQUALITIES:
        b, a = PATH_EQUALITIES[(right, left)]
        return a, b
    return None


class _Query:
    def __init__(self) -> None:
        self.n = 0

    def alias(self, table: str) -> str:
        self.n += 1
        return f"{table[0]}{self.n}"


def _equality(draw, left: tuple[str, str], right: tuple[str, str]) -> str:
    """``left.col = right.col`` (alias, table each): along the path half the time."""
    (la, lt), (ra, rt) = left, right
    path = _path_equality(lt, rt)
    if path is not None and draw(st.booleans()):
        lc, rc = path
    else:
        lc, rc = draw(st.sampled_from(TABLES[lt])), draw(st.sampled_from(TABLES[rt]))
    return f"{la}.{lc} = {ra}.{rc}"


def _simple(draw, refs: list[tuple[str, str]]) -> str:
    alias, table = draw(st.sampled_from(refs))
    col = draw(st.sampled_from(TABLES[table]))
    op = draw(st.sampled_from(["=", "<>", ">", "<="]))
    return f"{alias}.{col} {op} {draw(st.sampled_from(['0', '1', '2', '3']))}"


def _body(draw, q: _Query, outer: list[tuple[str, str]], depth: int) -> tuple[str, list]:
    """A subquery body ``FROM .. WHERE ..`` correlated with ``outer``."""
    table = draw(st.sampled_from(list(TABLES)))
    inner = [(q.alias(table), table)]
    source = f"{table} {inner[0][0]}"
    if draw(st.integers(0, 3)) == 0:  # a join inside the body
        t2 = draw(st.sampled_from(list(TABLES)))
        a2 = q.alias(t2)
        source += f" JOIN {t2} {a2} ON {_equality(draw, inner[0], (a2, t2))}"
        inner.append((a2, t2))
    conds = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["inner-outer", "inner-outer", "outer-outer", "inner"]))
        if kind == "inner-outer":
            conds.append(_equality(draw, draw(st.sampled_from(inner)),
                                   draw(st.sampled_from(outer))))
        elif kind == "outer-outer" and len(outer) > 1:
            a, b = draw(st.sampled_from(outer)), draw(st.sampled_from(outer))
            conds.append(_equality(draw, a, b))
        else:
            conds.append(_simple(draw, inner))
    if depth == 0 and draw(st.integers(0, 3)) == 0:
        conds.append(_subquery(draw, q, inner, depth + 1))
    return f"FROM {source} WHERE {' AND '.join(conds)}", inner


def _subquery(draw, q: _Query, outer: list[tuple[str, str]], depth: int = 0) -> str:
    kind = draw(st.sampled_from(["EXISTS", "NOT EXISTS", "NOT (EXISTS", "IN", "NOT IN"]))
    if kind == "NOT (EXISTS":
        body, _ = _body(draw, q, outer, depth)
        return f"NOT (EXISTS (SELECT 1 {body}))"
    if kind.endswith("EXISTS"):
        body, _ = _body(draw, q, outer, depth)
        return f"{kind} (SELECT 1 {body})"
    alias, table = draw(st.sampled_from(outer))
    col = draw(st.sampled_from(TABLES[table]))
    t = draw(st.sampled_from(list(TABLES)))
    a = q.alias(t)
    inner_col = draw(st.sampled_from(TABLES[t]))
    path = _path_equality(table, t)
    if path is not None and draw(st.booleans()):
        col, inner_col = path
    where = f" WHERE {_simple(draw, [(a, t)])}" if draw(st.booleans()) else ""
    return f"{alias}.{col} {kind} (SELECT {a}.{inner_col} FROM {t} {a}{where})"


@st.composite
def unit_queries(draw) -> str:
    q = _Query()
    first = draw(st.sampled_from(["orders", "items", "customer", "orders", "items"]))
    refs = [(q.alias(first), first)]
    source = f"{first} {refs[0][0]}"
    for _ in range(draw(st.integers(0, 2))):
        table = draw(st.sampled_from(list(TABLES)))
        alias = q.alias(table)
        on = _equality(draw, (alias, table), draw(st.sampled_from(refs)))
        if draw(st.integers(0, 4)) == 0:
            on += f" AND {_equality(draw, (alias, table), draw(st.sampled_from(refs)))}"
        join = "LEFT JOIN" if table == "regions" and draw(st.booleans()) else "JOIN"
        source += f" {join} {table} {alias} ON {on}"
        refs.append((alias, table))
    conds = []
    for _ in range(draw(st.integers(0, 2))):
        choice = draw(st.integers(0, 5))
        if choice <= 2:
            conds.append(_subquery(draw, q, refs))
        elif choice == 3 and len(refs) > 1:
            conds.append(_equality(draw, draw(st.sampled_from(refs)), draw(st.sampled_from(refs))))
        elif choice == 4:
            conds.append(f"({_simple(draw, refs)} OR {_simple(draw, refs)})")
        else:
            conds.append(_simple(draw, refs))
    tables = {t: a for a, t in reversed(refs)}
    aggregates = ["COUNT(*)"]
    if "orders" in tables:
        o = tables["orders"]
        aggregates += [f"SUM({o}.amount)", f"AVG({o}.amount)",
                       f"SUM(CASE WHEN {o}.amount > 0 THEN {o}.amount END)"]
    if "items" in tables:
        i = tables["items"]
        aggregates += [f"SUM({i}.qty)", f"COUNT(*) FILTER (WHERE {i}.qty > 1)"]
    picked = draw(st.lists(st.sampled_from(aggregates), min_size=1, max_size=2, unique=True))
    keys = [f"{tables['customer']}.region"] if "customer" in tables else []
    keys += [f"{tables['items']}.kind"] if "items" in tables else []
    group = draw(st.sampled_from([None, *keys])) if keys else None
    select = ", ".join(([group] if group else []) + picked)
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    return f"SELECT {select} FROM {source}{where}" + (f" GROUP BY {group}" if group else "")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(sql=unit_queries(), seed=st.integers(0, 2**20), bounds=st.sampled_from([(1, 1), (2, 3)]),
       base=st.sampled_from([2.0, 2.5]), max_sum=st.sampled_from([None, 3, 7]))
def test_unit_bounds_hold_over_the_grammar(sql, seed, bounds, base, max_sum):
    kappa, c = bounds
    # max_sum: a SUM's value-unit grid (dpsql.units.grid) small enough to truncate
    md = tiny.metadata(max_groups=kappa, max_rows_per_group=c, level_base=base, max_sum=max_sum)
    try:
        analysis = analyze_request(sql, md)
    except Error:
        assume(False)  # refused (the error fuzzer checks refusals do not depend on data)
        return
    assert analysis.unit is not None, sql
    rng = random.Random(seed)
    # one with many rows of no unit (NULL ids, guest orders, orphans): counted in full
    databases = [*(tiny.random_database(rng) for _ in range(3)), tiny.null_heavy_database(rng)]
    if analysis.unit.r2t:
        bruteforce_r2t(sql, md, databases)
    elif analysis.unit.alone is not None and not analysis.group_keys:
        bruteforce_one_row(sql, md, databases)  # the unit table read alone
    else:
        bruteforce_two_stage(sql, md, databases)


# ------------------------------------------------ a derived table grouped by the unit (Q13)

#: the outer queries over the derived table ``d`` (columns n: a count, m: its clamp 0..2)
DERIVED_OUTER = [
    "SELECT d.n, COUNT(*) FROM ({}) d GROUP BY d.n",
    "SELECT d.m, COUNT(*), SUM(d.m) FROM ({}) d GROUP BY d.m",
    "SELECT SUM(d.m), COUNT(*) FROM ({}) d WHERE d.n > 1",
    "WITH d AS ({}) SELECT d.n FROM d GROUP BY d.n",
]


@st.composite
def derived_unit_queries(draw) -> tuple[str, str]:
    """(D, the query over it): D groups a customer's or an orders row's key -- the unit id or
    not -- over joins on and off the unit paths (inner and LEFT), with row-local filters and
    sometimes a subquery (refused), as dpsql.units.derived has to judge."""
    q = _Query()
    first = draw(st.sampled_from(["customer", "orders", "orders", "items"]))
    refs = [(q.alias(first), first)]
    source = f"{first} {refs[0][0]}"
    for _ in range(draw(st.integers(0, 2))):
        table = draw(st.sampled_from(list(TABLES)))
        alias = q.alias(table)
        on = _equality(draw, (alias, table), draw(st.sampled_from(refs)))
        if draw(st.integers(0, 2)) == 0:
            on += f" AND {_simple(draw, [(alias, table)])}"
        join = draw(st.sampled_from(["JOIN", "LEFT JOIN", "LEFT JOIN"]))
        source += f" {join} {table} {alias} ON {on}"
        refs.append((alias, table))
    conds = []
    for _ in range(draw(st.integers(0, 2))):
        choice = draw(st.integers(0, 5))
        if choice == 0 and draw(st.booleans()):
            conds.append(_subquery(draw, q, refs))
        elif choice == 1 and len(refs) > 1:
            conds.append(_equality(draw, draw(st.sampled_from(refs)), draw(st.sampled_from(refs))))
        else:
            conds.append(_simple(draw, refs))
    alias, table = refs[0]
    unit_id = {"customer": "c_id", "orders": "o_cust"}.get(table)
    column = draw(st.sampled_from([*([unit_id] * 2 if unit_id else []), *TABLES[table]]))
    key = f"{alias}.{column}"
    counted_alias, counted_table = draw(st.sampled_from(refs))
    counted = f"{counted_alias}.{draw(st.sampled_from(TABLES[counted_table]))}"
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    derived = (f"SELECT {key}, COUNT({counted}) AS n, LEAST(COUNT(*), 2) AS m FROM {source}"
               f"{where} GROUP BY {key}")
    return derived, draw(st.sampled_from(DERIVED_OUTER)).format(derived)


@settings(max_examples=max(1, EXAMPLES // 2), deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(drawn=derived_unit_queries(), seed=st.integers(0, 2**20))
def test_derived_tables_grouped_by_the_unit_hold_one_row_per_unit(drawn, seed):
    from dpsql.rewrite.plan import plan_execution
    from tests.bruteforce.test_units_keyed_derived import (
        check_derived,
        random_databases,
        variant_rows,
    )

    derived, sql = drawn
    md = tiny.metadata(max_groups=2, max_rows_per_group=3)
    try:
        analysis = analyze_request(sql, md)
    except Error:
        assume(False)  # refused (the error fuzzer checks refusals do not depend on data)
        return
    exact_sql = plan_execution(analysis, md).exact_sql
    databases = random_databases(random.Random(seed), 4)
    check_derived(derived, sql, analysis, exact_sql, databases,
                  variant_rows(databases, [derived, exact_sql]))
