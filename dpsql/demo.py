"""The demo "shop": a synthetic DuckDB database, its reviewed metadata and a ledger with a budget.

:func:`create_demo` writes, once, into a folder (default :func:`demo_home`):

* ``shop.duckdb`` with ``customers`` (private), ``orders`` (private), ``products`` (public) and
  ``recommendations`` (private), generated from a fixed seed (same files on every machine
  with the same numpy and DuckDB versions);
* ``shop.yaml``: the metadata drafted by :func:`dpsql.metadata.build.build_metadata`, plus the
  bounds and domains a data owner would declare after review (see ``_REVIEWED``), and the
  ledger's path;
* ``ledger.sqlite``: a budget for the analyst ``demo`` (:data:`DEMO_EPSILON`,
  :data:`DEMO_DELTA`);
* ``demo.json``: written last, it marks the set as complete; without it the set is rebuilt.

No CLI code here; ``dpsql demo`` (``dpsql.cli.demo``) and ``dpsql shell --demo`` use it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from dpsql.accounting import Ledger, database_identity
from dpsql.errors import OperationalError
from dpsql.metadata import Column, Domain, Metadata, dump_metadata, load_metadata, loads_metadata
from dpsql.metadata.build import build_metadata

DEMO_ANALYST = "demo"
DEMO_EPSILON = 10.0
DEMO_DELTA = 1e-6
#: bump when the generated data or metadata change, so old caches are rebuilt
DEMO_VERSION = 1

STATUSES = ("delivered", "shipped", "processing", "cancelled", "returned")
_STATUS_P = (0.78, 0.08, 0.04, 0.06, 0.04)
COUNTRIES = ("DE", "ES", "FR", "IT", "NL", "PL", "SE", "UK")
_COUNTRY_P = (0.22, 0.12, 0.2, 0.13, 0.07, 0.09, 0.05, 0.12)
CATEGORIES = ("books", "electronics", "garden", "grocery", "home", "sports", "toys", "fashion")
_FIRST_DAY = _dt.date(2023, 1, 1)
_DAYS = 730

#: the owner's review: (table, column) -> settings added to the drafted metadata. Bounds are
#: policy (what one row may contribute), not observed min/max; domains are values the owner
#: agrees to publish as bins.
_REVIEWED: dict[tuple[str, str], dict[str, Any]] = {
    ("orders", "status"): {"releasable": True, "domain": Domain(values=STATUSES)},
    ("orders", "product_id"): {
        "releasable": True, "domain": Domain(table="products", column="product_id")
    },
    ("orders", "order_cost"): {"bounds": (0, 1000)},
    ("orders", "quantity"): {"bounds": (1, 10)},
    ("customers", "country"): {"releasable": True, "domain": Domain(values=COUNTRIES)},
    ("customers", "age"): {"bounds": (18, 100)},
    ("recommendations", "product_id"): {
        "releasable": True, "domain": Domain(table="products", column="product_id")
    },
    ("recommendations", "score"): {"bounds": (0, 1)},
}


@dataclass(frozen=True)
class DemoFiles:
    """Where the demo lives and how big it is."""

    folder: Path
    database: Path
    metadata: Path
    ledger: Path
    customers: int
    orders: int
    products: int

    @property
    def manifest(self) -> Path:
        return self.folder / "demo.json"


def demo_home() -> Path:
    """The demo folder: ``$DPSQL_HOME/demo``, else ``~/.cache/dpsql/demo``."""
    return dpsql_home() / "demo"


def dpsql_home() -> Path:
    """dpsql's per-user cache folder: ``$DPSQL_HOME``, else ``~/.cache/dpsql``."""
    env = os.environ.get("DPSQL_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dpsql"


def _files(folder: Path, customers: int, orders: int, products: int) -> DemoFiles:
    folder = folder.expanduser().absolute()
    return DemoFiles(folder, folder / "shop.duckdb", folder / "shop.yaml",
                     folder / "ledger.sqlite", customers, orders, products)


def existing_demo(folder: str | os.PathLike | None = None) -> DemoFiles | None:
    """The complete demo in ``folder`` (default :func:`demo_home`), or None if there is none."""
    folder = Path(folder) if folder is not None else demo_home()
    try:
        info = json.loads((folder / "demo.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("version") != DEMO_VERSION:
        return None
    try:
        files = _files(folder, int(info["customers"]), int(info["orders"]),
                       int(info["products"]))
    except (KeyError, TypeError, ValueError):
        return None
    if not all(p.is_file() for p in (files.database, files.metadata, files.ledger)):
        return None
    return files


def create_demo(
    folder: str | os.PathLike | None = None,
    *,
    customers: int = 50_000,
    orders: int = 1_000_000,
    products: int = 1_000,
    rebuild: bool = False,
    seed: int = 20240601,
) -> DemoFiles:
    """Create the demo shop in ``folder`` (default :func:`demo_home`) unless it already exists.

    An existing complete demo is reused as is (whatever its size) unless ``rebuild``. The data
    depend only on the sizes and ``seed``. Raises OperationalError if the folder is unusable.
    """
    folder = Path(folder) if folder is not None else demo_home()
    if not rebuild:
        found = existing_demo(folder)
        if found is not None:
            return found
    if min(customers, orders, products) < 1:
        raise OperationalError("demo sizes must be positive numbers of rows")
    files = _files(folder, customers, orders, products)
    try:
        files.folder.mkdir(parents=True, exist_ok=True)
        # The manifest goes first and last: an interrupted build leaves no manifest, so the
        # next run rebuilds instead of trusting half-written files.
        files.manifest.unlink(missing_ok=True)
        for path in (files.database, files.metadata, files.ledger):
            _remove(path)
        tmp = files.database.with_name(files.database.name + ".tmp")
        _remove(tmp)
        with duckdb.connect(str(tmp)) as con:
            _generate(con, np.random.default_rng(seed), customers, orders, products)
            con.execute("CHECKPOINT")
        os.replace(tmp, files.database)
        _write_metadata(files)
        with Ledger(files.ledger) as ledger:
            ledger.set_budget(database_identity(files.database), DEMO_ANALYST, DEMO_EPSILON,
                              DEMO_DELTA)
        info = {"version": DEMO_VERSION, "seed": seed, "customers": customers,
                "orders": orders, "products": products}
        files.manifest.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise OperationalError(f"cannot create the demo in {files.folder}: {exc}") from None
    except duckdb.Error as exc:
        raise OperationalError(f"cannot create the demo database: {exc}") from None
    return files


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    for extra in (path.with_name(path.name + ".wal"), path.with_name(path.name + "-wal"),
                  path.with_name(path.name + "-shm")):
        extra.unlink(missing_ok=True)


def _generate(con: duckdb.DuckDBPyConnection, rng: np.random.Generator, n_customers: int,
              n_orders: int, n_products: int) -> None:
    """Fill the four tables.

    numpy's seeded generator is right HERE because it makes synthetic demo DATA that must be
    reproducible; it must never be used for privacy noise (that is dpsql.noise.mechanisms' job).
    """
    # products (public): id, name, category, price
    product_id = np.arange(1, n_products + 1, dtype=np.int64)
    category = rng.integers(0, len(CATEGORIES), n_products)
    price = np.round(rng.lognormal(3.2, 0.7, n_products).clip(1.0, 240.0), 2)
    _load(con, "products", {
        "product_id": product_id,
        "name": np.array([f"product {i:04d}" for i in product_id], dtype=object),
        "category": np.array(CATEGORIES, dtype=object)[category],
        "price": price,
    })

    # customers (private): id, country, age, signup date
    customer_id = np.arange(1, n_customers + 1, dtype=np.int64)
    _load(con, "customers", {
        "customer_id": customer_id,
        "country": np.array(COUNTRIES, dtype=object)[
            rng.choice(len(COUNTRIES), n_customers, p=_COUNTRY_P)],
        "age": rng.integers(18, 90, n_customers).astype(np.int32),
        "signup_day": rng.integers(0, _DAYS, n_customers).astype(np.int32),
    })

    # orders (private): a few very active customers and best-selling products, as in real
    # shops, so max frequencies are well above the averages
    activity = rng.gamma(0.8, 1.0, n_customers)
    popularity = 1.0 / np.arange(1, n_products + 1) ** 0.9
    rng.shuffle(popularity)
    prod = rng.choice(n_products, n_orders, p=popularity / popularity.sum())
    quantity = rng.geometric(0.6, n_orders).clip(1, 4).astype(np.int32)
    _load(con, "orders", {
        "order_id": np.arange(1, n_orders + 1, dtype=np.int64),
        "customer_id": rng.choice(n_customers, n_orders, p=activity / activity.sum()) + 1,
        "product_id": product_id[prod],
        "status": np.array(STATUSES, dtype=object)[
            rng.choice(len(STATUSES), n_orders, p=_STATUS_P)],
        "quantity": quantity,
        "order_cost": np.round(price[prod] * quantity, 2),
        "order_day": rng.integers(0, _DAYS, n_orders).astype(np.int32),
    })

    # recommendations (private): 0-8 recommended products per customer, with a score
    per_customer = rng.integers(0, 9, n_customers)
    n_recs = int(per_customer.sum())
    _load(con, "recommendations", {
        "customer_id": np.repeat(customer_id, per_customer),
        "product_id": product_id[rng.choice(n_products, n_recs, p=popularity / popularity.sum())],
        "score": np.round(rng.random(n_recs), 3),
    })

    # days -> real DATE columns (numpy has no date type DuckDB reads directly from a dict)
    start = _FIRST_DAY.isoformat()
    for table, day, name in (("customers", "signup_day", "signup_date"),
                             ("orders", "order_day", "order_date")):
        con.execute(f"ALTER TABLE {table} ADD COLUMN {name} DATE")
        con.execute(f"UPDATE {table} SET {name} = DATE '{start}' + {day}")
        con.execute(f"ALTER TABLE {table} DROP COLUMN {day}")


def _load(con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, np.ndarray]) -> None:
    con.register("_demo_src", columns)
    try:
        con.execute(f"CREATE TABLE {name} AS SELECT * FROM _demo_src")
    finally:
        con.unregister("_demo_src")


def _write_metadata(files: DemoFiles) -> None:
    draft = build_metadata(files.database, public=["products"])
    md = loads_metadata(draft, files.metadata)
    md = review(md)
    md = dataclasses.replace(md, ledger=str(files.ledger))
    header = (
        "# dpsql demo shop: drafted by build_metadata, then reviewed (bounds and domains below\n"
        "# are the owner's decisions). OWNER-ONLY in real life: max_freq and rows describe the\n"
        "# private data.\n"
    )
    text = header + dump_metadata(md)
    files.metadata.write_text(text, encoding="utf-8")
    load_metadata(files.metadata)  # fail now, not in the tour, if the file does not load


def review(md: Metadata) -> Metadata:
    """``md`` with the owner's reviewed bounds and domains (``_REVIEWED``) applied."""
    tables = dict(md.tables)
    for (table_name, column_name), settings in _REVIEWED.items():
        table = tables[table_name]
        column: Column = table.columns[column_name]
        columns = dict(table.columns)
        columns[column_name] = dataclasses.replace(column, **settings)
        tables[table_name] = dataclasses.replace(table, columns=columns)
    return dataclasses.replace(md, tables=tables)
