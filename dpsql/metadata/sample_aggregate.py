"""Reading a private table's ``sample_aggregate`` setting (dpsql's format only)::

    tables:
      orders:
        sample_aggregate: {blocks: 100, by: o_custkey}   # by: optional
        columns: ...

``blocks`` (m) is how many disjoint blocks the table's rows are split into, an integer in
[2, MAX_BLOCKS]; ``by`` names a declared column of the table whose keyed hash picks a row's
block (e.g. a customer id, so one customer's rows stay together); without it the hash is of
every declared column. Both are public: they set how much noise a release gets (scale
2(hi - lo) / (m epsilon)), not whether it is private (docs/privacy.md, "Sample-and-aggregate").

One place handles the key: :func:`read_setting` while a table is read, :func:`checked_setting`
once its columns are known. Every problem is the readers' ProgrammingError with file and line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from dpsql.metadata.model import SampleAggregate

if TYPE_CHECKING:
    from dpsql.metadata.reader import _Reader, _TableSpec

#: the table key this module reads
KEY = "sample_aggregate"
#: at most this many blocks: the session reads one row per block
MAX_BLOCKS = 100_000
_FIELDS = ("blocks", "by")


def read_setting(reader: _Reader, spec: Mapping, where: str) -> SampleAggregate | None:
    """The table's ``sample_aggregate`` mapping as a :class:`SampleAggregate` (None: absent),
    its ``by`` column not yet checked against the table's columns."""
    value = spec.get(KEY)
    if value is None:
        return None
    node = reader.mapping(value, where, KEY, spec, KEY)
    reader.check_keys(node, _FIELDS, f"{where}, {KEY}", {})
    blocks = node.get("blocks")
    if (not isinstance(blocks, int) or isinstance(blocks, bool)
            or not 2 <= blocks <= MAX_BLOCKS):
        reader.fail(where, f"{KEY} needs 'blocks:', an integer from 2 to {MAX_BLOCKS} (how "
                    f"many disjoint blocks the rows are split into), got {blocks!r}",
                    spec, KEY)
    by = node.get("by")
    if by is not None:
        by = reader.name(by, where, f"{KEY} 'by'", spec, KEY).strip().lower()
    return SampleAggregate(blocks=blocks, by=by)


def checked_setting(reader: _Reader, table: _TableSpec) -> SampleAggregate | None:
    """``table``'s setting once its columns are read: only on a private table, and ``by``
    must be one of its declared columns."""
    setting = table.sample_aggregate
    if setting is None:
        return None
    if table.public:
        reader.fail(table.where, f"{KEY} is for private tables: a public table is answered "
                    "exactly; remove it", table.node, table.key)
    if setting.by is not None and setting.by not in table.columns:
        reader.fail(table.where, f"{KEY} 'by' names column {setting.by!r}, which is not "
                    f"declared; declare it under 'columns:' or name one of: "
                    f"{', '.join(table.columns)}", table.node, table.key)
    return setting


def settings(setting: SampleAggregate) -> dict[str, object]:
    """The setting as the mapping the metadata writer emits (``by`` only when declared)."""
    out: dict[str, object] = {"blocks": setting.blocks}
    if setting.by is not None:
        out["by"] = setting.by
    return out
