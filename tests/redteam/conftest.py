"""Databases the red-team modules share (not a test module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.db_files import writing


@pytest.fixture(scope="module")
def parallel_db(tmp_path_factory) -> Path:
    """8 row groups (983,040 rows) of values in [0, 2^53) mixed with fractions below 1, in 5
    groups k: big enough that DuckDB scans them in parallel (~0.4 s to build)."""
    path = tmp_path_factory.mktemp("float_sums") / "parallel.duckdb"
    with writing(path) as con:
        con.execute(
            "CREATE TABLE t AS SELECT i::INTEGER AS i, (i % 5)::INTEGER AS k, CASE WHEN i % 3 = 0 "
            "THEN (hash(i) % 9007199254740992)::DOUBLE ELSE (hash(i * 7) % 1000) / 1000.0 END "
            "AS v FROM range(8 * 122880) r(i) ORDER BY i")
    return path
