"""The metadata's hash: one part of the answer-cache key (with the data version).

Precondition: ``md`` is a loaded :class:`~dpsql.metadata.Metadata` (the owner's file as loaded,
before the session fills undeclared column types from the database: those follow the data, which
the data version covers).

Guarantee: :func:`metadata_digest` is the SHA-256 of a canonical JSON dump of every field of
the model except ``Metadata.path`` (where the file lies is not what it says): tables and
columns in declaration order, each value tagged with its type, so ``1``, ``1.0``, ``true`` and
``"1"`` differ. Any edit that changes the loaded model (a bound, a domain value, a max
frequency, a table made public, a source path, the data version) changes the digest, so an
answer cached under the old metadata is never served under the new one. Edits that leave the
model equal (comments, key order, spelling of the same path) keep the digest.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from dpsql.metadata.model import Metadata

_DIGEST_VERSION = "dpsql-metadata-digest-v1"


def _canonical(value: Any) -> Any:
    """A JSON-ready form of a model value in which distinct values stay distinct."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            "$": type(value).__name__,
            "v": [[f.name, _canonical(getattr(value, f.name))]
                  for f in dataclasses.fields(value) if f.compare],
        }
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return {"$": type(value).__name__, "v": repr(value)}
    if isinstance(value, _dt.date):  # datetime included
        return {"$": type(value).__name__, "v": value.isoformat()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, Mapping):
        return {"$": "map", "v": [[str(k), _canonical(v)] for k, v in value.items()]}
    # the readers only build the types above; anything else is keyed by type and repr
    return {"$": type(value).__qualname__, "v": repr(value)}


def metadata_digest(md: Metadata) -> str:
    """Hex SHA-256 of ``md``'s canonical dump (module docstring)."""
    text = json.dumps([_DIGEST_VERSION, _canonical(md)], ensure_ascii=True,
                      separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()
