"""Part ``analysis``: uncached analysis time per query over the TPC-H corpus, and a profile.

Analysis = ``analyze`` (parse, allow-list, sqlglot qualify, elastic sensitivity) +
``plan_noise`` (budget split and the smoothing scan) + ``plan_execution`` (the rewritten exact
and post-processing SQL): everything dpsql does before touching the database, measured without
the Engine's memo. Target (the analysis issue): median <= 2 ms for TPC-H-sized queries.

The profile (cProfile over the whole corpus) attributes the time to the pipeline's stages and
to the sqlglot passes inside them; see ``profile`` in the JSON.
"""

from __future__ import annotations

import cProfile
import itertools
import pstats
import statistics
import time
from typing import Any

from dpsql.analysis.elastic import analyze
from dpsql.analysis.hygiene import MAX_CONNECTIVES
from dpsql.budget import Budget
from dpsql.errors import Error
from dpsql.noise.plan import plan_noise
from dpsql.rewrite.plan import plan_execution

from .common import Handles, Settings
from .overhead import ANALYSIS_TARGET_MS, analysis_times
from .queries import analysis_corpus

#: Functions whose cumulative time the profile reports: (label, file suffix, function name).
_STAGES = [
    ("analyze (total)", "dpsql/analysis/elastic.py", "analyze"),
    ("  parse_sql (sqlglot parse)", "dpsql/analysis/parse.py", "parse_sql"),
    ("  check_allowed (allow-list walk)", "dpsql/analysis/allowlist.py", "check_allowed"),
    ("  sqlglot qualify", "sqlglot/optimizer/qualify.py", "qualify"),
    ("    qualify_tables", "sqlglot/optimizer/qualify_tables.py", "qualify_tables"),
    ("    qualify_columns", "sqlglot/optimizer/qualify_columns.py", "qualify_columns"),
    ("    normalize_identifiers", "sqlglot/optimizer/normalize_identifiers.py",
     "normalize_identifiers"),
    ("    validate_qualify_columns", "sqlglot/optimizer/qualify_columns.py",
     "validate_qualify_columns"),
    ("    ensure_schema (MappingSchema; memoised per Metadata)", "sqlglot/schema.py",
     "ensure_schema"),
    ("  analyze_query (elastic rules)", "dpsql/analysis/elastic.py", "analyze_query"),
    ("plan_noise (total)", "dpsql/noise/plan.py", "plan_noise"),
    ("  smooth (k scan)", "dpsql/noise/smooth.py", "smooth"),
    ("plan_execution (total)", "dpsql/rewrite/plan.py", "plan_execution"),
    ("  make_total_pass (totality)", "dpsql/rewrite/totality.py", "make_total_pass"),
    ("  exact_shape (the exact query's copy)", "dpsql/rewrite/plan.py", "exact_shape"),
    ("sqlglot tree copies (copy_tree, all callers)", "dpsql/analysis/trees.py", "copy_tree"),
    ("sqlglot Expression.sql (generation, all callers)",
     ("sqlglot/expressions.py", "sqlglot/expressions/core.py"), "sql"),
    ("sqlglot Expression.copy (deepcopy, all callers)",
     ("sqlglot/expressions.py", "sqlglot/expressions/core.py"), "copy"),
    ("Metadata.sqlglot_schema", "dpsql/metadata/model.py", "sqlglot_schema"),
]


def profile_corpus(corpus, handles: Handles, settings: Settings, reps: int) -> dict[str, Any]:
    """cProfile ``reps`` uncached analyses of every accepted query; cumulative ms per call."""
    prof = cProfile.Profile()
    calls = 0
    for _ in range(reps):
        for _name, sql in corpus:
            prof.enable()
            try:
                a = analyze(sql, handles.metadata)
                plan_noise(a, Budget(settings.epsilon, settings.delta))
                plan_execution(a, handles.metadata)
            finally:
                prof.disable()
            calls += 1
    stats = pstats.Stats(prof)
    raw = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())  # sum of tottime = profiled wall time
    stages = []
    for label, path, func in _STAGES:
        suffixes = (path,) if isinstance(path, str) else path
        cum = sum(v[3] for (file, _line, fn), v in raw.items()
                  if fn == func and file.replace("\\", "/").endswith(suffixes))
        stages.append({"stage": label, "ms_per_query": cum * 1e3 / calls,
                       "share": cum / total if total else 0.0})
    by_file: dict[str, float] = {}
    for (file, _line, _fn), v in raw.items():
        key = _short_path(file)
        by_file[key] = by_file.get(key, 0.0) + v[2]
    top_files = sorted(by_file.items(), key=lambda kv: -kv[1])[:12]
    top_funcs = sorted(raw.items(), key=lambda kv: -kv[1][2])[:15]
    return {
        "queries_profiled": calls,
        "profiled_ms_per_query": total * 1e3 / calls if calls else 0.0,
        "note": "cProfile inflates times (roughly 2x); use the shares, not the absolute values"
                + ("; sqlglot is the compiled build (sqlglotc): cProfile cannot see inside it, "
                   "so its passes show as 0 and their time counts toward the dpsql function "
                   "that calls them" if sqlglot_compiled() else ""),
        "sqlglot_compiled": sqlglot_compiled(),
        "stages": stages,
        "self_time_by_file": [{"file": f, "share": t / total} for f, t in top_files],
        "self_time_top_functions": [
            {"function": f"{_short_path(file)}:{line}({fn})", "share": v[2] / total,
             "calls_per_query": v[1] / calls}
            for (file, line, fn), v in top_funcs
        ],
    }


def sqlglot_compiled() -> bool:
    """True when sqlglot runs as its mypyc-compiled build (the sqlglotc package)."""
    import sqlglot.parser

    return not str(sqlglot.parser.__file__).endswith(".py")


def _short_path(file: str) -> str:
    file = file.replace("\\", "/")
    for marker in ("/site-packages/", "/work/main/", "/lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
    return file


#: AND-chain lengths timed by :func:`long_queries` (the last is the longest accepted)
LONG_CHAINS = (32, 64, 128, MAX_CONNECTIVES + 1)


def _chain(n: int) -> str:
    return "SELECT COUNT(*) FROM lineitem WHERE " + " AND ".join(
        f"l_quantity <> {i}" for i in range(n))


def long_queries(handles: Handles, reps: int, log=print) -> dict[str, Any]:
    """Analysis time of generated long AND chains (issue #12: ``qualify`` is quadratic in
    them, so hostile input is bounded before it, see dpsql/analysis/hygiene.py), and the time
    to refuse the issue's hostile inputs (20,000 conjuncts; 60 KB)."""
    chains = []
    for n in LONG_CHAINS:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            analyze(_chain(n), handles.metadata)
            times.append((time.perf_counter() - start) * 1e3)
        chains.append({"conjuncts": n, "chars": len(_chain(n)),
                       "median_ms": statistics.median(times)})
    for prev, cur in itertools.pairwise(chains):
        cur["ratio_to_previous"] = cur["median_ms"] / prev["median_ms"]
    refusals = []
    for label, sql in (("20,000 conjuncts", _chain(20_000)),
                       ("257 connectives", _chain(MAX_CONNECTIVES + 2)),
                       ("60 KB", _chain(3_000)[:60_000])):
        start = time.perf_counter()
        try:
            analyze(sql, handles.metadata)
            refused = None
        except Error as err:
            refused = type(err).__name__
        refusals.append({"input": label, "chars": len(sql), "refused_as": refused,
                         "ms": (time.perf_counter() - start) * 1e3})
    for c in chains:
        log(f"  AND chain of {c['conjuncts']}: {c['median_ms']:.2f} ms"
            + (f" ({c['ratio_to_previous']:.2f}x the previous)" if "ratio_to_previous" in c
               else ""))
    for r in refusals:
        log(f"  {r['input']} ({r['chars']:,} chars): refused as {r['refused_as']} in "
            f"{r['ms']:.2f} ms")
    return {"chains": chains, "refusals": refusals}


def run(handles: Handles, settings: Settings, log=print) -> dict[str, Any]:
    log("analysis: uncached analysis time over the TPC-H corpus")
    corpus = analysis_corpus()
    queries = []
    for name, sql in corpus:
        res = analysis_times(sql, handles, settings, settings.analysis_reps)
        entry = {"name": name, "sql": sql, **res}
        entry["status"] = "rejected" if "rejection" in res else "ok"
        queries.append(entry)
        if "rejection" in res:
            log(f"  {name}: rejected ({res['rejection']['class']}) in {res['reject_ms']:.2f} ms")
        else:
            t = res["analysis_ms"]
            log(f"  {name}: {t['total']:.2f} ms (analyze {t['analyze']:.2f}, plan_noise "
                f"{t['plan_noise']:.2f}, plan_execution {t['plan_execution']:.2f})")
    ok = [q for q in queries if q["status"] == "ok"]
    totals = [q["analysis_ms"]["total"] for q in ok]
    stage_medians = {
        stage: statistics.median(q["analysis_ms"][stage] for q in ok)
        for stage in ("analyze", "plan_noise", "plan_execution")
    } if ok else {}
    summary = {
        "queries": len(queries),
        "accepted": len(ok),
        "target_ms": ANALYSIS_TARGET_MS,
        "median_ms": statistics.median(totals) if totals else None,
        "max_ms": max(totals) if totals else None,
        "median_stage_ms": stage_medians,
        "median_reject_ms": statistics.median(q["reject_ms"] for q in queries
                                              if q["status"] == "rejected")
        if len(ok) < len(queries) else None,
    }
    summary["met"] = summary["median_ms"] is not None and summary["median_ms"] <= ANALYSIS_TARGET_MS
    out: dict[str, Any] = {"summary": summary, "queries": queries}
    log("analysis: generated long queries (hostile input is bounded before qualify)")
    out["long_queries"] = long_queries(
        handles, settings.at_least(min(settings.analysis_reps, 15), 3), log)
    if settings.profile and ok:
        accepted = [(q["name"], q["sql"]) for q in ok]
        out["profile"] = profile_corpus(accepted, handles, settings,
                                        reps=max(1, min(settings.analysis_reps, 10)))
    return out
