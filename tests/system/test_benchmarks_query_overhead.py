"""``python -m benchmarks.query_overhead`` on a tiny TPC-H database: every timing is there and
positive (timings are reported, never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.query_overhead import main
from benchmarks.tpch_data import ensure_dataset


def test_one_query_is_timed_raw_and_through_dpsql(tmp_path, capsys):
    data = ensure_dataset(0.002, tmp_path, "builtin", log=lambda *_: None)
    main(["--data", str(Path(data.db_path).parent), "--query", "Q21", "--runs", "1",
          "--fixed-runs", "1"])
    out = json.loads(capsys.readouterr().out)
    assert out["query"] == "Q21" and out["runs"] == 1
    for part in ("raw", "dpsql", "exact", "fixed"):
        assert set(out[part]) == {"wall_ms", "cpu_ms", "thread_ms"}
        assert out[part]["wall_ms"] > 0
    assert out["ratio_wall"] > 0
