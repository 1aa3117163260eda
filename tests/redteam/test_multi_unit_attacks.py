"""Red team (issue #17): several privacy units (dpsql.metadata.unit_multi, dpsql.units.multi,
dpsql.noise.r2t_flow; docs/privacy.md "Several privacy units").

The claim: with ``privacy_unit`` a list, neighbours differ in ONE unit of ANY unit table with
every row linked to it along that unit's paths; a query reaching one unit runs the one-unit
engine on that unit's view, a COUNT / SUM over two is truncated per level by the max-flow
Q(tau) (moves by <= tau), other shapes are refused from the SQL and metadata alone, and only a
release is charged. Attacked here on real DuckDB with noise off, the neighbour relation
re-implemented independently (:func:`cascade`: a row's unit follows its declared path in the
database itself, all doomed rows found before any is removed).

BROKE, and fixed after this red team (each test now guards the fix):

* a unit path THROUGH a table that another unit's cascade removes: ``items: {customer: {via:
  i_order, to: orders.o_id}}`` with ``orders: {customer: o_cust, supplier: o_supp}``.
  Removing supplier 1 removed its orders (linked to it), not their items (whose own supplier
  path is elsewhere / absent): the items' customer became NULL, their results MOVED from
  customers 1..K to the one NULL node, and Q(tau) dropped by (K-1) tau -- in the two-unit flow
  and in the one-unit engine on the customer's view (R2T and the two-stage GROUP BY), and also
  when the hop is a unit table linked to the other unit (``customer: {unit: {supplier:
  c_supp}}``, ``orders: {customer: {via: o_code, to: customer.c_code}}``). Fixed: such
  metadata is refused when it loads unless the table reaches the other unit through the same
  hop (dpsql.metadata.unit_multi._check_hops).
* data-dependent errors (error oracles; nothing was charged, so they were free): a per-pair
  SUM that overflows to +inf in DuckDB made flow_truncated raise ValueError (fixed: psi is
  capped at the top level, which changes no level); TINYINT ids spanning more than 127 were
  coded by ``valid - valid.min()`` in int8, which wrapped (fixed: signed ids subtract in
  int64).

Held (passing guards): the flow against an independent max-flow of the full network and its
sensitivity at large levels (steps > 1, float psi); brute force over every customer and
supplier removal with NULL ids, orphans, rows of one unit only, a public table, a via path to
the unit table's own id, EXISTS / NOT EXISTS / IN bodies; refusals of shapes that hide a GROUP
BY or a second unit (CTE, subquery, UNION, self-joins, a second supplier column, an EXISTS body
of another supplier) raised before any data is read; LIMIT / ORDER BY / HAVING never reach the
executed query; charging (refusal and failure: nothing; release: once).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import sparse
from scipy.sparse.csgraph import maximum_flow

from dpsql.analysis.blocks import analyze_request
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.errors import Error, NotSupportedError, UnsupportedConstructError
from dpsql.execute.exact import compile_plan
from dpsql.metadata import Metadata, loads_metadata
from dpsql.metadata.unit_multi import all_units
from dpsql.noise.r2t_flow import flow_truncated
from dpsql.rewrite.plan import plan_execution
from dpsql.units.execute import read_truncated
from dpsql.units.grid import part_grid, part_levels
from tests.db_files import create_tables, writing
from tests.ledgers import charged, ledger_session, open_ledger
from tests.shop_fixture import ZeroNoise

Schema = Mapping[str, Sequence[str]]  # table -> "column TYPE" declarations
Database = dict[str, list[tuple[Any, ...]]]

# ----------------------------------------------------------------------------- the harness


class Engine:
    """One query's analysis and plan, run on any database as the engine runs it: the executed
    exact query on a real in-memory DuckDB behind dpsql's backend (its tables replaced per
    database), then dpsql.units.execute.read_truncated (the flow for two units, the SQL
    truncation for one)."""

    def __init__(self, sql: str, md: Metadata) -> None:
        analysis = analyze_request(sql, md)
        release = analysis.unit
        assert release is not None and release.r2t
        self.release = release
        self.backend = DuckDBBackend(None, md)
        self.compiled = compile_plan(self.backend, plan_execution(analysis, md))

    def levels(self, schema: Schema, db: Database) -> list[tuple[list[float], list[float]]]:
        """Per R2T part: (tau_j * b, Q_j)."""
        create_tables(self.backend._con, schema, db)  # the backend's own connection, locked down
        got = read_truncated(self.backend, self.compiled, (), self.release)
        out = []
        for part, q in zip(self.release.parts, got, strict=True):
            bound = part_grid(part, self.release.unit)[0]
            out.append(([t * bound for t in part_levels(part, self.release.unit)],
                        [float(v) for v in q]))
        return out

    def close(self) -> None:
        self.backend.close()


def levels(sql: str, md: Metadata, schema: Schema, db: Database
           ) -> list[tuple[list[float], list[float]]]:
    """:meth:`Engine.levels` of one query on one database."""
    engine = Engine(sql, md)
    try:
        return engine.levels(schema, db)
    finally:
        engine.close()


def _unit_of(md: Metadata, db: Database, table: str, row: tuple[Any, ...], unit: str,
             columns: Mapping[str, Sequence[str]]) -> Any:
    """The ``unit``-id of ``row`` of ``table`` by the declared relation (None: no unit):
    a unit table's own id, a direct path's value, a via path's target row's unit."""
    t = md.tables[table]
    path = t.unit_paths.get(unit)
    if path is None:
        return None
    value = row[list(columns[table]).index(path.column)]
    if value is None or path.to_table is None:
        return value
    key = list(columns[path.to_table]).index(path.to_column or "")
    targets = [r for r in db[path.to_table] if r[key] == value]
    if len(targets) != 1:  # orphan (a repeated key is outside the precondition)
        return None
    return _unit_of(md, db, path.to_table, targets[0], unit, columns)


def cascade(md: Metadata, db: Database, unit: str, uid: Any,
            columns: Mapping[str, Sequence[str]]) -> Database:
    """``db`` without unit ``uid`` of unit table ``unit`` and every row linked to it along
    ``unit``'s paths (every doomed row found first, on ``db``)."""
    out: Database = {}
    for table, rows in db.items():
        if md.tables[table].public:
            out[table] = list(rows)
            continue
        out[table] = [r for r in rows if _unit_of(md, db, table, r, unit, columns) != uid]
    return out


def neighbours(md: Metadata, db: Database, columns: Mapping[str, Sequence[str]]
               ) -> Iterator[tuple[str, Database]]:
    """Every removal neighbour: each id of each unit table that some row's path reaches."""
    for u in all_units(md):
        ids = {_unit_of(md, db, t, r, u.table, columns)
               for t, rows in db.items() if not md.tables[t].public for r in rows}
        for uid in sorted(i for i in ids if i is not None):
            yield f"{u.table} {uid}", cascade(md, db, u.table, uid, columns)


def _names(schema: Schema) -> dict[str, list[str]]:
    return {t: [c.split()[0] for c in cols] for t, cols in schema.items()}


def assert_levels_bounded(sql: str, md: Metadata, schema: Schema,
                          databases: Sequence[Database]) -> None:
    """R2T's precondition: every level of every part moves by <= tau_j * b and never up when
    one unit (of either table) is removed with its cascade."""
    columns = _names(schema)
    engine = Engine(sql, md)
    try:
        for db in databases:
            base = engine.levels(schema, db)
            for what, other in neighbours(md, db, columns):
                for (taus, q), (_, q2) in zip(base, engine.levels(schema, other), strict=True):
                    for tau, x, y in zip(taus, q, q2, strict=True):
                        assert 0 <= y <= x + 1e-9 and x - y <= tau + 1e-9, (
                            f"PRIVACY BUG: {sql}\ndb={db}\nremoved {what}, tau={tau}: "
                            f"{x} -> {y}")
    finally:
        engine.close()


# ------------------------------- HOLE: a path through a table another unit's cascade removes

HOP_YAML = """
privacy_unit:
  - {{table: customer, column: c_id, max_contribution: 8}}
  - {{table: supplier, column: s_id}}
tables:
  customer: {{columns: {{c_id: {{type: INTEGER}}}}}}
  supplier: {{columns: {{s_id: {{type: INTEGER}}}}}}
  orders:
    unit: {{customer: o_cust, supplier: o_supp}}
    columns: {{o_id: {{type: INTEGER}}, o_cust: {{type: INTEGER}}, o_supp: {{type: INTEGER}}}}
  items:
    unit: {{customer: {{via: i_order, to: orders.o_id}}{items_supplier}}}
    columns: {{i_order: {{type: INTEGER}}, i_supp: {{type: INTEGER}},
              g: {{type: INTEGER, releasable: true, domain: {{values: [1, 2]}}}}}}
"""
HOP_SCHEMA = {"customer": ["c_id INTEGER"], "supplier": ["s_id INTEGER"],
              "orders": ["o_id INTEGER", "o_cust INTEGER", "o_supp INTEGER"],
              "items": ["i_order INTEGER", "i_supp INTEGER", "g INTEGER"]}
#: supplier 1 fulfils order c of each customer c = 1..4; each order has 8 items, sold by
#: supplier 10 + c. Removing supplier 1 removes the 4 orders (linked to it), not the items.
HOP_DB: Database = {
    "customer": [(c,) for c in range(1, 5)],
    "supplier": [(1,)] + [(10 + c,) for c in range(1, 5)],
    "orders": [(c, c, 1) for c in range(1, 5)],
    "items": [(c, 10 + c, 1) for c in range(1, 5) for _ in range(8)],
}


def _hop_md(two_units: bool) -> Metadata:
    return loads_metadata(HOP_YAML.format(
        items_supplier=", supplier: i_supp" if two_units else ""), "<hop>")


@pytest.mark.parametrize("two_units", [True, False])
def test_a_hop_removed_by_the_other_units_cascade_is_refused_at_load(two_units):
    """Was a HOLE (levels moved by 3 tau): items reach the customer through orders, which
    supplier 1's cascade removes while the items stay, so each item's result moved to the
    NULL customer (Q(2): 8 -> 2 on HOP_DB; with items' supplier path left out, the one-unit
    R2T and the two-stage GROUP BY moved as much). The metadata is now refused when it loads
    (dpsql.metadata.unit_multi._check_hops), naming the fix: the same hop for the supplier."""
    with pytest.raises(Error, match=r"reaches unit customer through orders, whose rows "
                       r"removing one supplier also removes.*supplier: \{via: i_order, to: "
                       r"orders\.o_id\}"):
        _hop_md(two_units)
    without = cascade(loads_metadata(HOP_YAML.format(
        items_supplier=", supplier: {via: i_order, to: orders.o_id}"), "<hop>"),
        HOP_DB, "supplier", 1, _names(HOP_SCHEMA))
    assert without["items"] == [] and without["orders"] == []  # the fix: they leave together


def test_both_paths_through_the_same_hop_held():
    """The safe form of the hop: items reach the supplier THROUGH the order too, so supplier
    1's cascade removes the items with their orders (no result changes its unit)."""
    md = loads_metadata(HOP_YAML.format(
        items_supplier=", supplier: {via: i_order, to: orders.o_id}"), "<hop>")
    assert_levels_bounded("SELECT COUNT(*) FROM items", md, HOP_SCHEMA, [HOP_DB])


UNIT_HOP_YAML = """
privacy_unit:
  - {table: customer, column: c_id, max_contribution: 8}
  - {table: supplier, column: s_id}
tables:
  customer:
    unit: {supplier: c_supp}
    columns: {c_id: {type: INTEGER}, c_code: {type: INTEGER}, c_supp: {type: INTEGER}}
  supplier: {columns: {s_id: {type: INTEGER}}}
  orders:
    unit: {customer: {via: o_code, to: customer.TARGET}}
    columns: {o_id: {type: INTEGER}, o_code: {type: INTEGER}}
"""
UNIT_HOP_SCHEMA = {"customer": ["c_id INTEGER", "c_code INTEGER", "c_supp INTEGER"],
                   "supplier": ["s_id INTEGER"], "orders": ["o_id INTEGER", "o_code INTEGER"]}


def _unit_hop_db(code: int) -> Database:
    """Customers 1..4 linked to supplier 1, 8 orders each pointing at the customer's
    ``code + c`` (code 0: its id, 100: its c_code)."""
    return {"customer": [(c, 100 + c, 1) for c in range(1, 5)], "supplier": [(1,)],
            "orders": [(10 * c + j, code + c) for c in range(1, 5) for j in range(8)]}


def test_a_via_path_to_the_unit_tables_own_id_held():
    # the id itself is the unit (a direct path's value is the unit even without its row), so
    # supplier 1's cascade removing the customer rows changes no order's unit
    md = loads_metadata(UNIT_HOP_YAML.replace("TARGET", "c_id"), "<unit hop>")
    db = _unit_hop_db(0)
    assert_levels_bounded("SELECT COUNT(*) FROM orders", md, UNIT_HOP_SCHEMA, [db])
    # the unit table as a result row of both units (its customer, its supplier c_supp)
    db["customer"] += [(5, 105, 2), (6, 106, None)]
    db["supplier"] += [(2,)]
    db["orders"] += [(60, 6), (61, 6), (70, 7)]
    assert_levels_bounded("SELECT COUNT(*) FROM customer c JOIN orders o ON o.o_code = c.c_id",
                          md, UNIT_HOP_SCHEMA, [db])


def test_a_domain_read_from_another_units_table_is_refused_at_load():
    """A bin domain is an implicit read like a hop: one over supplier (private, though public
    on the customer's view) is refused when the metadata loads."""
    text = (UNIT_HOP_YAML.replace("TARGET", "c_id")
            .replace("c_code: {type: INTEGER}", "c_code: {type: INTEGER, releasable: true, "
                     "domain: {table: supplier, column: s_id}}"))
    with pytest.raises(Error, match="private"):
        loads_metadata(text, "<domain>")


def test_a_unit_table_in_another_units_cascade_as_a_hop_is_refused_at_load():
    """Was a HOLE: orders reach the customer via customer.c_code while customer rows belong
    to supplier 1's cascade: removing the supplier moved 32 orders to the NULL unit."""
    with pytest.raises(Error, match="reaches unit customer through customer"):
        loads_metadata(UNIT_HOP_YAML.replace("TARGET", "c_code"), "<unit hop>")


# -------------------------------------------- HOLE: data-dependent errors (error oracles)


def _session_outcomes(tmp: Path, md: Metadata, schema: Schema, db: Database,
                      queries: Sequence[str]) -> tuple[list[str], list[float]]:
    """('ok' or the error class per query, the charges) of ``queries`` run one after the other
    through one session on a real DuckDB file and ledger, zero noise."""
    tmp.mkdir(parents=True, exist_ok=True)
    with writing(tmp / "db.duckdb") as con:
        create_tables(con, schema, db)
    backend = DuckDBBackend(tmp / "db.duckdb", md)
    ledger = open_ledger(tmp / "ledger.sqlite", epsilon=10.0, delta=1e-3)
    session = ledger_session(md, backend, ledger, sampler=ZeroNoise())
    outcomes = []
    try:
        for sql in queries:
            try:
                session.run(sql, epsilon=1.0)
                outcomes.append("ok")
            except Exception as exc:  # the outcome IS the attack
                outcomes.append(type(exc).__name__)
        return outcomes, [c.epsilon for c in charged(session)]
    finally:
        backend.close()
        ledger.close()


def _session_outcome(tmp: Path, md: Metadata, schema: Schema, db: Database, sql: str
                     ) -> tuple[str, list[float]]:
    (outcome,), charges = _session_outcomes(tmp, md, schema, db, [sql])
    return outcome, charges


WIDE_YAML = """
privacy_unit:
  - {table: customer, column: c_id, max_contribution: 8, max_sum: 64}
  - {table: supplier, column: s_id}
tables:
  customer: {columns: {c_id: {type: INTEGER}}}
  supplier: {columns: {s_id: {type: INTEGER}}}
  items:
    unit: {customer: i_cust, supplier: i_supp}
    columns: {i_cust: {type: INTEGER}, i_supp: {type: INTEGER},
              v: {type: DOUBLE, bounds: [0, 1.0e+307]}}
"""
WIDE_SCHEMA = {"customer": ["c_id INTEGER"], "supplier": ["s_id INTEGER"],
               "items": ["i_cust INTEGER", "i_supp INTEGER", "v DOUBLE"]}


def test_a_pair_sum_overflowing_to_inf_is_no_error_oracle(tmp_path):
    md = loads_metadata(WIDE_YAML, "<wide>")
    small: Database = {"customer": [(1,)], "supplier": [(1,)], "items": [(1, 1, 1e307)]}
    big: Database = {"customer": [(1,), (2,)], "supplier": [(1,)],
                     "items": small["items"] + [(2, 1, 1e307)] * 20}
    sql = "SELECT SUM(v) FROM items"
    assert _session_outcome(tmp_path / "small", md, WIDE_SCHEMA, small, sql) == ("ok", [1.0])
    assert _session_outcome(tmp_path / "big", md, WIDE_SCHEMA, big, sql) == ("ok", [1.0])


TINY_YAML = """
privacy_unit:
  - {table: customer, column: c_id, max_contribution: 8}
  - {table: supplier, column: s_id}
tables:
  customer: {columns: {c_id: {type: TINYINT}}}
  supplier: {columns: {s_id: {type: TINYINT}}}
  items: {unit: {customer: i_cust, supplier: i_supp},
          columns: {i_cust: {type: TINYINT}, i_supp: {type: TINYINT}}}
"""
TINY_SCHEMA = {"customer": ["c_id TINYINT"], "supplier": ["s_id TINYINT"],
               "items": ["i_cust TINYINT", "i_supp TINYINT"]}


def test_narrow_integer_ids_are_no_error_oracle(tmp_path):
    md = loads_metadata(TINY_YAML, "<tinyint>")
    small: Database = {"customer": [(-100,)], "supplier": [(s,) for s in range(50)],
                       "items": [(-100, s) for s in range(50)]}
    big: Database = {**small, "customer": [(-100,), (100,)],
                     "items": small["items"] + [(100, 0)]}
    sql = "SELECT COUNT(*) FROM items"
    assert _session_outcome(tmp_path / "small", md, TINY_SCHEMA, small, sql) == ("ok", [1.0])
    assert _session_outcome(tmp_path / "big", md, TINY_SCHEMA, big, sql) == ("ok", [1.0])


# ------------------------------------------------------------- the flow itself (held)


def _reference_flow(a: Sequence[int], b: Sequence[int], psi: Sequence[int], tau: int) -> int:
    """R2T's LP as the plain max-flow of the whole network (no shortcut, no certificate)."""
    if not a:
        return 0
    pairs: dict[tuple[int, int], int] = {}
    for x, y, p in zip(a, b, psi, strict=True):
        pairs[(x, y)] = pairs.get((x, y), 0) + min(p, tau)
    left, right = sorted(set(a)), sorted(set(b))
    n = 2 + len(left) + len(right)
    graph = np.zeros((n, n), dtype=np.int32)
    for i in range(len(left)):
        graph[0, 1 + i] = tau
    for j in range(len(right)):
        graph[1 + len(left) + j, n - 1] = tau
    for (x, y), c in pairs.items():
        graph[1 + left.index(x), 1 + len(left) + right.index(y)] = min(c, tau)
    return int(maximum_flow(sparse.csr_matrix(graph), 0, n - 1).flow_value)


def test_the_flow_equals_the_full_networks_max_flow_on_dense_small_instances():
    """Many heavy units on both sides (where the cheap certificate and the heavy/light split
    matter): the exact OPT, level by level."""
    rng = random.Random(17)
    taus = [1, 2, 3, 5, 16]
    for _ in range(80):
        na, nb, m = rng.randint(1, 5), rng.randint(1, 5), rng.randint(0, 20)
        a = [rng.randrange(na) for _ in range(m)]
        b = [rng.randrange(nb) for _ in range(m)]
        psi = [rng.choice([0, 1, 1, 2, 3, 5, 8, 40]) for _ in range(m)]
        got = flow_truncated(np.array(a, dtype=np.int64), np.array(b, dtype=np.int64),
                             np.array(psi, dtype=np.int64), taus, integer=True)
        assert list(got) == [_reference_flow(a, b, psi, t) for t in taus], (a, b, psi)


def test_the_flows_steps_keep_the_sensitivity_at_huge_levels():
    """Levels past 2^31 (a step delta > 1), float psi up to 1e300, every unit removal."""
    rng = random.Random(5)
    for _ in range(30):
        m = rng.randint(1, 10)
        a = np.array([rng.randrange(4) for _ in range(m)])
        b = np.array([rng.randrange(4) for _ in range(m)])
        integer = rng.random() < 0.5
        if integer:
            psi = np.array([rng.randint(0, 2**50) for _ in range(m)], dtype=np.int64)
            taus = [3.0, 2.0**31, 2.0**33 + 5, 2.0**45]
        else:
            scale = rng.choice([1.0, 2.0**40, 1e300])
            psi = np.array([rng.random() * scale for _ in range(m)])
            taus = [0.5, 2.0**31 + 0.5, 2.0**52, 1e300]
        q = flow_truncated(a, b, psi, taus, integer=integer)
        for side in (a, b):
            for u in set(side.tolist()):
                keep = side != u
                q2 = flow_truncated(a[keep], b[keep], psi[keep], taus, integer=integer)
                for tau, x, y in zip(taus, q, q2, strict=True):
                    assert 0 <= y <= x and x - y <= tau, (tau, x, y, a, b, psi)


# ---------------------- brute force: NULL ids, orphans, one-unit rows, public tables (held)

NULL_YAML = """
privacy_unit:
  - {table: customer, column: c_id, max_contribution: 4}
  - {table: supplier, column: s_id}
tables:
  customer: {columns: {c_id: {type: INTEGER}, nat: {type: INTEGER}}}
  supplier: {columns: {s_id: {type: INTEGER}, nat: {type: INTEGER}}}
  orders: {unit: {customer: o_cust}, columns: {o_id: {type: INTEGER}, o_cust: {type: INTEGER}}}
  items:
    unit: {customer: {via: i_order, to: orders.o_id}, supplier: i_supp}
    columns: {i_order: {type: INTEGER}, i_supp: {type: INTEGER},
              qty: {type: INTEGER, bounds: [-2, 3]}}
  stock: {unit: {supplier: k_supp}, columns: {k_supp: {type: INTEGER}, k_qty: {type: INTEGER}}}
  nations: {public: true, columns: {n: {type: INTEGER}}}
  transfers: {unit: {supplier: t_from}, columns: {t_from: {type: INTEGER}, t_to: {type: INTEGER}}}
"""
NULL_SCHEMA = {"customer": ["c_id INTEGER", "nat INTEGER"],
               "supplier": ["s_id INTEGER", "nat INTEGER"],
               "orders": ["o_id INTEGER", "o_cust INTEGER"],
               "items": ["i_order INTEGER", "i_supp INTEGER", "qty INTEGER"],
               "stock": ["k_supp INTEGER", "k_qty INTEGER"], "nations": ["n INTEGER"],
               "transfers": ["t_from INTEGER", "t_to INTEGER"]}
NULL_QUERIES = [
    "SELECT COUNT(*) FROM items",
    "SELECT SUM(qty) FROM items i JOIN supplier s ON s.s_id = i.i_supp",
    "SELECT COUNT(*) FROM customer c JOIN orders o ON o.o_cust = c.c_id"
    " JOIN items i ON i.i_order = o.o_id JOIN supplier s ON s.s_id = i.i_supp"
    " WHERE c.nat = s.nat",
    "SELECT COUNT(*) FROM customer c JOIN supplier s ON c.nat = s.nat",
    "SELECT COUNT(*) FROM items i JOIN nations n ON n.n = i.qty",
    "SELECT COUNT(*) FROM items i WHERE i.i_supp IN (SELECT k_supp FROM stock WHERE k_qty > 0)",
    "SELECT COUNT(*) FROM items i WHERE NOT EXISTS (SELECT 1 FROM stock k"
    " WHERE k.k_supp = i.i_supp)",
    "SELECT COUNT(*) FROM items i WHERE NOT EXISTS (SELECT 1 FROM orders o"
    " WHERE o.o_id = i.i_order)",
    "SELECT COUNT(*) FROM orders o JOIN stock k ON k.k_qty = o.o_cust",
    # a body correlated on both units: the customer by the order, the supplier by the stock
    "SELECT COUNT(*) FROM orders o JOIN stock k ON k.k_qty = o.o_cust WHERE NOT EXISTS"
    " (SELECT 1 FROM items i WHERE i.i_order = o.o_id AND i.i_supp = k.k_supp)",
    # expressions that raise on some values unless made total: an error on one neighbour
    # only would be an oracle (the brute force runs every neighbour)
    "SELECT SUM(qty) FILTER (WHERE 100 / qty > 1), COUNT(*) FILTER (WHERE CAST(qty AS UTINYINT)"
    " > 0) FROM items",
    "SELECT SUM(qty) FROM items WHERE 10 % qty = 0 AND CAST(i_supp - 2 AS UINTEGER) >= 0",
]


def _null_database(rng: random.Random) -> Database:
    """NULL ids on every path (and in the unit tables), orphans on both sides, rows of one
    unit only (stock, orders without items)."""
    def maybe(v: int) -> int | None:
        return None if rng.random() < 0.2 else v
    customers = [(maybe(c), rng.randint(1, 2)) for c in range(1, rng.randint(1, 3) + 1)]
    suppliers = [(maybe(s), rng.randint(1, 2)) for s in range(1, rng.randint(1, 3) + 1)]
    orders = [(maybe(o), maybe(rng.choice([1, 2, 3, 9]))) for o in range(1, rng.randint(1, 4))]
    items = [(maybe(rng.choice([1, 2, 3, 99])), maybe(rng.choice([1, 2, 3, 8])),
              rng.randint(-3, 4)) for _ in range(rng.randint(0, 7))]
    stock = [(maybe(rng.choice([1, 2, 8])), rng.randint(0, 3)) for _ in range(rng.randint(0, 3))]
    return {"customer": customers, "supplier": suppliers, "orders": orders, "items": items,
            "stock": stock, "nations": [(1,), (2,)], "transfers": []}


@pytest.mark.parametrize("index", range(len(NULL_QUERIES)))
def test_null_ids_orphans_and_one_unit_rows_move_each_level_by_at_most_tau(index):
    md = loads_metadata(NULL_YAML, "<nulls>")
    rng = random.Random(100 + index)
    assert_levels_bounded(NULL_QUERIES[index], md, NULL_SCHEMA,
                          [_null_database(rng) for _ in range(2)])


# --------------------------------- shapes that could slip past the refusal (held: refused)

REFUSED = [
    # a GROUP BY hidden in a CTE / derived table / scalar subquery, a set operation
    ("WITH t AS (SELECT i_supp, COUNT(*) AS n FROM items GROUP BY i_supp) "
     "SELECT SUM(n) FROM t", Error),
    ("SELECT COUNT(*) FROM (SELECT i_order FROM items GROUP BY i_order) t", Error),
    ("SELECT COUNT(*) FROM items WHERE qty > (SELECT AVG(k_qty) FROM stock)", NotSupportedError),
    ("SELECT COUNT(*) FROM items UNION ALL SELECT COUNT(*) FROM stock", NotSupportedError),
    ("SELECT COUNT(*) FROM items GROUP BY 1 = 1", NotSupportedError),
    ("SELECT DISTINCT i_supp FROM items", NotSupportedError),
    ("SELECT COUNT(*) OVER () FROM items", UnsupportedConstructError),
    # a result row of two suppliers / two customers
    ("SELECT COUNT(*) FROM items a JOIN items b ON a.i_order = b.i_order",
     UnsupportedConstructError),
    ("SELECT COUNT(*) FROM items a JOIN items b ON a.i_supp = b.i_supp",
     UnsupportedConstructError),
    ("SELECT COUNT(*) FROM supplier a JOIN supplier b ON a.nat = b.nat",
     UnsupportedConstructError),
    ("SELECT COUNT(*) FROM items i JOIN supplier s ON s.s_id = i.qty",
     UnsupportedConstructError),
    # one row reaching two suppliers: its path's and a second supplier column's
    ("SELECT COUNT(*) FROM transfers t JOIN supplier s ON s.s_id = t.t_to",
     UnsupportedConstructError),
    ("SELECT COUNT(*) FROM items i JOIN transfers t ON t.t_to = i.i_supp",
     UnsupportedConstructError),
    # an EXISTS body of the same customer but maybe another supplier: removing that supplier
    # would flip a result of another one
    ("SELECT COUNT(*) FROM items a WHERE EXISTS (SELECT 1 FROM items b"
     " WHERE b.i_order = a.i_order AND b.qty > 2)", UnsupportedConstructError),
    # a unit reached only inside a subquery
    ("SELECT COUNT(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM items i"
     " WHERE i.i_order = o.o_id)", UnsupportedConstructError),
    ("SELECT COUNT(*) FROM stock k JOIN orders o ON k.k_qty = o.o_cust"
     " WHERE EXISTS (SELECT 1 FROM items i WHERE i.i_supp = k.k_supp)",
     UnsupportedConstructError),
    ("SELECT COUNT(*) FROM items i LEFT JOIN stock k ON k.k_supp = i.i_supp",
     UnsupportedConstructError),
    ("SELECT MIN(qty) FROM items", UnsupportedConstructError),
    ("SELECT COUNT(DISTINCT i_supp) FROM items", UnsupportedConstructError),
]


@pytest.mark.parametrize(("sql", "error"), REFUSED)
def test_shapes_that_could_hide_a_group_or_a_second_unit_are_refused(sql, error):
    with pytest.raises(error):
        analyze_request(sql, loads_metadata(NULL_YAML, "<nulls>"))


def test_limit_order_by_and_having_never_reach_the_pair_query():
    md = loads_metadata(NULL_YAML, "<nulls>")
    for sql in ("SELECT COUNT(*) FROM items LIMIT 1", "SELECT COUNT(*) FROM items OFFSET 1",
                "SELECT COUNT(*) FROM items ORDER BY 1",
                "SELECT COUNT(*) FROM items HAVING COUNT(*) > 2"):
        analysis = analyze_request(sql, md)
        assert analysis.unit is not None and analysis.unit.more
        plan = plan_execution(analysis, md)
        exact = plan.exact_sql
        if plan.fallback_sql is not None:
            # plain counts read flat: dpsql's row guard is the reader's (no LIMIT in the SQL,
            # dpsql.units.multi_rewrite), and the grouped fallback has none either
            for fallback in plan.fallback_sql:
                assert not any(w in fallback.upper()
                               for w in ("LIMIT", "OFFSET", "ORDER BY", "HAVING"))
        exact = exact.upper()
        assert not any(w in exact for w in ("LIMIT", "OFFSET", "ORDER BY", "HAVING")), exact


# ---------------------------------------------------------------- charging and outcomes


def test_refusals_and_releases_charge_as_claimed_and_do_not_depend_on_the_data(tmp_path):
    """A refused query charges nothing and fails the same way on both neighbours; a release
    charges once on each."""
    md = loads_metadata(NULL_YAML, "<nulls>")
    db = _null_database(random.Random(3))
    db["customer"] = [(1, 1), (2, 2)]
    db["orders"] = [(1, 1), (2, 2)]
    db["items"] = [(1, 1, 2), (2, 1, 3), (2, 2, 1)]
    other = cascade(md, db, "customer", 2, _names(NULL_SCHEMA))
    queries = ["SELECT COUNT(*) FROM items WHERE qty > (SELECT AVG(k_qty) FROM stock)",
               "SELECT COUNT(*) FROM items a JOIN items b ON a.i_supp = b.i_supp",
               "SELECT COUNT(*), SUM(qty) FROM items"]
    for j, d in enumerate((db, other)):
        outcomes, charges = _session_outcomes(tmp_path / str(j), md, NULL_SCHEMA, d, queries)
        assert outcomes == ["NotSupportedError", "UnsupportedConstructError", "ok"]
        assert charges == [1.0]


LIST_YAML = """
privacy_unit:
  - {table: customer, column: c_id, max_contribution: 8}
  - {table: SECOND, column: COLUMN}
tables:
  customer: {columns: {c_id: {type: INTEGER}, nat: {type: INTEGER}}}
  supplier: {PUBLICcolumns: {s_id: {type: INTEGER}}}
  items: {unit: {customer: i_cust, supplier: i_supp},
          columns: {i_cust: {type: INTEGER}, i_supp: {type: INTEGER}}}
"""


@pytest.mark.parametrize(("second", "column", "public", "message"), [
    ("CUSTOMER", "nat", "", "twice"),  # one table as two units (by two columns)
    ("customer", "c_id", "", "twice"),
    ("supplier", "s_id", "public: true, ", "public"),  # a unit table declared public
    ("nosuch", "x", "", "not a privacy unit table"),  # items names a unit not declared
])
def test_unit_lists_that_would_blur_the_relation_are_refused_at_load(second, column, public,
                                                                      message):
    text = (LIST_YAML.replace("SECOND", second).replace("COLUMN", column)
            .replace("PUBLIC", public))
    with pytest.raises(Error, match=message):
        loads_metadata(text, "<list>")
