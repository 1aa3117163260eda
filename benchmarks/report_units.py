"""Markdown of the ``units`` part (``units-sf<scale>.json``): its own ``units-sf<scale>.md`` and
its section of ``summary.md``."""

from __future__ import annotations

from typing import Any

from .report import _f, _met, _reject


def _pct(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) < 1e-9:
        return "0" if x == 0 else "~0 (float rounding)"
    return f"{x * 100:.3g}%"


def _unit_cell(q: dict[str, Any]) -> str:
    if q["same_private_relations"]:
        return f"{q['unit']} (as R2T)"
    r2t = " and ".join(q["r2t_private"])
    return f"{q['unit']} (R2T: {r2t})"


def _grid(s: dict[str, Any]) -> str:
    """The level grid of the run (older files: the default 2^j up to GS)."""
    base = s.get("level_base", 2.0)
    taus = s.get("levels")
    if not taus:
        return "levels 2^j (R2T: 10^6)"
    unit = ("rows for a COUNT, value units for a SUM (`max_sum`)" if s.get("max_sum")
            else "rows")
    return (f"levels floor({base:g}^j) = {', '.join(f'{t:,}' for t in taus)} {unit} under one "
            f"unit, and {base:g}^j itself over two units (R2T's code: 5.5^i, i = 1..8, for its "
            f"G = 10^6; `levels: {{base: {base:g}}}`; dpsql.units.grid)")


def r2t_md(data: dict[str, Any]) -> list[str]:
    s = data["summary"]["r2t"]
    lines = [
        f"epsilon {s['epsilon']}, beta {s['beta']}, GS {s['max_contribution']:,}, "
        f"{_grid(s)}; "
        f"{s['draws']} releases per query, the exact query run once and replayed. dpsql's unit "
        "is one table: customer (`schemas/tpch-units.yaml`, supplier and partsupp **public**), "
        "so where R2T also protected supplier (Q5, Q7, Q8, Q21) or protected orders or "
        "supplier instead, dpsql's release protects something else: the *unit* column says "
        "which. Q11, Q12 and Q20 also run under R2T's own unit, and Q5, Q7, Q8 (customer and "
        "supplier) and Q21 (orders and supplier) under R2T's own two units (several unit "
        "tables: the max-flow truncation; their time is the per-pair query plus the flow of "
        "every level in Python). Time: dpsql's exact query "
        f"(unit lookup, GROUP BY unit, {len(s.get('levels') or [0] * 20)} truncated sums; "
        "for counts, the histogram of the units' contributions, its levels evaluated in "
        "Python) against the same SQL on "
        "raw DuckDB, "
        "interleaved, medians of 7 runs or as many as fill a second, up to 301 "
        f"(goal <= {s['time_ratio_target']:g}x; the CPU ratio is the "
        "process's CPU time, DuckDB's threads included: the work, without the wait for a core "
        "on a loaded machine).",
        "",
        "| query | unit | exact answer | dpsql median rel. error | R2T's statistic | R2T "
        "published | signed median | 95% interval held | raw DuckDB ms | dpsql exact ms | "
        "ratio | CPU ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for q in data["r2t"]:
        head = f"| {q['name']} | {_unit_cell(q)} | {_f(q['exact_answer'])} "
        if q["status"] != "ok":
            lines.append(head + f"| {_reject(q)} | | {_pct(q['r2t_figure'])} | | | | | | |")
            continue
        t = q.get("time")
        cpu = f"{t['cpu_ratio']:.2f}" if t and t.get("cpu_ratio") else ""
        timing = (f"| {_f(t['raw_ms'])} | {_f(t['exact_ms'])} | {t['ratio']:.2f} | {cpu} |"
                  if t else "| public: exact, free | | | |")
        lines.append(
            head + f"| {_pct(q['median_rel_error'])} | {_pct(q['r2t_statistic_rel_error'])} "
            f"| {_pct(q['r2t_figure'])} | {_pct(q['median_signed_rel_error'])} "
            f"| {q['interval_95_covered']:.0%} " + timing)
    slow = [q for q in data["r2t"] if (q.get("time") or {}).get("breakdown")]
    if slow:
        lines += ["", "Where the time goes in the queries over the goal (`units_profile.py`: cuts "
                  "of the exact query, timed side by side, medians, ms):", "",
                  "| query | unit | raw | + unit lookup joins | + GROUP BY unit | + truncation "
                  "levels | exact |", "|---|---|---:|---:|---:|---:|---:|"]
        for q in slow:
            b = q["time"]["breakdown"]
            lookup = _f(b["lookup_adds_ms"]) if "lookup_ms" in b else "none"
            lines.append(f"| {q['name']} | {q['unit']} | {_f(b['raw_ms'])} | {lookup} "
                         f"| {_f(b['grouping_adds_ms'])} | {_f(b['levels_add_ms'])} "
                         f"| {_f(b['exact_ms'])} |")
    lines += [
        "",
        f"- time <= {s['time_ratio_target']:g}x raw: "
        + (_met(not s["time_ratio_missed"]) + (f" (missed by {', '.join(s['time_ratio_missed'])})"
                                              if s["time_ratio_missed"] else "")
           + f"; median ratio {_f(s['median_time_ratio'])}"),
    ]
    return lines


def flex_md(data: dict[str, Any]) -> list[str]:
    s = data["summary"]["flex"]
    lines = [
        f"epsilon {s['epsilon']}, delta {s['delta']:g} (two-stage releases are pure: no delta "
        f"spent), customer as the unit; {s['draws']} releases; median over cells of each "
        "cell's median relative error. Answering 0 scores 1.",
        "",
        "| query | kappa, C | dpsql (unit) | better than 0 | row level (accuracy part) | FLEX "
        "(row level) | cells | mechanism | other (kappa, C) in hindsight |",
        "|---|---|---:|---|---:|---:|---:|---|---|",
    ]
    for q in data["flex"]:
        row = q.get("row_level") or {}
        row_cell = (_f(row.get("median_rel_error")) if row.get("status") == "ok"
                    else ("refused" if row else "-"))
        kc = f"{q['max_groups']}, {q['max_rows_per_group']}"
        if q["status"] != "ok":
            lines.append(f"| {q['name']} | {kc} | {_reject(q)} | **no** | {row_cell} "
                         f"| {_f(q['flex'])} | | | |")
            continue
        if q["mechanism"] == "exact":
            kc = "- (public tables only)"
        sweep = "; ".join(f"({p['max_groups']}, {p['max_rows_per_group']}): "
                          f"{_f(p['median_rel_error'])}" for p in q.get("sweep", []))
        better = "yes" if q["better_than_zero"] else "**no**"
        lines.append(
            f"| {q['name']} | {kc} | {_f(q['median_rel_error'])} | {better} | {row_cell} "
            f"| {_f(q['flex'])} | {q['cells']:,} | {q['mechanism']} | {sweep or '-'} |")
    lines += ["", "Why each kappa and C (from the TPC-H specification, not the data):", ""]
    lines += [f"- {q['name']}: {q['why']}" for q in data["flex"]]
    return lines


def units_md(data: dict[str, Any]) -> list[str]:
    """The part's section (R2T's queries, then FLEX's)."""
    return ["#### R2T's TPC-H queries", "", *r2t_md(data), "",
            "#### FLEX's TPC-H queries under a privacy unit", "", *flex_md(data)]


def units_document(data: dict[str, Any]) -> str:
    """``units-sf<scale>.md``: the section with a title and what it was measured on."""
    env = data["environment"]
    head = [f"# Privacy units (issue #17): TPC-H SF {env['scale']:g}", "",
            f"Data: {env.get('generator', '?')} generator; dpsql commit "
            f"{env.get('git_commit') or '?'}, {env.get('time', '?')}; 1-minute load average "
            f"{_f(env.get('load_average_1m_start'))} -> {_f(env.get('load_average_1m'))} on "
            f"{env.get('cpus', '?')} CPUs. Generated by `python -m benchmarks --parts units` "
            "(see benchmarks/README.md).", ""]
    return "\n".join([*head, *units_md(data)]).rstrip() + "\n"
