"""The brute-force harness of sample-and-aggregate (not a test module): the engine's exact
query for one SAMPLE_AGGREGATE query, run over many tiny databases in one DuckDB statement,
and the clamped block sums the release noises (tests/bruteforce/test_sample_aggregate.py,
tests/fuzz/test_grammar_bruteforce.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import duckdb
import numpy as np
import sqlglot
from sqlglot import exp

from dpsql.budget import Budget
from dpsql.metadata.model import Metadata
from dpsql.sample_aggregate.analysis import analyze_sample_aggregate
from dpsql.sample_aggregate.release import OutputNoise, clamped_sums, plan_release
from dpsql.sample_aggregate.rewrite import KEY_PARAM, plan_sample_aggregate


def batched(exact_sql: str) -> str:
    """The engine's exact query, grouped by a database id ``__db`` of the private table as
    well as by block (what running it once per database returns, tagged with the database)."""
    tree = sqlglot.parse_one(exact_sql, dialect="duckdb")
    inner = tree.find(exp.Subquery).this
    alias = inner.args["from_"].this.alias_or_name
    inner.select(exp.alias_(exp.column("__db", table=alias), "__db"), copy=False)
    inner.args["group"].append("expressions", exp.column("__db", table=alias))
    tree.select(exp.column("__db", table="__sa"), copy=False)
    return tree.sql(dialect="duckdb")


_CONNECTION: list[duckdb.DuckDBPyConnection] = []


def _connection() -> duckdb.DuckDBPyConnection:
    """One in-memory DuckDB per process (opening one costs more than a query here)."""
    if not _CONNECTION:
        _CONNECTION.append(duckdb.connect(config={"threads": 1}))
    return _CONNECTION[0]


def _values(rows: Sequence[tuple]) -> str:
    return ", ".join("(" + ", ".join("NULL" if v is None else str(v) for v in row) + ")"
                     for row in rows)


class Engine:
    """One S&A query's plan on one metadata, evaluated on many databases at once: the private
    table gets a database id ``__db`` (the exact query groups by it as well), every other
    (public) table holds the first database's rows. Every column is an INTEGER."""

    def __init__(self, sql: str, md: Metadata) -> None:
        query = analyze_sample_aggregate(sql, md)
        self.md, self.table = md, query.table
        self.plan = plan_sample_aggregate(query, md)
        self.outputs: Sequence[OutputNoise] = plan_release(self.plan, Budget(1.0), "bf")[0]
        self.sql = batched(self.plan.exact_sql)

    def sums(self, databases: Sequence[Mapping[str, Sequence[tuple]]],
             key: int) -> np.ndarray:
        """(database, output) -> the clamped sum S the release noises."""
        con = _connection()
        for name, table in self.md.tables.items():
            private = name == self.table
            columns = (["__db"] if private else []) + list(table.columns)
            rows = ([(d, *row) for d, db in enumerate(databases) for row in db[name]]
                    if private else list(databases[0][name]))
            ddl = ", ".join(f"{c} INTEGER" for c in columns)
            con.execute(f"CREATE OR REPLACE TABLE {name} ({ddl})")
            if rows:
                con.execute(f"INSERT INTO {name} VALUES {_values(rows)}")
        result = con.execute(self.sql, {KEY_PARAM: key}).fetchall()
        m, n = self.plan.blocks, len(self.outputs)
        answers = np.full((len(databases), n, m), np.nan)
        for row in result:
            block, values, db = row[0], row[1:-1], row[-1]
            assert 0 <= block < m
            answers[db, :, block] = [np.nan if x is None else float(x) for x in values]
        return np.array([clamped_sums(a, self.outputs) for a in answers])
