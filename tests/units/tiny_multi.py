"""A tiny shop with TWO privacy units (customer AND supplier, R2T's Q5/Q7/Q8 setting), for the
tests of dpsql.units.multi (not a test module).

customer(c_id, nat) and supplier(s_id, nat) are the unit tables; orders(o_id, o_cust) reach
customer directly; items(i_order, i_supp, qty) reach customer through orders and supplier
directly; stock(k_supp, k_qty) reaches supplier; nations(n) is public. Neighbours
(:func:`remove_customer`, :func:`remove_supplier`): one unit of either table with every row
linked to it (FK cascade). Orphans included (an order of customer 9, who does not exist; items
of order 99 and of supplier 8).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import duckdb

from dpsql.metadata import Metadata, loads_metadata
from tests.db_files import SchemaWorlds

Database = dict[str, list[tuple[int, ...]]]

COLUMNS: dict[str, tuple[str, ...]] = {
    "customer": ("c_id", "nat"),
    "supplier": ("s_id", "nat"),
    "orders": ("o_id", "o_cust"),
    "items": ("i_order", "i_supp", "qty"),
    "stock": ("k_supp", "k_qty"),
    "nations": ("n",),
}

YAML = """
privacy_unit:
  - {{table: customer, column: c_id, max_contribution: {gs}{grid}}}
  - {{table: supplier, column: s_id}}
tables:
  customer: {{columns: {{c_id: {{type: INTEGER}}, nat: {{type: INTEGER, releasable: true,
              domain: {{values: [1, 2]}}}}}}}}
  supplier: {{columns: {{s_id: {{type: INTEGER}}, nat: {{type: INTEGER}}}}}}
  orders: {{unit: {{customer: o_cust}}, columns: {{o_id: {{type: INTEGER}},
            o_cust: {{type: INTEGER}}}}}}
  items:
    unit: {{customer: {{via: i_order, to: orders.o_id}}, supplier: i_supp}}
    columns: {{i_order: {{type: INTEGER}}, i_supp: {{type: INTEGER}},
              qty: {{type: INTEGER, bounds: [-2, 4], releasable: true,
                     domain: {{values: [1, 2, 3]}}}}}}
  stock: {{unit: {{supplier: k_supp}}, columns: {{k_supp: {{type: INTEGER}},
           k_qty: {{type: INTEGER, bounds: [0, 3]}}}}}}
  nations: {{public: true, columns: {{n: {{type: INTEGER}}}}}}
"""

#: the two units and the tables the red teams' two-unit shops share (customer and supplier,
#: orders by customer, items by both), for ``str.format`` with ``gs`` and ``grid``; each shop
#: appends its ``items`` columns
TWO_UNIT_HEAD = """
privacy_unit:
  - {{table: customer, column: c_id, max_contribution: {gs}{grid}}}
  - {{table: supplier, column: s_id}}
tables:
  customer: {{columns: {{c_id: {{type: INTEGER}}}}}}
  supplier: {{columns: {{s_id: {{type: INTEGER}}}}}}
  orders: {{unit: {{customer: o_cust}}, columns: {{o_id: {{type: INTEGER}},
            o_cust: {{type: INTEGER}}}}}}
  items:
    unit: {{customer: {{via: i_order, to: orders.o_id}}, supplier: i_supp}}
"""


def metadata(*, max_contribution: int = 8, level_base: float = 2.0) -> Metadata:
    grid = "" if level_base == 2.0 else f", levels: {{base: {level_base}}}"
    return loads_metadata(YAML.format(gs=max_contribution, grid=grid), "<tiny two-unit shop>")


def random_database(rng: random.Random) -> Database:
    """1-3 customers, 1-3 suppliers, 0-4 orders, 0-8 items, 0-3 stock rows, with orphans."""
    customers = [(c, rng.randint(1, 2)) for c in range(1, rng.randint(1, 3) + 1)]
    suppliers = [(s, rng.randint(1, 2)) for s in range(1, rng.randint(1, 3) + 1)]
    owners = [c for c, _ in customers] + [9]
    orders = [(o, rng.choice(owners)) for o in range(1, rng.randint(0, 4) + 1)]
    keys = [o for o, _ in orders] + [99]
    supps = [s for s, _ in suppliers] + [8]
    items = [(rng.choice(keys), rng.choice(supps), rng.randint(-3, 5))
             for _ in range(rng.randint(0, 8))]
    stock = [(rng.choice(supps), rng.randint(0, 4)) for _ in range(rng.randint(0, 3))]
    return {"customer": customers, "supplier": suppliers, "orders": orders, "items": items,
            "stock": stock, "nations": [(1,), (2,)]}


def remove_customer(db: Mapping[str, Sequence[tuple[int, ...]]], unit: int) -> Database:
    """``db`` without customer ``unit``, its orders and their items."""
    gone = {o for o, c in db["orders"] if c == unit}
    out = {k: list(v) for k, v in db.items()}
    out["customer"] = [r for r in db["customer"] if r[0] != unit]
    out["orders"] = [r for r in db["orders"] if r[1] != unit]
    out["items"] = [r for r in db["items"] if r[0] not in gone]
    return out


def remove_supplier(db: Mapping[str, Sequence[tuple[int, ...]]], unit: int) -> Database:
    """``db`` without supplier ``unit``, its items and its stock."""
    out = {k: list(v) for k, v in db.items()}
    out["supplier"] = [r for r in db["supplier"] if r[0] != unit]
    out["items"] = [r for r in db["items"] if r[1] != unit]
    out["stock"] = [r for r in db["stock"] if r[0] != unit]
    return out


def neighbours(db: Mapping[str, Sequence[tuple[int, ...]]]
               ) -> Iterator[tuple[str, Database]]:
    """Every neighbour of ``db`` by removal: each customer and each supplier id any row holds
    (a direct path's value is the unit id even without its unit row)."""
    for c in sorted({r[0] for r in db["customer"]} | {r[1] for r in db["orders"]}):
        yield f"customer {c}", remove_customer(db, c)
    for s in sorted({r[0] for r in db["supplier"]} | {r[1] for r in db["items"]}
                    | {r[0] for r in db["stock"]}):
        yield f"supplier {s}", remove_supplier(db, s)


_CONNECTION: list[duckdb.DuckDBPyConnection] = []


def load(db: Mapping[str, Sequence[tuple[int, ...]]],
         con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB holding ``db`` (one in-memory connection per process unless ``con`` is given;
    its tables replaced)."""
    if con is None:
        if not _CONNECTION:
            _CONNECTION.append(duckdb.connect(config={"threads": 1}))
        con = _CONNECTION[0]
    script = []
    for table, columns in COLUMNS.items():
        rows = db[table]
        script.append(f"CREATE OR REPLACE TABLE {table} "
                      f"({', '.join(c + ' INTEGER' for c in columns)})")
        if rows:
            values = ", ".join("(" + ", ".join("NULL" if v is None else str(v) for v in r)
                               + ")" for r in rows)
            script.append(f"INSERT INTO {table} VALUES {values}")
    con.execute("; ".join(script))
    return con


_WORLDS = SchemaWorlds(COLUMNS)


def world(db: Mapping[str, Sequence[tuple[int, ...]]]) -> duckdb.DuckDBPyConnection:
    """:func:`load` (in memory), each distinct database written once per process
    (tests.db_files.SchemaWorlds)."""
    return _WORLDS.connection(db)


def recorded(backend: Any, monkeypatch: Any) -> list[str]:
    """The SQL texts ``backend.execute``, ``execute_columns`` and ``execute_flat_columns`` run
    from now on,
    in order (the backend still runs them: ``monkeypatch`` wraps the methods for the test's
    duration). A call made inside another (Spark's flat read is its execute_columns) is the
    same query: recorded once."""
    ran: list[str] = []
    depth = [0]
    for name in ("execute", "execute_columns", "execute_flat_columns"):
        execute = getattr(backend, name)

        def recording(sql: str, params: Any = None, *more: Any, execute: Any = execute
                      ) -> Any:
            if not depth[0]:
                ran.append(sql)
            depth[0] += 1
            try:
                return execute(sql, params, *more)
            finally:
                depth[0] -= 1

        monkeypatch.setattr(backend, name, recording)
    return ran
