"""The Spark backend from the outside: ``dpsql.connect(backend="spark")``, ``--backend spark``
on `dpsql query`, `dpsql shell`, `dpsql explain` (key types from Spark) and `dpsql metadata
build` (its draft equals DuckDB's).

The Spark tests use the one local session of the test run (tests/conftest.py); a master URL on
the command line finds that active session, as it would find a cluster's.
"""

from __future__ import annotations

import json

import duckdb
import pytest

import dpsql
from dpsql.accounting import Ledger
from dpsql.cli.main import main
from dpsql.errors import ProgrammingError
from dpsql.metadata import dump_metadata
from dpsql.metadata.build import build_metadata
from tests.recording import export_parquet, with_sources
from tests.shop_fixture import build_shop

JOIN = ("SELECT COUNT(*) AS n FROM orders o JOIN customers c ON o.customer_id = c.customer_id "
        "WHERE c.region = 'north'")


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spark_connect")
    shop = build_shop(folder / "shop.duckdb")
    sources = export_parquet(shop.path, folder / "parquet")
    metadata_file = folder / "shop.yaml"
    metadata_file.write_text(dump_metadata(with_sources(shop.metadata(), sources)))
    con = duckdb.connect(str(shop.path), read_only=True)
    (true_count,) = con.execute(JOIN).fetchone()
    con.close()
    return shop, sources, metadata_file, true_count


# --------------------------------------------------------------------------- dpsql.connect


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"backend": "oracle"}, "unknown backend 'oracle'"),
    ({"backend": "spark"}, "needs spark="),
    ({"backend": "duckdb", "spark": "local[2]"}, "only used with backend='spark'"),
])
def test_backend_arguments_are_checked(tmp_path, kwargs, message):
    metadata = {"tables": {"t": {"columns": {"a": {"max_freq": 1}}}}}
    with pytest.raises(ProgrammingError, match=message):
        dpsql.connect(None, metadata, analyst="alice", ledger=None, **kwargs)


@pytest.mark.spark
def test_connect_with_a_spark_session_charges_the_ledger(shop, spark, tmp_path):
    _, _, metadata_file, true_count = shop
    ledger_path = tmp_path / "ledger.sqlite"
    with Ledger(ledger_path, create=True) as ledger:
        ledger.set_budget("spark://default", "alice", 10.0, 1e-6)
    with dpsql.connect(None, metadata_file, analyst="alice", ledger=ledger_path,
                       backend="spark", spark=spark) as conn:
        assert conn.database == "spark://default"
        cur = conn.execute(JOIN, epsilon=5.0, delta=1e-7)
        (n,) = cur.fetchone()
        assert cur.description[0][0] == "n"
        assert abs(n - true_count) < 0.1 * true_count  # noise: scale ~ 2 S / 5, S ~ mf
        spent = conn.budget.epsilon_spent
        assert spent == pytest.approx(5.0)
        assert conn.execute(JOIN, epsilon=5.0, delta=1e-7).fetchone() == (n,)  # cached
        assert conn.budget.epsilon_spent == pytest.approx(spent)


@pytest.mark.spark
def test_connect_with_a_master_url(shop, spark):
    _, _, metadata_file, _ = shop
    with dpsql.connect("spark://sales", metadata_file, analyst="bob", ledger=None,
                       backend="spark", spark="local[2]") as conn:
        assert conn.database == "spark://sales"
        (n,) = conn.execute("SELECT COUNT(*) AS n FROM orders", epsilon=1.0).fetchone()
        assert abs(n - 3000) < 60  # scale 1: beyond 60 has probability ~e^-60


# --------------------------------------------------------------------------- the CLI


@pytest.mark.spark
def test_query_on_spark(shop, spark, capsys):
    _, _, metadata_file, true_count = shop
    code = main(["query", "-m", str(metadata_file), "--no-ledger", "-e", "5", "--delta", "1e-7",
                 "--backend", "spark", "--spark-master", "local[2]", "-f", "json", JOIN])
    out = capsys.readouterr().out
    assert code == 0, out
    doc = json.loads(out)
    assert doc["columns"] == ["n"]
    assert abs(doc["rows"][0][0] - true_count) < 0.1 * true_count


@pytest.mark.parametrize(("args", "message"), [
    (["--backend", "spark"], "needs --spark-master"),
    (["--spark-master", "local[2]"], "only used with --backend spark"),
])
def test_query_backend_options_are_checked(shop, capsys, args, message):
    _, _, metadata_file, _ = shop
    code = main(["query", "-m", str(metadata_file), "-e", "1", *args,
                 "SELECT COUNT(*) AS n FROM orders"])
    assert code == 2 and message in capsys.readouterr().err


@pytest.mark.spark
def test_shell_on_spark(shop, spark, capsys):
    _, _, metadata_file, _ = shop
    code = main(["shell", "-m", str(metadata_file), "-a", "carol", "--no-ledger", "--epsilon", "1",
                 "--backend", "spark", "--spark-master", "local[2]", "-f", "csv",
                 "-c", "SELECT status, COUNT(*) AS n FROM orders GROUP BY status;"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [line.split(",") for line in out.splitlines()]
    assert rows[0] == ["status", "n"]
    assert {r[0] for r in rows[1:4]} == {"new", "shipped", "returned"}


def test_shell_demo_is_duckdb_only(capsys):
    code = main(["shell", "--demo", "--backend", "spark", "--spark-master", "local[2]",
                 "-c", "\\q"])
    assert code == 2 and "--demo is a DuckDB database" in capsys.readouterr().err


def _comparable(draft: str) -> list[str]:
    # the first line names where the draft came from; Spark's draft records the sources
    return [line for line in draft.splitlines()[1:] if not line.strip().startswith("source:")]


@pytest.mark.spark
def test_metadata_build_on_spark_equals_duckdb(shop, spark, capsys):
    shop_, sources, _, _ = shop
    want = build_metadata(shop_.path, ["orders", "products"], public=["products"],
                          ledger="ledger.sqlite")
    code = main(["metadata", "build", "--backend", "spark", "--spark-master", "local[2]",
                 "--source", f"orders={sources['orders']}",
                 "--source", f"products={sources['products']}", "--public", "products"])
    got = capsys.readouterr().out
    assert code == 0, got
    assert "from Spark (master local[2])" in got.splitlines()[0]
    assert f"source: {sources['orders']}" in got
    assert _comparable(got) == _comparable(want)
    assert "max_freq: 1" in got and "rows: 3000" in got  # not vacuous


def test_metadata_build_options_are_checked(shop, capsys):
    shop_ = shop[0]
    assert main(["metadata", "build"]) == 2
    assert "missing --database" in capsys.readouterr().err
    assert main(["metadata", "build", "-d", str(shop_.path), "--source", "a=b"]) == 2
    assert "--source is for --backend spark" in capsys.readouterr().err


@pytest.mark.spark
def test_explain_takes_key_types_from_spark(shop, spark, tmp_path, capsys):
    import dataclasses

    shop_, sources, _, _ = shop
    untyped = with_sources(shop_.metadata(), sources)
    untyped = dataclasses.replace(untyped, tables={
        name: dataclasses.replace(t, columns={c: dataclasses.replace(col, type=None)
                                              for c, col in t.columns.items()})
        for name, t in untyped.tables.items()})
    path = tmp_path / "untyped.yaml"
    path.write_text(dump_metadata(untyped))
    assert main(["explain", "-m", str(path), "--json", JOIN]) == 0
    assert json.loads(capsys.readouterr().out)["unchecked_key_types"]
    assert main(["explain", "-m", str(path), "--json", "--backend", "spark",
                 "--spark-master", "local[2]", JOIN]) == 0
    assert json.loads(capsys.readouterr().out)["unchecked_key_types"] == []
