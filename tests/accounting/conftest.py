"""The ``ledger`` fixture: a fresh ledger file in tmp_path, closed after the test."""

from __future__ import annotations

import pytest

from dpsql.accounting import Ledger


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.sqlite") as book:
        yield book
