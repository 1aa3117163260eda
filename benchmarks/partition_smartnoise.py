"""Partition selection side by side with SmartNoise SQL's ``censor_dims`` (issue #16): the PUMS
age histogram, ``SELECT age, COUNT(*) FROM pums GROUP BY age``, at equal total epsilon 1 and
delta 1e-5, with ``age`` given NO domain on either side (dpsql: ``partition_selection: true``;
SmartNoise: its default ``censor_dims``). Per side, over ``--draws`` releases: the number of
age groups kept and the mean absolute error of the kept counts against the exact counts.

    python -m benchmarks.partition_smartnoise [--draws 50] [--copies 1,10]

``--copies k`` stacks k copies of the 1,000-row sample (each row k times: a 10x larger table
of the same shape), so the curve is seen where ages have enough people. Needs the ``bench``
extra (smartnoise-sql) and ../shared/data/PUMS.csv. Writes results/partition-smartnoise.json.

Neighbouring relations differ: SmartNoise's ``row_privacy`` adds or removes one row (one group
touched), dpsql changes one row (two groups touched), so at equal (epsilon, delta) dpsql's
threshold is about twice SmartNoise's in noise scales.

``--relation units`` (issue #17) compares at the SAME relation: PUMS with its person id
(``PUMS_pid.csv``; each copy gets fresh ids) and each person the unit -- dpsql's
``privacy_unit: {table: pums, column: pid}`` (the table is its own unit table; max_groups 1,
max_rows_per_group 1: one person, one age; dpsql.noise.unit_partition), SmartNoise's
``PUMS_pid.yaml`` (``private_id: pid``) with ``max_ids: 1, sample_max_ids: False``, its
person-level mode. Writes results/partition-smartnoise-units.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import duckdb
import numpy as np
import yaml

import dpsql
from dpsql.metadata import loads_metadata

from . import smartnoise

HERE = Path(__file__).resolve().parent
PUMS_CSV = HERE.parents[1] / "shared" / "data" / "PUMS.csv"
SN_YAML = HERE.parents[1] / "shared" / "data" / "PUMS.yaml"
PUMS_PID_CSV = HERE.parents[1] / "shared" / "data" / "PUMS_pid.csv"
SN_PID_YAML = HERE.parents[1] / "shared" / "data" / "PUMS_pid.yaml"
EPSILON, DELTA = 1.0, 1e-5
SQL_DPSQL = "SELECT age, COUNT(*) AS n FROM pums GROUP BY age"
SQL_SN = "SELECT age, COUNT(*) AS n FROM PUMS.PUMS GROUP BY age"

METADATA = """
tables:
  pums:
    columns:
      age: {releasable: true, partition_selection: true, type: BIGINT}
"""

#: every row one person (pid unique): the table is its own unit table, kappa = C = 1
UNIT_METADATA = """
privacy_unit: {table: pums, column: pid, max_contribution: 2, max_groups: 1,
               max_rows_per_group: 1}
tables:
  pums:
    columns:
      pid: {type: BIGINT}
      age: {releasable: true, partition_selection: true, type: BIGINT}
"""


def _database(folder: Path, copies: int, units: bool = False) -> Path:
    path = folder / f"pums-x{copies}{'-units' if units else ''}.duckdb"
    if path.exists():
        path.unlink()
    con = duckdb.connect(str(path))
    if units:  # copy i of person p is a new person: pid + i * 1,000,000
        con.execute(f"CREATE TABLE pums AS SELECT p.* REPLACE (p.pid + r.i * 1000000 AS pid) "
                    f"FROM read_csv({str(PUMS_PID_CSV)!r}) p, range({copies}) r(i)")
    else:
        con.execute(f"CREATE TABLE pums AS SELECT p.* FROM read_csv({str(PUMS_CSV)!r}) p, "
                    f"range({copies}) r(i)")
    con.execute("CREATE SCHEMA \"PUMS\"")
    con.execute("CREATE VIEW \"PUMS\".\"PUMS\" AS SELECT * FROM main.pums")
    con.close()
    return path


def _score(rows, truth: dict) -> tuple[int, float | None]:
    errors = [abs(float(n) - truth[a]) for a, n in rows if a in truth]
    assert len(errors) == len(rows), "a released age is not in the data"
    return len(rows), (float(np.mean(errors)) if errors else None)


def _summary(scores: list[tuple[int, float | None]]) -> dict:
    kept = [k for k, _ in scores]
    maes = [m for _, m in scores if m is not None]
    return {"groups_kept_mean": float(np.mean(kept)), "groups_kept_min": min(kept),
            "groups_kept_max": max(kept), "mae_of_kept": float(np.mean(maes)) if maes else None}


def run(draws: int, copies: int, folder: Path, units: bool = False) -> dict:
    db = _database(folder, copies, units)
    raw = duckdb.connect(str(db), read_only=True)
    truth = dict(raw.execute(SQL_DPSQL).fetchall())
    md = loads_metadata(UNIT_METADATA if units else METADATA)
    conn = dpsql.connect(str(db), metadata=md, analyst="bench", ledger=None)
    cur = conn.cursor()
    ours = []
    tau = mechanism = None
    for _ in range(draws):
        cur.execute(SQL_DPSQL, epsilon=EPSILON, delta=DELTA)
        ours.append(_score(cur.fetchall(), truth))
        tau = cur.release.selection_threshold
        mechanism = cur.release.selection_mechanism  # the COUNT(*) shares it: thresholding
    conn.close()
    sn_meta = yaml.safe_load((SN_PID_YAML if units else SN_YAML).read_text(encoding="utf-8"))
    table = sn_meta[""]["PUMS"]["PUMS"] if units else sn_meta["PUMS"]["PUMS"]["PUMS"]
    table["rows"] = 1000 * copies
    if units:  # person-level: one row per person (coverage_pums.py's setting)
        table["max_ids"] = 1
        table["sample_max_ids"] = False
    reader, spent = smartnoise.reader(smartnoise.DuckDBConnection(raw), sn_meta, SQL_SN,
                                      EPSILON, DELTA)
    theirs = []
    for _ in range(draws):
        result = reader.execute(SQL_SN)
        theirs.append(_score([tuple(r) for r in result[1:]], truth))
    raw.close()
    db.unlink()
    return {"copies": copies, "rows": 1000 * copies, "ages_in_data": len(truth),
            "draws": draws, "relation": "add/remove one person" if units else "row",
            "dpsql": {"epsilon": EPSILON, "delta": DELTA, "threshold": tau,
                      "selection_mechanism": mechanism, **_summary(ours)},
            "smartnoise": {**spent, "threshold": getattr(reader, "tau", None),
                           **_summary(theirs)}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.partition_smartnoise")
    p.add_argument("--draws", type=int, default=50)
    p.add_argument("--copies", default="1,10")
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--data-dir", type=Path, default=HERE / "data")
    p.add_argument("--relation", choices=("rows", "units"), default="rows",
                   help="units: each person the privacy unit on both sides (issue #17)")
    args = p.parse_args(argv)
    if not smartnoise.available():
        raise SystemExit(smartnoise.INSTALL_HINT)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    units = args.relation == "units"
    results = [run(args.draws, int(c), args.data_dir, units) for c in args.copies.split(",")]
    path = args.out / f"partition-smartnoise{'-units' if units else ''}.json"
    path.write_text(json.dumps({"epsilon": EPSILON, "delta": DELTA, "query": SQL_DPSQL,
                                "results": results}, indent=1) + "\n", encoding="utf-8")
    for r in results:
        d, s = r["dpsql"], r["smartnoise"]
        print(f"x{r['copies']} ({r['ages_in_data']} ages): dpsql tau {d['threshold']} kept "
              f"{d['groups_kept_mean']:.1f} MAE {d['mae_of_kept']}; SmartNoise tau "
              f"{s['threshold']} kept {s['groups_kept_mean']:.1f} MAE {s['mae_of_kept']}")
    print(path)


if __name__ == "__main__":
    main()
