"""Loading metadata: parse the YAML, pick the format's reader, validate into the model."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dpsql.errors import ProgrammingError
from dpsql.metadata.flex import _FlexReader
from dpsql.metadata.model import Metadata
from dpsql.metadata.ours import _OursReader
from dpsql.metadata.reader import _Reader
from dpsql.metadata.yaml_io import _parse_yaml


def _from_document(doc: object, origin: str, path: Path | None, base: Path | None) -> Metadata:
    reader = _Reader(origin, base)
    if doc is None:
        reader.fail("", "the metadata is empty; declare 'tables:' (see README.md, \"Metadata\")")
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
        flex = _FlexReader(origin, base)
        return flex.finish(flex.read_flex(doc), None, path)
    ours = _OursReader(origin, base)
    specs, ledger, data_version = ours.read_ours(doc)
    return ours.finish(specs, ledger, path, data_version, ours.privacy_unit,
                       ours.extra_units)


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
