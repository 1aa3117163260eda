"""Reading dpsql's own metadata format (README.md, "Metadata"), for example::

    ledger: ledger.sqlite             # optional; relative to this file
    data_version: 2026-11-26          # optional; bump it when the data change
    privacy_unit: {table: customers, column: customer_id}   # optional (dpsql.metadata.unit_paths)
    tables:
      customers:                      # the unit's table: its path is its id column
        columns:
          customer_id: {type: INTEGER}
      products:
        public: true                  # optional
        columns:
          product_id: {type: INTEGER}
      orders:
        rows: 1000000                 # optional
        source: orders.parquet        # optional; relative to this file
        unit: customer_id             # with privacy_unit: every private table's path to it
        columns:
          customer_id: {max_freq: 100, type: INTEGER}
          cost: {bounds: [0, 500]}
          ordered: {bounds: ['2020-01-01', '2025-12-31'], type: DATE}  # days: see derived keys
          product_id: {releasable: true, domain: {table: products, column: product_id}}
          status: {releasable: true, domain: {values: [open, shipped]}}
          city: {releasable: true, partition_selection: true}  # bins from the data, by DP
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping

from dpsql.metadata import sample_aggregate
from dpsql.metadata.model import Domain, _table_key
from dpsql.metadata.reader import _FLEX_TO_OURS, _ColSpec, _Reader, _TableSpec
from dpsql.metadata.unit_multi import read_unit_list, read_unit_map
from dpsql.metadata.unit_paths import _UnitSpec, read_privacy_unit, read_unit_path
from dpsql.metadata.yaml_io import _Map

_OURS_TOP = ("ledger", "data_version", "privacy_unit", "tables")
_OURS_TABLE = ("public", "rows", "source", "unit", "columns", sample_aggregate.KEY)
_OURS_COLUMN = ("max_freq", "bounds", "releasable", "domain", "type", "partition_selection")
_OURS_DOMAIN = ("values", "table", "column")


def _day_type(type_text: str) -> bool:
    """DATE or TIMESTAMP (without a time zone: its days would depend on the zone)."""
    text = " ".join(type_text.upper().split())
    return text in ("DATE", "TIMESTAMP", "DATETIME", "TIMESTAMP_NS", "TIMESTAMP_MS",
                    "TIMESTAMP_S", "TIMESTAMP WITHOUT TIME ZONE")


class _OursReader(_Reader):
    """Validates a document in our format into table specs (see :meth:`_Reader.finish`)."""

    #: the document's ``privacy_unit`` as read by :meth:`read_ours` (None: not declared)
    privacy_unit: _UnitSpec | None = None
    #: further unit tables when ``privacy_unit`` is a list of several (unit_multi)
    extra_units: tuple[_UnitSpec, ...] = ()

    def read_ours(self, doc: Mapping) -> tuple[list[_TableSpec], str | None, str | None]:
        """(table specs, ledger path, data version) of ``doc``; the privacy unit is in
        :attr:`privacy_unit` (checked against the tables by :meth:`finish`)."""
        self.check_keys(doc, _OURS_TOP, "top level", _FLEX_TO_OURS)
        ledger = self.path(doc, "ledger", "top level")
        data_version = self.version(doc, "data_version", "top level")
        units = read_unit_list(self, doc)
        if units is None:
            self.privacy_unit = read_privacy_unit(self, doc)
        else:
            self.privacy_unit, self.extra_units = units[0], tuple(units[1:])
        names = [u.unit.table for u in units or ()]
        tables = doc.get("tables")
        if tables is None:
            self.fail("top level", "missing 'tables': declare at least one table", doc)
        self.mapping(tables, "top level", "'tables'", doc, "tables")
        if not tables:
            self.fail("top level", "'tables' is empty: declare at least one table", doc, "tables")
        specs = []
        for raw_name, spec in tables.items():
            self.name(raw_name, "tables", "a table name", tables, None)
            where = f"table {raw_name!r}"
            if spec is None:
                self.fail(where, "has no settings; give it at least 'columns:'", tables, raw_name)
            self.mapping(spec, where, "the table", tables, raw_name)
            self.check_keys(spec, _OURS_TABLE, where, _FLEX_TO_OURS)
            table = _TableSpec(
                name=_table_key(raw_name),
                where=where,
                node=tables,
                key=raw_name,
                public=bool(self.flag(spec, "public", where)),
                rows=self.rows(spec, "rows", where),
                source=self.path(spec, "source", where),
                unit=None if self.extra_units else read_unit_path(self, spec, where),
                unit_paths=(read_unit_map(self, spec, where, names) if self.extra_units
                            else None),
                sample_aggregate=sample_aggregate.read_setting(self, spec, where),
            )
            columns = spec.get("columns")
            if columns is None:
                self.fail(where, "missing 'columns:'; list the columns queries may use",
                          spec, None)
            self.mapping(columns, where, "'columns'", spec, "columns")
            for raw_col, cspec in columns.items():
                self.name(raw_col, where, "a column name", columns, None)
                cwhere = f"{where}, column {raw_col!r}"
                cspec = {} if cspec is None else cspec
                self.mapping(cspec, cwhere, "the column", columns, raw_col)
                self.check_keys(cspec, _OURS_COLUMN, cwhere, _FLEX_TO_OURS)
                days = self.date_bounds(cspec, "bounds", cwhere)
                col = _ColSpec(
                    name=raw_col.lower(),
                    where=cwhere,
                    node=cspec if isinstance(cspec, _Map) else columns,
                    max_freq=self.max_freq(cspec, "max_freq", cwhere),
                    bounds=None if days is not None else self.bounds(cspec, "bounds", cwhere),
                    date_bounds=days,
                    releasable=self.flag(cspec, "releasable", cwhere),
                    partition_selection=self.flag(cspec, "partition_selection", cwhere),
                    type=self.col_type(cspec, cwhere),
                )
                if days is not None and col.type is not None and not _day_type(col.type):
                    self.fail(cwhere, f"bounds are days, and the column's type is {col.type}: "
                              "declare days only for a DATE or TIMESTAMP column", cspec,
                              "bounds")
                if cspec.get("domain") is not None:
                    col.domain = self.domain_ours(cspec["domain"], cwhere, cspec)
                self.add_column(table, col, columns, raw_col)
            specs.append(table)
        return specs, ledger, data_version

    def version(self, node: Mapping, key: str, where: str) -> str | None:
        """A version label: a non-empty string, or a number or date (kept as its text)."""
        value = node.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float | _dt.date):
            self.fail(where, f"{key} must be a label such as 3 or 2026-11-26, got "
                      f"{value!r}", node, key)
        text = value.isoformat() if isinstance(value, _dt.date) else str(value)
        if not text.strip():
            self.fail(where, f"{key} is empty; write a label such as 3 or 2026-11-26",
                      node, key)
        return text

    def col_type(self, node: Mapping, where: str) -> str | None:
        value = node.get("type")
        if value is None:
            return None
        return self.name(value, where, "type", node, "type").strip()

    def domain_ours(self, value: object, where: str, node: Mapping) -> Domain:
        dom = self.mapping(value, where, "domain", node, "domain")
        self.check_keys(dom, _OURS_DOMAIN, f"{where}, domain", {})
        if "values" in dom:
            if "table" in dom or "column" in dom:
                self.fail(where, "domain takes either 'values' or 'table' and 'column', not both",
                          node, "domain")
            return Domain(values=self.values(dom["values"], where, "domain values", node))
        if "table" not in dom or "column" not in dom:
            self.fail(
                where,
                "domain needs either {values: [...]} or {table: T, column: C} naming a public "
                "table's column",
                node,
                "domain",
            )
        table = self.name(dom["table"], where, "domain table", node, "domain")
        column = self.name(dom["column"], where, "domain column", node, "domain")
        return Domain(table=_table_key(table), column=column.lower())
