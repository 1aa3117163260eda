"""The README's DB-API example (docs/dbapi_example.py) runs, as a real process, and says what the
README claims: noisy counts near the truth, a charge per new query, a free cached repeat, and the
budget with its composition bounds."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "dbapi_example.py"


@pytest.fixture(scope="module")
def output() -> list[str]:
    proc = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no warnings either (e.g. an answer that could not be cached)
    return proc.stdout.splitlines()


def test_example_prints_noisy_histogram_then_the_same_cached_one(output):
    head = re.fullmatch(r"\['status', 'n'\] (\[.*\])", output[0])
    assert head, output[0]
    rows = ast.literal_eval(head.group(1))
    assert [r[0] for r in rows] == ["new", "returned", "shipped"]  # every declared bin
    # true counts 1000 / 0 / 1000; the noise (discrete Laplace, scale 8) is far below 200
    # except with probability < 1e-10
    assert all(abs(n - true) < 200 for (_, n), true in zip(rows, (1000, 0, 1000), strict=True))
    assert output[1] == "spent 0.25 cached False"
    mean = re.fullmatch(r"mean cost of new orders: (-?[\d.]+)", output[2])
    assert mean and 0.0 <= float(mean.group(1)) <= 250.0  # AVG is clamped to the bounds
    assert output[3] == f"again: {head.group(1)} cached True"


def test_example_prints_budget_and_composition(output):
    # two charged queries of 0.25 each; the repeat was free
    assert output[4] == "budget: spent 0.5, remaining 0.5"
    assert output[5] == "  basic: epsilon 0.500, delta 0"
    assert output[6].startswith("  advanced (DRV): epsilon ") and output[6].endswith("1e-06")
    assert output[7].startswith("  KOV bound: epsilon ")
    assert output[8].startswith("  KOV optimal: epsilon ")
    assert len(output) == 9


def _readme_dbapi_snippet() -> str | None:
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    section = re.search(r"^## Python: the DB-API driver$(.*?)^## ", text, re.M | re.S)
    if section is None:
        return None
    block = re.search(r"```python\n(.*?)```", section.group(1), re.S)
    return None if block is None else block.group(1)


def test_readme_dbapi_snippet_matches_the_driver():
    """The README's short snippet needs a shop database, so it is not run; instead every call it
    makes must exist with the keywords it uses, and the README must point to (or include) the
    runnable example, which the tests above run."""
    snippet = _readme_dbapi_snippet()
    assert snippet is not None, "README.md must keep its '## Python: the DB-API driver' example"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    body = EXAMPLE.read_text(encoding="utf-8")
    assert "docs/dbapi_example.py" in readme or body[body.index("import tempfile"):] in readme

    from dpsql import dbapi

    classes = {"conn": dbapi.Connection, "cur": dbapi.Cursor}
    connect_params = set(inspect.signature(dbapi.connect).parameters)
    checked = 0
    for node in ast.walk(ast.parse(snippet)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            isinstance(node.func.value, ast.Name) and node.func.value.id == "dpsql"
            and node.func.attr == "connect"
        ):
            assert {k.arg for k in node.keywords} <= connect_params
            checked += 1
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
            node.value.id in classes
        ):
            assert hasattr(classes[node.value.id], node.attr), f"{node.value.id}.{node.attr}"
            checked += 1
    assert checked >= 3
