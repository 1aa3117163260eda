"""The schemas Spark infers for declared source files, kept per file version for the process.

A Spark backend registers every declared table when it opens (one per connection: the driver,
each server client), and reading a source's schema is most of that: the Parquet footer (~70 ms
of CPU on the driver for a small file, against ~15 ms to register it with a known schema) or,
for a CSV with ``inferSchema``, a pass over its data. :func:`read_source` infers it the first
time and then hands Spark the same schema while the file is unchanged: same path, size,
modification time and inode (``os.stat``). A replaced or rewritten file is read afresh. Only a
single local file is remembered (a glob, a folder or a URI is inferred every time, as before),
and at most :data:`KEPT` of them.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from typing import Any

#: how many file versions' schemas the process keeps (the oldest goes first)
KEPT = 256

_SCHEMAS: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_LOCK = threading.Lock()


def _version(source: str) -> tuple[Any, ...] | None:
    """What identifies this version of the local file ``source``; None for anything else."""
    if "://" in source or any(ch in source for ch in "*?["):
        return None
    try:
        st = os.stat(source)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):  # a folder of parts: inferred every time
        return None
    return (os.path.abspath(source), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def read_source(session: Any, source: str, *, parquet: bool) -> Any:
    """A DataFrame of ``source`` (Parquet, else CSV with a header and inferred types) in
    ``session``, its schema inferred once per file version (module docstring)."""
    version = _version(source)
    kind = None if version is None else ("parquet" if parquet else "csv", *version)
    schema = None
    if kind is not None:
        with _LOCK:
            schema = _SCHEMAS.get(kind)
            if schema is not None:
                _SCHEMAS.move_to_end(kind)
    reader = session.read if schema is None else session.read.schema(schema)
    frame = reader.parquet(source) if parquet else \
        reader.option("header", True).option("inferSchema", schema is None).csv(source)
    if kind is not None and schema is None:
        with _LOCK:
            _SCHEMAS[kind] = frame.schema
            while len(_SCHEMAS) > KEPT:
                _SCHEMAS.popitem(last=False)
    return frame
