"""A partition selection that keeps no group, with an ORDER BY: an empty answer, not "a dpsql
bug" after the charge (QA round 2 of issue #17).

``sort_order``'s one-integer-key shortcut took the key's min() and max(), which numpy refuses
on zero bins (ValueError), so ``SELECT age, COUNT(*) .. GROUP BY age ORDER BY age`` over a
partition-selected key crashed after the charge whenever the noise kept no group: the analyst
paid and got an InternalError. The release of no group is a valid answer (post-processing of
the selection's noisy outcome) and must come back as zero rows."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.execute.post import sort_order
from dpsql.metadata import loads_metadata
from tests.db_files import writing
from tests.ledgers import charged, charging_session
from tests.shop_fixture import ZeroNoise


@pytest.mark.parametrize("keys", [
    [np.array([], dtype=np.int64)],  # one integer key: the radix shortcut
    [np.array([], dtype=np.int64), np.array([], dtype=np.int64)],  # folded integer keys
    [np.array([], dtype=np.float64), np.array([], dtype=np.int64)],  # lexsort
])
def test_sort_order_of_no_bins_is_empty(keys):
    order = sort_order(keys, 0)
    assert len(order) == 0 and order.dtype.kind in "iu"


_METADATA = """
privacy_unit: {table: people, column: pid, max_contribution: 8}
tables:
  people:
    columns:
      pid: {type: INTEGER}
      age: {type: INTEGER, bounds: [0, 120], releasable: true, partition_selection: true}
"""


@pytest.fixture
def session(tmp_path):
    path = tmp_path / "p.duckdb"
    with writing(path) as con:  # 30 people, each alone in their age: no group reaches tau
        con.execute("CREATE TABLE people AS SELECT i::INTEGER AS pid, i::INTEGER AS age "
                    "FROM range(30) t(i)")
    with charging_session(path, loads_metadata(_METADATA), tmp_path / "ledger.sqlite",
                          epsilon=10.0, delta=1e-3, sampler=ZeroNoise()) as session:
        yield session


@pytest.mark.parametrize("order", ["age", "n DESC", "age DESC, n"])
def test_no_kept_group_with_an_order_by_is_an_empty_answer(session, order):
    result = session.run(f"SELECT age, COUNT(*) AS n FROM people GROUP BY age ORDER BY {order}",
                         epsilon=1.0, delta=1e-5)
    assert result.rows == []
    assert [c.epsilon for c in charged(session)] == [1.0]

