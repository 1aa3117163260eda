"""The harness of the floating-point summation red team (tests/redteam/test_float_sum_attacks.py,
test_fixed_point_attacks.py, test_sum_error_attacks.py; not a test module).

Everything runs through the real engine (no mocks): the analysis, dpsql.rewrite.plan's executed
query, dpsql's own DuckDB backend on files made here (or one in-memory backend whose tables are
replaced, for the brute force), and the plan's exact values (dpsql.execute.exact.read_exact;
under a unit without GROUP BY the levels Q(tau_j), dpsql.units.execute.read_truncated). A move
is measured in exact rationals (``Fraction``): the float difference of 2^53 + 2 and 1.5 rounds
back to 2^53 and would hide an excess.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from dpsql.analysis.blocks import analyze_request
from dpsql.analysis.elastic import QueryAnalysis
from dpsql.backends.base import Backend
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.backends.stored import StoredFacts
from dpsql.budget import Budget
from dpsql.execute.exact import compile_plan, read_exact
from dpsql.metadata import Metadata, loads_metadata
from dpsql.noise.plan import plan_noise
from dpsql.rewrite.plan import plan_execution
from dpsql.units.execute import read_truncated
from dpsql.units.grid import part_grid, part_levels
from tests.db_files import insert_many, writing

#: 2^53: from here on the DOUBLE grid is coarser than 1 (ulp 2), so 1.5 added to it rounds
B53 = 2.0**53

Tables = dict[str, tuple[Sequence[str], Sequence[tuple[Any, ...]]]]  # name -> (columns, rows)

# ----------------------------------------------------------------------------- the harness


def make_db(path: Path, tables: Tables) -> Path:
    """A DuckDB file holding ``tables``, rows stored in the order given."""
    with writing(path) as con:
        for name, (columns, rows) in tables.items():
            con.execute(f"CREATE TABLE {name} ({', '.join(columns)})")
            if rows:
                insert_many(con, name, rows)
    return path


@contextmanager
def opened(path: Path, md: Metadata, threads: int | None = None) -> Iterator[DuckDBBackend]:
    """dpsql's backend on ``path``; with ``threads``, DuckDB's instance set to that many threads
    first (a plain connection to the same file shares the instance, and the backend then locks
    its configuration as always)."""
    pre = None
    if threads is not None:
        pre = duckdb.connect(str(path), read_only=True)
        pre.execute(f"SET threads={int(threads)}")
    backend = DuckDBBackend(path, md)
    try:
        yield backend
    finally:
        backend.close()
        if pre is not None:
            pre.close()


#: the in-memory backend :meth:`Query.in_memory` shares across the queries of a process: one
#: connection opened and locked down once (~15 ms each, ~150 queries in the two-stage red
#: team alone), its tables dropped at each use so a query sees only the tables it is given
_SHARED: list[DuckDBBackend] = []


def _shared_backend(md: Metadata) -> DuckDBBackend | None:
    """The shared in-memory backend, emptied; None when ``md`` declares a file source (the
    only thing a backend takes from the metadata: such a query gets a backend of its own)."""
    if any(t.source for t in md.tables.values()):
        return None
    if not _SHARED:
        _SHARED.append(DuckDBBackend(None, md))
    backend = _SHARED[0]
    con = backend._con  # tables only; settings are locked
    for (schema, name) in con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT temporary").fetchall():
        con.execute(f'DROP TABLE "{schema}"."{name}"')
    return backend


class Query:
    """One query's analysis and plan, run on any database file as the engine runs it."""

    def __init__(self, sql: str, md: Metadata) -> None:
        analysis = analyze_request(sql, md)
        assert isinstance(analysis, QueryAnalysis)
        self.sql, self.md, self.analysis = sql, md, analysis
        self.plan = plan_execution(analysis, md)
        unit = analysis.unit
        self.r2t = unit is not None and unit.r2t

    def exact(self, path: Path, threads: int | None = None, *, stored: bool = False
              ) -> list[np.ndarray]:
        """Per measurement its exact value in every bin; under a unit without GROUP BY, per
        R2T part its levels Q(tau_j). ``stored``: planned as the session plans it, with the
        backend's promises about the stored values (a clamp the data make the identity goes)."""
        with opened(path, self.md, threads) as backend:
            return self.read(backend, stored=stored)

    def on_spark(self, path: Path, folder: Path, spark: object) -> list[np.ndarray]:
        """:meth:`exact` of the database file ``path`` read by the Spark backend (its tables
        exported to parquet under ``folder``)."""
        from tests.recording import export_parquet, spark_backend_class, with_sources

        sources = export_parquet(path, folder)
        backend = spark_backend_class(False)(with_sources(self.md, sources), spark)
        try:
            return self.read(backend)
        finally:
            backend.close()

    def read(self, backend: Backend, *, stored: bool = False) -> list[np.ndarray]:
        """:meth:`exact` on any backend."""
        plan = (plan_execution(self.analysis, self.md, StoredFacts(backend)) if stored
                else self.plan)
        compiled = compile_plan(backend, plan)
        if self.r2t:
            assert self.analysis.unit is not None
            return read_truncated(backend, compiled, (), self.analysis.unit)
        return read_exact(backend, compiled).exact

    @contextmanager
    def in_memory(self) -> Iterator[Any]:
        """A function ``tables -> exact values`` on one in-memory DuckDB behind dpsql's backend
        (its tables replaced per database, rows stored in the order given; the plan compiled
        once): for the brute force, without a file per database."""
        shared = _shared_backend(self.md)
        backend = DuckDBBackend(None, self.md) if shared is None else shared
        compiled = compile_plan(backend, self.plan)
        con = backend._con  # the backend's own connection (tables only; settings are locked)

        def run(tables: Tables) -> list[np.ndarray]:
            for name, (columns, rows) in tables.items():
                con.execute(f"CREATE OR REPLACE TABLE {name} ({', '.join(columns)})")
                if rows:
                    insert_many(con, name, rows)
            if self.r2t:
                assert self.analysis.unit is not None
                return read_truncated(backend, compiled, (), self.analysis.unit)
            return read_exact(backend, compiled).exact

        try:
            yield run
        finally:
            if shared is None:
                backend.close()

    def claimed(self) -> list[list[float | Fraction]]:
        """The bound the noise plan uses on each value's move: per measurement its elastic
        sensitivity at distance 0 (per bin); under R2T, per part tau_j * b per level, exactly
        (levels reach 2^62: a float product would round them, as the SQL once did)."""
        unit = self.analysis.unit
        if self.r2t:
            assert unit is not None
            out: list[list[float | Fraction]] = []
            for part in unit.parts:
                bound = Fraction(part_grid(part, unit.unit)[0])
                out.append([t * bound for t in part_levels(part, unit.unit)])
            return out
        return [[p.elastic_sensitivity] for p in plan_noise(self.analysis, Budget(1.0, 1e-6))]


def excess(q: Query, d: list[np.ndarray], d2: list[np.ndarray]) -> list[str]:
    """Every value whose move between ``d`` and ``d2`` exceeds its claim, in exact rationals."""
    out = []
    for i, (a, b, claims) in enumerate(zip(d, d2, q.claimed(), strict=True)):
        a, b = np.atleast_1d(a), np.atleast_1d(b)
        for j, (x, y) in enumerate(zip(a.tolist(), b.tolist(), strict=True)):
            claim = claims[j] if len(claims) > 1 else claims[0]
            move = abs(Fraction(x) - Fraction(y))
            if move > Fraction(claim):
                out.append(f"value {i}[{j}]: {x!r} -> {y!r} moves by {move} > {claim!r}")
    return out


#: the thread counts a parallel read is repeated at (two runs at 2: a repeat may differ too)
THREAD_COUNTS = (1, 2, 2, 4)


def at_thread_counts(q: Query, path: Path) -> list[list[np.ndarray]]:
    """:meth:`Query.exact` of ``path`` at each of :data:`THREAD_COUNTS`."""
    return [q.exact(path, threads) for threads in THREAD_COUNTS]


def same(values: Sequence[list[np.ndarray]]) -> bool:
    """Whether every run returned bit-identical values."""
    first = values[0]
    return all(len(v) == len(first)
               and all(np.array_equal(np.atleast_1d(a).view(np.uint8),
                                      np.atleast_1d(b).view(np.uint8))
                       for a, b in zip(v, first, strict=True))
               for v in values[1:])


# ------------------------------------------------------------------ the worlds and databases

#: a row-level table t(i, v DOUBLE in [0, 1e16])
ROW_MD = loads_metadata("""
tables:
  t: {columns: {i: {type: INTEGER}, v: {type: DOUBLE, bounds: [0, 1.0e+16]}}}
""", "<float sums: rows>")
ROW_COLUMNS = ("i INTEGER", "v DOUBLE")
#: the parallel table of tests/redteam/conftest.py's ``parallel_db``, no bounds (the values it
#: is read for sit below the top level, where no clamp applies)
PARALLEL_MD = loads_metadata("tables:\n  t: {columns: {i: {type: INTEGER}, k: {type: INTEGER}, "
                             "v: {type: DOUBLE}}}\n", "<float sums: the parallel table>")


def t_rows(values: Sequence[float | None]) -> Tables:
    """Table t holding ``values`` (row i has i), stored in the order given."""
    return {"t": (ROW_COLUMNS, list(enumerate(values)))}


def visits_db(rows: Sequence[tuple[int, int, float | None]]) -> Tables:
    """Tables people and visits for ``rows`` (person, group, value), in the order given."""
    people = sorted({r[0] for r in rows})
    return {"people": (["pid INTEGER"], [(p,) for p in people]),
            "visits": (["v_pid INTEGER", "g INTEGER", "v DOUBLE"], list(rows))}




def items_db(rows: Sequence[tuple[int, int, float | None]]) -> Tables:
    """Tables customer, supplier and items for ``rows`` (customer, supplier, value)."""
    return {"customer": (["c_id INTEGER"], [(c,) for c in sorted({r[0] for r in rows})]),
            "supplier": (["s_id INTEGER"], [(s,) for s in sorted({r[1] for r in rows})]),
            "items": (["i_cust INTEGER", "i_supp INTEGER", "v DOUBLE"], list(rows))}


# ------------------------------------------------------------------------------- the claims


def conversion_residual(*values: float) -> Fraction:
    """What the one conversion of an exact integer sum S to DOUBLE may add to a neighbour's
    move, as dpsql.rewrite.fixed_point documents it: within 2^-51 |S| of S, per value."""
    return sum((abs(Fraction(v)) * Fraction(1, 2**51) for v in values), Fraction(0))


def moves(q: Query, d: list[np.ndarray], d2: list[np.ndarray]) -> list[tuple[Fraction, Fraction,
                                                                                 Fraction]]:
    """Per value: (exact move, claim, documented conversion residual of both values)."""
    out = []
    for a, b, claims in zip(d, d2, q.claimed(), strict=True):
        a, b = np.atleast_1d(a), np.atleast_1d(b)
        for j, (x, y) in enumerate(zip(a.tolist(), b.tolist(), strict=True)):
            claim = claims[j] if len(claims) > 1 else claims[0]
            out.append((abs(Fraction(x) - Fraction(y)), Fraction(claim),
                        conversion_residual(x, y)))
    return out


def unit_md(lo: str, hi: str, c: int, base: float | None = None,
            rows: int | None = None) -> Metadata:
    """One privacy unit (people) with visits(v_pid, g, v DOUBLE in [lo, hi]) (YAML numbers),
    max_contribution ``c``, max_rows_per_group ``rows`` (default ``c``), one group per person,
    and R2T's level base."""
    levels = "" if base is None else f", levels: {{base: {base}}}"
    return loads_metadata(f"""
privacy_unit: {{table: people, column: pid, max_contribution: {c}, max_groups: 1,
               max_rows_per_group: {c if rows is None else rows}{levels}}}
tables:
  people: {{columns: {{pid: {{type: INTEGER}}}}}}
  visits:
    unit: v_pid
    columns:
      v_pid: {{type: INTEGER}}
      g: {{type: INTEGER, releasable: true, domain: {{values: [1, 2]}}}}
      v: {{type: DOUBLE, bounds: [{lo}, {hi}]}}
""", "<float sums: unit brute force>")


def pair_md(lo: str, hi: str) -> Metadata:
    """Two privacy units (customer, supplier) with items(i_cust, i_supp, v DOUBLE in [lo, hi])
    (YAML numbers)."""
    return loads_metadata(f"""
privacy_unit:
  - {{table: customer, column: c_id, max_contribution: 2}}
  - {{table: supplier, column: s_id}}
tables:
  customer: {{columns: {{c_id: {{type: INTEGER}}}}}}
  supplier: {{columns: {{s_id: {{type: INTEGER}}}}}}
  items:
    unit: {{customer: i_cust, supplier: i_supp}}
    columns: {{i_cust: {{type: INTEGER}}, i_supp: {{type: INTEGER}},
              v: {{type: DOUBLE, bounds: [{lo}, {hi}]}}}}
""", "<float sums: two units brute force>")


#: one unit with v in [0, 2^53]: C = 2 rows for R2T, one group of one row per person for the
#: two-stage
UNIT_MD = unit_md("0", str(int(B53)), 2, rows=1)

#: the two-unit world with v in [0, 2^53]
PAIR_MD = pair_md("0", str(int(B53)))
