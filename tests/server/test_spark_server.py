"""`dpsql serve --backend spark`: the server over the Spark backend, one real server process
(its own Spark driver JVM, started with the test suite's low-CPU settings through
``$SPARK_CONF_DIR``) and a few queries through psycopg: private answers charged once, a
parameterised GROUP BY, a cached repeat, a catalog query and a refusal. Marked ``spark``: it runs
on the worker that runs the other Spark tests, and is skipped without pyspark."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest

from dpsql.accounting import Ledger
from dpsql.backends import ledger_identity
from dpsql.metadata import dump_metadata, load_metadata
from tests.conftest import SPARK_CONF
from tests.recording import export_parquet, with_sources
from tests.server.serving import PASSWORDS, launch
from tests.shop_fixture import build_shop


@pytest.mark.spark
def test_dpsql_serve_with_the_spark_backend(tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (the spark extra)")
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java 17+")
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
    conf = tmp_path / "spark-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "".join(f"{k} {v}\n" for k, v in {**SPARK_CONF, "spark.sql.warehouse.dir":
                                           str(tmp_path / "warehouse")}.items()))
    server = launch(None, md, ledger, database_id, "--backend", "spark",
                    env={"SPARK_CONF_DIR": str(conf)}, timeout=180)
    try:
        with psycopg.connect(server.dsn("alice"), autocommit=True, connect_timeout=30) as conn:
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
        server.stop()
