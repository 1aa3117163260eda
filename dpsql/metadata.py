"""Table metadata: the validated model the analysis reads (DESIGN.md section 6).

Names are stored lower-case (DuckDB identifiers are case-insensitive); a schema prefix such as
``public.orders`` names the same table as ``orders``.

``load_metadata`` (a file or a parsed mapping) and ``loads_metadata`` (YAML text) read our format
or FLEX's schema.yaml and raise ProgrammingError naming the file, line, table and column of any
problem; ``dump_metadata`` writes our format back. Columns of public tables are always
releasable, with the column itself as their domain unless another is declared. Drafting a file
from a database lives in ``dpsql.metadata_build``.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import yaml

from dpsql.errors import ProgrammingError


@dataclass(frozen=True)
class Domain:
    """The declared set of values a group key may take: a literal list or a public table's column.

    Exactly one of ``values`` or (``table``, ``column``) is set.
    """

    values: tuple[object, ...] | None = None
    table: str | None = None
    column: str | None = None


@dataclass(frozen=True)
class Column:
    """One column. ``max_freq`` is mf(a): the most rows sharing one value (None: unknown).

    ``bounds`` = (lower, upper) clamps SUM/AVG arguments. ``releasable`` lets the column be a
    GROUP BY key (columns of public tables are always releasable).
    """

    name: str
    max_freq: int | None = None
    bounds: tuple[float, float] | None = None
    releasable: bool = False
    domain: Domain | None = None
    type: str | None = None


@dataclass(frozen=True)
class Table:
    """One table. Public tables have stability 0. ``source`` is a CSV/Parquet path or glob the
    owner-side backend registers as a view (None: the table lives in the database)."""

    name: str
    columns: Mapping[str, Column]
    public: bool = False
    rows: int | None = None
    source: str | None = None

    def column(self, name: str) -> Column:
        try:
            return self.columns[name.lower()]
        except KeyError:
            raise ProgrammingError(
                f"column {name!r} is not declared for table {self.name!r}; "
                f"declared columns: {', '.join(self.columns)}"
            ) from None


@dataclass(frozen=True)
class Metadata:
    """All declared tables. Only these tables and columns are reachable by queries."""

    tables: Mapping[str, Table]
    #: path of the privacy ledger every query against this database is charged to (optional)
    ledger: str | None = None
    #: the file this metadata came from (for error messages and relative paths)
    path: Path | None = field(default=None, compare=False)

    def table(self, name: str) -> Table:
        """The table named ``name`` (case-insensitive; a ``schema.`` prefix is ignored)."""
        key = name.lower().rsplit(".", 1)[-1]
        try:
            return self.tables[key]
        except KeyError:
            raise ProgrammingError(
                f"table {name!r} is not declared in the metadata; "
                f"declared tables: {', '.join(self.tables) or '(none)'}"
            ) from None

    def sqlglot_schema(self) -> dict[str, dict[str, str]]:
        """{table: {column: type}} for sqlglot's qualify / annotate_types."""
        return {
            t.name: {c.name: (c.type or "UNKNOWN") for c in t.columns.values()}
            for t in self.tables.values()
        }


# --------------------------------------------------------------------------------------------
# Loading and validation
# --------------------------------------------------------------------------------------------
#
# Two formats are accepted and produce the same model:
#
# * ours (DESIGN.md section 6): ``{ledger?, tables: {name: {public?, rows?, source?, columns:
#   {name: {max_freq?, bounds?, releasable?, domain?, type?}}}}}``
# * FLEX's schema.yaml (uber/sql-differential-privacy, src/test/resources/schema.yaml):
#   ``{databases: [{database, dialect?, namespace?, tables: [{table, isPublic?, approxRowCount?,
#   columns: [{name, maxFreq?, isUnique?, canRelease?, domainSet?, isTainted?, fields?}]}]}]}``
#
# Every problem is a ProgrammingError "FILE:LINE: table 't', column 'c': what is wrong; what to do".

_OURS_TOP = ("ledger", "tables")
_OURS_TABLE = ("public", "rows", "source", "columns")
_OURS_COLUMN = ("max_freq", "bounds", "releasable", "domain", "type")
_OURS_DOMAIN = ("values", "table", "column")
_FLEX_TOP = ("databases",)
_FLEX_DATABASE = ("database", "dialect", "namespace", "tables")
_FLEX_TABLE = ("table", "isPublic", "approxRowCount", "columns")
_FLEX_COLUMN = ("name", "maxFreq", "isUnique", "canRelease", "domainSet", "isTainted", "fields")

# The same setting under the other format's spelling, to point users at the right key.
_OURS_TO_FLEX = {
    "max_freq": "maxFreq",
    "releasable": "canRelease",
    "domain": "domainSet",
    "public": "isPublic",
    "rows": "approxRowCount",
}
_FLEX_TO_OURS = {v: k for k, v in _OURS_TO_FLEX.items()}


class _Map(dict):
    """A YAML mapping that remembers its own line and each key's line (for error messages)."""

    line: int | None = None
    lines: dict[str, int]


class _DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one, which would
    let a second ``orders:`` entry quietly replace the first) and keeps keys as written: a
    column named ``no`` or ``2020`` is a name, not the boolean false or the integer 2020."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> _Map:
    loader.flatten_mapping(node)  # resolves "<<" merge keys
    out = _Map()
    out.line = node.start_mark.line + 1
    out.lines = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain name", key_node.start_mark
            )
        key = key_node.value
        line = key_node.start_mark.line + 1
        if key in out:
            raise _DuplicateKeyError(key, out.lines[key], line)
        out[key] = loader.construct_object(value_node, deep=deep)
        out.lines[key] = line
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _line_of(node: object, key: str | None = None) -> int | None:
    if isinstance(node, _Map):
        if key is not None and key in node.lines:
            return node.lines[key]
        return node.line
    return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(value: object) -> bool:
    # bool is an int subclass; ``true`` is never a number here.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _table_key(name: str) -> str:
    """Canonical table name: lower-case, schema/namespace prefix dropped (as Metadata.table)."""
    return name.lower().rsplit(".", 1)[-1]


def _has_scheme(path: str) -> bool:
    return "://" in path


@dataclass
class _ColSpec:
    name: str
    where: str
    node: object
    max_freq: int | None = None
    bounds: tuple[float, float] | None = None
    releasable: bool | None = None
    domain: Domain | None = None
    domain_key: str = "domain"
    type: str | None = None


@dataclass
class _TableSpec:
    name: str
    where: str
    node: object
    key: str
    public: bool = False
    rows: int | None = None
    source: str | None = None
    columns: dict[str, _ColSpec] = field(default_factory=dict)


class _Reader:
    """Validates one parsed document (either format) into the model."""

    def __init__(self, origin: str, base: Path | None) -> None:
        self.origin = origin
        self.base = base

    # -- error reporting ---------------------------------------------------------------------

    def fail(
        self, where: str, message: str, node: object = None, key: str | None = None
    ) -> NoReturn:
        line = _line_of(node, key)
        loc = f"{self.origin}:{line}" if line else self.origin
        raise ProgrammingError(f"{loc}: {where + ': ' if where else ''}{message}")

    def check_keys(
        self, node: Mapping, known: Sequence[str], where: str, other: Mapping[str, str]
    ) -> None:
        for key in node:
            if not isinstance(key, str):
                self.fail(where, f"key {_short(key)} is not a name; quote it", node)
            if key in known:
                continue
            if key in other:
                hint = f"; {key!r} is the other format's spelling, here write {other[key]!r}"
            else:
                close = difflib.get_close_matches(key.lower(), known, n=1, cutoff=0.5)
                close = close or [k for k in known if k.lower() == key.lower()]
                hint = f"; did you mean {close[0]!r}?" if close else ""
            self.fail(
                where,
                f"unknown key {key!r}{hint} (known keys: {', '.join(known)})",
                node,
                key,
            )

    # -- scalar validators -------------------------------------------------------------------

    def mapping(
        self, value: object, where: str, what: str, node: object, key: str | None
    ) -> Mapping:
        if not isinstance(value, Mapping):
            self.fail(where, f"{what} must be a mapping of keys to values, got {_short(value)}",
                      node, key)
        return value

    def name(self, value: object, where: str, what: str, node: object, key: str | None) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(where, f"{what} must be a non-empty name, got {_short(value)}", node, key)
        return value

    def flag(self, node: Mapping, key: str, where: str) -> bool | None:
        value = node.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            self.fail(where, f"{key} must be true or false, got {_short(value)}", node, key)
        return value

    def max_freq(self, node: Mapping, key: str, where: str) -> int | None:
        value = node.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            self.fail(
                where,
                f"{key} must be a positive integer (the largest number of rows sharing one "
                f"value of this column), got {_short(value)}; remove it if unknown",
                node,
                key,
            )
        return value

    def rows(self, node: Mapping, key: str, where: str) -> int | None:
        value = node.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            self.fail(where, f"{key} must be a non-negative integer, got {_short(value)}",
                      node, key)
        return value

    def bounds(self, node: Mapping, key: str, where: str) -> tuple[float, float] | None:
        value = node.get(key)
        if value is None:
            return None
        ok = (
            isinstance(value, list | tuple)
            and len(value) == 2
            and all(_is_number(v) and math.isfinite(v) for v in value)
        )
        if not ok:
            self.fail(
                where,
                f"{key} must be two finite numbers [lower, upper], got {_short(value)}",
                node,
                key,
            )
        lower, upper = value
        if lower > upper:
            self.fail(
                where,
                f"{key} lower {lower} is greater than upper {upper}; write [{upper}, {lower}]",
                node,
                key,
            )
        return (lower, upper)

    def path(self, node: Mapping, key: str, where: str) -> str | None:
        value = node.get(key)
        if value is None:
            return None
        value = self.name(value, where, key, node, key)
        # Relative paths mean "next to this metadata file", not "next to wherever dpsql runs".
        if self.base is not None and not _has_scheme(value):
            expanded = os.path.expanduser(value)
            if not os.path.isabs(expanded):
                expanded = os.path.join(self.base, expanded)
            value = os.path.normpath(expanded)
        return value

    def values(self, value: object, where: str, key: str, node: object) -> tuple[object, ...]:
        if not isinstance(value, list | tuple) or not value:
            self.fail(where, f"{key} must be a non-empty list of values, got {_short(value)}",
                      node, key)
        kinds = set()
        for v in value:
            if isinstance(v, float) and not math.isfinite(v):
                self.fail(where, f"{key} contains {v}; domain values must be finite", node, key)
            if v is None:
                continue  # NULL is a group of its own; it may be listed with any other kind
            if isinstance(v, bool):
                kinds.add("boolean")
            elif _is_number(v):
                kinds.add("number")
            elif isinstance(v, str):
                kinds.add("string")
            elif isinstance(v, _dt.datetime):
                kinds.add("timestamp")
            elif isinstance(v, _dt.date):
                kinds.add("date")
            else:
                self.fail(where, f"{key} contains {_short(v)}; list plain values only",
                          node, key)
        if len(kinds) > 1:
            self.fail(
                where,
                f"{key} mixes {' and '.join(sorted(kinds))} values; quote the values so they "
                "all have the column's type",
                node,
                key,
            )
        seen: list[object] = []
        for v in value:
            # compare with the kind so that 1 and true are not "the same" value
            if any(type(v) is type(s) and v == s for s in seen):
                self.fail(where, f"{key} lists {_short(v)} twice; list each value once", node, key)
            seen.append(v)
        return tuple(value)

    # -- our format --------------------------------------------------------------------------

    def read_ours(self, doc: Mapping) -> tuple[list[_TableSpec], str | None]:
        self.check_keys(doc, _OURS_TOP, "top level", _FLEX_TO_OURS)
        ledger = self.path(doc, "ledger", "top level")
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
                col = _ColSpec(
                    name=raw_col.lower(),
                    where=cwhere,
                    node=cspec if isinstance(cspec, _Map) else columns,
                    max_freq=self.max_freq(cspec, "max_freq", cwhere),
                    bounds=self.bounds(cspec, "bounds", cwhere),
                    releasable=self.flag(cspec, "releasable", cwhere),
                    type=self.col_type(cspec, cwhere),
                )
                if cspec.get("domain") is not None:
                    col.domain = self.domain_ours(cspec["domain"], cwhere, cspec)
                self.add_column(table, col, columns, raw_col)
            specs.append(table)
        return specs, ledger

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

    def add_column(self, table: _TableSpec, col: _ColSpec, node: object, key: str) -> None:
        if col.name in table.columns:
            self.fail(
                table.where,
                f"column {key!r} is declared twice (names are case-insensitive); "
                "keep one declaration",
                node,
                key,
            )
        table.columns[col.name] = col

    # -- FLEX's format -----------------------------------------------------------------------

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

    # -- cross-table checks and the frozen model ---------------------------------------------

    def finish(self, specs: list[_TableSpec], ledger: str | None, path: Path | None) -> Metadata:
        by_name: dict[str, _TableSpec] = {}
        for t in specs:
            if t.name in by_name:
                first = by_name[t.name]
                self.fail(
                    t.where,
                    f"names the same table as {first.where} (names are case-insensitive and "
                    f"schema prefixes are dropped); rename or remove one",
                    t.node,
                    t.key,
                )
            by_name[t.name] = t

        tables: dict[str, Table] = {}
        for t in specs:
            columns: dict[str, Column] = {}
            for c in t.columns.values():
                if c.domain is not None and c.domain.table is not None:
                    self.check_domain_table(c, by_name)
                releasable = bool(c.releasable)
                domain = c.domain
                if t.public:
                    if c.releasable is False:
                        self.fail(c.where, "columns of public tables are always releasable; "
                                  "remove 'releasable: false' or make the table private",
                                  c.node, "canRelease" if c.domain_key == "domainSet"
                                  else "releasable")
                    releasable = True
                    # A public table's own values are public: they are the natural bins.
                    domain = domain or Domain(table=t.name, column=c.name)
                columns[c.name] = Column(
                    name=c.name,
                    max_freq=c.max_freq,
                    bounds=c.bounds,
                    releasable=releasable,
                    domain=domain,
                    type=c.type,
                )
            tables[t.name] = Table(
                name=t.name, columns=columns, public=t.public, rows=t.rows, source=t.source
            )
        return Metadata(tables=tables, ledger=ledger, path=path)

    def check_domain_table(self, c: _ColSpec, by_name: Mapping[str, _TableSpec]) -> None:
        assert c.domain is not None and c.domain.table is not None
        target = by_name.get(c.domain.table)
        if target is None:
            close = difflib.get_close_matches(c.domain.table, list(by_name), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.fail(c.where, f"{c.domain_key} names table {c.domain.table!r}, which is not "
                      f"declared{hint}", c.node, c.domain_key)
        if not target.public:
            self.fail(
                c.where,
                f"{c.domain_key} names table {c.domain.table!r}, which is private: its values "
                "would leak through the filled bins; use a public table or list the values",
                c.node,
                c.domain_key,
            )
        if c.domain.column not in target.columns:
            close = difflib.get_close_matches(c.domain.column or "", list(target.columns), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.fail(c.where, f"{c.domain_key} names column {c.domain.column!r}, which is not "
                      f"declared in table {c.domain.table!r}{hint}", c.node, c.domain_key)


def _parse_yaml(text: str, origin: str) -> object:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except _DuplicateKeyError as exc:
        raise ProgrammingError(
            f"{origin}:{exc.second}: key {exc.key!r} appears twice in the same mapping (first "
            f"on line {exc.first}); YAML keeps only one, so merge them or remove one"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"{origin}:{mark.line + 1}" if mark is not None else origin
        problem = getattr(exc, "problem", None) or str(exc)
        raise ProgrammingError(f"{loc}: not valid YAML: {problem}") from None


def _from_document(doc: object, origin: str, path: Path | None, base: Path | None) -> Metadata:
    reader = _Reader(origin, base)
    if doc is None:
        reader.fail("", "the metadata is empty; declare 'tables:' (see DESIGN.md section 6)")
    if not isinstance(doc, Mapping):
        reader.fail(
            "",
            f"the top level must be a mapping with 'tables:' (dpsql) or 'databases:' (FLEX), "
            f"got a {type(doc).__name__}",
        )
    if "databases" in doc and "tables" in doc:
        reader.fail("top level", "has both 'tables' (dpsql format) and 'databases' (FLEX "
                    "format); use one format per file", doc)
    if "databases" in doc:
        return reader.finish(reader.read_flex(doc), None, path)
    specs, ledger = reader.read_ours(doc)
    return reader.finish(specs, ledger, path)


def loads_metadata(text: str, path: str | os.PathLike | None = None) -> Metadata:
    """Parse metadata YAML text (either format). ``path`` is where the text notionally lives:
    it names the text in errors and anchors relative ``ledger``/``source`` paths."""
    p = Path(path).absolute() if path is not None else None
    origin = str(path) if path is not None else "<metadata>"
    return _from_document(_parse_yaml(text, origin), origin, p, p.parent if p else None)


def load_metadata(source: str | os.PathLike | Mapping) -> Metadata:
    """Load and validate metadata from a YAML file (ours or FLEX's schema.yaml) or an already
    parsed mapping. Raises ProgrammingError naming the file, table and column on any problem.

    Relative ``ledger`` and ``source`` paths in a file are resolved against the file's folder;
    in a mapping they are kept as written.
    """
    if isinstance(source, Mapping):
        return _from_document(source, "<metadata>", None, None)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProgrammingError(f"metadata file {str(source)!r} does not exist") from None
    except IsADirectoryError:
        raise ProgrammingError(f"metadata path {str(source)!r} is a folder, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProgrammingError(f"cannot read metadata file {str(source)!r}: {exc}") from None
    return loads_metadata(text, path)


# --------------------------------------------------------------------------------------------
# Dumping (our format)
# --------------------------------------------------------------------------------------------


def _double_quoted(text: str) -> str:
    """A YAML double-quoted scalar with everything outside printable ASCII escaped."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _scalar(value: object) -> str:
    # dumped inside a flow list, so that "a,b" or "[x" get quoted for flow context
    text = yaml.safe_dump([value], default_flow_style=True, width=2**31, allow_unicode=True)
    text = text.strip()[1:-1]
    if isinstance(value, str):
        # line breaks, and characters PyYAML writes raw but cannot read back (e.g. U+007F)
        try:
            readable = "\n" not in text and yaml.load(f"[{text}]", Loader=_StrictLoader) == [value]
        except yaml.YAMLError:
            readable = False
        if not readable:
            return _double_quoted(value)
    return text


def _flow(value: object) -> str:
    """One-line YAML for a scalar, list or mapping."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_scalar(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return _scalar(value)


def _relative(path: str, base: Path | None) -> str:
    """``path`` relative to ``base`` when they share more than the file-system root (files kept
    next to the metadata), else unchanged (an absolute path the owner wrote stays absolute)."""
    if base is None or _has_scheme(path) or not os.path.isabs(path):
        return path
    try:
        common = os.path.commonpath([path, str(base)])
        if common == os.path.dirname(common):  # only the root ("/" or "C:\\") in common
            return path
        return os.path.relpath(path, base)
    except ValueError:  # another drive on Windows
        return path


def _column_settings(table: Table, col: Column) -> dict[str, object]:
    out: dict[str, object] = {}
    if col.max_freq is not None:
        out["max_freq"] = col.max_freq
    if col.bounds is not None:
        out["bounds"] = list(col.bounds)
    if col.releasable and not table.public:  # implied for public tables
        out["releasable"] = True
    dom = col.domain
    if dom is not None and not (
        table.public and dom.values is None and (dom.table, dom.column) == (table.name, col.name)
    ):
        out["domain"] = (
            {"values": list(dom.values)} if dom.values is not None
            else {"table": dom.table, "column": dom.column}
        )
    if col.type is not None:
        out["type"] = col.type
    return out


def _emit(
    md: Metadata,
    *,
    header: Sequence[str] = (),
    table_notes: Mapping[str, Sequence[str]] | None = None,
    column_notes: Mapping[tuple[str, str], Sequence[str]] | None = None,
) -> str:
    """Our format as text. Notes become ``#`` comments: table notes under the table's name,
    column notes inside the column's block (so a commented ``# bounds: [..]`` can be
    uncommented in place)."""
    table_notes = table_notes or {}
    column_notes = column_notes or {}
    base = md.path.parent if md.path is not None else None
    lines = [f"# {h}" if h else "#" for h in header]
    if md.ledger is not None:
        lines.append(f"ledger: {_scalar(_relative(md.ledger, base))}")
    lines.append("tables:")
    for t in md.tables.values():
        lines.append(f"  {_scalar(t.name)}:")
        lines.extend(f"    # {n}" for n in table_notes.get(t.name, ()))
        if t.public:
            lines.append("    public: true")
        if t.rows is not None:
            lines.append(f"    rows: {t.rows}")
        if t.source is not None:
            lines.append(f"    source: {_scalar(_relative(t.source, base))}")
        lines.append("    columns:" if t.columns else "    columns: {}")
        for c in t.columns.values():
            settings = _column_settings(t, c)
            notes = column_notes.get((t.name, c.name), ())
            if not notes:
                lines.append(f"      {_scalar(c.name)}: {_flow(settings)}")
                continue
            lines.append(f"      {_scalar(c.name)}:")
            lines.extend(f"        {k}: {_flow(v)}" for k, v in settings.items())
            lines.extend(f"        # {n}" for n in notes)
    return "\n".join(lines) + "\n"


def dump_metadata(md: Metadata) -> str:
    """``md`` as YAML in our format; ``loads_metadata(dump_metadata(md), md.path) == md``.

    Paths are written relative to ``md.path``'s folder when ``md`` came from a file.
    """
    return _emit(md)
