"""dpsql.execute.post_check: post-processing SQL bound over empty tables before the charge."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.errors import ProgrammingError
from dpsql.execute.layout import Domains
from dpsql.execute.post import PostProcessor
from dpsql.execute.post_check import check_rows, check_tables, measurement_dtypes

DOMAINS = Domains([np.array(["a", "b"], dtype=object)], ["VARCHAR"])


@pytest.fixture
def post():
    processor = PostProcessor()
    yield processor
    processor.close()


def test_measurement_types_follow_the_noise():
    assert measurement_dtypes(["COUNT", "SUM"]) == [np.int64, np.float64]


def test_a_binder_error_is_refused(post):
    with pytest.raises(ProgrammingError, match="Nothing was charged"):
        check_rows(post.cursor(), "SELECT __k0 FROM __noisy WHERE __m0 > DATE '2020-01-01'",
                   (), [], DOMAINS, [np.int64])


def test_a_query_that_fails_only_on_some_values_passes(post):
    check_rows(post.cursor(), "SELECT __k0, 10 // __m0 FROM __noisy WHERE __k0 = 'a'", (),
               [], DOMAINS, [np.int64])


def test_a_cast_without_implementation_is_refused_on_one_row(post):
    with pytest.raises(ProgrammingError, match="Unimplemented type for cast"):
        check_rows(post.cursor(), "SELECT CAST(__m0 AS DATE) FROM __noisy", (), [], DOMAINS,
                   [np.int64])
    with pytest.raises(ProgrammingError, match="Unimplemented type for cast"):
        check_tables(post.cursor(),
                     [("__b0", ("SELECT __m0 AS c FROM __noisy", ()), DOMAINS, [np.int64])],
                     [], "SELECT CAST(c AS DATE) FROM __b0", ())


def test_keys_keep_their_type(post):
    # VARCHAR keys: comparing them with a string binds, with a number needs no cast either
    check_rows(post.cursor(), "SELECT upper(__k0) FROM __noisy", (), [], DOMAINS,
               [np.float64])
    with pytest.raises(ProgrammingError):
        check_rows(post.cursor(), "SELECT __k0 + 1 FROM __noisy", (), [], DOMAINS,
                   [np.float64])


def test_blocks_then_the_outer_query(post):
    block = ("__b0", ("SELECT __k0 AS k, __m0 AS c FROM __noisy", ()), DOMAINS, [np.int64])
    public = [("p", ("k", "label"), ("VARCHAR", "VARCHAR"), [("a", "A")])]
    check_tables(post.cursor(), [block], [], "SELECT k, c, label FROM __b0 JOIN p USING (k)",
                 (), public)
    with pytest.raises(ProgrammingError, match="Nothing was charged"):
        check_tables(post.cursor(), [block], [], "SELECT k FROM __b0 WHERE c > DATE '2020-01-01'",
                     (), public)
    # nothing is left behind in the post-processing DuckDB
    cur = post.cursor()
    assert cur.execute("SELECT COUNT(*) FROM duckdb_tables()").fetchone() == (0,)
    cur.close()
