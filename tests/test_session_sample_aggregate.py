"""SAMPLE_AGGREGATE through dpsql/session.py: exact means with noise off, one charge of
(epsilon, 0) before the read, free repeats from the cache, refusals that charge nothing, and
a fresh block key per release."""

from __future__ import annotations

from typing import Any

import pytest

import dpsql
from dpsql.backends.duckdb import DuckDBBackend
from dpsql.budget import Budget
from dpsql.errors import NotSupportedError, ProgrammingError, UnsupportedConstructError
from dpsql.sample_aggregate.prepared import PreparedSampleAggregate
from dpsql.sample_aggregate.release import MECHANISM, block_answers
from dpsql.session import Session
from tests.ledgers import charged, ledger_session, open_ledger
from tests.sample_aggregate.world import METADATA_TEXT, build, metadata
from tests.shop_fixture import ZeroNoise

KEY = 99


class FixedKey(ZeroNoise):
    """No noise, and a chosen block key (tests only)."""

    def __init__(self, key: int = KEY) -> None:
        super().__init__()
        self.key = key

    def block_key(self) -> int:
        return self.key


class KeyRecordingBackend(DuckDBBackend):
    """The real DuckDB backend, remembering the parameters of every execution."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bound: list[dict[str, Any]] = []

    def execute(self, compiled, params=None):
        self.bound.append(dict(params or {}))
        return super().execute(compiled, params)


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    return build(tmp_path_factory.mktemp("sa_session") / "world.duckdb")


@pytest.fixture
def session(database, tmp_path):
    md = metadata()
    ledger = open_ledger(tmp_path / "ledger.sqlite", epsilon=5000.0, delta=1e-3)
    s = ledger_session(md, KeyRecordingBackend(database, md), ledger, sampler=FixedKey())
    yield s
    s.close()
    ledger.close()


def test_exact_means_with_noise_off(session):
    # u: 12 rows, v = 1.5 i; every split of them gives these means over its 3 blocks
    result = session.run("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 20) AS n, "
                         "SAMPLE_AGGREGATE(SUM(v), 0, 1000) AS s FROM u", epsilon=1000.0)
    assert result.names == ("n", "s") and result.types == ("DOUBLE", "DOUBLE")
    n, s = result.rows[0]
    assert n == pytest.approx(12 / 3, abs=1e-6) and s == pytest.approx(1.5 * 66 / 3, abs=1e-5)


def test_clamped_mean_is_the_mean_of_the_clamped_block_answers(database):
    md = metadata()
    backend = DuckDBBackend(database, md)
    sql = "SELECT SAMPLE_AGGREGATE(MEDIAN(x), 10, 40) FROM t WHERE n > ?"
    prepared = Session(md, backend).prepare(sql)
    assert isinstance(prepared, PreparedSampleAggregate)
    # a key that leaves a block without rows (it counts as the lower bound) and clamps another
    for key in range(100):
        rows, _ = backend.execute(prepared.compiled, prepared.bindings([0], key))
        answers = block_answers(rows, 4, 1)[0]
        if len(rows) < 4 and any(a > 40 for a in answers if a == a):
            break
    else:
        raise AssertionError("no key in range(100) gives an empty block")
    want = sum(10.0 if a != a else min(max(a, 10.0), 40.0) for a in answers) / 4
    session = Session(md, backend, sampler=FixedKey(key))
    got = session.run(sql, [0], epsilon=1000.0).rows[0][0]
    assert got == pytest.approx(want, abs=1e-5)
    session.close()


def test_one_charge_of_epsilon_and_no_delta_then_free_repeats(session):
    sql = "SELECT SAMPLE_AGGREGATE(AVG(x), 0, 100) FROM t JOIN p ON t.g = p.g"
    first = session.run(sql, epsilon=0.5, delta=1e-6)
    assert (first.release.epsilon, first.release.delta) == (0.5, 0.0)
    assert first.release.mechanism == MECHANISM
    assert first.release.columns[0].mechanism == MECHANISM
    history = charged(session)
    assert len(history) == 1 and history[0].epsilon == 0.5 and history[0].delta == 0.0
    again = session.run(sql, epsilon=0.5, delta=1e-6)
    assert again.rows == first.rows and again.release.cached
    assert len(charged(session)) == 1


REFUSED = [
    ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM q", {}, UnsupportedConstructError,
     "has not enabled"),
    ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t", {"mechanism": "gaussian"},
     NotSupportedError, "needs delta > 0"),
    ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t", {"epsilon": None}, ProgrammingError,
     "epsilon"),
    ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t WHERE n > ?", {}, ProgrammingError,
     "parameter"),
    ("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9), COUNT(*) FROM t", {}, UnsupportedConstructError,
     "every output"),
    ("SELECT SAMPLE_AGGREGATE(MIN(g) + 1, 0, 9) FROM t", {}, ProgrammingError,
     "BinderException"),  # decided by types, before the charge
]


@pytest.mark.parametrize("sql, options, error, part", REFUSED)
def test_refusals_charge_nothing(session, sql, options, error, part):
    kwargs = {"epsilon": 1.0, **options}
    with pytest.raises(error, match=part):
        session.run(sql, **kwargs)
    assert charged(session) == []
    assert session.backend.bound == []  # nothing was read


def test_every_release_draws_a_fresh_key(database):
    md = metadata()
    backend = KeyRecordingBackend(database, md)
    session = Session(md, backend, sampler=ZeroNoise())  # no block_key: the secure one
    sql = "SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) FROM t"
    for _ in range(3):
        session.run(sql, epsilon=1.0)
    keys = [b["__dpsql_sa_key"] for b in backend.bound]
    assert len(set(keys)) == 3 and all(0 <= k < 2**63 for k in keys)
    session.close()


def test_prepared_exposes_what_a_server_reads(session):
    prepared = session.prepare("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) AS c FROM t "
                               "JOIN p ON t.g = p.g")
    assert prepared.tables == frozenset({"t", "p"})
    assert [c.name for c in prepared.analysis.columns] == ["c"]
    assert not prepared.public
    assert session.prepare("SELECT SAMPLE_AGGREGATE(COUNT(*), 0, 9) AS c FROM t "
                           "JOIN p ON t.g = p.g") is prepared  # memoised by text


def test_through_the_dbapi_driver(database, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(METADATA_TEXT)
    con = dpsql.connect(str(database), metadata=str(path), analyst="a", ledger=None,
                        epsilon=1.0)
    cur = con.cursor()
    cur.execute("SELECT SAMPLE_AGGREGATE(QUANTILE_CONT(x, 0.5), 0, 100) AS med FROM t")
    assert [d[0] for d in cur.description] == ["med"]
    (value,) = cur.fetchone()
    assert isinstance(value, float)
    assert cur.release.mechanism == MECHANISM
    con.close()


def test_charged_by_its_curve_under_the_renyi_filter(database, tmp_path):
    """A Rényi-filtered budget (dpsql.accounting.filters) admits the release: it has a pure
    Laplace curve, and the record carries its rho."""
    from dpsql.accounting import Ledger
    from tests.ledgers import ANALYST, DATABASE

    md = metadata()
    ledger = Ledger(tmp_path / "renyi.sqlite")
    ledger.set_budget(DATABASE, ANALYST, 5.0, 1e-6, filter="renyi")
    session = ledger_session(md, DuckDBBackend(database, md), ledger)
    result = session.run("SELECT SAMPLE_AGGREGATE(AVG(x), 0, 100) AS a, "
                         "SAMPLE_AGGREGATE(COUNT(*), 0, 20) AS n FROM t", epsilon=1.0)
    assert result.release.rho == pytest.approx(2 * 0.5**2 / 2, rel=1e-8)
    assert len(charged(session)) == 1
    session.close()
    ledger.close()


def test_gaussian_release_is_charged_by_its_zcdp_curve(database, tmp_path):
    """mechanism='gaussian': a zCDP-filtered budget admits it and charges rho = the sum of the
    outputs' l2^2 / (2 sigma^2); the record names the Gaussian, its sigma and delta."""
    from dpsql.accounting import Ledger
    from dpsql.sample_aggregate.gaussian import MECHANISM_GAUSSIAN
    from dpsql.sample_aggregate.release import plan_release
    from tests.ledgers import ANALYST, DATABASE

    md = metadata()
    ledger = Ledger(tmp_path / "zcdp.sqlite")
    ledger.set_budget(DATABASE, ANALYST, 5.0, 1e-6, filter="zcdp")
    session = ledger_session(md, DuckDBBackend(database, md), ledger)
    sql = ("SELECT SAMPLE_AGGREGATE(AVG(x), 0, 100) AS a, SAMPLE_AGGREGATE(COUNT(*), 0, 20) "
           "AS n FROM t")
    result = session.run(sql, epsilon=1.0, delta=1e-7, mechanism="gaussian")
    outputs, _ = plan_release(session.prepare(sql).plan,
                              Budget(1.0, 1e-7, "gaussian"), "fp")
    rho = sum(o.l2_squared / (2 * o.sigma**2) for o in outputs)
    assert result.release.rho == pytest.approx(rho, rel=1e-8)
    assert result.release.mechanism == MECHANISM_GAUSSIAN
    assert result.release.delta == 1e-7
    assert [c.sigma for c in result.release.columns] == [o.scale / 4 for o in outputs]
    assert len(charged(session)) == 1
    session.close()
    ledger.close()
