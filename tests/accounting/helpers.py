"""What the accounting tests share: the database they charge, and a one-line charge."""

from __future__ import annotations

from dpsql.accounting import Ledger

DB = "shop.duckdb"


def spend(book: Ledger, epsilon: float, delta: float = 0.0, *, analyst: str = "alice",
          database: str = DB) -> int:
    return book.charge(database, analyst, fingerprint="q", epsilon=epsilon, delta=delta,
                       mechanism="laplace")
