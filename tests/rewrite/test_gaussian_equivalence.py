"""With noise switched off, a Gaussian release answers what the analyst's SQL answers, on
DuckDB and Spark (the default ``backend_name`` fixture runs both).

The Gaussian path shares the rewrite and the exact read with the Laplace path; what differs
is the noise plan and the release arithmetic (dpsql.noise.gaussian_release). Counts come back
exact; sums are snapped to the plan's grid g (a public power of two tied to the sensitivity,
coarser than the Laplace path's), so each is within g/2 of the reference and an exact multiple
of g; AVG = SUM/COUNT within g/2 divided by the count.
"""

from __future__ import annotations

import math

import pytest

from dpsql.budget import Budget
from dpsql.noise.plan import plan_noise
from dpsql.session import Session
from tests.shop_fixture import ZeroNoise

EPSILON, DELTA = 1.0, 1e-6

QUERIES = [
    ("SELECT COUNT(*) AS n FROM orders", ()),
    ("SELECT status, COUNT(*) AS n, SUM(order_cost) AS s FROM orders GROUP BY status", ()),
    ("SELECT SUM(age) AS s, AVG(age) AS a FROM customers WHERE age > ?", (30,)),
    ("SELECT product_id, COUNT(*) AS n FROM orders GROUP BY product_id", ()),
]


@pytest.fixture(scope="module")
def engine(shop, make_backend):
    metadata = shop.metadata()
    return Session(metadata, make_backend(shop.path, metadata), sampler=ZeroNoise())


@pytest.mark.parametrize(("sql", "params"), QUERIES)
def test_noise_off_gaussian_answer_is_the_analysts_sql(engine, reference, backend_name, sql,
                                                       params):
    if backend_name == "spark" and sql != QUERIES[1][0]:
        pytest.skip("on Spark one case (counts and sums, grouped): the exact read is shared "
                    "with the Laplace path, which tests/backends/test_spark.py covers")
    result = engine.run(sql, list(params), epsilon=EPSILON, delta=DELTA, mechanism="gaussian")
    assert "gaussian" in result.release.mechanism and "laplace" not in result.release.mechanism
    plans = plan_noise(engine.prepare(sql).analysis, Budget(EPSILON, DELTA, "gaussian"))
    grid = max((p.granularity or 0.0) for p in plans)
    want = sorted(reference.execute(sql, list(params)).fetchall(), key=repr)
    got = sorted(result.rows, key=repr)
    assert len(got) == len(want)
    for g_row, w_row in zip(got, want, strict=True):
        for g, w, name in zip(g_row, w_row, result.names, strict=True):
            if name == "n":
                assert g == w
            elif name == "s":
                assert abs(g - float(w)) <= grid / 2 and g / grid == math.floor(g / grid)
            elif name == "a":
                assert abs(g - float(w)) <= grid / 2 / 100  # every group has > 100 rows
            else:
                assert g == w
