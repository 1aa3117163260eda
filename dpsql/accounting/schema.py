"""The ledger file's SQL schema: version 1, the upgrades to versions 2-5, what a valid file holds.

A new ledger is made by running :data:`SCHEMA_V1` and then every upgrade in
:data:`UPGRADES`, so a fresh file and an upgraded old one have the same schema by construction
(and the upgrade path runs on every new ledger). ``PRAGMA user_version`` is the schema version;
``PRAGMA application_id`` marks the file as a dpsql ledger.

Version 2 (issue #14) adds:

* the **audit log** on ``charges``: the SQL text, its parameters and the released values (JSON),
  when the values were released, and, instead of deleting rows, ``refunded_at`` (a refund) and
  ``reset_id`` (cleared by the owner's ``budget reset``, one row of ``resets``). A charge counts
  against the budget while both are NULL. Triggers make the log append-only: no charge or reset
  is ever deleted, and each audit field is written at most once (NULL to a value);
* ``resets``: one row per ``budget reset`` (who, when, what it cleared), append-only too;
* ``analysts``: accounts for server mode, holding SCRAM-SHA-256 verifiers (never passwords) and
  the owner's per-analyst policy (tables, per-query caps and defaults).

Version 3 adds the **events** of the audit log that are not charges: the owner's actions
(``analyst add|remove|passwd|set``, ``budget set``; ``budget reset`` stays in ``resets``) and
cache hits (a repeated query answered from the cache, charged nothing), append-only by
triggers; and ``cache.charge_id``, the charge that paid for a cached answer, so a hit names it.

Version 4 (issue #18) adds the **budget filter**: ``budgets.filter`` (``basic``, the default
and what every older budget keeps; ``renyi``; ``zcdp``) and ``budgets.alpha`` (the Rényi
filter's order, fixed when the owner sets the budget), and ``charges.curve``, the release's
privacy curve (:mod:`dpsql.accounting.curves`: Rényi divergences at the public grid of orders
and the zCDP rho, JSON; NULL for a release no curve covers, and for every older charge),
written with the charge and never changed (``charges_written_once`` is recreated to cover it).

Version 5 adds the ``gdp`` filter (Gaussian differential privacy: a charge's curve may carry
its ``mu``, in the same JSON, so ``charges`` is unchanged). ``budgets.filter``'s CHECK, which
names the filters, cannot be altered in place in SQLite: the table (which has no triggers and
no index beyond its primary key) is rebuilt with the same columns and the new CHECK, its rows
copied, in the upgrade's one transaction.

Statements are separated by ";" at the end of a line (:func:`statements`); a trigger body's
inner statements therefore end with "; END" on one line.
"""

from __future__ import annotations

APPLICATION_ID = 0x64704C64  # "dpLd"
SCHEMA_VERSION = 5

#: Version 1 exactly as released (do not edit: old files were made by it).
SCHEMA_V1 = """
CREATE TABLE budgets (
    database      TEXT    NOT NULL,
    analyst       TEXT    NOT NULL,
    epsilon_total INTEGER NOT NULL CHECK (typeof(epsilon_total) = 'integer' AND epsilon_total >= 0),
    delta_total   INTEGER NOT NULL CHECK (typeof(delta_total) = 'integer' AND delta_total >= 0),
    -- running sums of this principal's charges, updated in the same transaction as each insert,
    -- so a charge is an O(1) check, and status() cross-checks them against the charges table
    epsilon_spent INTEGER NOT NULL CHECK (typeof(epsilon_spent) = 'integer' AND epsilon_spent >= 0),
    delta_spent   INTEGER NOT NULL CHECK (typeof(delta_spent) = 'integer' AND delta_spent >= 0),
    updated_at    TEXT    NOT NULL,
    PRIMARY KEY (database, analyst)
);
-- AUTOINCREMENT: charge ids are never reused, not even after reset() deleted the charges
CREATE TABLE charges (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    database    TEXT    NOT NULL,
    analyst     TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    epsilon     INTEGER NOT NULL CHECK (typeof(epsilon) = 'integer' AND epsilon >= 0),
    delta       INTEGER NOT NULL CHECK (typeof(delta) = 'integer' AND delta >= 0),
    mechanism   TEXT    NOT NULL,
    at          TEXT    NOT NULL
);
CREATE INDEX charges_by_principal ON charges (database, analyst, id);
CREATE TABLE cache (
    database TEXT NOT NULL,
    analyst  TEXT NOT NULL,
    key      TEXT NOT NULL,
    payload  BLOB NOT NULL,
    at       TEXT NOT NULL,
    PRIMARY KEY (database, analyst, key)
) WITHOUT ROWID;
"""

_V1_TO_V2 = """
ALTER TABLE charges ADD COLUMN sql TEXT;
ALTER TABLE charges ADD COLUMN params TEXT;
ALTER TABLE charges ADD COLUMN released TEXT;
ALTER TABLE charges ADD COLUMN released_at TEXT;
ALTER TABLE charges ADD COLUMN refunded_at TEXT;
ALTER TABLE charges ADD COLUMN reset_id INTEGER;
CREATE TABLE resets (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    database        TEXT    NOT NULL,
    analyst         TEXT    NOT NULL,
    charges_cleared INTEGER NOT NULL CHECK (typeof(charges_cleared) = 'integer'),
    epsilon_cleared INTEGER NOT NULL CHECK (typeof(epsilon_cleared) = 'integer'),
    delta_cleared   INTEGER NOT NULL CHECK (typeof(delta_cleared) = 'integer'),
    at              TEXT    NOT NULL
);
CREATE TABLE analysts (
    name            TEXT    NOT NULL PRIMARY KEY CHECK (length(name) > 0),
    salt            BLOB    NOT NULL CHECK (length(salt) > 0),
    stored_key      BLOB    NOT NULL CHECK (length(stored_key) = 32),
    server_key      BLOB    NOT NULL CHECK (length(server_key) = 32),
    iterations      INTEGER NOT NULL CHECK (typeof(iterations) = 'integer' AND iterations >= 4096),
    tables          TEXT,
    max_epsilon     REAL    CHECK (max_epsilon IS NULL OR max_epsilon > 0),
    max_delta       REAL    CHECK (max_delta IS NULL OR (max_delta >= 0 AND max_delta <= 1)),
    default_epsilon REAL    CHECK (default_epsilon IS NULL OR default_epsilon > 0),
    default_delta   REAL    CHECK (default_delta IS NULL OR (default_delta >= 0
                                                             AND default_delta <= 1)),
    created_at      TEXT    NOT NULL,
    updated_at      TEXT    NOT NULL
);
CREATE TRIGGER charges_never_deleted BEFORE DELETE ON charges
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: charges are never deleted'); END;
CREATE TRIGGER charges_written_once BEFORE UPDATE ON charges
WHEN NEW.id IS NOT OLD.id OR NEW.database IS NOT OLD.database OR NEW.analyst IS NOT OLD.analyst
  OR NEW.fingerprint IS NOT OLD.fingerprint OR NEW.epsilon IS NOT OLD.epsilon
  OR NEW.delta IS NOT OLD.delta OR NEW.mechanism IS NOT OLD.mechanism OR NEW.at IS NOT OLD.at
  OR NEW.sql IS NOT OLD.sql OR NEW.params IS NOT OLD.params
  OR (OLD.released IS NOT NULL AND NEW.released IS NOT OLD.released)
  OR (OLD.released_at IS NOT NULL AND NEW.released_at IS NOT OLD.released_at)
  OR (OLD.refunded_at IS NOT NULL AND NEW.refunded_at IS NOT OLD.refunded_at)
  OR (OLD.reset_id IS NOT NULL AND NEW.reset_id IS NOT OLD.reset_id)
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: a charge is written once'); END;
CREATE TRIGGER resets_never_deleted BEFORE DELETE ON resets
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: resets are never deleted'); END;
CREATE TRIGGER resets_never_updated BEFORE UPDATE ON resets
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: resets are never changed'); END;
"""

_V2_TO_V3 = """
ALTER TABLE cache ADD COLUMN charge_id INTEGER;
CREATE TABLE events (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        TEXT    NOT NULL,
    kind      TEXT    NOT NULL CHECK (length(kind) > 0),
    database  TEXT,
    analyst   TEXT,
    charge_id INTEGER,
    detail    TEXT
);
CREATE TRIGGER events_never_deleted BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: events are never deleted'); END;
CREATE TRIGGER events_never_updated BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: events are never changed'); END;
"""

_V3_TO_V4 = """
ALTER TABLE budgets ADD COLUMN filter TEXT NOT NULL DEFAULT 'basic'
    CHECK (filter IN ('basic', 'renyi', 'zcdp'));
ALTER TABLE budgets ADD COLUMN alpha REAL CHECK (alpha IS NULL OR alpha > 1);
ALTER TABLE charges ADD COLUMN curve TEXT;
DROP TRIGGER charges_written_once;
CREATE TRIGGER charges_written_once BEFORE UPDATE ON charges
WHEN NEW.id IS NOT OLD.id OR NEW.database IS NOT OLD.database OR NEW.analyst IS NOT OLD.analyst
  OR NEW.fingerprint IS NOT OLD.fingerprint OR NEW.epsilon IS NOT OLD.epsilon
  OR NEW.delta IS NOT OLD.delta OR NEW.mechanism IS NOT OLD.mechanism OR NEW.at IS NOT OLD.at
  OR NEW.sql IS NOT OLD.sql OR NEW.params IS NOT OLD.params OR NEW.curve IS NOT OLD.curve
  OR (OLD.released IS NOT NULL AND NEW.released IS NOT OLD.released)
  OR (OLD.released_at IS NOT NULL AND NEW.released_at IS NOT OLD.released_at)
  OR (OLD.refunded_at IS NOT NULL AND NEW.refunded_at IS NOT OLD.refunded_at)
  OR (OLD.reset_id IS NOT NULL AND NEW.reset_id IS NOT OLD.reset_id)
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: a charge is written once'); END;
"""

_V4_TO_V5 = """
CREATE TABLE budgets_v5 (
    database      TEXT    NOT NULL,
    analyst       TEXT    NOT NULL,
    epsilon_total INTEGER NOT NULL CHECK (typeof(epsilon_total) = 'integer' AND epsilon_total >= 0),
    delta_total   INTEGER NOT NULL CHECK (typeof(delta_total) = 'integer' AND delta_total >= 0),
    epsilon_spent INTEGER NOT NULL CHECK (typeof(epsilon_spent) = 'integer' AND epsilon_spent >= 0),
    delta_spent   INTEGER NOT NULL CHECK (typeof(delta_spent) = 'integer' AND delta_spent >= 0),
    updated_at    TEXT    NOT NULL,
    filter        TEXT    NOT NULL DEFAULT 'basic'
                  CHECK (filter IN ('basic', 'renyi', 'zcdp', 'gdp')),
    alpha         REAL    CHECK (alpha IS NULL OR alpha > 1),
    PRIMARY KEY (database, analyst)
);
INSERT INTO budgets_v5 (database, analyst, epsilon_total, delta_total, epsilon_spent,
                        delta_spent, updated_at, filter, alpha)
    SELECT database, analyst, epsilon_total, delta_total, epsilon_spent, delta_spent,
           updated_at, filter, alpha FROM budgets;
DROP TABLE budgets;
ALTER TABLE budgets_v5 RENAME TO budgets;
"""

#: (version it upgrades from, its statements), in order.
UPGRADES: tuple[tuple[int, str], ...] = (
    (1, _V1_TO_V2), (2, _V2_TO_V3), (3, _V3_TO_V4), (4, _V4_TO_V5))

#: Columns every table of the current version must have.
EXPECTED_COLUMNS: dict[str, frozenset[str]] = {
    "budgets": frozenset(
        {"database", "analyst", "epsilon_total", "delta_total", "epsilon_spent", "delta_spent",
         "updated_at", "filter", "alpha"}
    ),
    "charges": frozenset(
        {"id", "database", "analyst", "fingerprint", "epsilon", "delta", "mechanism", "at",
         "sql", "params", "released", "released_at", "refunded_at", "reset_id", "curve"}
    ),
    "cache": frozenset({"database", "analyst", "key", "payload", "at", "charge_id"}),
    "resets": frozenset(
        {"id", "database", "analyst", "charges_cleared", "epsilon_cleared", "delta_cleared", "at"}
    ),
    "analysts": frozenset(
        {"name", "salt", "stored_key", "server_key", "iterations", "tables", "max_epsilon",
         "max_delta", "default_epsilon", "default_delta", "created_at", "updated_at"}
    ),
    "events": frozenset({"id", "at", "kind", "database", "analyst", "charge_id", "detail"}),
}

#: Triggers that keep the audit log append-only; a file without them is damaged.
EXPECTED_TRIGGERS = frozenset(
    {"charges_never_deleted", "charges_written_once", "resets_never_deleted",
     "resets_never_updated", "events_never_deleted", "events_never_updated"}
)


def statements(script: str) -> list[str]:
    """The statements of ``script``, split at ";" ending a line (comments may contain ";" but
    never at a line's end)."""
    return [s for s in script.split(";\n") if s.strip()]
