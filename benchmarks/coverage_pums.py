"""The coverage part's second set: SmartNoise SQL's own PUMS test queries, both engines.

The queries (``smartnoise_suite.json``) were gathered from opendp/smartnoise-sdk's
``sql/tests`` at the commit the file records, each with its origins (file and line). Each is
run as written, on the 1,000-row PUMS sample with person ids (``../shared/data/PUMS_pid.csv``,
the database of :func:`benchmarks.synthetic.ensure`), at epsilon 1 and delta 1e-6 for the
whole query:

* **dpsql** with the owner's metadata: max frequencies profiled from the data, the bounds and
  domains declared in ``pums_owner.yaml``. SmartNoise names the table ``PUMS.PUMS`` (its
  metadata's schema and table); dpsql's owner declared it ``pums``, so ``PUMS.PUMS`` (any
  case) is written ``pums`` in dpsql's text: the only change, the one peer.py makes.
  ``PUMS.PUMS.PUMS`` (a catalog-qualified test) is left as it is.
* **SmartNoise SQL** (when ``smartnoise-sql`` is installed) through its Postgres reader on the
  same DuckDB database (:mod:`benchmarks.smartnoise`; ``PUMS.PUMS`` is a view of the table),
  with the metadata its tests use, ``PUMS_pid.yaml`` (the same bounds; defaults otherwise, so
  it censors rare groups as in its suite), its per-column epsilon scaled so that its own
  ``get_privacy_cost`` is epsilon 1.

Accepted = the engine returned an answer; refused = it raised (class, message). On the
queries both answer, the errors are side by side: cells matched by dpsql's layout
(:mod:`benchmarks.cells`; SmartNoise returns the same SELECT list), the median relative error
and the mean absolute error over ``draws`` releases, each engine's exact result replayed.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from dpsql.metadata import dump_metadata, load_metadata

from . import cells as cellmod
from . import smartnoise, synthetic
from .common import Handles, Settings, rejection
from .coverage import DELTA, EPSILON, peer_reason, tally, through_dpsql, truth_of
from .peer import _smartnoise_version

HERE = Path(__file__).resolve().parent
SUITE = HERE / "smartnoise_suite.json"
OWNER_YAML = HERE / "pums_owner.yaml"
SMARTNOISE_YAML = synthetic.SHARED_DATA / "PUMS_pid.yaml"
#: --smoke: these suite queries only
SMOKE_IDS = ("SN001", "SN002", "SN019", "SN031", "SN040", "SN053")
#: releases per accepted query (both engines): SmartNoise parses and rewrites on every call,
#: ~0.3 s on the loaded 2-core machine, so fewer draws than the TPC-H side's
MAX_DRAWS = 20
_SCHEMA_TABLE = re.compile(r"(?<![\w.])pums\s*\.\s*pums(?![\w.])", re.IGNORECASE)
_BARE_TABLE = re.compile(r"(?<=\bFROM )pums(?![\w.])", re.IGNORECASE)


def dpsql_sql(sql: str) -> str:
    """SmartNoise's ``PUMS.PUMS`` as dpsql's declared table ``pums``."""
    return _SCHEMA_TABLE.sub("pums", sql)


def smartnoise_sql(sql: str) -> str:
    """A bare ``FROM pums`` (SmartNoise's tests run those on readers whose default schema is
    PUMS) as ``PUMS.PUMS``, the name in SmartNoise's metadata."""
    return _BARE_TABLE.sub("PUMS.PUMS", sql)


def smartnoise_metadata() -> dict[str, Any]:
    """SmartNoise's PUMS_pid.yaml with ``max_ids: 1`` and ``sample_max_ids: False``: each
    person has one row, so no reservoir sampling per person is needed (its rewrite for that,
    ``ROW_NUMBER() OVER (PARTITION BY pid ORDER BY RANDOM())``, is refused by DuckDB 2:
    "ORDER BY window expressions cannot be volatile")."""
    doc = yaml.safe_load(SMARTNOISE_YAML.read_text(encoding="utf-8"))
    table = doc[""]["PUMS"]["PUMS"]
    table["max_ids"] = 1
    table["sample_max_ids"] = False
    return doc


def load_suite() -> dict[str, Any]:
    return json.loads(SUITE.read_text(encoding="utf-8"))


def owner_metadata(profiled_path: str) -> str:
    """The profiled metadata of the sample's database with pums_owner.yaml laid over it."""
    doc = yaml.safe_load(Path(profiled_path).read_text(encoding="utf-8"))
    owner = yaml.safe_load(OWNER_YAML.read_text(encoding="utf-8"))["columns"]
    cols = doc["tables"]["pums"]["columns"]
    for name, spec in owner.items():
        for key in ("bounds", "releasable", "domain"):
            cols[name].pop(key, None)
        cols[name].update(spec)
    md = load_metadata(doc)  # validates
    return ("# The PUMS sample as its owner completes it (benchmarks/pums_owner.yaml over the "
            "profiled max\n# frequencies: OWNER-ONLY).\n" + dump_metadata(md))


def _smartnoise_side(sql: str, sn_meta: dict | None, layout, truth: dict | None,
                     raw, draws: int) -> dict[str, Any]:
    if sn_meta is None:
        return {"status": "skipped", "reason": smartnoise.INSTALL_HINT}
    try:
        conn = smartnoise.DuckDBConnection(raw, replay=True)
        reader, spent = smartnoise.reader(conn, sn_meta, sql, EPSILON, DELTA)
        first = reader.execute(sql)
    except Exception as err:
        rej = rejection(err)
        return {"status": "refused", "rejection": rej, "reason": peer_reason(rej)}
    out: dict[str, Any] = {"status": "accepted", "spent": spent, "rows_released": len(first) - 1}
    if layout is not None and truth is not None:
        results = [first] + [reader.execute(sql) for _ in range(draws - 1)]
        out.update(cellmod.errors(truth, [layout.cells(r[1:]) for r in results]))
        out["draws"] = draws
    return out


def one_query(q: dict[str, Any], handles: Handles, sn_meta: dict | None, draws: int,
              log) -> dict[str, Any]:
    sql = dpsql_sql(q["sql"])
    out: dict[str, Any] = {"id": q["id"], "sql": q["sql"], "origins": q["origins"]}
    if sql != q["sql"]:
        out["dpsql_sql"] = sql
    if "smartnoise_expects" in q:
        out["smartnoise_expects"] = q["smartnoise_expects"]
    truth_rows, duck_err = truth_of(handles, sql)
    if duck_err:
        out["duckdb_error"] = duck_err
    d = through_dpsql(sql, truth_rows, handles, draws)
    layout = d.pop("layout", None)
    out["dpsql"] = d
    truth = (layout.cells(truth_rows) if layout is not None and truth_rows is not None
             and layout.matchable(truth_rows) else None)
    sn_sql = smartnoise_sql(q["sql"])
    if sn_sql != q["sql"]:
        out["smartnoise_sql"] = sn_sql
    out["smartnoise"] = _smartnoise_side(sn_sql, sn_meta, layout, truth, handles.raw, draws)
    log(f"  {q['id']}: dpsql {d['status']}"
        + (f" ({d['reason']})" if d["status"] == "refused" else "")
        + f", SmartNoise {out['smartnoise']['status']}")
    return out


def run(settings: Settings, data_dir: Path | None, log=print) -> dict[str, Any]:
    if synthetic.sample_missing():
        log(f"coverage: SmartNoise suite skipped: {synthetic.sample_missing()}")
        return {"skipped": synthetic.sample_missing()}
    suite = load_suite()
    dataset = synthetic.ensure(None, data_dir or HERE / "data", log=log)
    md_path = Path(dataset.metadata_path).with_name("coverage.yaml")
    md_path.write_text(owner_metadata(dataset.metadata_path), encoding="utf-8")
    sn_meta = smartnoise_metadata() if smartnoise.available() else None
    if sn_meta is None:
        log(f"coverage: SmartNoise SQL skipped: {smartnoise.INSTALL_HINT}; dpsql's side runs "
            "alone")
    queries = [q for q in suite["queries"] if not settings.smoke or q["id"] in SMOKE_IDS]
    draws = min(settings.draws, MAX_DRAWS)
    log(f"coverage: SmartNoise SQL's PUMS suite, {len(queries)} queries, epsilon {EPSILON}, "
        f"delta {DELTA:g}, {draws} draws")
    handles = Handles.open(replace(dataset, metadata_path=str(md_path)))
    try:
        results = [one_query(q, handles, sn_meta, draws, log) for q in queries]
    finally:
        handles.close()
    return {"summary": summarise(suite, results, sn_meta is None), "queries": results}


def summarise(suite: dict[str, Any], results: list[dict[str, Any]],
              sn_skipped: bool) -> dict[str, Any]:
    def acc(side: str) -> list[str]:
        return [q["id"] for q in results if q[side]["status"] == "accepted"]

    d_ok, s_ok = acc("dpsql"), acc("smartnoise")
    both = [i for i in d_ok if i in s_ok]
    summary: dict[str, Any] = {
        "source": suite["source"], "commit": suite["commit"], "epsilon": EPSILON,
        "delta": DELTA, "queries": len(results), "excluded": len(suite["excluded"]),
        "dpsql_accepted": len(d_ok),
        "smartnoise_accepted": None if sn_skipped else len(s_ok),
        "smartnoise_skipped": sn_skipped,
        "smartnoise_version": None if sn_skipped else _smartnoise_version(),
        "both_accepted": None if sn_skipped else len(both),
        "only_dpsql": None if sn_skipped else [i for i in d_ok if i not in s_ok],
        "only_smartnoise": None if sn_skipped else [i for i in s_ok if i not in d_ok],
        "goal_met": None if sn_skipped else len(d_ok) >= len(s_ok),
        "dpsql_refusal_reasons": tally(results),
    }
    if not sn_skipped:
        summary["smartnoise_refusal_reasons"] = tally(results, "smartnoise")
    return summary
