"""Sample-and-aggregate's sensitivity by brute force (docs/privacy.md, "Sample-and-aggregate").

For random tiny databases D (1-5 rows of the private table ``s(k, v)``, k from {1, 2, 3}, v
from {-2, 0, 1, 3, NULL}; a fixed public table ``p``), m in {2, 3} blocks, blocks keyed by
``k`` or by the whole row, and several block keys, this file

1. plans each query shape with the engine (dpsql.sample_aggregate: analysis, rewrite, release),
2. runs the engine's exact SQL (tests/bruteforce/sample_blocks.py) on DuckDB over D and EVERY
   neighbour D' (change one row of s to any other tuple of the domain) -- all of them in one
   statement: the exact query grouped by a database id as well as by the block, which is what
   running it on each database gives,
3. clamps and sums the block answers as the release does (NULL or an empty block: lo), and
4. checks ``|S(D) - S(D')| <= `` the sensitivity the release plan charges, 2 (hi - lo), for
   every output, and (distance two, small cases) the same between every neighbour D' and every
   neighbour D'' of it: the bound is global, so it holds at every distance.

``test_the_factor_two_is_attained`` shows the bound is tight: a change that empties one
block's minimum and fills another block reaches exactly 2 (hi - lo), so a plan charging
hi - lo would fail the checks above. A failure message prints D, D', the key and both sums:
a counterexample is a privacy bug.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsql.metadata import loads_metadata
from dpsql.metadata.model import Metadata, SampleAggregate
from tests.bruteforce.sample_blocks import Engine

EXAMPLES = int(os.environ.get("DPSQL_SOUNDNESS_EXAMPLES", "8"))
DERANDOMIZE = not os.environ.get("DPSQL_SOUNDNESS_RANDOM")

K_VALUES = (1, 2, 3)
V_VALUES = (-2, 0, 1, 3, None)
TUPLES = tuple(itertools.product(K_VALUES, V_VALUES))
PUBLIC_ROWS = ((1, 1), (2, 1), (2, 2), (3, 2))  # p(k, g): k = 2 matches twice
KEYS = (0, 7, 2026)

METADATA = """\
tables:
  s:
    sample_aggregate: {blocks: 2}
    columns:
      k: {type: INTEGER}
      v: {type: INTEGER}
  p:
    public: true
    columns:
      k: {type: INTEGER}
      g: {type: INTEGER}
"""

#: query shapes; each output is one template (bounds chosen so that clamping happens)
SHAPES = {
    "plain": "SELECT SAMPLE_AGGREGATE(MEDIAN(v), -1, 2), SAMPLE_AGGREGATE(AVG(v), -1, 2), "
             "SAMPLE_AGGREGATE(MIN(v), -1, 2), SAMPLE_AGGREGATE(MAX(v) - MIN(v), 0, 3), "
             "SAMPLE_AGGREGATE(COUNT(*), 0, 2), SAMPLE_AGGREGATE(SUM(v) / COUNT(*), -1, 2), "
             "SAMPLE_AGGREGATE(COUNT(v) / COUNT(*), 0, 1), "
             "SAMPLE_AGGREGATE(STDDEV_POP(v), 0, 2), "
             "SAMPLE_AGGREGATE(QUANTILE_DISC(v, 0.25), -2, 3), "
             "SAMPLE_AGGREGATE(MAX(k) - MIN(k), 0, 2), "
             "SAMPLE_AGGREGATE(COUNT(DISTINCT k), 0, 2) FROM s",
    "join": "SELECT SAMPLE_AGGREGATE(MEDIAN(s.v), -1, 2), SAMPLE_AGGREGATE(COUNT(*), 0, 3), "
            "SAMPLE_AGGREGATE(SUM(s.v * p.g), -2, 4) FROM s JOIN p ON s.k = p.k WHERE p.g = 1",
    "left": "SELECT SAMPLE_AGGREGATE(AVG(s.v + p.g), 0, 3), SAMPLE_AGGREGATE(COUNT(p.g), 0, 2) "
            "FROM s LEFT JOIN p ON s.k = p.k AND p.g = 2 WHERE s.v > -2 OR s.v IS NULL",
    "subquery": "SELECT SAMPLE_AGGREGATE(MAX(v), 0, 1) FROM s WHERE k IN "
                "(SELECT k FROM p WHERE g = 2)",
}

Rows = tuple[tuple[int, int | None], ...]


def metadata(blocks: int, by: str | None) -> Metadata:
    md = loads_metadata(METADATA)
    table = dataclasses.replace(md.tables["s"], sample_aggregate=SampleAggregate(blocks, by))
    return dataclasses.replace(md, tables={**md.tables, "s": table})


def neighbours(rows: Rows) -> Iterator[tuple[str, Rows]]:
    """Every database one changed row away: row i replaced by any other tuple."""
    for i, row in enumerate(rows):
        for new in TUPLES:
            if new != row:
                yield f"row {i} {row} -> {new}", (*rows[:i], new, *rows[i + 1:])


def assert_within(engine: Engine, base: Rows, key: int,
                  pairs: list[tuple[Rows, list]]) -> None:
    """For each (D1, [(what, D2), ...]): |S(D1) - S(D2)| <= the planned sensitivity."""
    dbs = [base] + [d for d1, others in pairs for d in (d1, *(d2 for _, d2 in others))]
    index = {d: i for i, d in enumerate(dict.fromkeys(dbs))}
    sums = engine.sums([{"s": d, "p": PUBLIC_ROWS} for d in index], key)
    limit = np.array([o.sensitivity for o in engine.outputs])
    for d1, others in pairs:
        for what, d2 in others:
            moved = np.abs(sums[index[d1]] - sums[index[d2]])
            bad = np.flatnonzero(moved > limit + 1e-9)
            assert not bad.size, (
                f"PRIVACY BUG: {engine.plan.names[bad[0]]}\n  D1 = {d1}\n  D2 = D1 with {what}\n"
                f"  key {key}: S = {sums[index[d1]][bad[0]]} vs {sums[index[d2]][bad[0]]}, "
                f"change {moved[bad[0]]} > 2 (hi - lo) = {limit[bad[0]]}")


rows_strategy = st.lists(st.sampled_from(TUPLES), min_size=1, max_size=5).map(tuple)


@pytest.mark.parametrize("shape", SHAPES)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(rows=rows_strategy, blocks=st.sampled_from((2, 3)), by=st.sampled_from(("k", None)))
def test_clamped_sum_moves_at_most_twice_the_width(shape: str, rows: Rows, blocks: int,
                                                     by: str | None):
    engine = Engine(SHAPES[shape], metadata(blocks, by))
    for key in KEYS:
        assert_within(engine, rows, key, [(rows, list(neighbours(rows)))])


@pytest.mark.parametrize("shape", ["plain", "join"])
@settings(max_examples=max(2, EXAMPLES // 2), deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.sampled_from(TUPLES), min_size=1, max_size=2).map(tuple),
       blocks=st.sampled_from((2, 3)))
def test_the_bound_holds_at_distance_one(shape: str, rows: Rows, blocks: int):
    engine = Engine(SHAPES[shape], metadata(blocks, "k"))
    at_most_one = [(rows, "D itself"), *((d1, what) for what, d1 in neighbours(rows))]
    assert_within(engine, rows, KEYS[1],
                  [(d1, list(neighbours(d1))) for d1, _ in at_most_one])


def test_the_factor_two_is_attained():
    """MIN(v) in [0, 1], blocks by k: D = {(a, 0), (a, 1)}, D' = {(b, 1), (a, 1)} with a, b in
    different blocks. Block(a)'s minimum rises 0 -> 1 and block(b) goes from empty (lo = 0) to
    1: S moves by 2 = 2 (hi - lo), for every key that separates a and b."""
    engine = Engine("SELECT SAMPLE_AGGREGATE(MIN(v), 0, 1) FROM s", metadata(2, "k"))
    assert engine.outputs[0].sensitivity == 2.0
    attained = []
    for key in range(8):
        for a, b in ((1, 2), (1, 3), (2, 3)):
            d, d_prime = ((a, 0), (a, 1)), ((b, 1), (a, 1))
            sums = engine.sums([{"s": d, "p": PUBLIC_ROWS}, {"s": d_prime, "p": PUBLIC_ROWS}],
                               key)
            attained.append(abs(sums[1][0] - sums[0][0]))
    assert max(attained) == 2.0  # = 2 (hi - lo): hi - lo alone would be too small
    assert min(attained) == 1.0  # a and b in one block: only that block moves
