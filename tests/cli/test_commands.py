"""dpsql.cli.commands: what the shell's backslash commands print about a column's groups."""

from __future__ import annotations

from dpsql.cli.commands import _domain_text
from dpsql.metadata import Column, Domain, Table


def _table(*columns: Column) -> Table:
    return Table("visits", {c.name: c for c in columns})


def test_a_partition_selected_column_says_its_groups_come_from_the_data():
    # found by the units QA: \describe showed such a column as releasable with an empty
    # domain, as if GROUP BY on it were refused, though it runs with delta > 0
    chosen = Column("store_id", type="INTEGER", releasable=True, partition_selection=True)
    assert _domain_text(None, _table(chosen), chosen) == "from the data (needs delta > 0)"
    plain = Column("kind", type="VARCHAR", releasable=True)
    assert _domain_text(None, _table(plain), plain) == ""
    listed = Column("kind", type="VARCHAR", releasable=True, domain=Domain(values=("a", "b")))
    assert _domain_text(listed.domain, _table(listed), listed) == "a, b"
