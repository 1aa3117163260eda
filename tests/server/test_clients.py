"""Unmodified PostgreSQL clients against a real `dpsql serve` process on loopback: psycopg 3,
psql, pandas through SQLAlchemy, dpsql's own remote driver, and a JDBC-style catalog probe."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

import dpsql
from dpsql.accounting import Ledger
from tests.server.serving import PASSWORDS, ServerProcess

# one xdist worker runs this module: one server process for it, not one per worker
pytestmark = pytest.mark.xdist_group("server-clients")


def _charges(server: ServerProcess, analyst: str) -> int:
    with Ledger(server.ledger, create=False) as ledger:
        return len(ledger.status(server.database_id, analyst).history)


@contextmanager
def _noticed(server: ServerProcess, epsilon: float
             ) -> Iterator[tuple[psycopg.Cursor, list[str | None]]]:
    """A psycopg cursor at ``epsilon`` and the DETAIL of every NOTICE it gets, in order."""
    details: list[str | None] = []
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: details.append(d.message_detail))
        cur = conn.cursor()
        cur.execute(f"SET dpsql.epsilon = {epsilon}")
        yield cur, details


def test_psycopg_private_query_with_parameters_is_noisy_charged_once_and_cached(
        server: ServerProcess) -> None:
    before = _charges(server, "alice")
    with _noticed(server, 0.25) as (cur, details):
        cur.execute("SELECT COUNT(*) AS n FROM orders WHERE status = %s", ["returned"])
        assert [d.name for d in cur.description] == ["n"]
        (n,) = cur.fetchone()
        assert isinstance(n, int)
        assert '"epsilon": 0.25' in (details[-1] or "")
        cur.execute("SELECT COUNT(*) AS n FROM orders WHERE status = %s", ["returned"])
        assert cur.fetchone() == (n,)  # the cached noisy answer, not a fresh draw
        assert '"cached": true' in (details[-1] or "")
    assert _charges(server, "alice") == before + 1


def test_psycopg_repeat_with_another_unused_delta_is_the_cached_answer(
        server: ServerProcess) -> None:
    # psql's session default (delta 0) and the shell's 1e-6 share a pure Laplace count's entry
    # (audit of #17, bug 3); a Gaussian count, which reads delta, is drawn again under another
    before = _charges(server, "alice")
    with _noticed(server, 0.35) as (cur, details):
        cur.execute("SELECT COUNT(*) AS n FROM orders WHERE status = 'shipped'")
        first = cur.fetchone()
        assert '"cached": false' in (details[-1] or "")
        cur.execute("SET dpsql.delta = 1e-6")
        cur.execute("SELECT COUNT(*) AS n FROM orders WHERE status = 'shipped'")
        assert cur.fetchone() == first and '"cached": true' in (details[-1] or "")
        assert _charges(server, "alice") == before + 1
        cur.execute("SET dpsql.mechanism = 'gaussian'")
        cur.execute("SELECT COUNT(*) AS n FROM orders WHERE status = 'shipped'")
        assert '"cached": false' in (details[-1] or "")
        cur.execute("SET dpsql.delta = 1e-7")
        cur.execute("SELECT COUNT(*) AS n FROM orders WHERE status = 'shipped'")
        assert '"cached": false' in (details[-1] or "")
    assert _charges(server, "alice") == before + 3


def test_psycopg_query_of_several_releases_is_charged_once(server: ServerProcess) -> None:
    before = _charges(server, "alice")
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("SET dpsql.epsilon = 0.3")
        cur.execute("WITH t AS (SELECT status, COUNT(*) AS n FROM orders GROUP BY status) "
                    "SELECT status, n FROM t WHERE n > (SELECT COUNT(*) FROM customers) / %s "
                    "ORDER BY status", [100])
        assert [d.name for d in cur.description] == ["status", "n"]
        assert all(isinstance(n, int) for _, n in cur.fetchall())
    assert _charges(server, "alice") == before + 1


def test_a_public_query_the_pipeline_refuses_runs_exactly_and_free(server: ServerProcess
                                                                     ) -> None:
    # dpsql.execute.public (QA round 7): MAX beside COUNT over public products, prepared
    # (psycopg's extended protocol describes it first), with a parameter; nothing charged
    before = _charges(server, "bob")
    with psycopg.connect(server.dsn("bob"), autocommit=True) as conn:
        cur = conn.execute("SELECT category, COUNT(*) AS n, MAX(price) AS top FROM products "
                           "WHERE price > %s GROUP BY category ORDER BY category", [0],
                           prepare=True)
        assert [d.name for d in cur.description] == ["category", "n", "top"]
        rows = cur.fetchall()
        assert rows and all(isinstance(n, int) and n > 0 for _, n, _ in rows)
    assert _charges(server, "bob") == before


def test_describe_refuses_an_ungranted_table_before_naming_its_columns(server: ServerProcess
                                                                         ) -> None:
    # the public-path red team: a statement's Describe prepared it and sent its column names
    # before the grant check (bob may read orders and products only)
    from psycopg.pq import DiagnosticField, ExecStatus

    with psycopg.connect(server.dsn("bob"), autocommit=True) as conn:
        pg = conn.pgconn
        parsed = pg.prepare(b"s1", b"SELECT COUNT(*) AS n FROM customers")
        if parsed.status == ExecStatus.COMMAND_OK:
            described = pg.describe_prepared(b"s1")
        else:
            described = parsed
        assert described.status == ExecStatus.FATAL_ERROR
        assert described.error_field(DiagnosticField.SQLSTATE) == b"42501"


@pytest.mark.parametrize(("sql", "code"), [
    ("SELECT * FROM orders", "0A000"),
    ("SELEC COUNT(*) FROM orders", "42601"),
    ("SELECT COUNT(*) FROM customers", "42501"),  # bob may read orders and products only
])
def test_errors_carry_sqlstate_and_are_not_charged(server: ServerProcess, sql: str,
                                                   code: str) -> None:
    before = _charges(server, "bob")
    with psycopg.connect(server.dsn("bob"), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SET dpsql.epsilon = 0.1")
            conn.execute(sql)
        assert info.value.sqlstate == code
        assert "Traceback" not in str(info.value)
    assert _charges(server, "bob") == before


def test_epsilon_above_the_owner_cap_is_refused_before_the_charge(server: ServerProcess) -> None:
    before = _charges(server, "alice")
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 3")
        with pytest.raises(psycopg.errors.InsufficientPrivilege,
                           match=r"at most epsilon=2\.0 on one query"):
            conn.execute("SELECT COUNT(*) FROM orders")
    assert _charges(server, "alice") == before


def test_exhausted_budget_is_53400(server: ServerProcess) -> None:
    with psycopg.connect(server.dsn("carol"), autocommit=True) as conn:
        conn.execute("SELECT COUNT(*) FROM orders WHERE quantity = 1")
        conn.execute("SELECT COUNT(*) FROM orders WHERE quantity = 2")
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT COUNT(*) FROM orders WHERE quantity = 3")
        assert info.value.sqlstate == "53400"


def test_wrong_password_and_unknown_user_fail_alike(server: ServerProcess) -> None:
    messages = []
    for user, password in (("alice", "wrong"), ("mallory", "whatever")):
        with pytest.raises(psycopg.OperationalError) as info:
            psycopg.connect(server.dsn(user, password))
        messages.append(str(info.value).split("failed:")[-1].replace(user, "USER"))
    assert messages[0] == messages[1]
    assert "password authentication failed" in messages[0]


def test_psql_runs_queries_and_describes_tables(server: ServerProcess) -> None:
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql (Debian's postgresql-client) is not installed; .ci/run installs it")
    env = {"PGPASSWORD": PASSWORDS["alice"], "PATH": "/usr/bin:/bin"}
    conninfo = f"host={server.host} port={server.port} user=alice dbname=shop sslmode=disable"
    out = subprocess.run(
        [psql, conninfo, "-X", "-c", "SELECT COUNT(*) AS n FROM orders", "-c", r"\dt",
         "-c", r"\d orders", "-c", "SELECT version()"],
        capture_output=True, text=True, env=env, timeout=60, check=True)
    assert "(1 row)" in out.stdout
    for name in ("customers", "orders", "products", "recommendations", "order_cost", "dpsql"):
        assert name in out.stdout
    assert "NOTICE:  dpsql: released with epsilon=0.5" in out.stderr
    assert "max_freq" not in out.stdout and "1810" not in out.stdout


def test_pandas_read_sql_through_sqlalchemy(server: ServerProcess) -> None:
    pd = pytest.importorskip("pandas")
    sqlalchemy = pytest.importorskip("sqlalchemy")
    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://alice:{PASSWORDS['alice']}@{server.host}:{server.port}/shop")
    try:
        with engine.connect() as conn:
            frame = pd.read_sql(sqlalchemy.text(
                "SELECT status, COUNT(*) AS n FROM orders WHERE quantity >= :q GROUP BY status"),
                conn, params={"q": 2})
            assert sorted(frame["status"]) == ["new", "returned", "shipped"]
            assert list(frame.columns) == ["status", "n"]
            assert pd.read_sql("SELECT COUNT(*) AS n FROM orders", conn).shape == (1, 1)
    finally:
        engine.dispose()


def test_pandas_read_sql_over_the_server_is_typed_and_warns_nothing(
        server: ServerProcess) -> None:
    """The typed results (dpsql.execute.typed) encode on the wire: COUNT and the SUM of an
    INTEGER column arrive as int8, and pandas reads them without a warning."""
    pd = pytest.importorskip("pandas")
    sqlalchemy = pytest.importorskip("sqlalchemy")
    import warnings

    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://alice:{PASSWORDS['alice']}@{server.host}:{server.port}/shop")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            frame = pd.read_sql("SELECT status, COUNT(*) AS n, SUM(quantity) AS q FROM orders "
                                "GROUP BY status", engine)
    finally:
        engine.dispose()
    assert str(frame["n"].dtype) == "int64" and str(frame["q"].dtype) == "int64"
    assert (frame["n"] >= 0).all()


def _budget(server: ServerProcess, user: str) -> tuple:
    with psycopg.connect(server.dsn(user), autocommit=True) as conn:
        row = conn.execute("SHOW dpsql.budget").fetchone()
    assert row is not None
    return tuple(row)


def test_sqlalchemy_reflection_answers_from_the_analyst_schema_for_free(
        server: ServerProcess) -> None:
    """inspect(engine) as ORMs and notebooks call it: table names, columns with their
    PostgreSQL types, no keys, no indexes (the analyst-facing schema has none), only the
    granted tables, and MetaData.reflect; nothing is charged."""
    sqlalchemy = pytest.importorskip("sqlalchemy")
    url = f"{server.host}:{server.port}/shop"
    before = {user: _budget(server, user) for user in ("alice", "bob")}
    engine = sqlalchemy.create_engine(f"postgresql+psycopg://alice:{PASSWORDS['alice']}@{url}")
    try:
        inspector = sqlalchemy.inspect(engine)
        assert inspector.get_table_names() == ["customers", "orders", "products",
                                               "recommendations"]
        assert inspector.has_table("orders") and not inspector.has_table("nope")
        columns = inspector.get_columns("orders")
        assert [(c["name"], type(c["type"]).__name__) for c in columns] == [
            ("order_id", "INTEGER"), ("customer_id", "INTEGER"), ("product_id", "INTEGER"),
            ("quantity", "INTEGER"), ("order_cost", "DOUBLE_PRECISION"), ("status", "VARCHAR")]
        assert all(c["default"] is None and c["nullable"] for c in columns)
        assert inspector.get_pk_constraint("orders")["constrained_columns"] == []
        assert inspector.get_foreign_keys("orders") == []
        assert inspector.get_indexes("orders") == []
        assert inspector.get_unique_constraints("orders") == []
        reflected = sqlalchemy.MetaData()
        reflected.reflect(engine)
        assert sorted(reflected.tables) == ["customers", "orders", "products", "recommendations"]
    finally:
        engine.dispose()
    engine = sqlalchemy.create_engine(f"postgresql+psycopg://bob:{PASSWORDS['bob']}@{url}")
    try:
        inspector = sqlalchemy.inspect(engine)
        assert inspector.get_table_names() == ["orders", "products"]
        assert not inspector.has_table("customers")
        assert [c["name"] for c in inspector.get_columns("products")] == [
            "product_id", "category", "price"]
        with pytest.raises(sqlalchemy.exc.NoSuchTableError):
            inspector.get_columns("customers")
    finally:
        engine.dispose()
    assert {user: _budget(server, user) for user in ("alice", "bob")} == before


# What pgjdbc sends on connect and for DatabaseMetaData.getTables/getColumns (as DBeaver and
# Metabase call them), shortened to the parts that matter.
JDBC_PROBE = [
    "SET extra_float_digits = 3",
    "SET application_name = 'PostgreSQL JDBC Driver'",
    "SELECT current_schema(), session_user",
    "SHOW TRANSACTION ISOLATION LEVEL",
    "SELECT oid, typname FROM pg_catalog.pg_type WHERE typname = 'int4'",
    "SELECT NULL AS TABLE_CAT, n.nspname AS TABLE_SCHEM, c.relname AS TABLE_NAME, "
    "CASE n.nspname ~ '^pg_' OR n.nspname = 'information_schema' WHEN true THEN 'SYSTEM TABLE' "
    "WHEN false THEN CASE c.relkind WHEN 'r' THEN 'TABLE' WHEN 'v' THEN 'VIEW' END END "
    "AS TABLE_TYPE, d.description AS REMARKS FROM pg_catalog.pg_namespace n, "
    "pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_description d ON (c.oid = d.objoid AND "
    "d.objsubid = 0 and d.classoid = 'pg_class'::regclass) WHERE c.relnamespace = n.oid AND "
    "c.relname LIKE '%' AND c.relkind = 'r' AND n.nspname !~ '^pg_' "
    "ORDER BY TABLE_TYPE, TABLE_SCHEM, TABLE_NAME",
    "SELECT * FROM (SELECT n.nspname, c.relname, a.attname, a.atttypid, a.attnotnull, "
    "a.atttypmod, a.attlen, row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) "
    "AS attnum, pg_catalog.pg_get_expr(def.adbin, def.adrelid) AS adsrc, dsc.description, "
    "t.typbasetype, t.typtype FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_class c ON "
    "(c.relnamespace = n.oid) JOIN pg_catalog.pg_attribute a ON (a.attrelid=c.oid) JOIN "
    "pg_catalog.pg_type t ON (a.atttypid = t.oid) LEFT JOIN pg_catalog.pg_attrdef def ON "
    "(a.attrelid=def.adrelid AND a.attnum = def.adnum) LEFT JOIN pg_catalog.pg_description dsc "
    "ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid) WHERE c.relkind in ('r','v') and "
    "a.attnum > 0 AND NOT a.attisdropped AND c.relname LIKE 'orders') c WHERE true "
    "ORDER BY nspname, c.relname, attnum",
]


def test_jdbc_style_catalog_probe_is_answered_free_from_the_analyst_schema(
        server: ServerProcess) -> None:
    before = _charges(server, "bob")
    with psycopg.connect(server.dsn("bob"), autocommit=True) as conn:
        results = [conn.execute(q).fetchall() if conn.execute(q).description else None
                   for q in JDBC_PROBE]
    tables = {row[2] for row in results[5]}
    assert tables == {"orders", "products"}  # bob's grants only
    assert [row[2] for row in results[6]] == [
        "order_id", "customer_id", "product_id", "quantity", "order_cost", "status"]
    assert _charges(server, "bob") == before


def test_dpsql_connect_url_gives_a_remote_dbapi_connection(server: ServerProcess) -> None:
    with dpsql.connect(server.url(), epsilon=0.2) as conn:
        cur = conn.cursor()
        cur.execute("SELECT AVG(order_cost) AS a FROM orders WHERE quantity = ?", [3])
        (avg,) = cur.fetchone()
        assert isinstance(avg, float)
        assert cur.release is not None and cur.release.epsilon == pytest.approx(0.2)
        assert not cur.release.cached
        epsilon_left, _ = conn.budget_remaining
        assert epsilon_left < 50.0
        with pytest.raises(dpsql.NotSupportedError):
            cur.execute("SELECT order_id FROM orders")


def test_named_prepared_statements_and_binary_results(server: ServerProcess) -> None:
    """psycopg's prepare=True sends Parse with a name once, then Bind/Execute per call; a binary
    cursor asks for binary results (fixed-width numbers and text)."""
    before = _charges(server, "alice")
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        cur = conn.cursor()
        seen = set()
        for q in (1, 2, 1):
            cur.execute("SELECT COUNT(*) AS n FROM orders WHERE quantity = %s", [q], prepare=True)
            seen.add(cur.fetchone())
        assert len(seen) == 2  # the repeat of quantity = 1 is the cached answer
        with conn.cursor(binary=True) as bcur:
            bcur.execute("SELECT COUNT(*) AS n, SUM(order_cost) AS s FROM orders")
            n, s = bcur.fetchone()
            assert isinstance(n, int) and isinstance(s, float)
    assert _charges(server, "alice") == before + 3


def test_clients_connecting_at_once_all_get_a_session(server: ServerProcess) -> None:
    # The first connections to the DuckDB file race to lock its configuration down; opened
    # at once they used to fail with "internal error" ("the configuration has been locked").
    failures: list[str] = []
    answers: list[int] = []
    start = threading.Barrier(8)

    def client() -> None:
        try:
            start.wait(30)
            with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=30) as conn:
                answers.append(conn.execute("SELECT 1").fetchone()[0])  # type: ignore[index]
        except Exception as exc:  # collected: the assertion below names it
            failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []
    assert answers == [1] * 8


def test_repeated_statement_texts_keep_their_route(server: ServerProcess) -> None:
    # The runner memoises, per text, whether a statement is a catalog query: repeats of a
    # catalog text stay free and exact, repeats of a private text stay releases.
    details: list[str | None] = []
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: details.append(d.message_detail))
        for i in range(3):
            details.clear()
            names = conn.execute("SELECT table_name FROM information_schema.tables "
                                 "WHERE table_name = %s", ["orders"]).fetchall()
            assert names == [("orders",)] and details == []
            conn.execute("SELECT COUNT(*) FROM orders WHERE quantity > %s", [i]).fetchall()
            assert len(details) == 1 and '"cached": false' in (details[0] or "")


@pytest.mark.parametrize(("sql", "names"), [
    ("SELECT COUNT(*) AS n FROM orders WHERE quantity = $1", ["n"]),  # private: no charge
    # release blocks (dpsql.analysis.blocks): the outer query's names
    ("WITH t AS (SELECT status, COUNT(*) AS n FROM orders WHERE quantity = $1 GROUP BY status) "
     "SELECT status AS s, n * 2 AS twice FROM t", ["s", "twice"]),
    ("SELECT table_name FROM information_schema.tables WHERE table_name = $1", ["table_name"]),
    ("SHOW dpsql.epsilon", ["dpsql.epsilon"]),  # a session command: run (it reads no data)
])
def test_describe_statement_reads_no_data_and_charges_nothing(server: ServerProcess, sql: str,
                                                              names: list[str]) -> None:
    from tests.server import rawwire as rw

    before = _charges(server, "alice")
    with rw.RawClient(server.host, server.port) as client:
        rw.login(client, "alice", PASSWORDS["alice"])
        client.send(rw.parse(b"s1", sql.encode()) + rw.message(b"D", b"Ss1\0") + rw.SYNC)
        got = client.read_until(b"Z")
    kinds = [m.kind for m in got]
    assert kinds[:2] == [b"1", b"t"] and kinds[-1] == b"Z", got  # ParseComplete, parameters
    assert b"E" not in kinds, got
    description = next(m for m in got if m.kind == b"T")
    for name in names:
        assert name.encode() + b"\0" in description.body
    assert _charges(server, "alice") == before


def test_psycopg_set_and_show_the_gaussian_mechanism(server: ServerProcess) -> None:
    before = _charges(server, "alice")
    details: list[str | None] = []
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: details.append(d.message_detail))
        assert conn.execute("SHOW dpsql.mechanism").fetchone() == ("laplace",)
        assert conn.execute("SHOW dpsql.calibration").fetchone() == ("analytic",)
        conn.execute("SET dpsql.epsilon = 0.2")
        conn.execute("SET dpsql.mechanism = 'gaussian'")
        assert conn.execute("SHOW dpsql.mechanism").fetchone() == ("gaussian",)
        # delta 0 is refused before the charge, with the fix
        conn.execute("SET dpsql.delta = 0")
        with pytest.raises(psycopg.Error, match="needs delta > 0") as info:
            conn.execute("SELECT COUNT(*) FROM orders WHERE quantity = 7")
        assert info.value.sqlstate == "0A000"
        assert _charges(server, "alice") == before
        conn.execute("SET dpsql.delta = 1e-7")
        conn.execute("SET dpsql.calibration TO classical")
        conn.execute("SELECT COUNT(*) FROM orders WHERE quantity = 7").fetchone()
        assert '"mechanism": "discrete_gaussian"' in (details[-1] or "")
        assert '"calibration": "classical"' in (details[-1] or "")
        with pytest.raises(psycopg.Error, match=r"dpsql\.mechanism must be 'laplace' or"):
            conn.execute("SET dpsql.mechanism = 'uniform'")
        conn.execute("RESET dpsql.mechanism")
        assert conn.execute("SHOW dpsql.mechanism").fetchone() == ("laplace",)
    assert _charges(server, "alice") == before + 1
    with Ledger(server.ledger, create=False) as ledger:
        last = ledger.status(server.database_id, "alice").history[-1]
    assert last.mechanism == "discrete_gaussian" and last.delta == pytest.approx(1e-7)


def test_raw_counts_is_a_session_setting(server: ServerProcess) -> None:
    """SET dpsql.raw_counts (PostgreSQL's boolean spellings) reaches the release: the record
    names the count's clamp only while it is off; dpsql.connect(url, raw_counts=True) sets it."""
    details: list[str | None] = []
    sql = "SELECT COUNT(*) AS n FROM orders WHERE quantity = 9"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.add_notice_handler(lambda d: details.append(d.message_detail))
        assert conn.execute("SHOW dpsql.raw_counts").fetchone() == ("off",)
        conn.execute("SET dpsql.epsilon = 0.1")
        conn.execute(sql).fetchone()
        assert "clamped at 0" in (details[-1] or "")
        conn.execute("SET dpsql.raw_counts = true")
        assert conn.execute("SHOW dpsql.raw_counts").fetchone() == ("on",)
        conn.execute(sql).fetchone()
        assert "clamped at 0" not in (details[-1] or "")
        with pytest.raises(psycopg.Error, match=r"dpsql\.raw_counts must be 'off' or 'on'"):
            conn.execute("SET dpsql.raw_counts = 'sometimes'")
    with dpsql.connect(server.url(), epsilon=0.1, raw_counts=True) as remote:
        cur = remote.execute(sql)  # the raw answer above, cached
        assert cur.release is not None and cur.release.cached
        assert cur.release.columns[0].post_processing is None
        remote.raw_counts = False  # what the shell's \raw off does
        cur = remote.execute(sql)  # the clamped answer above, cached
        assert cur.release is not None and cur.release.cached
        assert "clamped at 0" in (cur.release.columns[0].post_processing or "")


def test_remote_driver_passes_the_mechanism(server: ServerProcess) -> None:
    with dpsql.connect(server.url(), epsilon=0.2, delta=1e-7, mechanism="gaussian") as conn:
        cur = conn.cursor()
        cur.execute("SELECT COUNT(*) AS n FROM orders WHERE quantity = 8")
        assert cur.release is not None and cur.release.mechanism == "discrete_gaussian"
        cur.execute("SELECT COUNT(*) AS n FROM orders WHERE quantity = 8", mechanism="laplace")
        assert cur.release is not None and cur.release.mechanism == "discrete_laplace"
