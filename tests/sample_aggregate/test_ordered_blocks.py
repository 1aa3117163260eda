"""Sample-and-aggregate's block answers do not depend on the order the database reads the rows
in (dpsql.sample_aggregate.rewrite._ordered): a floating-point SUM, AVG or STDDEV of a block is
a function of the block's values alone, so a neighbour changes one block's answer only."""

from __future__ import annotations

import random

from dpsql.backends.duckdb import DuckDBBackend
from dpsql.metadata import loads_metadata
from dpsql.sample_aggregate.prepared import prepare_sample_aggregate
from dpsql.sample_aggregate.rewrite import KEY_PARAM, block_expression
from tests.db_files import writing

METADATA = loads_metadata("""\
tables:
  u:
    sample_aggregate: {blocks: 3}
    columns:
      id: {type: INTEGER}
      v: {type: DOUBLE}
""")
SQL = ("SELECT SAMPLE_AGGREGATE(SUM(v), -1e16, 1e16), SAMPLE_AGGREGATE(AVG(v), -1e16, 1e16), "
       "SAMPLE_AGGREGATE(STDDEV(v), 0, 1e16) FROM u")


def _values(n: int, rng: random.Random) -> list[float]:
    """Large terms that cancel and small ones that vanish next to them: their floating-point
    sum depends on the order."""
    return [rng.choice([1e15, -1e15, 3.3e14]) if rng.random() < 0.1
            else rng.uniform(-1, 1) * rng.choice([1e-3, 0.1, 7.0]) for _ in range(n)]


def test_block_answers_are_the_same_in_any_row_order(tmp_path):
    rng = random.Random(23)
    rows = list(enumerate(_values(150_000, rng)))  # two row groups: a parallel aggregate
    answers, plain = set(), set()
    for attempt in range(2):
        rng.shuffle(rows)
        path = tmp_path / f"u{attempt}.duckdb"
        with writing(path) as con:
            con.execute("CREATE TABLE u AS SELECT i::INTEGER AS id, v FROM "
                        "(SELECT unnest(?) AS i, unnest(?) AS v)",
                        [[i for i, _ in rows], [v for _, v in rows]])
        backend = DuckDBBackend(str(path), METADATA)
        try:
            prepared = prepare_sample_aggregate(SQL, METADATA, backend)
            assert prepared.plan.exact_sql.count("ORDER BY") == 3
            got, _ = backend.execute(prepared.compiled, prepared.bindings([], 7))
            answers.add(tuple(sorted(got)))
            # the same blocks without the order: what the ORDER BY protects against
            block = block_expression(prepared.query, METADATA).sql(dialect="duckdb")
            unordered, _ = backend.execute(
                f"SELECT {block} AS b, SUM(v) FROM u AS u GROUP BY b ORDER BY b",
                {KEY_PARAM: 7})
            plain.add(tuple(unordered))
        finally:
            backend.close()
    assert len(answers) == 1
    assert len(plain) > 1  # the unordered sums do move: the test is not vacuous
