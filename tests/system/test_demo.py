"""The demo shop (small sizes): deterministic data, reviewed metadata, budget, reuse, and the
guided tour of `dpsql demo`."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from dpsql.accounting import Ledger, database_identity
from dpsql.cli.main import main
from dpsql.demo import (
    DEMO_ANALYST,
    STATUSES,
    DemoFiles,
    create_demo,
    demo_home,
    existing_demo,
)
from dpsql.metadata import Domain, load_metadata

SIZES = {"customers": 400, "orders": 4_000, "products": 40}
TABLES = ("customers", "orders", "products", "recommendations")


def small(folder: Path, **kw: object) -> DemoFiles:
    return create_demo(folder, **{**SIZES, **kw})


def contents(files: DemoFiles) -> dict[str, list[tuple]]:
    with duckdb.connect(str(files.database), read_only=True) as con:
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}


def test_same_data_twice(tmp_path: Path) -> None:
    a, b = small(tmp_path / "a"), small(tmp_path / "b")
    data = contents(a)
    assert data == contents(b)
    assert a.metadata.read_text() == b.metadata.read_text()
    assert [len(data[t]) for t in ("customers", "orders", "products")] == [400, 4_000, 40]
    assert len(data["recommendations"]) > 400
    other = small(tmp_path / "c", seed=7)
    assert contents(other)["orders"] != data["orders"]  # the seed is what fixes the data


def test_data_are_plausible(tmp_path: Path) -> None:
    files = small(tmp_path / "demo")
    with duckdb.connect(str(files.database), read_only=True) as con:
        statuses = {s for (s,) in con.execute("SELECT DISTINCT status FROM orders").fetchall()}
        lo, hi = con.execute("SELECT min(order_cost), max(order_cost) FROM orders").fetchone()
        orphans = con.execute(
            "SELECT count(*) FROM orders o LEFT JOIN products p USING (product_id) "
            "WHERE p.product_id IS NULL").fetchone()[0]
        types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                 "WHERE table_name = 'orders'").fetchall())
    assert statuses <= set(STATUSES)
    assert lo > 0 and hi <= 1000  # inside the declared bounds: the tour's SUM is not clamped
    assert orphans == 0
    assert types["order_date"] == "DATE" and "order_day" not in types


def test_metadata_loads_with_reviewed_policy(tmp_path: Path) -> None:
    files = small(tmp_path / "demo")
    md = load_metadata(files.metadata)
    assert md.ledger == str(files.ledger)
    assert md.table("products").public and not md.table("orders").public
    orders = md.table("orders")
    assert orders.column("status").releasable
    assert orders.column("status").domain == Domain(values=STATUSES)
    assert orders.column("product_id").domain == Domain(table="products", column="product_id")
    assert orders.column("order_cost").bounds == (0, 1000)
    assert orders.column("order_id").max_freq == 1
    # max frequencies are the drafted (profiled) ones
    with duckdb.connect(str(files.database), read_only=True) as con:
        mf = con.execute("SELECT max(c) FROM (SELECT count(*) AS c FROM orders "
                         "GROUP BY customer_id)").fetchone()[0]
    assert orders.column("customer_id").max_freq == mf
    assert not orders.column("customer_id").releasable
    with Ledger(files.ledger) as ledger:
        status = ledger.status(database_identity(files.database), DEMO_ANALYST)
    assert (status.epsilon_total, status.delta_total, status.epsilon_spent) == (10.0, 1e-6, 0.0)


def test_reused_unless_rebuilt(tmp_path: Path) -> None:
    first = small(tmp_path / "demo")
    stamp = first.database.stat().st_mtime_ns
    again = create_demo(tmp_path / "demo")  # default (large) sizes: the existing demo wins
    assert again == first and again.database.stat().st_mtime_ns == stamp
    with Ledger(first.ledger) as ledger:
        ledger.charge(database_identity(first.database), DEMO_ANALYST, fingerprint="x",
                      epsilon=1.0, delta=0.0, mechanism="test")
    rebuilt = small(tmp_path / "demo", rebuild=True)
    assert rebuilt.database.stat().st_mtime_ns != stamp
    with Ledger(rebuilt.ledger) as ledger:  # a rebuild starts with the full budget again
        assert ledger.status(database_identity(rebuilt.database), DEMO_ANALYST).history == ()


def test_incomplete_demo_is_rebuilt(tmp_path: Path) -> None:
    files = small(tmp_path / "demo")
    files.manifest.unlink()  # as if the build had been interrupted
    assert existing_demo(files.folder) is None
    assert small(tmp_path / "demo") == files
    assert existing_demo(files.folder) == files


def test_demo_home_follows_dpsql_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path))
    assert demo_home() == tmp_path / "demo"
    monkeypatch.delenv("DPSQL_HOME")
    assert demo_home() == Path.home() / ".cache" / "dpsql" / "demo"


SECTIONS = (
    "1. A count", "2. A join count", "3. A histogram over a public domain",
    "4. A bounded SUM and AVG", "5. A raw-row query is rejected", "6. The budget left",
)


def test_tour(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DPSQL_HOME", str(tmp_path))
    files = small(tmp_path / "demo")  # `dpsql demo` reuses it instead of building 1M orders
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"using the demo shop in {files.folder}")
    positions = [out.index(s) for s in SECTIONS]
    assert positions == sorted(positions)

    # 1: the owner's true count next to the analyst's noisy one
    count = out[positions[0]:positions[1]].splitlines()
    true, noisy = count[-4].split()
    assert int(true) == 4_000 and abs(int(noisy) - 4_000) < 100
    assert re.match(r"spent epsilon=0\.5 delta=0; remaining epsilon=9\.5 delta=1e-06; "
                    r"95% interval: orders ±6\.49", count[-3])
    # 2: a join of private tables spends delta and shows no error bar, saying why
    assert ("spent epsilon=0.5 delta=1e-07; remaining epsilon=9 delta=9e-07; french_orders: "
            "accuracy not publishable (data-dependent noise)\n") in out
    # 3: one row per category of the public products table
    histogram = out[positions[2]:positions[3]]
    with duckdb.connect(str(files.database), read_only=True) as con:
        categories = [c for (c,) in con.execute(
            "SELECT DISTINCT category FROM products ORDER BY 1").fetchall()]
    for category in categories:
        assert re.search(rf"^{category} +\d+ +\d+$", histogram, re.M)
    # 4: SUM and AVG, true and noisy
    assert "revenue (true, owner)" in out and "avg_cost (noisy, analyst)" in out
    # 5: the raw-row query is refused, free
    assert "rejected (UnsupportedQueryError): column 'customer_id' is neither aggregated" in out
    assert "epsilon spent by the rejected query: 0\n" in out
    # 6: the budget
    budget = ("analyst demo: budget epsilon 10, delta 1e-06; spent epsilon 2.5, delta 1e-07 in "
              "4 charges; remaining epsilon 7.5, delta 9e-07")
    assert budget in out
    assert "dpsql shell --demo" in out

    # Again: the same noisy answers from the ledger's cache, and nothing more spent.
    assert main(["demo"]) == 0
    again = capsys.readouterr().out
    assert again.count("cached answer, spent nothing") == 4
    assert budget in again
    assert again[again.index(SECTIONS[0]):] == out[out.index(SECTIONS[0]):].replace(
        "spent epsilon=0.5 delta=0;", "cached answer, spent nothing;").replace(
        "spent epsilon=0.5 delta=1e-07;", "cached answer, spent nothing;").replace(
        "spent epsilon=1 delta=0;", "cached answer, spent nothing;").replace(
        "remaining epsilon=9.5 delta=1e-06", "remaining epsilon=7.5 delta=9e-07").replace(
        "remaining epsilon=9 delta=9e-07", "remaining epsilon=7.5 delta=9e-07").replace(
        "remaining epsilon=8.5 delta=9e-07", "remaining epsilon=7.5 delta=9e-07")
