"""The answer cache's key and codec: a repeated request returns the answer already paid for.

Key (see :func:`cache_key`): SHA-256 over a JSON array of a version tag, the session's scope
(the data version, :func:`dpsql.backends.data_version`, and the metadata's hash,
:func:`dpsql.metadata.digest.metadata_digest`, both computed once per connection), the query's
text after sqlglot qualification (so ``select count(*) n from T`` and ``SELECT COUNT(*) AS n
FROM t`` share one entry), the parameters encoded with their Python types, and
``repr(float(epsilon))``, ``repr(float(delta))``. The ledger scopes every entry by (database
identity, analyst). Two requests that differ in anything else (say ``1`` vs ``1.0`` as a
parameter) are different entries; each is charged, so the key can only err towards charging
more, never towards a free fresh answer. Because the scope is in the key, a changed database
(file rewritten, sources rewritten, or the owner's ``data_version:`` bumped) or a changed
metadata (a bound, a domain, ...) never serves an answer computed before the change: the repeat
is a miss, charged again; a changed epsilon asks afresh.

The delta keyed is the requested one for a release whose draw reads it (the Gaussian
mechanism, partition selection, a smoothed join, Gaussian sample-and-aggregate), and 0 for one
that never does (a pure Laplace release without a smoothed measurement, R2T under a privacy
unit, Laplace sample-and-aggregate, MIN / MAX / quantiles / top-k): the session decides which
before any read, from the SQL, the metadata and the budget's mechanism alone
(:func:`dpsql.noise.plan.draws_with_delta`; ``Session._lookup``). A pure release asked with
delta 1e-6 and again with delta 0 would be drawn from the very same distribution (same
mechanism, epsilon, scales; delta 0 spent), so the stored draw is one draw of what a fresh
request would make, and serving it costs nothing; a delta-reading release asked with another
delta is a miss, drawn and charged again. Entries written before this rule need no new version
tag: an old entry under delta 0 was drawn with delta unread (a delta-reading release refuses
delta 0), and one under another delta is looked up only by a release that reads that delta.

Payload: JSON {names, types, rows, release}, every value tagged with its type so it comes back
equal and of the same type.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import hashlib
import json
import math
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from dpsql.release.record import ColumnRelease, Release, Result

# Bumped whenever the key derivation or the payload format changes: old entries then simply
# stop matching (a miss is charged, never a wrong free answer).
_CACHE_VERSION = "dpsql-cache-v2"


class Uncacheable(Exception):
    """A value the JSON payload cannot represent faithfully (the answer is then not cached)."""


def _encode(value: Any) -> Any:
    """A JSON-ready form of ``value`` that :func:`_decode` turns back into an equal value of the
    same type. JSON-native scalars are kept; everything else is tagged ``{"$": type, "v": ...}``
    (a plain JSON object never occurs otherwise, so tags cannot be confused with data)."""
    # bool before int: bool is an int subclass, and True must come back as True
    if value is None or isinstance(value, (bool, str)):
        return value
    if type(value) is int:
        return value
    if type(value) is float:
        # json would write NaN/Infinity, which is not JSON; tag them instead
        return value if math.isfinite(value) else {"$": "float", "v": repr(value)}
    if isinstance(value, decimal.Decimal):
        return {"$": "decimal", "v": str(value)}
    if isinstance(value, _dt.datetime):  # before date: datetime is a date subclass
        return {"$": "datetime", "v": value.isoformat()}
    if isinstance(value, _dt.date):
        return {"$": "date", "v": value.isoformat()}
    if isinstance(value, _dt.time):
        return {"$": "time", "v": value.isoformat()}
    if isinstance(value, _dt.timedelta):
        return {"$": "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, uuid.UUID):
        return {"$": "uuid", "v": str(value)}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$": "bytes", "v": bytes(value).hex()}
    if isinstance(value, (list, tuple)):
        return {"$": type(value).__name__, "v": [_encode(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"$": "dict", "v": [[k, _encode(v)] for k, v in value.items()]}
    raise Uncacheable(type(value).__name__)


def _decode(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    tag, raw = value["$"], value["v"]
    if tag == "float":
        return float(raw)
    if tag == "decimal":
        return decimal.Decimal(raw)
    if tag == "datetime":
        return _dt.datetime.fromisoformat(raw)
    if tag == "date":
        return _dt.date.fromisoformat(raw)
    if tag == "time":
        return _dt.time.fromisoformat(raw)
    if tag == "timedelta":
        return _dt.timedelta(days=raw[0], seconds=raw[1], microseconds=raw[2])
    if tag == "uuid":
        return uuid.UUID(raw)
    if tag == "bytes":
        return bytes.fromhex(raw)
    if tag == "list":
        return [_decode(v) for v in raw]
    if tag == "tuple":
        return tuple(_decode(v) for v in raw)
    if tag == "dict":
        return {k: _decode(v) for k, v in raw}
    raise ValueError(f"unknown tag {tag!r}")


def cache_key(normalised_sql: str, params: Sequence[Any], epsilon: float, delta: float, *,
              scope: str) -> str:
    """The answer-cache key of one request (hex SHA-256; see the module docstring).

    Precondition: ``normalised_sql`` is the session's qualified text of the query
    (``Session.prepare(sql).qualified_sql``); ``scope`` names the data version and the
    metadata the answer is computed from (``Session.cache_scope``).
    ``delta``: the requested delta when the release reads it, else 0.0 (module docstring).
    Guarantee: deterministic across processes and Python versions; distinct requests
    (scope, text, typed parameters, epsilon, delta) give distinct keys except with probability
    ~2^-256.
    A parameter of a type without a faithful encoding is keyed by its type and ``repr`` (at
    worst a miss, which is charged).
    """
    encoded = []
    for p in params:
        try:
            encoded.append(_encode(p))
        except Uncacheable:
            encoded.append({"$": "repr", "v": [type(p).__qualname__, repr(p)]})
    text = json.dumps(
        [_CACHE_VERSION, scope, normalised_sql, encoded, repr(float(epsilon)),
         repr(float(delta))],
        ensure_ascii=True, separators=(",", ":"), allow_nan=False,
    )
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def dump_payload(result: Result) -> bytes:
    """The cache payload: JSON {names, types, rows, release}. Raises Uncacheable."""
    doc = {
        "names": list(result.names),
        "types": list(result.types),
        "rows": [[_encode(v) for v in row] for row in result.rows],
        "release": _encode_release(result.release),
    }
    try:
        return json.dumps(doc, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode()
    except ValueError as exc:  # a non-finite number in the release record
        raise Uncacheable("non-finite float") from exc


def _encode_release(release: Release) -> dict[str, Any]:
    doc = asdict(release)
    # half widths are finite or None; epsilon/delta finite: plain JSON numbers suffice
    doc.pop("cached", None)
    return doc


def load_payload(payload: bytes) -> Result:
    # ASCII JSON (dump_payload): decoded here, not by json's encoding detection (a hot path:
    # every cache hit); bytes that are not ASCII raise ValueError, a damaged entry
    doc = json.loads(payload.decode("ascii"))
    rel = dict(doc["release"])
    rel["columns"] = tuple(ColumnRelease.from_json(c) for c in rel["columns"])
    release = Release(**rel, cached=True)
    rows = [tuple(_decode(v) for v in row) for row in doc["rows"]]
    return Result(tuple(doc["names"]), tuple(doc["types"]), rows, release)


def cache_entry(key: str | None, result: Result) -> tuple[str, bytes] | None:
    """(key, payload) to cache ``result`` under, or None (no key, or values the cache's codec
    cannot store: safe, an uncached repeat is charged again)."""
    if key is None:
        return None
    try:
        return key, dump_payload(result)
    except Uncacheable as exc:
        warnings.warn(f"dpsql: answer not cached (values of type {exc})", RuntimeWarning,
                      stacklevel=5)
        return None
