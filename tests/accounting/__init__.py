"""Tests of dpsql.accounting, one module per module: units, ledger (and its file), composition."""
