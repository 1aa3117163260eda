"""`dpsql serve --backend spark`: the server over the Spark backend and a few queries through
psycopg: private answers charged once, a parameterised GROUP BY, a cached repeat, a catalog query
and a refusal. The Server runs in this process (a loop in a thread, as tests/server/
test_connection.py runs it), built as `dpsql serve --backend spark` builds it (master
``local[2]``, which finds the test run's one Spark session): a server process would start a
second Spark driver JVM, ~10 CPU-s, for the same code. The real `dpsql serve` process is tested
over DuckDB by the other server modules (tests/server/serving.py). Marked ``spark``: it runs on
the worker that runs the other Spark tests, and is skipped without pyspark."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import psycopg
import pytest

from dpsql.accounting import Ledger
from dpsql.backends import ledger_identity
from dpsql.metadata import dump_metadata, load_metadata
from dpsql.server.app import Server
from tests.recording import export_parquet, with_sources
from tests.server.serving import PASSWORDS
from tests.shop_fixture import build_shop


@pytest.mark.spark
def test_dpsql_serve_with_the_spark_backend(spark, tmp_path: Path) -> None:
    shop = build_shop(tmp_path / "shop.duckdb")
    sources = export_parquet(shop.path, tmp_path / "parquet")
    md = tmp_path / "shop.yaml"
    md.write_text(dump_metadata(with_sources(shop.metadata(), sources)))
    database_id = ledger_identity("spark", None, load_metadata(md))
    assert database_id == "spark://default"
    ledger = tmp_path / "ledger.sqlite"
    with Ledger(ledger) as book:
        book.add_analyst("alice", PASSWORDS["alice"], default_epsilon=0.5)
        book.set_budget(database_id, "alice", 5.0, 0.0)
    # what `dpsql serve -m MD --ledger L --backend spark` builds (dpsql/cli/serve.py)
    server = Server(md, None, ledger, backend="spark", spark="local[2]")
    loop = asyncio.new_event_loop()
    host, port = loop.run_until_complete(server.start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    dsn = (f"host={host} port={port} user=alice password={PASSWORDS['alice']} dbname=shop "
           "sslmode=disable")
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=30) as conn:
            notices: list[str] = []
            conn.add_notice_handler(lambda d: notices.append(d.message_detail or ""))
            (n,) = conn.execute("SELECT COUNT(*) AS n FROM orders").fetchone() or (None,)
            assert isinstance(n, int)
            assert json.loads(notices[-1])["epsilon"] == 0.5
            rows = conn.execute(
                "SELECT status, COUNT(*) AS n FROM orders WHERE quantity >= %s GROUP BY status "
                "ORDER BY status", [2]).fetchall()
            assert [r[0] for r in rows] == ["new", "returned", "shipped"]
            again = conn.execute("SELECT COUNT(*) AS n FROM orders").fetchone()
            assert again == (n,)  # the cache: same noise, no charge
            tables = conn.execute("SELECT table_name FROM information_schema.tables "
                                  "ORDER BY table_name").fetchall()
            assert [t[0] for t in tables] == ["customers", "orders", "products",
                                              "recommendations"]
            with pytest.raises(psycopg.errors.FeatureNotSupported):
                conn.execute("SELECT order_id FROM orders")  # a row-level query: refused
        with Ledger(ledger, create=False) as book:
            status = book.status(database_id, "alice")
            assert len(status.history) == 2 and status.epsilon_spent == 1.0
            assert all(e.released is not None for e in book.audit(analyst="alice")
                       if hasattr(e, "released"))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        server.close()
