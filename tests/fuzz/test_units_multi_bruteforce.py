"""Brute-force sensitivity over a small query grammar with TWO privacy units (customer AND
supplier; dpsql.units.multi): for every query the analysis accepts, removing one customer or
one supplier with its cascade moves every truncated level by at most tau_j and never up.

The universe is ``tests/units/tiny_multi.py`` (orphans included); the check is
``tests/bruteforce/test_r2t_multi.py``'s. The grammar draws joins on and off both units' paths
(self-joins included: most are refused, a result row of one unit twice), public tables,
EXISTS / NOT EXISTS bodies correlated on either unit's columns, filters, and COUNT / SUM
aggregates. Queries reaching one unit run the one-unit engine on its view; they are checked the
same way when they are R2T releases. ``DPSQL_FUZZ_EXAMPLES`` scales it (default 6 here).
"""

from __future__ import annotations

import os
import random

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dpsql.analysis.blocks import analyze_request
from dpsql.errors import Error
from tests.bruteforce.test_r2t_multi import bruteforce_two_units
from tests.units import tiny_multi

EXAMPLES = max(4, int(os.environ.get("DPSQL_FUZZ_EXAMPLES", "30")) // 5)
DERANDOMIZE = not os.environ.get("DPSQL_FUZZ_RANDOM")

TABLES = tiny_multi.COLUMNS
#: the unit paths' equalities (and the keys they point to)
PATHS = {
    ("orders", "customer"): ("o_cust", "c_id"),
    ("items", "orders"): ("i_order", "o_id"),
    ("items", "supplier"): ("i_supp", "s_id"),
    ("stock", "supplier"): ("k_supp", "s_id"),
    ("items", "stock"): ("i_supp", "k_supp"),
    ("customer", "supplier"): ("nat", "nat"),
    ("customer", "nations"): ("nat", "n"),
}


def _equality(draw, left: tuple[str, str], right: tuple[str, str]) -> str:
    (la, lt), (ra, rt) = left, right
    path = PATHS.get((lt, rt))
    flipped = PATHS.get((rt, lt))
    if path is None and flipped is not None:
        path = (flipped[1], flipped[0])
    if path is not None and draw(st.integers(0, 3)) > 0:
        lc, rc = path
    else:
        lc, rc = draw(st.sampled_from(TABLES[lt])), draw(st.sampled_from(TABLES[rt]))
    return f"{la}.{lc} = {ra}.{rc}"


@st.composite
def queries(draw) -> str:
    n = 0

    def alias(table: str) -> str:
        nonlocal n
        n += 1
        return f"{table[0]}{n}"

    first = draw(st.sampled_from(["items", "items", "orders", "stock"]))
    refs = [(alias(first), first)]
    source = f"{first} {refs[0][0]}"
    for _ in range(draw(st.integers(0, 2))):
        table = draw(st.sampled_from(list(TABLES)))
        a = alias(table)
        source += f" JOIN {table} {a} ON {_equality(draw, (a, table), draw(st.sampled_from(refs)))}"
        refs.append((a, table))
    conds = []
    if draw(st.booleans()):
        a, t = draw(st.sampled_from(refs))
        conds.append(f"{a}.{draw(st.sampled_from(TABLES[t]))} > {draw(st.integers(0, 2))}")
    if draw(st.integers(0, 2)) == 0:
        table = draw(st.sampled_from(["stock", "items", "orders"]))
        a = alias(table)
        corr = _equality(draw, (a, table), draw(st.sampled_from(refs)))
        kind = draw(st.sampled_from(["EXISTS", "NOT EXISTS"]))
        conds.append(f"{kind} (SELECT 1 FROM {table} {a} WHERE {corr})")
    tables = {t: a for a, t in reversed(refs)}
    aggregates = ["COUNT(*)"]
    if "items" in tables:
        aggregates.append(f"SUM({tables['items']}.qty)")
    if "stock" in tables:
        aggregates.append(f"SUM({tables['stock']}.k_qty)")
    picked = draw(st.lists(st.sampled_from(aggregates), min_size=1, max_size=2, unique=True))
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    return f"SELECT {', '.join(picked)} FROM {source}{where}"


@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(sql=queries(), seed=st.integers(0, 2**20), base=st.sampled_from([2.0, 2.5]))
def test_two_unit_levels_hold_over_the_grammar(sql, seed, base):
    md = tiny_multi.metadata(level_base=base)
    try:
        analysis = analyze_request(sql, md)
    except Error:
        assume(False)  # refused (refusals read the SQL and the metadata only)
        return
    assume(analysis.unit is not None and analysis.unit.r2t)
    rng = random.Random(seed)
    bruteforce_two_units(sql, md, [tiny_multi.random_database(rng) for _ in range(2)])
