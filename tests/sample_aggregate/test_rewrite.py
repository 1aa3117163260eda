"""dpsql/sample_aggregate/rewrite.py with noise off: the one-pass query returns, for every
non-empty block, exactly the analyst's expression over that block's rows (DuckDB, and Spark,
where the quantiles are translated: dpsql.backends.spark_quantiles).

The reference splits ``t`` (``u``) into blocks with the same keyed hash in plain DuckDB, copies
each block with the public table into an in-memory database, and runs the analyst's SQL
without the wrapper there. Blocks whose joined, filtered relation is empty must be absent (the
release counts them as the lower bound).
"""

from __future__ import annotations

import math

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from dpsql.sample_aggregate.analysis import WRAPPER
from dpsql.sample_aggregate.prepared import prepare_sample_aggregate
from dpsql.sample_aggregate.rewrite import KEY_PARAM, block_expression
from tests.sample_aggregate.world import build, metadata

KEY = 20261126
MD = metadata()

CASES = [
    ("SELECT SAMPLE_AGGREGATE(MEDIAN(x), 0, 100) FROM t", []),
    ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 20), SAMPLE_AGGREGATE(AVG(x), 0, 100) FROM t", []),
    ("SELECT SAMPLE_AGGREGATE(SUM(t.x * p.w) / COUNT(DISTINCT t.cid), 0, 500) "
     "FROM t JOIN p ON t.g = p.g WHERE t.n > ?", [1]),
    ("SELECT SAMPLE_AGGREGATE(MAX(x) - MIN(x), 0, 100), SAMPLE_AGGREGATE(QUANTILE_CONT(x, 0.25)"
     ", 0, 100), SAMPLE_AGGREGATE(MAX(n), 0, 5) FROM t LEFT JOIN p ON t.g = p.g AND p.w > 1", []),
    ("SELECT SAMPLE_AGGREGATE(STDDEV(x) + VAR_POP(n), 0, 1000), SAMPLE_AGGREGATE(CORR(x, n), "
     "-1, 1) FROM t WHERE g IN (SELECT g FROM p WHERE w >= 1)", []),
    ("SELECT SAMPLE_AGGREGATE(COUNT(n) / (COUNT(*) - 5), -5, 5) FROM t WHERE x < ?", [60.0]),
    # each floating-point aggregate ordered by its arguments (Spark: a fold over them sorted)
    ("SELECT SAMPLE_AGGREGATE(SUM(DISTINCT n) + AVG(DISTINCT x), 0, 500), SAMPLE_AGGREGATE("
     "VARIANCE(x) + STDDEV_POP(n) + COVAR_SAMP(x, n) + COVAR_POP(n, x), -1e4, 1e4) FROM t", []),
    ("SELECT SAMPLE_AGGREGATE(AVG(v) + ?, 0, 30) FROM u", [0.5]),
    ("SELECT SAMPLE_AGGREGATE(CAST(MIN(g) AS INTEGER) + QUANTILE_DISC(n, 0.5), 0, 9) FROM t "
     "WHERE x > (SELECT AVG(w) FROM p)", []),
]


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    return build(tmp_path_factory.mktemp("sa_rewrite") / "world.duckdb")


@pytest.fixture(scope="module")
def backend(database, make_backend):
    return make_backend(database, MD)


def unwrapped(sql: str) -> str:
    """The analyst's SQL with each SAMPLE_AGGREGATE(e, lo, hi) replaced by e."""
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    for node in list(tree.find_all(exp.Anonymous)):
        if str(node.this).lower() == WRAPPER:
            node.replace(node.expressions[0])
    return tree.sql(dialect="duckdb")


@pytest.fixture(scope="module")
def splits(backend) -> dict[str, list[tuple]]:
    """The rows of each split query run on ``backend`` (the cases over one table send the
    same text: it runs once per backend)."""
    return {}


def split(backend, prepared, memo: dict[str, list[tuple]]) -> list[tuple]:
    """Every row of the private table with its block last, by the backend's own keyed hash
    (the block expression the engine groups by: its values differ between backends)."""
    q = prepared.query
    columns = ", ".join(f"{q.alias}.{c}" for c in MD.tables[q.table].columns)
    block = block_expression(q, MD).sql(dialect="duckdb")
    sql = backend.compile(f"SELECT {columns}, {block} FROM {q.table} AS {q.alias}")
    if sql not in memo:
        memo[sql] = backend.execute(sql, {KEY_PARAM: KEY})[0]
    return memo[sql]


def reference(database, sql: str, params: list, table: str, rows: list[tuple], blocks: int):
    """{block: answers} over the blocks whose relation is non-empty, in plain DuckDB."""
    con = duckdb.connect(str(database), read_only=True)
    names = [d[0] for d in con.execute(f"SELECT * FROM {table} LIMIT 0").description]
    public = con.execute("SELECT * FROM p").fetchall()
    con.close()
    inner = unwrapped(sql)
    tree = sqlglot.parse_one(sql, dialect="duckdb")
    count = tree.copy()
    count.set("expressions", [exp.Count(this=exp.Star())])
    out = {}
    mem = duckdb.connect()  # one instance (~16 ms of CPU each), the block's table replaced
    mem.execute("CREATE TABLE p (g VARCHAR, w DOUBLE)")
    mem.executemany("INSERT INTO p VALUES (?, ?)", public)
    types = {"t": "id INTEGER, cid INTEGER, x DOUBLE, g VARCHAR, n INTEGER",
             "u": "id INTEGER, v DOUBLE"}[table]
    for b in range(blocks):
        mem.execute(f"CREATE OR REPLACE TABLE {table} ({types})")
        block_rows = [r[:-1] for r in rows if r[-1] == b]
        if block_rows:
            marks = ", ".join("?" for _ in names)
            mem.executemany(f"INSERT INTO {table} VALUES ({marks})", block_rows)
        n_where = [v for v in params] if "?" in str(tree.args.get("where")) else []
        if mem.execute(count.sql(dialect="duckdb"), n_where).fetchone()[0]:
            out[b] = tuple(mem.execute(inner, params).fetchone())
    mem.close()
    return out


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("sql, params", CASES, ids=[c[0][:60] for c in CASES])
def test_block_answers_are_the_query_over_each_block(database, backend, splits, sql, params):
    prepared = prepare_sample_aggregate(sql, MD, backend)
    rows, _ = backend.execute(prepared.compiled, prepared.bindings(params, KEY))
    got = {r[0]: r[1:] for r in rows}
    assert len(got) == len(rows)  # one row per block
    table = prepared.query.table
    setting = MD.tables[table].sample_aggregate
    assert setting is not None
    want = reference(database, sql, params, table, split(backend, prepared, splits), setting.blocks)
    assert set(got) == set(want)
    assert len(want) >= 2  # the split is not degenerate
    for b, answers in want.items():
        assert all(_same(g, w) for g, w in zip(got[b], answers, strict=True)), (b, got, want)


def test_the_split_depends_on_the_key(backend):
    """Which customers share a block changes with the key, for m = 4 too (a power of two:
    DuckDB's HASH(key, x) alone only relabels one split; the outer HASH mixes the key in)."""
    prepared = prepare_sample_aggregate("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t", MD,
                                        backend)
    relations = set()
    for key in range(6):  # until two keys split differently (each read is a Spark job)
        rows = _split_with_key(backend, prepared, key)
        block_of = {r[1]: r[-1] for r in rows}  # cid -> block (by: cid)
        relations.add(frozenset((a, b) for a in block_of for b in block_of
                                if a < b and block_of[a] == block_of[b]))
        if len(relations) > 1:
            break
    assert len(relations) > 1


def _split_with_key(backend, prepared, key: int) -> list[tuple]:
    q = prepared.query
    block = block_expression(q, MD).sql(dialect="duckdb")
    sql = f"SELECT {q.alias}.id, {q.alias}.cid, {block} FROM {q.table} AS {q.alias}"
    rows, _ = backend.execute(backend.compile(sql), {KEY_PARAM: key})
    return rows
