"""The analyst-facing schema: what an analyst may know about the tables, and nothing else.

The owner's metadata holds values computed from the private data (each column's max frequency,
each table's row count) and the owner's plumbing (source file paths, the ledger path, the data
version). The analyst-facing schema keeps only what a query author needs and what is already a
public decision: tables (and which are public), columns, their types, which columns are
releasable, their domains (listed values, or the public table and column they come from),
their clamping bounds, and the privacy unit (its table, id column and bounds) with each
table's path to it.

Guarantee: built by an allow-list (:data:`ANALYST_FIELDS`): each model object is rebuilt from
its analyst fields only, so a field added to the model later is left out until someone
classifies it (the test ``tests/metadata/test_analyst.py`` fails until every field of every
model class is in :data:`ANALYST_FIELDS` or :data:`OWNER_ONLY_FIELDS`). The written file is in
dpsql's metadata format and loads with :func:`dpsql.metadata.load_metadata` (as metadata
without max frequencies, row counts, sources or ledger).

Precondition: ``md`` holds the owner's decisions as reviewed. A draft from ``dpsql metadata
build`` has its bounds and domains still commented out; the schema written from it lists none,
so write it again after the review (``dpsql metadata analyst-schema``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dpsql.metadata import sample_aggregate
from dpsql.metadata.model import Column, Domain, Metadata, Table
from dpsql.metadata.yaml_io import _column_settings, _emit, _path_setting, _unit_settings

#: the fields of each model class an analyst may see
ANALYST_FIELDS: dict[type, tuple[str, ...]] = {
    # the privacy unit (its table, id column and public contribution bounds) and each table's
    # path to it are public decisions: what a release protects, and how
    Metadata: ("tables", "privacy_unit", "extra_units"),
    # sample_aggregate: the owner's public choice of blocks (and the column hashed into them)
    Table: ("name", "columns", "public", "unit", "sample_aggregate", "unit_paths"),
    Column: ("name", "bounds", "releasable", "domain", "type", "date_bounds",
             "partition_selection"),
    Domain: ("values", "table", "column"),
}

#: the fields of each model class only the owner sees: data-dependent values (``max_freq``,
#: ``rows``) and the owner's files and bookkeeping (``source``, ``ledger``, ``data_version``,
#: ``path``)
OWNER_ONLY_FIELDS: dict[type, tuple[str, ...]] = {
    Metadata: ("ledger", "data_version", "path"),
    Table: ("rows", "source"),
    Column: ("max_freq",),
    Domain: (),
}

HEADER = (
    "dpsql analyst-facing schema: the tables and columns queries may use, their types,",
    "the releasable columns with their domains, and the clamping bounds of SUM/AVG arguments.",
    "Columns without 'releasable: true' cannot be GROUP BY keys; every column of a public",
    "table is releasable; 'partition_selection: true' groups by a column without a domain",
    "(the groups shared by enough rows are released, and delta > 0 is needed).",
    "With 'privacy_unit', a release protects one unit (a row of that table) with every row",
    "linked to it through the tables' 'unit' paths, and the bounds given there.",
    "'sample_aggregate: {blocks: m}' on a table: SAMPLE_AGGREGATE(expr, lo, hi) may read it.",
    "It holds no row counts, max frequencies or file paths: share it.",
    "Written by dpsql from the owner's metadata; write it again after editing that file.",
    "",
)


def _keep(obj: Any, **changes: Any) -> Any:
    """``obj`` rebuilt from its analyst fields only (plus ``changes``); the rest default."""
    cls = type(obj)
    kwargs = {name: getattr(obj, name) for name in ANALYST_FIELDS[cls]}
    kwargs.update(changes)
    return cls(**kwargs)


def analyst_metadata(md: Metadata) -> Metadata:
    """``md`` with every owner-only field at its default (None): the analyst's view."""
    tables = {}
    for name, t in md.tables.items():
        columns = {
            cname: _keep(c, domain=None if c.domain is None else _keep(c.domain))
            for cname, c in t.columns.items()
        }
        tables[name] = _keep(t, columns=columns)
    return _keep(md, tables=tables)


def analyst_schema(md: Metadata) -> dict[str, Any]:
    """The analyst-facing schema of ``md`` as a YAML-ready mapping (dpsql's format)::

        {"tables": {"orders": {"columns": {"status": {"releasable": True,
            "domain": {"values": ["open", "shipped"]}, "type": "VARCHAR"}, ...}},
         "products": {"public": True, "columns": {...}}}}

    Per column: ``type`` (when known), ``releasable: true`` (private tables; absent means
    not releasable), ``bounds`` and ``domain`` (when declared). Nothing else. With a privacy
    unit: ``privacy_unit`` (its table, column and bounds) first, and each private table's
    ``unit`` path (the unit's table's own is implied).
    """
    view = analyst_metadata(md)
    tables: dict[str, Any] = {}
    for t in view.tables.values():
        entry: dict[str, Any] = {}
        if t.public:
            entry["public"] = True
        path = _path_setting(t, view)
        if path is not None:
            entry["unit"] = path
        if t.sample_aggregate is not None:
            entry[sample_aggregate.KEY] = sample_aggregate.settings(t.sample_aggregate)
        entry["columns"] = {c.name: _column_settings(t, c) for c in t.columns.values()}
        tables[t.name] = entry
    if view.privacy_unit is None:
        return {"tables": tables}
    unit: object = _unit_settings(view.privacy_unit)
    if view.extra_units:  # several units: the list form (dpsql.metadata.unit_multi)
        unit = [unit, *({"table": u.table, "column": u.column} for u in view.extra_units)]
    return {"privacy_unit": unit, "tables": tables}


def dumps_analyst_schema(md: Metadata) -> str:
    """The analyst-facing schema of ``md`` as YAML text, with an explanatory header."""
    return _emit(analyst_metadata(md), header=HEADER)


def write_analyst_schema(md: Metadata, path: str | os.PathLike) -> None:
    """Write the analyst-facing schema of ``md`` to ``path`` (folders created as needed)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dumps_analyst_schema(md), encoding="utf-8")
