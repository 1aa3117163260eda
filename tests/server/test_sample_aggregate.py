"""SAMPLE_AGGREGATE through a real `dpsql serve` process and psycopg: grants checked on the
tables it reads, Describe names its columns, the release NOTICE names the mechanism, one charge,
the cached repeat free, and refusals with their SQLSTATE before any charge."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest

from dpsql.accounting import Ledger
from dpsql.backends import ledger_identity
from dpsql.metadata import load_metadata
from tests.sample_aggregate.world import METADATA_TEXT, build
from tests.server.serving import ServerProcess, launch

# one xdist worker runs this module: its server process is
# built once per run, not once per worker (issue #13)
pytestmark = pytest.mark.xdist_group("server-sample-aggregate")

PASSWORD = "dave-secret"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("sa_server")
    db = build(tmp / "world.duckdb")
    md = tmp / "world.yaml"
    md.write_text(METADATA_TEXT)
    ledger_path = tmp / "ledger.sqlite"
    database_id = ledger_identity("duckdb", str(db), load_metadata(md))
    with Ledger(ledger_path) as ledger:
        ledger.add_analyst("dave", PASSWORD, tables=["t", "p"], default_epsilon=0.5)
        ledger.set_budget(database_id, "dave", 10.0, 0.0)
    proc = launch(db, md, ledger_path, database_id)
    yield proc
    proc.stop()


def _charges(server: ServerProcess) -> int:
    with Ledger(server.ledger, create=False) as ledger:
        return len(ledger.status(server.database_id, "dave").history)


def test_released_charged_once_and_cached(server: ServerProcess) -> None:
    details: list[str | None] = []
    sql = ("SELECT SAMPLE_AGGREGATE(MEDIAN(t.x), 0, 100) AS med FROM t JOIN p ON t.g = p.g "
           "WHERE t.n > %s")
    with psycopg.connect(server.dsn("dave", PASSWORD), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: details.append(d.message_detail))
        cur = conn.cursor()
        cur.execute(sql, [1])  # extended protocol: Describe, then Execute
        assert [d.name for d in cur.description] == ["med"]
        (value,) = cur.fetchone()
        assert isinstance(value, float)
        record = json.loads(details[-1] or "{}")
        assert record["mechanism"] == "sample_aggregate_laplace" and record["epsilon"] == 0.5
        assert record["delta"] == 0.0
        cur.execute(sql, [1])
        assert cur.fetchone() == (value,) and '"cached": true' in (details[-1] or "")
    assert _charges(server) == 1


@pytest.mark.parametrize(("sql", "code"), [
    ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM u", "42501"),  # not granted
    ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9), COUNT(*) FROM t", "0A000"),
    ("SELECT SAMPLE_AGGREGATE(COUNT(*), 9, 0) FROM t", "0A000"),
])
def test_refusals_carry_sqlstate_and_charge_nothing(server: ServerProcess, sql: str,
                                                    code: str) -> None:
    before = _charges(server)
    with (psycopg.connect(server.dsn("dave", PASSWORD), autocommit=True) as conn,
          pytest.raises(psycopg.Error) as err):
        conn.execute(sql)
    assert err.value.sqlstate == code
    assert _charges(server) == before
