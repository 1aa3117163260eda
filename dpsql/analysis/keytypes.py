"""Which join-key type pairs keep max frequencies meaningful (docs/privacy.md section 2,
"Join keys must be compared without a lossy cast").

The join rule bounds the rows of r1 that match one value of the key b by mf(a): the rows of r1
matching one value share one value of a. That holds only if the equality ``a = b`` the
database evaluates compares the *stored* values of a. A database compares keys of different
types by casting them to a common type first; the rows matching one value then share one value
of cast(a), and mf(a) bounds them only if that cast is **injective** (distinct values stay
distinct). DuckDB compares VARCHAR with INTEGER as ``CAST(varchar AS INTEGER)``, so '1', '01'
and ' 1' (mf 1 each) all equal 1: three rows match where mf promises one.

A cast that can *fail* is no better: which rows exist would decide whether the query errors,
and an error is not a noisy answer (DuckDB's ``DATE -> TIMESTAMP`` fails after 294247 AD,
``UHUGEINT`` compared with a signed integer is cast to a narrower type or to DOUBLE).

Contract of :func:`injectively_comparable`: True only when DuckDB (and Spark, which has no
unsigned types) evaluates ``a = b`` by casting each side *totally and injectively* into a
common type, so that ``a = b`` is true exactly when the stored values are equal. The accepted
pairs:

* the same type after normalisation (sqlglot aliases: INT = INTEGER = INT4, VARCHAR = TEXT =
  STRING, NUMERIC(15,2) = DECIMAL(15,2), ...) -- no cast at all; parameters must match, so
  DECIMAL(10,2) vs DECIMAL(12,2) is rejected (DuckDB may widen DECIMAL(38,x) to a type that
  overflows);
* two integer types (TINYINT .. HUGEINT, UTINYINT .. UHUGEINT): widening an integer is exact,
  and DuckDB picks a common type holding both ranges -- except UHUGEINT against a signed type,
  which DuckDB compares as DOUBLE or a narrower signed type (checked by tests on DuckDB's plans);
* two string types (VARCHAR(n) vs VARCHAR: the length is not part of the comparison).

Everything else is rejected: VARCHAR vs any number or date (parsing is many-to-one), BIGINT vs
DOUBLE (2^53 and 2^53 + 1 meet), DECIMAL vs DOUBLE, DATE vs TIMESTAMP (injective but not
total), TIMESTAMP vs TIMESTAMPTZ (time-zone dependent), FLOAT vs DOUBLE (kept out for
simplicity: store both keys with the same type).
"""

from __future__ import annotations

import re
from functools import lru_cache

from sqlglot import exp
from sqlglot.errors import SqlglotError

from dpsql.analysis.parse import DIALECT

T = exp.DataType.Type

_SIGNED = frozenset({T.TINYINT, T.SMALLINT, T.MEDIUMINT, T.INT, T.BIGINT, T.INT128, T.INT256})
_UNSIGNED = frozenset({T.UTINYINT, T.USMALLINT, T.UMEDIUMINT, T.UINT, T.UBIGINT})
#: unsigned types too wide for any signed type DuckDB compares them in
_WIDE_UNSIGNED = frozenset({T.UINT128, T.UINT256})
_STRINGS = frozenset({T.TEXT, T.VARCHAR, T.NVARCHAR})


_COLLATE = re.compile(r"\bCOLLATE\s+(\S+)", re.IGNORECASE)


def collation(type_text: str | None) -> str | None:
    """The collation of a string type reported as ``VARCHAR COLLATE nocase`` (the backends
    report stored collations this way), or None.

    Under a collation distinct stored strings can compare equal ('a' = 'A' under NOCASE), so
    a max frequency no longer bounds the rows matching one value and one row can fall in
    several bins: such columns are never keys or group keys.
    """
    if not type_text:
        return None
    m = _COLLATE.search(type_text)
    return m.group(1) if m else None


def without_collation(type_text: str) -> str:
    """``VARCHAR COLLATE nocase`` -> ``VARCHAR`` (the type a declared one is compared with)."""
    return _COLLATE.sub("", type_text).strip()


@lru_cache(maxsize=512)
def normalise(type_text: str | None) -> exp.DataType | None:
    """The sqlglot DataType of a declared or database-reported type; None when unknown,
    unreadable or collated (the analysis then cannot prove anything about a key of this
    type)."""
    if type_text is None or not type_text.strip() or collation(type_text) is not None:
        return None
    try:
        dtype = exp.DataType.build(type_text, dialect=DIALECT)
    except (SqlglotError, ValueError):
        return None
    if dtype.this == T.UNKNOWN:
        return None
    return dtype


def numeric_or_unknown(type_text: str | None) -> bool:
    """False only for a known type that is not a number (SUM/AVG would cast it per row)."""
    dtype = normalise(type_text)
    return dtype is None or dtype.this in exp.DataType.NUMERIC_TYPES


def injectively_comparable(left: exp.DataType, right: exp.DataType) -> bool:
    """True when ``left = right`` compares stored values exactly (see the module contract)."""
    a, b = left.this, right.this
    if a == b and left.sql(dialect=DIALECT) == right.sql(dialect=DIALECT):
        return True
    if a in _STRINGS and b in _STRINGS:
        return True
    ints = _SIGNED | _UNSIGNED | _WIDE_UNSIGNED
    if a in ints and b in ints:
        wide_vs_signed = (a in _WIDE_UNSIGNED and b in _SIGNED) or (
            b in _WIDE_UNSIGNED and a in _SIGNED
        )
        return not wide_vs_signed
    return False


@lru_cache(maxsize=1024)
def comparable(left: str | None, right: str | None) -> bool | None:
    """:func:`injectively_comparable` of two type texts; None when either type is unknown.

    Memoised on the texts: generating a DataType's SQL costs tens of microseconds, and the
    analysis asks this for every key equality of every query.
    """
    lt, rt = normalise(left), normalise(right)
    if lt is None or rt is None:
        return None
    return injectively_comparable(lt, rt)


@lru_cache(maxsize=1024)
def same_type(left: str | None, right: str | None) -> bool:
    """True when both types are known and equal after normalising aliases."""
    lt, rt = normalise(left), normalise(right)
    return lt is not None and rt is not None and lt.sql(dialect=DIALECT) == rt.sql(dialect=DIALECT)


#: ``meta`` key the analysis sets on a key equality ``a.x = b.y`` whose two column types it
#: proved injectively comparable (:func:`comparable` is True): the rewrite leaves exactly these
#: equalities of two bare columns without TRY (hash joins need them plain); every other one is
#: wrapped unless its operand types prove it total (dpsql.rewrite.safe_compare).
COMPARABLE_KEY = "dpsql_comparable_key"


def mark_comparable(node: exp.Expression, left: str | None, right: str | None) -> None:
    """Mark ``node`` (a key equality) when its sides' types are proven comparable."""
    if comparable(left, right):
        node.meta[COMPARABLE_KEY] = True


def is_marked_comparable(node: exp.Expression) -> bool:
    """Whether the analysis proved this equality's key types comparable (see COMPARABLE_KEY)."""
    meta = node._meta  # read without creating the dict ``meta`` would
    return bool(meta) and bool(meta.get(COMPARABLE_KEY))


def type_name(type_text: str | None) -> str:
    """How a key's type is shown in messages: as declared (or as the database reports it)."""
    if type_text is None or not type_text.strip():
        return "type unknown"
    if normalise(type_text) is None:
        return f"unreadable type {type_text.strip()!r}"
    return type_text.strip().upper()
