"""SmartNoise SQL (``smartnoise-sql``, the optional ``bench`` extra) over a DuckDB database.

SmartNoise SQL 1.0 has no DuckDB reader. Its Postgres reader takes any connection object with
``cursor()``, ``commit()`` and ``rollback()`` and sends it SmartNoise's Postgres-dialect SQL,
which DuckDB runs as is; :class:`DuckDBConnection` is that object over a DuckDB connection
(rows fetched with ``fetchall``). Its pandas reader would copy the table into SQLite first
(minutes at 10M rows), so DuckDB is the fairer and faster backend for it.

Privacy accounting: SmartNoise spends its ``Privacy.epsilon`` on *each* noisy column of its
rewritten query (an AVG is a SUM and a COUNT: 2 epsilon), while dpsql splits one epsilon over
its measurements. :func:`reader` therefore scales SmartNoise's per-column epsilon so that its
own ``get_privacy_cost`` equals the epsilon dpsql is given.
"""

from __future__ import annotations

from typing import Any

import duckdb

from .common import importable

INSTALL_HINT = "smartnoise-sql is not installed (pip install -e '.[bench]')"


def available() -> bool:
    return importable("snsql")


class _Cursor:
    def __init__(self, owner: DuckDBConnection) -> None:
        self.owner = owner
        self.description = None
        self._rows: list[tuple] = []

    def execute(self, sql: str) -> None:
        self.owner.executed.append(sql)
        cached = self.owner.replay.get(sql) if self.owner.replay is not None else None
        if cached is None:
            cur = self.owner.con.execute(sql)
            cached = (cur.description, cur.fetchall())
            if self.owner.replay is not None:
                self.owner.replay[sql] = cached
        self.description, self._rows = cached

    def __iter__(self):
        return iter(self._rows)


class DuckDBConnection:
    """The DB-API subset SmartNoise's Postgres reader uses, over a DuckDB connection.

    ``replay=True`` runs each distinct SQL text once and returns its rows again afterwards
    (for noise draws over an unchanging read-only database; ``executed`` counts calls).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, *, replay: bool = False) -> None:
        self.con = con
        self.replay: dict[str, Any] | None = {} if replay else None
        self.executed: list[str] = []

    def cursor(self) -> _Cursor:
        return _Cursor(self)

    def commit(self) -> None:  # read-only: nothing to commit
        pass

    def rollback(self) -> None:
        pass


def reader(conn: DuckDBConnection, metadata: dict[str, Any], sql: str, epsilon: float,
           delta: float) -> tuple[Any, dict[str, Any]]:
    """A SmartNoise PrivateReader whose total cost for ``sql`` is ``epsilon``.

    Returns the reader and what it spends: ``{"epsilon", "delta", "columns", "mechanisms"}``
    from SmartNoise's own accounting. Raises whatever SmartNoise raises for a query it
    refuses (it parses and rewrites the query to cost it).
    """
    import snsql

    def make(eps: float):
        return snsql.from_connection(conn, engine="postgres", metadata=metadata,
                                     privacy=snsql.Privacy(epsilon=eps, delta=delta))

    probe = make(epsilon)
    spent_eps, _ = probe.get_privacy_cost(sql)
    per_column = epsilon * epsilon / float(spent_eps)
    private = make(per_column)
    spent_eps, spent_delta = private.get_privacy_cost(sql)
    subquery, _ = private._rewrite(sql)
    mechs = [m for m in private._get_mechanisms(subquery) if m]
    return private, {
        "epsilon": float(spent_eps), "delta": float(spent_delta),
        "epsilon_per_column": per_column, "columns": len(mechs),
        "mechanisms": sorted({getattr(m.mechanism, "name", str(m.mechanism)) for m in mechs}),
        "sensitivities": [float(m.sensitivity) for m in mechs],
    }
