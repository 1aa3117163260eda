"""Reading FLEX's schema.yaml (uber/sql-differential-privacy, src/test/resources/schema.yaml)::

    databases:
    - database: shop
      namespace: public            # optional; stripped from table names
      tables:
      - table: orders
        isPublic: false            # optional
        approxRowCount: 1000000    # optional
        columns:
        - {name: customer_id, maxFreq: 100, isUnique: false, canRelease: true,
           domainSet: products.product_id}

Several databases merge into one model; ``dialect``, ``isTainted`` and ``fields`` are accepted
for compatibility and not used.
"""

from __future__ import annotations

from collections.abc import Mapping

from dpsql.metadata.model import Domain, _table_key
from dpsql.metadata.reader import _OURS_TO_FLEX, _ColSpec, _Reader, _short, _TableSpec

_FLEX_TOP = ("databases",)
_FLEX_DATABASE = ("database", "dialect", "namespace", "tables")
_FLEX_TABLE = ("table", "isPublic", "approxRowCount", "columns")
_FLEX_COLUMN = ("name", "maxFreq", "isUnique", "canRelease", "domainSet", "isTainted", "fields")


class _FlexReader(_Reader):
    """Validates a document in FLEX's format into table specs (see :meth:`_Reader.finish`)."""

    def read_flex(self, doc: Mapping) -> list[_TableSpec]:
        self.check_keys(doc, _FLEX_TOP, "top level", _OURS_TO_FLEX)
        databases = doc.get("databases")
        if not isinstance(databases, list) or not databases:
            self.fail("top level", "'databases' must be a non-empty list of databases",
                      doc, "databases")
        specs: list[_TableSpec] = []
        for i, db in enumerate(databases):
            self.mapping(db, f"databases[{i}]", "a database entry", doc, "databases")
            dbname = db.get("database")
            dwhere = f"database {dbname!r}" if isinstance(dbname, str) else f"databases[{i}]"
            self.check_keys(db, _FLEX_DATABASE, dwhere, _OURS_TO_FLEX)
            self.name(dbname, dwhere, "'database'", db, "database")
            namespace = db.get("namespace")
            if namespace is not None and not isinstance(namespace, str):
                self.fail(dwhere, f"namespace must be a name, got {_short(namespace)}",
                          db, "namespace")
            tables = db.get("tables")
            if not isinstance(tables, list):
                self.fail(dwhere, "'tables' must be a list of tables", db, "tables")
            for j, spec in enumerate(tables):
                self.mapping(spec, f"{dwhere}, tables[{j}]", "a table entry", db, "tables")
                raw_name = spec.get("table")
                where = (f"{dwhere}, table {raw_name!r}" if isinstance(raw_name, str)
                         else f"{dwhere}, tables[{j}]")
                self.check_keys(spec, _FLEX_TABLE, where, _OURS_TO_FLEX)
                self.name(raw_name, where, "'table'", spec, "table")
                name = raw_name
                # FLEX strips "<namespace>." from names; we drop any schema prefix (as
                # Metadata.table does), so public.orders and orders are the same table.
                if namespace and name.startswith(namespace + "."):
                    name = name[len(namespace) + 1 :]
                table = _TableSpec(
                    name=_table_key(name),
                    where=where,
                    node=spec,
                    key="table",
                    public=bool(self.flag(spec, "isPublic", where)),
                    rows=self.rows(spec, "approxRowCount", where),
                )
                columns = spec.get("columns")
                if not isinstance(columns, list):
                    self.fail(where, "'columns' must be a list of columns", spec, "columns")
                for k, cspec in enumerate(columns):
                    self.mapping(cspec, f"{where}, columns[{k}]", "a column entry",
                                 spec, "columns")
                    raw_col = cspec.get("name")
                    cwhere = (f"{where}, column {raw_col!r}" if isinstance(raw_col, str)
                              else f"{where}, columns[{k}]")
                    self.check_keys(cspec, _FLEX_COLUMN, cwhere, _OURS_TO_FLEX)
                    self.name(raw_col, cwhere, "'name'", cspec, "name")
                    col = _ColSpec(
                        name=raw_col.lower(),
                        where=cwhere,
                        node=cspec,
                        max_freq=self.max_freq(cspec, "maxFreq", cwhere),
                        releasable=self.flag(cspec, "canRelease", cwhere),
                        domain_key="domainSet",
                    )
                    # FLEX: a unique column has max frequency 1 whatever maxFreq says.
                    if self.flag(cspec, "isUnique", cwhere):
                        if col.max_freq not in (None, 1):
                            self.fail(cwhere, "isUnique: true contradicts maxFreq "
                                      f"{col.max_freq}; a unique column has maxFreq 1",
                                      cspec, "isUnique")
                        col.max_freq = 1
                    self.flag(cspec, "isTainted", cwhere)  # FLEX's taint analysis; not used
                    fields = cspec.get("fields")
                    if fields is not None and not isinstance(fields, list):
                        # nested struct fields: accepted for compatibility, not modelled
                        self.fail(cwhere, "'fields' must be a list", cspec, "fields")
                    if cspec.get("domainSet") is not None:
                        col.domain = self.domain_flex(cspec["domainSet"], cwhere, cspec)
                    self.add_column(table, col, columns, "name")
                specs.append(table)
        return specs

    def domain_flex(self, value: object, where: str, node: Mapping) -> Domain:
        if isinstance(value, list | tuple):
            return Domain(values=self.values(value, where, "domainSet", node))
        if not isinstance(value, str) or "." not in value.strip(". "):
            self.fail(
                where,
                f"domainSet must be 'table.column' naming a public table's column (or a list "
                f"of values), got {_short(value)}",
                node,
                "domainSet",
            )
        table, column = value.strip().rsplit(".", 1)
        return Domain(table=_table_key(table), column=column.lower())
