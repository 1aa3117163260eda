"""What a backend promises about its stored data, asked once per column."""

from __future__ import annotations

import functools

from dpsql.backends.base import Backend


class StoredFacts:
    """The backend's ``value_range`` and ``domain_table`` promises, asked once per column
    and kept for the backend's life, as the promise allows: the
    :class:`dpsql.rewrite.context.StoredData` the rewrite consults."""

    def __init__(self, backend: Backend) -> None:
        self._value_range = functools.cache(backend.value_range)
        self._domain_table = functools.cache(backend.domain_table)

    def in_bounds(self, table: str, column: str, bounds: tuple[float, float]) -> bool:
        """Whether every value the backend promises ``table.column`` holds lies inside
        ``bounds`` (False when it promises nothing, or the values do not compare)."""
        held = self._value_range(table, column)
        if held is None:
            return False
        least, greatest = held
        if least is None or greatest is None:
            return least is None and greatest is None  # no non-NULL value at all
        try:
            # Exact comparisons (Decimal and int against float are exact in Python); NaN
            # compares False, so a NaN keeps the clamp.
            return bool(bounds[0] <= least and greatest <= bounds[1])
        except TypeError:
            return False

    def domain_table(self, table: str, column: str) -> str | None:
        """The public column's domain table the backend registered (None: it did not)."""
        return self._domain_table(table, column)
