"""Every ```python block of the README runs as written, in the demo folder the README's
examples assume (a small demo shop, with a budget granted to alice as the README's `budget set`
example does), with warnings as errors. Blocks that need a Spark cluster are skipped (listed
here, and the test fails if the list goes stale)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from dpsql.accounting import Ledger, database_identity
from dpsql.demo import create_demo

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

#: a phrase of a block that is not run here -> why
SKIPPED = {'backend="spark"': "needs a Spark cluster (tests/system/test_spark_connect.py)"}


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"),
                      flags=re.S | re.M)


def test_the_readme_has_python_examples_and_skips_only_what_it_lists() -> None:
    blocks = python_blocks()
    assert any("create_engine(" in b for b in blocks)
    for phrase in SKIPPED:
        assert any(phrase in b for b in blocks), f"{phrase} is stale"


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_every_python_example_runs(index: int, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    block = python_blocks()[index]
    reason = next((why for phrase, why in SKIPPED.items() if phrase in block), None)
    if reason is not None:
        pytest.skip(reason)
    demo = create_demo(tmp_path / "demo", customers=300, orders=3_000, products=30)
    with Ledger(demo.ledger) as ledger:
        ledger.set_budget(database_identity(demo.database), "alice", 10.0, 1e-6)
    monkeypatch.chdir(demo.folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(compile(block, f"README.md python block {index + 1}", "exec"), {})
