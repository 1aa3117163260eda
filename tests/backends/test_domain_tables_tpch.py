"""TPC-H Q21 and other GROUP BY domains on a tiny TPC-H database, noise off: the answer with
the public domain read from the table the backend registered (and the domains kept by the
session's memo on a second run) is the answer with the DISTINCT scan of every run, and its
non-empty bins are plain SQL's groups, in plain SQL's order (dpsql.backends.duckdb's
``domain_table``, dpsql.execute.exact.DomainMemo, dpsql.execute.post's sort shortcuts).

Domains of four kinds: a public table's column (Q21's supplier names, nation keys), a declared
value list (market segments) and the years inside a date column's bounds (a computed key).
"""

from __future__ import annotations

import pytest

from benchmarks.queries import overhead_corpus
from benchmarks.tpch_data import ensure_dataset
from dpsql.backends.duckdb import DuckDBBackend, domain_table_name
from dpsql.metadata import load_metadata
from dpsql.session import Session
from tests.recording import RecordingDuckDBBackend
from tests.shop_fixture import ZeroNoise

Q21 = dict(overhead_corpus())["Q21"]
QUERIES = {
    "Q21": (Q21, True),
    "Q21 over every nation": (Q21.replace("AND n_name = 'SAUDI ARABIA'", ""), True),
    "supplier names, unordered": (
        "SELECT s_name, COUNT(*) AS n FROM supplier, lineitem WHERE s_suppkey = l_suppkey "
        "AND l_quantity > 25 GROUP BY s_name", False),
    "nation keys, narrowed": (
        "SELECT s_nationkey, COUNT(*) AS n FROM supplier WHERE s_nationkey < 12 "
        "GROUP BY s_nationkey ORDER BY n DESC, s_nationkey", True),
    "value list": (
        "SELECT c_mktsegment, COUNT(*) AS n FROM customer GROUP BY c_mktsegment "
        "ORDER BY c_mktsegment", True),
    "date bounds": (
        "SELECT EXTRACT(year FROM o_orderdate) AS y, COUNT(*) AS n FROM orders "
        "GROUP BY EXTRACT(year FROM o_orderdate) ORDER BY n DESC, y", True),
}


@pytest.fixture(scope="module")
def tpch(tmp_path_factory):
    return ensure_dataset(0.002, tmp_path_factory.mktemp("tpch"), "builtin",
                          log=lambda *_: None)


@pytest.mark.parametrize("name", list(QUERIES))
def test_answers_as_the_scan_and_as_plain_sql(tpch, name):
    sql, ordered = QUERIES[name]
    metadata = load_metadata(tpch.metadata_path)
    backend = RecordingDuckDBBackend(tpch.db_path, metadata)
    try:
        plain = backend.execute(sql)[0]
        engine = Session(metadata, backend, sampler=ZeroNoise())
        first = engine.run(sql, epsilon=1.0, delta=1e-6)
        engine._prepared.clear()  # a new query: the domains come from the memo
        second = engine.run(sql, epsilon=1.0, delta=1e-6)
        if "s_name" in sql:
            assert domain_table_name("supplier_names", "s_name") in backend.executed[-1]
        engine._stored = None  # without the backend's promises: DISTINCT scans
        engine._prepared.clear()
        scanned = engine.run(sql, epsilon=1.0, delta=1e-6)
    finally:
        backend.close()
    assert first.rows == second.rows == scanned.rows
    assert first.types == second.types == scanned.types
    filled = [r for r in first.rows if r[-1] != 0]
    assert plain or name == "Q21"  # at this scale no Saudi supplier: every bin is empty
    assert len(first.rows) >= len(plain) and all(r[-1] >= 0 for r in first.rows)
    if ordered:
        assert filled == [tuple(r) for r in plain]
        assert first.rows[:len(filled)] == filled  # the empty bins sort after them
    else:
        assert sorted(filled) == sorted(tuple(r) for r in plain)


def test_q21_reads_the_registered_table_on_a_plain_backend(tpch):
    """The backend the analyst's connection opens registers the names once."""
    metadata = load_metadata(tpch.metadata_path)
    backend = DuckDBBackend(tpch.db_path, metadata)
    try:
        engine = Session(metadata, backend, sampler=ZeroNoise())
        plan = engine.prepare(Q21).plan
        assert plan.domains_fixed and "SELECT DISTINCT" not in plan.exact_sql
        assert domain_table_name("supplier_names", "s_name") in plan.exact_sql
    finally:
        backend.close()
