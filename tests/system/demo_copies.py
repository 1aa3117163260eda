"""A fresh copy of a small demo shop per test (not a test module): the shell tests' fixtures."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from dpsql.accounting import Ledger, database_identity
from dpsql.demo import DEMO_DELTA, DEMO_EPSILON, DemoFiles, create_demo


def demo_template(folder: Path) -> DemoFiles:
    """The small shop the copies are made from (built once per module)."""
    return create_demo(folder / "demo", customers=500, orders=5_000, products=50)


def demo_copy(template: DemoFiles, folder: Path) -> DemoFiles:
    """A byte copy of ``template`` under ``folder``, with demo's full budget (the ledger keys
    budgets by the database's real path, so the copy gets its own)."""
    copied = Path(shutil.copytree(template.folder, folder / "demo"))
    files = dataclasses.replace(template, folder=copied, database=copied / "shop.duckdb",
                                metadata=copied / "shop.yaml", ledger=copied / "ledger.sqlite")
    with Ledger(files.ledger) as ledger:
        ledger.set_budget(database_identity(files.database), "demo", DEMO_EPSILON, DEMO_DELTA)
    return files
