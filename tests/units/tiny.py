"""A tiny shop under a privacy unit, for the unit tests (not a test module).

customer(c_id, region) is the unit table; orders(o_id, o_cust, amount) reach it directly
(``o_cust``), items(i_order, qty, kind) through orders (``i_order -> orders.o_id``); regions(r) is
public. Databases are dicts of row tuples; :func:`remove_unit` is the neighbouring relation
(one unit and every row linked to it: FK cascade); :func:`load` writes one into DuckDB.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path

import duckdb

from dpsql.metadata import Column, Domain, Metadata, PrivacyUnit, Table, UnitPath
from dpsql.units.analysis import UnitRelease
from dpsql.units.execute import truncated_levels
from tests.db_files import SchemaWorlds, insert_many, writing

Database = dict[str, list[tuple[int, ...]]]

COLUMNS: dict[str, tuple[str, ...]] = {
    "customer": ("c_id", "region"),
    "orders": ("o_id", "o_cust", "amount"),
    "items": ("i_order", "qty", "kind"),
    "regions": ("r",),
}

AMOUNT_BOUNDS = (-3.0, 5.0)
QTY_BOUNDS = (0.0, 4.0)


def shop_tables(columns: Mapping[str, Sequence[str]] = COLUMNS) -> dict[str, Table]:
    """The shop's tables (customer the unit, orders by o_cust, items via orders, regions
    public), each with every column of ``columns`` (extra ones as plain INTEGERs)."""
    def cols(table: str, **extra: Column) -> dict[str, Column]:
        out = {c: Column(c, type="INTEGER") for c in columns[table]}
        out.update(extra)
        return out

    return {
        "customer": Table("customer", cols("customer", region=Column(
            "region", type="INTEGER", releasable=True, domain=Domain(table="regions",
                                                                      column="r"))),
            unit=UnitPath("c_id")),
        "orders": Table("orders", cols("orders", amount=Column(
            "amount", type="INTEGER", bounds=AMOUNT_BOUNDS)), unit=UnitPath("o_cust")),
        "items": Table("items", cols(
            "items", qty=Column("qty", type="INTEGER", bounds=QTY_BOUNDS),
            kind=Column("kind", type="INTEGER", releasable=True, domain=Domain(values=(1, 2, 3)))),
            unit=UnitPath("i_order", "orders", "o_id")),
        "regions": Table("regions", cols("regions"), public=True),
    }


def metadata(*, max_contribution: int = 8, max_groups: int = 2,
             max_rows_per_group: int = 2, level_base: float = 2.0,
             max_sum: int | None = None) -> Metadata:
    return Metadata(shop_tables(), privacy_unit=PrivacyUnit(
        "customer", "c_id", max_contribution=max_contribution, max_groups=max_groups,
        max_rows_per_group=max_rows_per_group, level_base=level_base, max_sum=max_sum))


def random_database(rng: random.Random) -> Database:
    """1-3 customers, 0-5 orders (unique o_id; some of customer 9, who does not exist: an
    orphan), 0-8 items (some of order 99: an orphan)."""
    customers = [(c, rng.randint(1, 2)) for c in range(1, rng.randint(1, 3) + 1)]
    owners = [c for c, _ in customers] + [9]
    orders = [(o, rng.choice(owners), rng.randint(-4, 6)) for o in range(1, rng.randint(0, 5) + 1)]
    keys = [o for o, _, _ in orders] + [99]
    items = [(rng.choice(keys), rng.randint(0, 5), rng.randint(1, 3))
             for _ in range(rng.randint(0, 8))]
    return {"customer": customers, "orders": orders, "items": items, "regions": [(1,), (2,)]}


def null_heavy_database(rng: random.Random) -> Database:
    """:func:`random_database` plus MANY rows of no unit, so their group is far beyond every
    bound (each level tau_j, kappa groups, C rows per group): 1-3 customers with a NULL id,
    4-12 guest orders (a NULL ``o_cust``, keys 50..) with 0-4 items each, 3-10 items of the
    orphan order 99 and 2-6 items of a NULL order, over every kind."""
    db = random_database(rng)
    db["customer"] += [(None, rng.randint(1, 2)) for _ in range(rng.randint(1, 3))]
    guests = [(o, None, rng.randint(-4, 6)) for o in range(50, 50 + rng.randint(4, 12))]
    db["orders"] += guests
    db["items"] += [(o, rng.randint(0, 5), rng.randint(1, 3))
                    for o, _, _ in guests for _ in range(rng.randint(0, 4))]
    db["items"] += [(99, rng.randint(0, 5), rng.randint(1, 3)) for _ in range(rng.randint(3, 10))]
    db["items"] += [(None, rng.randint(0, 5), rng.randint(1, 3))
                    for _ in range(rng.randint(2, 6))]
    return db


def without_units(db: Mapping[str, Sequence[tuple[int, ...]]]) -> Database:
    """``db`` with every unit removed (:func:`remove_unit` of each): only the rows of no unit
    (NULL ids and paths, orphan items) and the public rows are left."""
    out: Database = {t: list(rows) for t, rows in db.items()}
    for u in units(db):
        out = remove_unit(out, u)
    return out


def only_units(db: Mapping[str, Sequence[tuple[int, ...]]]) -> Database:
    """``db`` without its rows of no unit: customers of a NULL id, orders of a NULL
    ``o_cust``, items whose order does not resolve or resolves to such an order (the rows
    :func:`without_units` keeps, but for the public ones)."""
    owner = {o: c for o, c, _ in db["orders"]}
    return {
        "customer": [r for r in db["customer"] if r[0] is not None],
        "orders": [r for r in db["orders"] if r[1] is not None],
        "items": [r for r in db["items"] if owner.get(r[0]) is not None],
        "regions": list(db["regions"]),
    }


def remove_unit(db: Mapping[str, Sequence[tuple[int, ...]]], unit: int) -> Database:
    """``db`` without customer ``unit`` and every row linked to it (its orders, their items)."""
    gone_orders = {o for o, c, _ in db["orders"] if c == unit}
    return {
        "customer": [r for r in db["customer"] if r[0] != unit],
        "orders": [r for r in db["orders"] if r[1] != unit],
        "items": [r for r in db["items"] if r[0] not in gone_orders],
        "regions": list(db["regions"]),
    }


def units(db: Mapping[str, Sequence[tuple[int, ...]]]) -> list[int]:
    """Every unit with a row: the customers, and the ids orders hold directly (customer 9 has
    orders but no customer row: a direct path's value is the unit id all the same); a NULL id
    is no unit."""
    return sorted(({c for c, _ in db["customer"]} | {c for _, c, _ in db["orders"]}) - {None})


_CONNECTION: list[duckdb.DuckDBPyConnection] = []
#: what each table of the connection holds now: a neighbour differs from its base in a few
#: tables, and the others (regions always) need not be written again
_LOADED: dict[str, list[tuple[int, ...]]] = {}


def load(db: Mapping[str, Sequence[tuple[int, ...]]]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB holding ``db`` (one connection per process, its tables replaced;
    callers only read it). :func:`world` writes each database once instead."""
    if not _CONNECTION:
        _CONNECTION.append(duckdb.connect(config={"threads": 1}))
    con = _CONNECTION[0]
    for table, columns in COLUMNS.items():
        rows = list(db[table])
        if _LOADED.get(table) == rows:
            continue
        con.execute(f"CREATE OR REPLACE TABLE {table} "
                    f"({', '.join(c + ' INTEGER' for c in columns)})")
        if rows:  # None is NULL
            values = ", ".join("(" + ", ".join("NULL" if v is None else str(v) for v in r) + ")"
                               for r in rows)
            con.execute(f"INSERT INTO {table} VALUES {values}")
        _LOADED[table] = rows
    return con


_WORLDS = SchemaWorlds(COLUMNS)


def world(db: Mapping[str, Sequence[tuple[int, ...]]]) -> duckdb.DuckDBPyConnection:
    """:func:`load`, each distinct database written once per process
    (tests.db_files.SchemaWorlds)."""
    return _WORLDS.connection(db)


def write_file(path: Path, db: Mapping[str, Sequence[tuple[int, ...]]]) -> Path:
    """A DuckDB file at ``path`` holding ``db`` (for a real Session on it)."""
    with writing(path) as con:
        for table, columns in COLUMNS.items():
            con.execute(f"CREATE TABLE {table} ({', '.join(c + ' INTEGER' for c in columns)})")
            if db[table]:
                insert_many(con, table, db[table])
    return path


def r2t_row(con: duckdb.DuckDBPyConnection, exact_sql: str, release: UnitRelease
            ) -> tuple[int | float, ...]:
    """The R2T levels of ``exact_sql`` (dpsql.units.rewrite's executed query) on ``con``, part
    after part as one flat row, read as the engine reads them
    (dpsql.units.execute.truncated_levels: the one row of truncated sums, or the histogram of
    contributions when every part is a COUNT; a NULL sum, over no unit, is 0)."""
    parts = truncated_levels(con.execute(exact_sql).fetchall(), release)
    return tuple(v for part in parts for v in part.tolist())
