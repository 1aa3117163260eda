"""The PUMS-shaped databases of the ``peer`` and ``scale`` parts (made once, then reused).

Each database has two tables:

* ``pums(age, sex, educ, race, income, married, pid)``: for ``rows=None`` the real 1,000-row
  PUMS sample (``../shared/data/PUMS_pid.csv``); otherwise ``rows`` rows whose person ``pid``
  is 1..rows and whose other columns copy sample row ``(pid * 2654435761 mod P) mod 1000``
  (P = 2^32 - 5, prime): the sample's joint distribution, bounds and domains, at any size.
* ``jobs(pid, hours)``: as many rows as ``pums``, ``pid = (i * 2246822519 mod P) mod rows + 1``
  (each person holds 0 to a few jobs), ``hours`` 1..60.

The formulas are integer arithmetic in DuckDB SQL, so the data is the same on every machine
and nothing larger than the tables themselves is held in memory (50M rows take ~20 s).
dpsql's metadata takes its max frequencies from the data (``build_metadata``) and its bounds
and domains from ``schemas/pums.yaml`` (the reviewed metadata of the sample); SmartNoise's
metadata is the sample's ``PUMS.yaml`` with the row count and the ``jobs`` table.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import duckdb
import yaml

from dpsql.metadata import dump_metadata, load_metadata
from dpsql.metadata.build import build_metadata

from .tpch_data import Dataset, write_database

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
PUMS_CSV = SHARED_DATA / "PUMS_pid.csv"
SMARTNOISE_YAML = SHARED_DATA / "PUMS.yaml"
DPSQL_YAML = ROOT / "schemas" / "pums.yaml"
SAMPLE_ROWS = 1000
_P = 4_294_967_291  # 2^32 - 5, prime: i -> i * a mod P is a bijection for 0 < i < P
_A_ROW, _A_JOB, _A_HOURS = 2_654_435_761, 2_246_822_519, 3_266_489_917


def label(rows: int | None) -> str:
    """``pums`` for the sample, else ``10k``, ``1m``, ``50m`` ..."""
    if rows is None:
        return "pums"
    for unit, size in (("m", 1_000_000), ("k", 1_000)):
        if rows >= size and rows % size == 0:
            return f"{rows // size}{unit}"
    return str(rows)


def sample_missing() -> str | None:
    """Why the peer and scale parts cannot run here (the sample is the user's shared data,
    expected beside the repository), or None."""
    if PUMS_CSV.exists():
        return None
    return f"the PUMS sample is not beside the repository (expected {PUMS_CSV})"


def ensure(rows: int | None, data_dir: Path, log=print) -> Dataset:
    """The dataset with ``rows`` generated rows (None: the PUMS sample), made if missing."""
    folder = Path(data_dir).resolve() / f"pums-{label(rows)}"
    info_path = folder / "info.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        if Path(info["db_path"]).exists() and Path(info["metadata_path"]).exists():
            return Dataset(**info)
    if sample_missing():
        raise SystemExit(sample_missing())
    db_path = folder / "db.duckdb"
    log(f"generating the PUMS-shaped database {label(rows)} ...")
    counts, gen_seconds = write_database(db_path, lambda con: _fill(con, rows), ("pums", "jobs"))
    start = time.perf_counter()
    md_path = folder / "pums.yaml"
    md_path.write_text(_dpsql_metadata(db_path), encoding="utf-8")
    ds = Dataset(float(counts["pums"]), str(db_path), str(md_path), "pums-synthetic"
                 if rows is not None else "pums-sample", gen_seconds,
                 time.perf_counter() - start, counts)
    info_path.write_text(json.dumps(asdict(ds), indent=2))
    return ds


def _fill(con: duckdb.DuckDBPyConnection, rows: int | None) -> None:
    con.execute("CREATE TABLE sample AS SELECT * FROM read_csv_auto(?)", [str(PUMS_CSV)])
    if rows is None:
        con.execute("ALTER TABLE sample RENAME TO pums")
        n = SAMPLE_ROWS
    else:
        n = rows
        con.execute(
            f"CREATE TABLE pums AS SELECT s.age, s.sex, s.educ, s.race, s.income, s.married, "
            f"t.i AS pid FROM range(1, {n} + 1) t(i) JOIN sample s "
            f"ON s.pid = (t.i * {_A_ROW} % {_P}) % {SAMPLE_ROWS} + 1"
        )
        con.execute("DROP TABLE sample")
    con.execute(
        f"CREATE TABLE jobs AS SELECT CAST((i * {_A_JOB} % {_P}) % {n} + 1 AS BIGINT) AS pid, "
        f"CAST((i * {_A_HOURS} % {_P}) % 60 + 1 AS BIGINT) AS hours FROM range(1, {n} + 1) t(i)"
    )
    # SmartNoise names the tables PUMS.PUMS and PUMS.JOBS (its metadata's schema.table):
    # views of the same tables, no copy
    con.execute("CREATE SCHEMA pums")
    con.execute("CREATE VIEW pums.pums AS SELECT * FROM main.pums")
    con.execute("CREATE VIEW pums.jobs AS SELECT * FROM main.jobs")


def _dpsql_metadata(db_path: Path) -> str:
    """Profiled max frequencies plus the reviewed bounds and domains of schemas/pums.yaml."""
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        draft = yaml.safe_load(build_metadata(con, tables=["main.pums", "main.jobs"]))
    finally:
        con.close()
    reviewed = yaml.safe_load(DPSQL_YAML.read_text())["tables"]["pums"]["columns"]
    cols = draft["tables"]["pums"]["columns"]
    for name, spec in reviewed.items():
        for key in ("bounds", "releasable", "domain"):
            if key in spec:
                cols[name][key] = spec[key]
    draft["tables"]["jobs"]["columns"]["hours"]["bounds"] = [0, 60]
    md = load_metadata(draft)  # validates
    return ("# PUMS-shaped benchmark database (benchmarks/synthetic.py): max frequencies from "
            "the data\n# (OWNER-ONLY), bounds and domains from schemas/pums.yaml.\n"
            + dump_metadata(md))


def smartnoise_metadata(rows: int) -> dict[str, Any]:
    """SmartNoise's metadata: the sample's PUMS.yaml (same bounds) for ``rows`` rows.

    ``censor_dims: False``: SmartNoise then releases every group it sees, as dpsql releases
    every bin of the declared domain, so both spend the whole epsilon on the values and no
    delta on thresholding. ``jobs`` is declared so that the join is refused for being a join.
    """
    doc = yaml.safe_load(SMARTNOISE_YAML.read_text())
    table = doc["PUMS"]["PUMS"]["PUMS"]
    table["rows"] = rows
    table["censor_dims"] = False
    table["pid"] = {"type": "int"}
    doc["PUMS"]["PUMS"]["JOBS"] = {"row_privacy": True, "rows": rows, "censor_dims": False,
                                   "pid": {"type": "int"},
                                   "hours": {"type": "int", "lower": 0, "upper": 60}}
    return doc
