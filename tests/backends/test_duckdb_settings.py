"""dpsql.backends.duckdb's session settings that change speed only: the perfect-hash GROUP BY
threshold (PERFECT_HT_BITS) is set on dpsql's connection, and a per-unit GROUP BY that it turns
into a perfect-hash aggregate returns exactly what DuckDB's default plan returns."""

from __future__ import annotations

import duckdb

from dpsql.backends.duckdb import PERFECT_HT_BITS, DuckDBBackend

SQL = ("SELECT c, COUNT(*) AS n FROM (SELECT o_cust, COUNT(*) AS c, SUM(amount) AS s FROM orders "
       "GROUP BY o_cust) GROUP BY c ORDER BY c")


def test_perfect_hash_grouping_is_set_and_changes_no_result(tmp_path):
    path = str(tmp_path / "shop.duckdb")
    con = duckdb.connect(path)
    # unit keys spread over 2^16 values: above DuckDB's default threshold (2^12), within ours
    con.execute("CREATE TABLE orders AS SELECT (i * 7919) % 65536 AS o_cust, i % 13 AS amount "
                "FROM range(200000) t(i)")
    con.close()
    plain = duckdb.connect(path, read_only=True)
    want = plain.execute(SQL).fetchall()
    plan = "".join(r[1] for r in plain.execute("EXPLAIN " + SQL).fetchall())
    assert "Perfect Hash Group By" not in plan  # DuckDB's default: a hash table
    plain.close()
    backend = DuckDBBackend(path)
    try:
        assert backend._setting("perfect_ht_threshold") == PERFECT_HT_BITS == 18
        rows, _ = backend.execute("EXPLAIN " + SQL)
        assert "Perfect Hash Group By" in "".join(str(r[1]) for r in rows)
        got, _ = backend.execute(SQL)
    finally:
        backend.close()
    assert got == want and sum(n for _, n in got) == 65536
