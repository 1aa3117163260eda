"""Give test metadata the column types a real database would report.

The analysis rejects join / IN / EXISTS keys of unknown type (dpsql.analysis.keytypes); the
Engine fills types from the database. Tests that analyse metadata without a database and are
about ES values, not key types, declare the types this way. Key types have their own tests
(test_keytypes.py).
"""

from __future__ import annotations

import dataclasses

from dpsql.metadata import Metadata


def typed(md: Metadata, type_: str = "INTEGER") -> Metadata:
    """``md`` with every undeclared column type set to ``type_``."""
    return dataclasses.replace(md, tables={
        name: dataclasses.replace(t, columns={
            c: dataclasses.replace(col, type=col.type or type_) for c, col in t.columns.items()
        }) for name, t in md.tables.items()
    })
