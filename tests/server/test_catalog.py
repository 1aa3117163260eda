"""dpsql.server.catalog: the shadow schema answers as the authenticated analyst."""

from __future__ import annotations

import pytest

from dpsql.metadata import loads_metadata
from dpsql.server.catalog import Catalog, parse_postgres

METADATA = "tables:\n  t:\n    columns:\n      x: {type: INTEGER, bounds: [0, 1]}\n"


@pytest.mark.parametrize(("sql", "names"), [
    ("SELECT current_user, session_user", ("current_user", "session_user")),
    ("SELECT pg_catalog.current_user() AS who", ("who",)),
    ("SELECT usename FROM pg_catalog.pg_user WHERE usename = current_user", ("usename",)),
])
def test_current_user_is_the_analyst_not_the_shadow_database(sql: str,
                                                             names: tuple[str, ...]) -> None:
    catalog = Catalog(loads_metadata(METADATA), ["t"], "o'brien")
    try:
        tree = parse_postgres(sql)
        assert tree is not None
        got = catalog.run(tree)
    finally:
        catalog.close()
    assert got.names == names
    assert got.rows == [("o'brien",) * len(names)]
