"""dpsql.privacy_audit.neighbours: the candidates of each neighbouring relation and the copies
they make, on real DuckDB files."""

from __future__ import annotations

import duckdb
import pytest

from dpsql.errors import ProgrammingError
from dpsql.privacy_audit.neighbours import RELATIONS, candidates, copy_database, make_neighbour
from tests.db_files import writing


@pytest.fixture
def base(tmp_path):
    path = tmp_path / "t.duckdb"
    with writing(path) as con:
        con.execute("CREATE TABLE t AS SELECT i AS v FROM range(10) r(i)")
    return copy_database(path, tmp_path / "base.duckdb")


def rows(path) -> list[int]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return sorted(r[0] for r in con.execute("SELECT v FROM t").fetchall())
    finally:
        con.close()


def test_change_and_remove_candidates(base):
    assert RELATIONS == ("change", "remove", "unit")
    change = candidates(base, "t", "change", 6)
    assert len(change) == 6 and all(a != b and b is not None for a, b in change)
    remove = candidates(base, "t", "remove", 3)
    assert [b for _, b in remove] == [None] * 3 and len({a for a, _ in remove}) == 3
    with pytest.raises(ProgrammingError, match="unknown neighbouring relation"):
        candidates(base, "t", "unit", 2)


def test_a_removed_row_is_gone_and_a_changed_row_copies_another(base, tmp_path):
    removed = make_neighbour(base, tmp_path / "r.duckdb", "t", 0, None)
    assert rows(removed.path) == list(range(1, 10))
    assert removed.describe() == "t: row 0 removed" and removed.relation == "remove"
    changed = make_neighbour(base, tmp_path / "c.duckdb", "t", 0, 9)
    assert rows(changed.path) == [*range(1, 10), 9]
    assert changed.relation == "change" and "replaced by a copy of row 9" in changed.describe()
    assert rows(base) == list(range(10))  # the base copy is untouched
