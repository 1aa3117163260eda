"""dpsql.cli.completion: what TAB offers in the shell (the completer the pty sessions of
tests/system/test_shell_pty.py use, driven here without a terminal)."""

from __future__ import annotations

import pytest
from prompt_toolkit.document import Document

from dpsql.cli.completion import sql_completer
from dpsql.demo import create_demo
from dpsql.metadata import Metadata, load_metadata


@pytest.fixture(scope="module")
def shop_metadata(tmp_path_factory: pytest.TempPathFactory) -> Metadata:
    folder = tmp_path_factory.mktemp("completion") / "demo"
    return load_metadata(create_demo(folder, customers=50, orders=500, products=20).metadata)


@pytest.mark.parametrize(("text", "expected"), [
    ("SELECT COUNT(*) FROM ord", ["orders"]),  # only tables after FROM/JOIN
    ("SELECT COUNT(*) FROM orders, cus", ["customers"]),
    ("SELECT o.cu FROM orders AS o", ["customer_id"]),  # alias defined after the cursor
    ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customer_id = c.co", ["country"]),
    ("SELECT COUNT(*) FROM orders WHERE stat", ["status"]),
    ("sel", ["select"]),  # keywords in the case being typed
    ("\\de", ["\\describe", "\\delta"]),
    ("\\describe pro", ["products"]),
    ("\\format j", ["json"]),
])
def test_completer(shop_metadata: Metadata, text: str, expected: list[str]) -> None:
    """What TAB offers at the cursor (the end of ``text``, or before its FROM clause)."""
    cursor = text.index(" FROM orders AS") if "AS o" in text else len(text)
    completer = sql_completer(shop_metadata)
    found = [c.text for c in completer.get_completions(Document(text, cursor), None)]
    assert found == expected
