"""The markdown summary of every ``<part>-sf<scale>.json`` in a results folder."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

# on their own data (PUMS-shaped; the demo shop for server): see report_peer.py
OWN_DATA_PARTS = ("peer", "scale", "server")
PARTS = ("overhead", "analysis", "accuracy", "noise", "coverage", "units", *OWN_DATA_PARTS)
#: what runs without --parts: the server part starts a server and 16 client processes and
#: needs psycopg, so it is asked for by name (``--parts server``); the units part (issue #17,
#: ~10 min at SF1) too (``--parts units``)
DEFAULT_PARTS = tuple(p for p in PARTS if p not in ("server", "units"))
_FILE = re.compile(r"^(overhead|analysis|accuracy|noise|coverage|units)-sf([0-9.e+-]+)\.json$")


def _f(x: Any) -> str:
    """A number for a table: ints with separators, floats to a readable precision."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    x = float(x)
    a = abs(x)
    if a == 0:
        return "0"
    if a >= 1e7 or a < 1e-2:
        return f"{x:.3g}"
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def _met(flag: bool | None) -> str:
    return "-" if flag is None else ("**met**" if flag else "**missed**")


def _reject(q: dict[str, Any]) -> str:
    r = q["rejection"]
    msg = r["message"].replace("|", "\\|")
    if len(msg) > 70:
        msg = msg[:67] + "..."
    return f"rejected: {r['class']} ({msg})"


def overhead_md(data: dict[str, Any]) -> list[str]:
    s = data["summary"]
    lines = [
        "| query | raw DuckDB ms | dpsql ms | ratio | exact SQL ms | analysis ms | noise ms "
        "| bins (raw rows) | peak Python MB (dpsql/raw) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for q in data["queries"]:
        if q["status"] != "ok":
            lines.append(f"| {q['name']} | {_f(q['raw_ms'])} | {_reject(q)} | | | "
                         f"{_f(q['reject_ms'])} (to reject) | | ({q['rows_raw']}) | |")
            continue
        mem = q["peak_python_mb"]
        mem_s = f"{mem['dpsql']:.1f} / {mem['raw']:.1f}" if mem else "-"
        lines.append(
            f"| {q['name']} | {_f(q['raw_ms'])} | {_f(q['dpsql_ms'])} | {q['ratio']:.2f} "
            f"| {_f(q['exact_ms'])} | {_f(q['analysis_ms']['total'])} | {_f(q['noise_ms'])} "
            f"| {q['bins']:,} ({q['rows_raw']:,}) | {mem_s} |"
        )
    target = f"- ratio <= {s['ratio_target']} where raw >= {s['ratio_min_raw_ms']:g} ms: "
    if not s["ratio_eligible"]:
        target += ("not applicable at this scale (no accepted query has raw >= "
                   f"{s['ratio_min_raw_ms']:g} ms; see a larger scale)")
    else:
        target += (f"{_met(not s['ratio_missed'])} — met by {len(s['ratio_met'])} of "
                   f"{len(s['ratio_eligible'])}: {', '.join(s['ratio_met']) or 'none'}"
                   + (f"; missed by {', '.join(s['ratio_missed'])}" if s["ratio_missed"]
                      else ""))
    lines += [
        "",
        target,
        f"- analysis median <= {s['analysis_target_ms']:g} ms: {_met(s['analysis_met'])} "
        f"(median {_f(s['median_analysis_ms'])} ms over the {s['accepted']} accepted queries)",
    ]
    if s.get("median_fixed_overhead_ms") is not None:
        lines.append(
            f"- fixed per-query overhead (analysis, rewrite, noise, post-processing; the exact "
            f"result replayed) median <= {s['fixed_overhead_target_ms']:g} ms: "
            f"{_met(s['fixed_overhead_met'])} (median {_f(s['median_fixed_overhead_ms'])} ms)")
    return lines


def analysis_md(data: dict[str, Any]) -> list[str]:
    s = data["summary"]
    lines = [
        "| query | total ms | analyze | plan_noise | plan_execution |",
        "|---|---:|---:|---:|---:|",
    ]
    for q in data["queries"]:
        if q["status"] != "ok":
            lines.append(f"| {q['name']} | {_f(q['reject_ms'])} (to reject) | {_reject(q)} | | |")
            continue
        t = q["analysis_ms"]
        lines.append(f"| {q['name']} | {_f(t['total'])} | {_f(t['analyze'])} "
                     f"| {_f(t['plan_noise'])} | {_f(t['plan_execution'])} |")
    st = s.get("median_stage_ms") or {}
    lines += [
        "",
        f"- median over {s['accepted']} accepted queries: {_f(s['median_ms'])} ms "
        f"(target <= {s['target_ms']:g} ms: {_met(s['met'])}); max {_f(s['max_ms'])} ms; "
        + ", ".join(f"{k} {_f(v)} ms" for k, v in st.items()),
    ]
    prof = data.get("profile")
    if prof:
        lines += [
            "",
            f"Profile (cProfile, {prof['queries_profiled']} uncached analyses; shares of the "
            "profiled time, cumulative):",
            "",
            "| stage | share | ms/query (profiled) |",
            "|---|---:|---:|",
        ]
        for st_ in prof["stages"]:
            name = st_["stage"]
            depth = (len(name) - len(name.lstrip())) // 2
            label = "&nbsp;&nbsp;" * depth + name.strip()
            lines.append(f"| {label} | {st_['share']:.0%} | {_f(st_['ms_per_query'])} |")
        if prof.get("sqlglot_compiled"):
            lines += ["", "sqlglot runs as its compiled build (sqlglotc): cProfile cannot see "
                      "inside it, so its passes show 0% and count toward their dpsql callers."]
    return lines


def accuracy_md(data: dict[str, Any]) -> list[str]:
    s = data["summary"]
    lines = [
        f"epsilon {s['epsilon']}, delta {s['delta']:.3g}, {s['draws']} draws per cell; "
        "median over cells of each cell's median relative error. Reporting 0 scores 1.",
        "",
        "| query | dpsql | FLEX (corrected) | floor: pure count, b = 1/ε | expected from dpsql's "
        "scale | cells (empty bins) | mechanism |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for q in data["queries"]:
        if q["status"] != "ok":
            would = q.get("would_need") or {}
            extra = ""
            if would.get("expected_median_rel_error") is not None:
                extra = (f"; the noise it would need gives ~"
                         f"{_f(would['expected_median_rel_error'])}")
            lines.append(f"| {q['name']} | {_reject(q)}{extra} | {_f(q['flex'])} "
                         f"| {_f(would.get('floor_pure_count'))} | | ({q['true_rows']} true rows)"
                         " | |")
            continue
        lines.append(
            f"| {q['name']} | {_f(q['median_rel_error'])} | {_f(q['flex'])} "
            f"| {_f(q['floor_pure_count'])} | {_f(q['expected_from_scale'])} "
            f"| {q['cells']:,} ({q['empty_bins']:,}) | {q['mechanism']} |"
        )
    return lines


def noise_md(data: dict[str, Any]) -> list[str]:
    s = data["summary"]
    lines = ["| sampler | median M samples/s | best M samples/s |", "|---|---:|---:|"]
    for r in data["samplers"]:
        lines.append(f"| {r['sampler']} | {r['median_per_s'] / 1e6:.2f} "
                     f"| {r['best_per_s'] / 1e6:.2f} |")
    lines += ["", f"- discrete_laplace >= {s['target_per_s'] / 1e6:g} M samples/s: "
              f"{_met(s['met'])} ({s['size']:,} samples per call, scale {s['scale']})"]
    if "gaussian_met" in s:  # results written before the Gaussian sampler have no such line
        lines.append(f"- discrete_gaussian >= {s['target_per_s'] / 1e6:g} M samples/s: "
                     f"{_met(s['gaussian_met'])}")
    return lines


def coverage_md(data: dict[str, Any]) -> list[str]:
    from .report_coverage import coverage_md as md  # it uses this module's formatters

    return md(data)


def units_md(data: dict[str, Any]) -> list[str]:
    from .report_units import units_md as md  # it uses this module's formatters

    return md(data)


_SECTIONS = {
    "overhead": ("Overhead: dpsql end to end vs raw DuckDB", overhead_md),
    "analysis": ("Analysis time (uncached) over the TPC-H corpus", analysis_md),
    "accuracy": ("Accuracy: FLEX's TPC-H queries", accuracy_md),
    "noise": ("Noise throughput", noise_md),
    "coverage": ("Coverage: TPC-H's 22 queries verbatim, SmartNoise SQL's PUMS test suite",
                 coverage_md),
    "units": ("Privacy units (issue #17): R2T's and FLEX's TPC-H queries", units_md),
}


def _measured(env: dict[str, Any]) -> str:
    """When a part ran, at which commit, and how loaded the machine was (timings on a shared
    machine move with the load: compare load averages before comparing runs)."""
    start, end = env.get("load_average_1m_start"), env.get("load_average_1m")
    load = (f"; 1-minute load average {_f(start)} -> {_f(end)} on {env.get('cpus', '?')} CPUs"
            if start is not None and end is not None else "")
    return f"Measured at dpsql commit {env.get('git_commit') or '?'}, {env.get('time', '?')}{load}."


def write_summary(folder: Path) -> Path:
    """Write ``folder/summary.md`` from the JSON files in ``folder``; returns its path."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.json")):
        m = _FILE.match(path.name)
        if m:
            found.setdefault(m.group(2), {})[m.group(1)] = json.loads(path.read_text())
    lines = ["# dpsql benchmark results", "",
             "Generated by `python -m benchmarks` (see benchmarks/README.md for what each "
             "number means). Timings are medians; they are reported, never asserted.", ""]
    for scale in sorted(found, key=float):
        parts = found[scale]
        env = next(iter(parts.values()))["environment"]
        lines += [f"## TPC-H scale factor {scale}", ""]
        gen = env.get("generator")
        lines.append(
            f"Data: {gen or 'n/a'} generator"
            + (f" ({env['rows'].get('lineitem', 0):,} lineitem rows)" if env.get("rows") else "")
            + f"; machine: {env['cpus']} CPUs, Python {env['python']}, DuckDB {env['duckdb']}, "
            f"sqlglot {env['sqlglot']}; dpsql commit {env.get('git_commit') or '?'}; "
            f"{env['time']}."
        )
        lines.append("")
        for part in PARTS:
            if part in parts:
                title, fn = _SECTIONS[part]
                lines += [f"### {title}", "", _measured(parts[part]["environment"]), "",
                          *fn(parts[part]), ""]
    from .report_peer import own_data_sections  # it uses this module's formatters

    lines += own_data_sections(folder)
    out = folder / "summary.md"
    out.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return out
