"""A tiny TPC-H-like DuckDB database for the unit tests (tests/metadata, tests/cli), with
hand-counted orphans, NULLs and keys."""

from __future__ import annotations

from pathlib import Path

from tests.db_files import writing

# customer is the unit (c_custkey 1..4, unique). orders: o_custkey 1, 1, 2, NULL, 9 (9 is an
# orphan). lineitem: l_orderkey 10, 10, 11, 12, NULL, 99 (99 an orphan, one NULL). l_suppkey
# and l_linenumber hold values that all occur in c_custkey, by coincidence: the names say
# nothing of the kind, so build must not propose them. supplier links to no customer.
SETUP = """
CREATE TABLE customer (c_custkey BIGINT, c_name VARCHAR, c_nationkey INTEGER);
INSERT INTO customer VALUES (1, 'a', 0), (2, 'b', 1), (3, 'c', 1), (4, 'd', 2);
CREATE TABLE orders (o_orderkey BIGINT, o_custkey BIGINT, o_status VARCHAR);
INSERT INTO orders VALUES (10, 1, 'F'), (11, 1, 'O'), (12, 2, 'F'), (13, NULL, 'F'),
                          (14, 9, 'O');
CREATE TABLE lineitem (l_orderkey BIGINT, l_suppkey BIGINT, l_linenumber INTEGER);
INSERT INTO lineitem VALUES (10, 1, 1), (10, 2, 2), (11, 1, 1), (12, 3, 1), (NULL, 1, 1),
                            (99, 2, 1);
CREATE TABLE supplier (s_suppkey BIGINT, s_name VARCHAR);
INSERT INTO supplier VALUES (1, 'x'), (2, 'y'), (3, 'z');
CREATE TABLE nation (n_nationkey INTEGER, n_name VARCHAR);
INSERT INTO nation VALUES (0, 'A'), (1, 'B'), (2, 'C');
"""

METADATA = """\
privacy_unit: {table: customer, column: c_custkey}
tables:
  customer: {columns: {c_custkey: {}, c_name: {}, c_nationkey: {}}}
  orders: {unit: o_custkey, columns: {o_orderkey: {}, o_custkey: {}, o_status: {}}}
  lineitem:
    unit: {via: l_orderkey, to: orders.o_orderkey}
    columns: {l_orderkey: {}, l_suppkey: {}, l_linenumber: {}}
  supplier: {public: true, columns: {s_suppkey: {}, s_name: {}}}
  nation: {public: true, columns: {n_nationkey: {}, n_name: {}}}
"""


def make_db(folder: Path, extra: str = "") -> Path:
    path = folder / "units.duckdb"
    with writing(path) as con:
        con.execute(SETUP + extra)
    return path
