"""docs/examples/histogram.py (linked from the README) runs as written, headless, on a small
demo shop: it prints the true and noisy count of every country and writes a PNG."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dpsql.demo import create_demo

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "histogram.py"


def test_the_histogram_example_plots_true_and_noisy_counts(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (the test extra has "
                        "it): the example's plot cannot be drawn")
    files = create_demo(tmp_path / "demo", customers=400, orders=4_000, products=40)
    out = tmp_path / "h.png"
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--demo-folder", str(files.folder), "--out", str(out),
         "--epsilon", "0.5"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"epsilon=0\.5 \(cached: False\); 95% interval: ±[\d.]+ per bin",
                        lines[0]), lines[0]
    counts = [re.fullmatch(r"([A-Z]{2}): true (\d+), noisy (\d+)", line) for line in lines[1:-1]]
    assert all(counts) and len(counts) == 8
    assert sum(int(m.group(2)) for m in counts if m) == 400  # every customer has a country
    assert lines[-1] == f"wrote {out}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
