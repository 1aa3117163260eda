"""``python -m benchmarks --smoke`` runs end to end and writes well-formed results.

Timings are reported by the benchmarks, never asserted here: only the keys and sanity of the
numbers (positive times, ratios, rates; errors non-negative; FLEX's rejected queries recorded
with an error class). The smoke mode uses the built-in generator, so no optional dependency.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("overhead", "analysis", "accuracy", "noise")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "results"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--smoke", "--quiet", "--out", str(out),
         "--data-dir", str(tmp / "data")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = {p: out / f"{p}-sf0.01.json" for p in PARTS}
    for path in files.values():
        assert str(path) in proc.stdout  # the paths written are printed
    loaded = {p: json.loads(path.read_text()) for p, path in files.items()}
    loaded["summary.md"] = (out / "summary.md").read_text()
    return loaded


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_environment_is_recorded(results):
    for part in PARTS:
        env = results[part]["environment"]
        assert env["scale"] == 0.01 and env["smoke"] is True
        assert env["epsilon"] == 0.1 and env["delta"] == pytest.approx(1 / 2e6**2)
        for key in ("python", "duckdb", "sqlglot", "cpus", "part_seconds"):
            assert key in env
    assert results["overhead"]["environment"]["generator"] == "builtin"
    assert results["overhead"]["environment"]["rows"]["lineitem"] > 50_000


def test_overhead(results):
    data = results["overhead"]
    queries = {q["name"]: q for q in data["queries"]}
    assert {"Q1", "Q4", "Q13", "Q16", "Q21"} <= set(queries)
    assert len([n for n in queries if n.startswith("J")]) == 5
    for q in queries.values():
        assert q["status"] in ("ok", "rejected")
        assert positive(q["raw_ms"])
        if q["status"] == "rejected":
            assert q["rejection"]["class"].endswith("Error") and q["rejection"]["message"]
            assert positive(q["reject_ms"])
            continue
        for key in ("dpsql_ms", "exact_ms", "ratio", "noise_ms"):
            assert positive(q[key]), key
        assert q["ratio"] == pytest.approx(q["dpsql_ms"] / q["raw_ms"])
        assert set(q["analysis_ms"]) == {"analyze", "plan_noise", "plan_execution", "total"}
        assert q["analysis_ms"]["total"] >= q["analysis_ms"]["analyze"] > 0
        assert q["bins"] >= 1 and q["rows_dpsql"] >= 1 and q["noise_cells"] >= q["bins"]
        assert len(q["raw_ms_all"]) == len(q["dpsql_ms_all"]) == q["runs"]
    # Q1 is a plain histogram: 3 x 2 declared bins, pure discrete Laplace
    assert queries["Q1"]["status"] == "ok" and queries["Q1"]["bins"] == 6
    assert queries["Q1"]["mechanism"] == "discrete_laplace"
    # Q13 needs an outer join, which has no sensitivity rule
    assert queries["Q13"]["status"] == "rejected"
    s = data["summary"]
    assert s["queries"] == 10 and s["accepted"] + len(s["rejected"]) == 10
    assert positive(s["median_analysis_ms"]) and isinstance(s["analysis_met"], bool)


def test_analysis(results):
    data = results["analysis"]
    s = data["summary"]
    assert s["queries"] >= 15 and s["accepted"] >= 10
    assert positive(s["median_ms"]) and s["max_ms"] >= s["median_ms"]
    assert s["target_ms"] == 2.0 and isinstance(s["met"], bool)
    prof = data["profile"]
    stages = {st["stage"].strip(): st for st in prof["stages"]}
    assert stages["analyze (total)"]["ms_per_query"] > 0
    assert stages["sqlglot qualify"]["ms_per_query"] > 0
    assert all(0 <= st["share"] <= 1.0 + 1e-9 for st in prof["stages"])
    assert prof["self_time_top_functions"]


def test_accuracy(results):
    data = results["accuracy"]
    queries = {q["name"]: q for q in data["queries"]}
    assert list(queries) == ["Q1", "Q4", "Q13", "Q16", "Q21"]
    assert data["summary"]["flex_figures"]["Q21"] == 11551
    for q in queries.values():
        assert q["flex"] == data["summary"]["flex_figures"][q["name"]]
        if q["status"] == "rejected":
            assert q["rejection"]["class"].endswith("Error")
            continue
        assert q["draws"] == 5 and q["exact_executions"] == 1  # replayed, not re-executed
        assert q["cells"] >= 1 and q["cells_missing_from_release"] == 0
        assert 0 <= q["min_cell_rel_error"] <= q["median_rel_error"] <= q["max_cell_rel_error"]
        assert positive(q["floor_pure_count"])
        assert all(positive(b) for b in q["noise_scales"])
    q1 = queries["Q1"]
    assert q1["status"] == "ok" and q1["pure"] == [True]
    # Q1's histogram has sensitivity 2: scale 2/epsilon, twice the floor's b = 1/epsilon
    assert q1["noise_scales"] == [pytest.approx(20.0)]
    assert q1["expected_from_scale"] == pytest.approx(2 * q1["floor_pure_count"])


def test_noise(results):
    data = results["noise"]
    names = [r["sampler"] for r in data["samplers"]]
    assert names[0] == "discrete_laplace" and "release_sums" in names
    for r in data["samplers"]:
        assert positive(r["best_per_s"]) and r["best_per_s"] >= r["median_per_s"] > 0
    assert data["summary"]["target_per_s"] == 5e6 and isinstance(data["summary"]["met"], bool)


def test_summary_markdown(results):
    md = results["summary.md"]
    assert "## TPC-H scale factor 0.01" in md
    for title in ("### Overhead", "### Analysis", "### Accuracy", "### Noise"):
        assert title in md
    assert "| Q1 |" in md and "rejected: UnsupportedConstructError" in md
