"""A small shop database and its metadata, shared by the execution test suites (not a test module).

``build_shop(path)`` writes a DuckDB file with four tables, deterministic contents (seeded numpy
generator: the data are fixtures, not noise) and returns :class:`Shop` facts the tests need:

* ``customers`` (private, 300 rows): customer_id (unique), region (releasable, domain
  north/south/east/west), segment (releasable, domain consumer/business), age in [18, 90];
* ``products`` (public, 20 rows): product_id 1..20, category (5 values), price;
* ``orders`` (private, 3000 rows): order_id (unique), customer_id, product_id (releasable, domain
  the public products.product_id), quantity 1..5 (releasable, domain [1..5], bounds [0, 10]),
  order_cost a multiple of 1/4 in [0.25, 400] (bounds [0, 500]), status (releasable, domain
  new/shipped/returned);
* ``recommendations`` (private, 1200 rows): customer_id (1..340: some match no customer),
  product_id (one row, for customer 1, has a NULL product_id).

Every group-key value occurs in the data and lies in its declared domain, no group key is NULL,
and every SUM argument lies inside its bounds, so with zero noise the engine's answer equals the
plain SQL answer. Costs are multiples of 1/4, so a sum release's power-of-two grid represents
every exact sum exactly when the grid is at most 1/4 (a large epsilon ensures that).
``order_cost`` is NULL in a few rows (COUNT(x) differs from COUNT(*)).

Max frequencies in the metadata are the true ones, computed from the data.

DuckDB shares one database instance per file within a process and dpsql locks its
configuration, so ``build_shop`` writes with its own connection and CLOSES it before anyone opens
a dpsql backend; give each test module its own file.

The contents depend on the seed alone, so each process writes the database once per seed (to a
private template no caller sees or opens) and gives every caller a byte copy of that closed
file: ~0.4 CPU-s per build (the suite builds it a few dozen times: module fixtures on both xdist
workers, each server test's database) against ~1 ms per copy.
"""

from __future__ import annotations

import atexit
import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np

from dpsql.metadata import Metadata, loads_metadata

REGIONS = ("north", "south", "east", "west")
SEGMENTS = ("consumer", "business")
STATUSES = ("new", "shipped", "returned")
CATEGORIES = ("books", "garden", "games", "kitchen", "tools")

N_CUSTOMERS = 300
N_PRODUCTS = 20
N_ORDERS = 3000
N_RECOMMENDATIONS = 1200


class ZeroNoise:
    """A test Sampler that adds no noise and records the size of every noise request."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    @property
    def cells(self) -> int:
        return sum(self.sizes)

    def discrete_laplace(self, scale: float, size: int) -> np.ndarray:
        assert scale > 0 and math.isfinite(scale)
        self.sizes.append(size)
        return np.zeros(size, dtype=np.int64)

    def discrete_gaussian(self, sigma: float, size: int) -> np.ndarray:
        """The same for the Gaussian path (dpsql.noise.gaussian_release)."""
        return self.discrete_laplace(sigma, size)

    def uniform_words(self, size: int) -> np.ndarray:
        """The Bernoulli draws' words (dpsql.noise.bernoulli), all 2^52 (U = 1/2): the
        optimal partition selection keeps a group iff pi(n) > 1/2, its median decision, as
        zero noise is thresholding's."""
        self.sizes.append(size)
        return np.full(size, 1 << 52, dtype=np.int64)


@dataclass(frozen=True)
class Shop:
    """Where the shop database lives and the true max frequencies its metadata declares."""

    path: Path
    max_freq: dict[str, int]

    def metadata_yaml(self, *, status_domain: tuple[str, ...] = STATUSES) -> str:
        return shop_metadata_yaml(self.max_freq, status_domain=status_domain)

    def metadata(self, *, status_domain: tuple[str, ...] = STATUSES) -> Metadata:
        return loads_metadata(self.metadata_yaml(status_domain=status_domain))


def _flow(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(values) + "]"


class _AnyMaxFreq(dict):
    """Max frequencies for a use that never reads them (the server's catalog shadow): any
    value will do."""

    def __missing__(self, key: str) -> int:
        return 1


#: :func:`shop_metadata_yaml`'s max frequencies where none is read
ANY_MAX_FREQ: dict[str, int] = _AnyMaxFreq()


def shop_metadata_yaml(max_freq: dict[str, int], *,
                       status_domain: tuple[str, ...] = STATUSES) -> str:
    mf = max_freq
    return f"""\
tables:
  customers:
    columns:
      customer_id: {{max_freq: 1, type: INTEGER}}
      region: {{max_freq: {mf["customers.region"]}, releasable: true, type: VARCHAR,
                domain: {{values: {_flow(REGIONS)}}}}}
      segment: {{max_freq: {mf["customers.segment"]}, releasable: true, type: VARCHAR,
                 domain: {{values: {_flow(SEGMENTS)}}}}}
      age: {{bounds: [0, 120], type: INTEGER}}
  products:
    public: true
    columns:
      product_id: {{max_freq: 1, type: INTEGER}}
      category: {{max_freq: {mf["products.category"]}, type: VARCHAR}}
      price: {{type: DOUBLE}}
  orders:
    columns:
      order_id: {{max_freq: 1, type: INTEGER}}
      customer_id: {{max_freq: {mf["orders.customer_id"]}, type: INTEGER}}
      product_id: {{max_freq: {mf["orders.product_id"]}, releasable: true, type: INTEGER,
                    domain: {{table: products, column: product_id}}}}
      quantity: {{max_freq: {mf["orders.quantity"]}, releasable: true, bounds: [0, 10],
                  type: INTEGER, domain: {{values: [1, 2, 3, 4, 5]}}}}
      order_cost: {{bounds: [0, 500], type: DOUBLE}}
      status: {{max_freq: {mf["orders.status"]}, releasable: true, type: VARCHAR,
                domain: {{values: {_flow(status_domain)}}}}}
  recommendations:
    columns:
      customer_id: {{max_freq: {mf["recommendations.customer_id"]}, type: INTEGER}}
      product_id: {{max_freq: {mf["recommendations.product_id"]}, type: INTEGER}}
"""


def _literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows) -> None:
    """Insert ``rows`` with one multi-row VALUES statement (executemany is slow in DuckDB)."""
    values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows)
    con.execute(f"INSERT INTO {table} VALUES {values}")


#: seed -> the template file written once in this process and its true max frequencies
_TEMPLATES: dict[int, Shop] = {}


def build_shop(path: Path, *, seed: int = 20240611) -> Shop:
    """Write the shop database to ``path`` (a new file) and return its facts (a copy of this
    process's template for ``seed``: see the module docstring)."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"build_shop writes a new file: {path} exists")
    template = _TEMPLATES.get(seed)
    if template is None:
        folder = Path(tempfile.mkdtemp(prefix="dpsql-shop-template-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        template = _TEMPLATES[seed] = _write_shop(folder / "shop.duckdb", seed)
        # closed and checkpointed: the one file holds everything (no write-ahead log)
        assert [p.name for p in folder.iterdir()] == ["shop.duckdb"]
    shutil.copyfile(template.path, path)
    return Shop(path, dict(template.max_freq))


def _write_shop(path: Path, seed: int) -> Shop:
    rng = np.random.default_rng(seed)
    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE customers (customer_id INTEGER, region VARCHAR, "
                    "segment VARCHAR, age INTEGER)")
        insert_rows(con, "customers", [
            (i, REGIONS[i % 4], SEGMENTS[int(rng.integers(2))], int(rng.integers(18, 91)))
            for i in range(1, N_CUSTOMERS + 1)
        ])
        con.execute("CREATE TABLE products (product_id INTEGER, category VARCHAR, "
                    "price DOUBLE)")
        insert_rows(con, "products", [
            (p, CATEGORIES[p % 5], float(p) * 2.5) for p in range(1, N_PRODUCTS + 1)
        ])
        con.execute("CREATE TABLE orders (order_id INTEGER, customer_id INTEGER, "
                    "product_id INTEGER, quantity INTEGER, order_cost DOUBLE, status VARCHAR)")
        rows = []
        for i in range(1, N_ORDERS + 1):
            # every product and every customer appears; cost a multiple of 1/4 in [0.25, 400]
            product = (i % N_PRODUCTS) + 1 if i <= 2 * N_PRODUCTS else int(rng.integers(1, 21))
            customer = i if i <= N_CUSTOMERS else int(rng.integers(1, N_CUSTOMERS + 1))
            cost = None if i % 97 == 0 else int(rng.integers(1, 1601)) / 4
            rows.append((i, customer, product, int(rng.integers(1, 6)), cost,
                         STATUSES[int(rng.choice(3, p=[0.3, 0.6, 0.1]))]))
        insert_rows(con, "orders", rows)
        con.execute("CREATE TABLE recommendations (customer_id INTEGER, product_id INTEGER)")
        insert_rows(con, "recommendations", [
            (int(rng.integers(1, N_CUSTOMERS + 41)), int(rng.integers(1, 21)))
            for _ in range(N_RECOMMENDATIONS - 1)
        ] + [(1, None)])  # one NULL product: NOT IN over it differs from NOT EXISTS
        max_freq = {}
        for table, column in [("customers", "region"), ("customers", "segment"),
                              ("products", "category"), ("orders", "customer_id"),
                              ("orders", "product_id"), ("orders", "quantity"),
                              ("orders", "status"), ("recommendations", "customer_id"),
                              ("recommendations", "product_id")]:
            (mf,) = con.execute(
                f"SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM {table} GROUP BY {column})"
            ).fetchone()
            max_freq[f"{table}.{column}"] = int(mf)
    finally:
        con.close()
    return Shop(Path(path), max_freq)
