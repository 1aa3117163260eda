"""benchmarks/spark_vs_duckdb.py at its smoke size: it runs, and both backends agree."""

from __future__ import annotations

import json

import pytest


@pytest.mark.spark
def test_spark_benchmark_smoke(spark, tmp_path):
    from benchmarks.spark_vs_duckdb import QUERIES, main

    out = tmp_path / "out"
    assert main(["--smoke", "--out", str(out), "--data", str(tmp_path / "data")]) == 0
    doc = json.loads((out / "spark-smoke.json").read_text())
    (result,) = doc["results"]
    assert result["rows"] == 20_000 and set(result["queries"]) == set(QUERIES)
    for entry in result["queries"].values():
        assert entry["same_exact_answer"]
        assert entry["duckdb_exact_s"] > 0 and entry["spark_exact_s"] > 0
        assert entry["spark_over_duckdb_exact"] > 0
    assert doc["spark_master"] == spark.sparkContext.master
    assert not spark.sparkContext._jsc.sc().isStopped()  # the test run's session is left running
