"""What the metadata tests share: the example schemas, and writing a metadata file."""

from __future__ import annotations

import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLEX_OURS = ROOT / "schemas" / "flex_test.yaml"
FLEX_THEIRS = ROOT / "tests" / "fixtures" / "flex_schema.yaml"
PUMS = ROOT / "schemas" / "pums.yaml"


def write(tmp_path: Path, text: str, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path
