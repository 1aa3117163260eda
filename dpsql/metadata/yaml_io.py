"""YAML in and out: the strict loader that remembers line numbers, and the writer of our format.

Reading: :func:`_parse_yaml` rejects duplicate keys and keeps keys as written; every mapping
it returns is a :class:`_Map` that knows its own line and each key's line, so the readers can
name ``FILE:LINE`` in errors. Writing: :func:`dump_metadata` (and :func:`_emit`, which also
writes comments, for ``dpsql metadata build``) produce our format, which loads back equal.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from dpsql.errors import ProgrammingError
from dpsql.metadata import sample_aggregate
from dpsql.metadata.model import Column, Metadata, PrivacyUnit, Table, UnitPath, _has_scheme

# --------------------------------------------------------------------------------------------
# Strict loading, with line numbers
# --------------------------------------------------------------------------------------------


class _Map(dict):
    """A YAML mapping that remembers its own line and each key's line (for error messages)."""

    line: int | None = None
    lines: dict[str, int]


class _DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


#: PyYAML's safe loading with libyaml's parser when PyYAML was built with it (its wheels are):
#: the same documents, nodes and line marks, ~7x faster (3.9 -> 0.6 ms on the test shop's
#: metadata, which every connection that names a metadata file reads). The pure-Python one
#: otherwise.
_SafeBase: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_SafeBase):  # type: ignore[misc, valid-type]
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one, which would
    let a second ``orders:`` entry quietly replace the first) and keeps keys as written: a
    column named ``no`` or ``2020`` is a name, not the boolean false or the integer 2020."""


class _PureStrictLoader(yaml.SafeLoader):
    """:class:`_StrictLoader` on PyYAML's pure-Python parser: a value written for a metadata
    file must read back under both parsers (a file may be read where PyYAML lacks libyaml)."""


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


for _loader in (_StrictLoader, _PureStrictLoader):
    _loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _line_of(node: object, key: str | None = None) -> int | None:
    if isinstance(node, _Map):
        if key is not None and key in node.lines:
            return node.lines[key]
        return node.line
    return None


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
            readable = "\n" not in text and all(
                yaml.load(f"[{text}]", Loader=loader) == [value]
                for loader in (_StrictLoader, _PureStrictLoader))
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
    if col.date_bounds is not None:
        out["bounds"] = [day.isoformat() for day in col.date_bounds]
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
    if col.partition_selection:
        out["partition_selection"] = True
    if col.type is not None:
        out["type"] = col.type
    return out


def _unit_settings(unit: PrivacyUnit) -> dict[str, object]:
    """``privacy_unit``'s mapping, every bound written (they are public parameters); R2T's
    grid (``levels``) only when not the default base 2."""
    out: dict[str, object] = {
        "table": unit.table, "column": unit.column, "max_contribution": unit.max_contribution,
        "max_groups": unit.max_groups, "max_rows_per_group": unit.max_rows_per_group}
    if unit.level_base != 2.0:
        base = unit.level_base
        out["levels"] = {"base": int(base) if float(base).is_integer() else base}
    if unit.max_sum is not None:
        out["max_sum"] = unit.max_sum
    return out


def _path_setting(table: Table, md: Metadata) -> object:
    """A table's ``unit`` value (None: nothing to write: no path, or the unit table's own
    implied path)."""
    if md.extra_units:
        own = {u: p for u, p in table.unit_paths.items() if u != table.name}
        return {u: _one_path(p) for u, p in own.items()} or None
    path = table.unit
    unit = md.privacy_unit
    if path is None or (unit is not None and table.name == unit.table
                        and path == UnitPath(unit.column)):
        return None
    return _one_path(path)


def _one_path(path: UnitPath) -> object:
    if path.direct:
        return path.column
    return {"via": path.column, "to": f"{path.to_table}.{path.to_column}"}


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
    if md.data_version is not None:
        lines.append(f"data_version: {_scalar(md.data_version)}")
    if md.privacy_unit is not None:
        settings: object = _unit_settings(md.privacy_unit)
        if md.extra_units:  # several units: a list, the bounds on the first (unit_multi)
            settings = [settings, *({"table": u.table, "column": u.column}
                                    for u in md.extra_units)]
        lines.append(f"privacy_unit: {_flow(settings)}")
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
        path = _path_setting(t, md)
        if path is not None:
            lines.append(f"    unit: {_flow(path)}")
        if t.sample_aggregate is not None:
            setting = sample_aggregate.settings(t.sample_aggregate)
            lines.append(f"    {sample_aggregate.KEY}: {_flow(setting)}")
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
