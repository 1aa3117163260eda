"""The driver's ledger rule and the answer cache's scope, end to end (real DuckDB files, CSV
files and ledger files): no ledger is an explicit choice; a changed database, data version or
metadata never serves an answer cached before the change; budgets of source-backed tables are
keyed by their files."""

from __future__ import annotations

from pathlib import Path

import pytest

import dpsql
from dpsql.accounting import Ledger, database_identity
from dpsql.backends import ledger_identity
from dpsql.errors import BudgetExhaustedError, ProgrammingError
from dpsql.metadata import load_metadata
from tests.db_files import writing

COUNT = "SELECT COUNT(*) AS n FROM people"
TOTAL = "SELECT SUM(age) AS s FROM people"

METADATA = """\
ledger: ledger.sqlite
{extra}tables:
  people:
{source}    columns:
      id: {{max_freq: 1, type: BIGINT}}
      age: {{bounds: [0, {upper}], type: BIGINT}}
"""


def write_metadata(path: Path, *, upper: int = 120, extra: str = "",
                   source: str | None = None) -> Path:
    path.write_text(METADATA.format(upper=upper, extra=extra,
                                    source=f"    source: {source}\n" if source else ""))
    return path


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(database, metadata naming the ledger, ledger granting alice epsilon 100)."""
    db = tmp_path / "people.duckdb"
    with writing(db) as con:
        con.execute("CREATE TABLE people AS SELECT i AS id, 20 + i % 50 AS age "
                    "FROM range(300) t(i)")
    ledger = tmp_path / "ledger.sqlite"
    with Ledger(ledger) as book:
        book.set_budget(database_identity(db), "alice", 100.0, 0.0)
    return db, write_metadata(tmp_path / "people.yaml"), ledger


def ask(db: Path | None, metadata: Path, sql: str = COUNT) -> tuple[bool, float]:
    """(served from the cache?, epsilon spent so far) after one query on a new connection."""
    with dpsql.connect(db, metadata, analyst="alice", epsilon=0.5) as conn:
        cached = conn.execute(sql).release.cached
        return cached, conn.budget.epsilon_spent


# -- no ledger is an explicit choice -----------------------------------------------------------


def test_connect_without_any_ledger_refuses_and_names_the_fix(world, tmp_path):
    db, _, _ = world
    plain = tmp_path / "plain.yaml"
    plain.write_text("tables:\n  people:\n    public: true\n    columns:\n      id: {}\n")
    # refused even when every table is public (free): the rule depends on the arguments only
    with pytest.raises(ProgrammingError) as info:
        dpsql.connect(db, plain, analyst="alice")
    message = str(info.value)
    assert "`ledger:`" in message and "ledger=PATH" in message and "ledger=None" in message
    with dpsql.connect(db, plain, analyst="alice", ledger=None) as conn:
        assert conn.execute("SELECT COUNT(*) AS n FROM people").fetchone() == (300,)
        assert conn.ledger_path is None


# -- the cache follows the data and the metadata -------------------------------------------------


def test_a_rewritten_database_is_charged_again(world):
    db, metadata, _ = world
    assert ask(db, metadata) == (False, 0.5)
    assert ask(db, metadata) == (True, 0.5)  # same data, same metadata: free repeat
    with writing(db) as con:
        con.execute("UPDATE people SET age = 21 WHERE id = 0")  # rewrite one row
    assert ask(db, metadata) == (False, 1.0)  # a new answer, paid for
    assert ask(db, metadata) == (True, 1.0)


def test_an_edited_metadata_is_charged_again(world, tmp_path):
    db, metadata, _ = world
    assert ask(db, metadata, TOTAL) == (False, 0.5)
    write_metadata(metadata, upper=120)  # rewritten, equal: still the same metadata
    assert ask(db, metadata, TOTAL) == (True, 0.5)
    write_metadata(metadata, upper=121)  # a bound changed
    assert ask(db, metadata, TOTAL) == (False, 1.0)
    # the same query on a loaded Metadata object: the same hash, so the same entry
    with dpsql.connect(db, load_metadata(metadata), analyst="alice", epsilon=0.5) as conn:
        assert conn.execute(TOTAL).release.cached


def test_a_bumped_data_version_is_charged_again(world):
    db, metadata, _ = world
    write_metadata(metadata, extra="data_version: 1\n")
    assert ask(db, metadata) == (False, 0.5)
    assert ask(db, metadata) == (True, 0.5)
    write_metadata(metadata, extra="data_version: 2\n")
    assert ask(db, metadata) == (False, 1.0)


def test_a_rewritten_source_file_is_charged_again(tmp_path):
    csv = tmp_path / "people.csv"
    csv.write_text("id,age\n" + "".join(f"{i},{20 + i % 50}\n" for i in range(300)))
    metadata = write_metadata(tmp_path / "csv.yaml", source="people.csv")
    with Ledger(tmp_path / "ledger.sqlite") as book:
        book.set_budget(ledger_identity("duckdb", None, load_metadata(metadata)), "alice",
                        10.0, 0.0)
    assert ask(None, metadata) == (False, 0.5)
    assert ask(None, metadata) == (True, 0.5)
    csv.write_text(csv.read_text() + "300,40\n")
    assert ask(None, metadata) == (False, 1.0)


# -- source-backed budgets are keyed by their files ----------------------------------------------


def test_metadata_over_different_csv_files_do_not_share_a_budget(tmp_path):
    for name in ("a.csv", "b.csv"):
        (tmp_path / name).write_text("id,age\n" + "".join(f"{i},30\n" for i in range(50)))
    meta_a = write_metadata(tmp_path / "a.yaml", source="a.csv")
    meta_b = write_metadata(tmp_path / "b.yaml", source="b.csv")
    id_a = ledger_identity("duckdb", None, load_metadata(meta_a))
    id_b = ledger_identity("duckdb", None, load_metadata(meta_b))
    assert id_a != id_b and ":memory:" not in (id_a, id_b)
    with Ledger(tmp_path / "ledger.sqlite") as book:
        book.set_budget(id_a, "alice", 0.6, 0.0)
    assert ask(None, meta_a) == (False, 0.5)
    # b's files are other data: a's budget does not cover them (and was not touched by them)
    with pytest.raises(BudgetExhaustedError):
        ask(None, meta_b)
    with Ledger(tmp_path / "ledger.sqlite") as book:
        book.set_budget(id_b, "alice", 0.6, 0.0)
        assert book.status(":memory:", "alice").history == ()
    assert ask(None, meta_b) == (False, 0.5)  # b's own budget; a's 0.1 left would not do
    with Ledger(tmp_path / "ledger.sqlite") as book:
        assert book.status(id_a, "alice").epsilon_spent == 0.5
        assert book.status(id_b, "alice").epsilon_spent == 0.5
