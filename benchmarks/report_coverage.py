"""The markdown section of the ``coverage`` part (``coverage-sf<scale>.json``)."""

from __future__ import annotations

from typing import Any

from .report import _f


def _cell(text: str, limit: int = 90) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _status(d: dict[str, Any]) -> str:
    if d["status"] == "accepted":
        return "accepted"
    if d["status"] == "skipped":
        return "skipped"
    return f"refused: {d['reason']}"


def tpch_md(data: dict[str, Any]) -> list[str]:
    s = data["summary"]
    met = "**met**" if s["goal_met"] else "**missed**"
    lines = [
        f"{s['spec']}; epsilon {s['epsilon']}, delta {s['delta']:g}, {s['draws']} draws per "
        "accepted query. Error: the median over the query's cells (group x noisy column, "
        "matched by group key) of each cell's median relative error; cells whose true value "
        "is 0 are counted apart.",
        "",
        f"- accepted **{len(s['accepted'])} of {s['queries']}** (goal >= {s['goal_accepted']}: "
        f"{met}): {', '.join(s['accepted']) or 'none'}",
        f"- answer with rows of private tables, correctly refused: "
        f"{', '.join(s['correctly_refused']) or 'none'}"
        + (f"; **WRONGLY ACCEPTED: {', '.join(s['wrongly_accepted'])}**"
           if s["wrongly_accepted"] else ""),
        "",
        "| query | dpsql | median rel. error | cells (zero) | mechanism | error class: message |",
        "|---|---|---:|---:|---|---|",
    ]
    for q in data["queries"]:
        d = q["dpsql"]
        if d["status"] == "accepted":
            lines.append(
                f"| {q['name']} | accepted | {_f(d.get('median_rel_error'))} "
                f"| {d.get('cells', 0):,} ({d.get('zero_cells', 0):,}) | {d['mechanism']} | |")
        else:
            r = d["rejection"]
            lines.append(f"| {q['name']} | {q['verdict']}: {d['reason']} | | | "
                         f"| {r['class']}: {_cell(r['message'])} |")
    return lines


def tally_md(tpch: dict[str, Any], suite: dict[str, Any] | None) -> list[str]:
    t = tpch["summary"]["refusal_reasons"]
    p = suite["summary"]["dpsql_refusal_reasons"] if suite else {}
    keys = sorted(set(t) | set(p), key=lambda k: (-(t.get(k, 0) + p.get(k, 0)), k))
    lines = ["dpsql's refusals by reason (the feature that would unlock them; "
             "those \"by design\" or \"must stay refused\" stay):", "",
             "| reason | TPC-H 22 | SmartNoise suite |", "|---|---:|---:|"]
    lines += [f"| {k} | {t.get(k, 0)} | {p.get(k, 0)} |" for k in keys]
    return lines


def suite_md(data: dict[str, Any]) -> list[str]:
    if "skipped" in data:
        return [f"SmartNoise SQL's PUMS suite skipped: {data['skipped']}."]
    s = data["summary"]
    lines = [
        f"{s['queries']} queries from {s['source']} `sql/tests` at commit `{s['commit'][:12]}` "
        f"({s['excluded']} more need tables whose data is not in the repository snapshot; see "
        "benchmarks/smartnoise_suite.json), on the 1,000-row PUMS sample; epsilon "
        f"{s['epsilon']}, delta {s['delta']:g} per query for each engine.",
        "",
    ]
    if s["smartnoise_skipped"]:
        lines += [f"- dpsql accepts **{s['dpsql_accepted']}**; SmartNoise SQL skipped: "
                  "smartnoise-sql is not installed."]
        return lines
    met = "**met**" if s["goal_met"] else "**missed**"
    lines += [
        f"- dpsql accepts **{s['dpsql_accepted']}**, SmartNoise SQL "
        f"{s.get('smartnoise_version') or ''} **{s['smartnoise_accepted']}** (goal: dpsql >= "
        f"SmartNoise: {met}); both {s['both_accepted']}; only dpsql: "
        f"{', '.join(s['only_dpsql']) or 'none'}; only SmartNoise: "
        f"{', '.join(s['only_smartnoise']) or 'none'}",
        "",
        "Queries only one engine answers:",
        "",
        "| id | query | dpsql | SmartNoise SQL |",
        "|---|---|---|---|",
    ]
    for q in data["queries"]:
        if q["dpsql"]["status"] != q["smartnoise"]["status"]:
            lines.append(f"| {q['id']} | `{_cell(q['sql'], 80)}` | {_status(q['dpsql'])} "
                         f"| {_cell(_status(q['smartnoise']), 60)} |")
    lines += [
        "",
        "Error on the queries both answer (median relative error, mean absolute error; cells "
        "matched by group key, SmartNoise's censored groups count as missing):",
        "",
        "| id | query | dpsql rel. | SmartNoise rel. | dpsql MAE | SmartNoise MAE "
        "| cells (missing dpsql / SmartNoise) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for q in data["queries"]:
        d, sn = q["dpsql"], q["smartnoise"]
        if d["status"] == sn["status"] == "accepted" and "cells" in sn:
            lines.append(
                f"| {q['id']} | `{_cell(q['sql'], 70)}` | {_f(d.get('median_rel_error'))} "
                f"| {_f(sn.get('median_rel_error'))} | {_f(d.get('mae'))} | {_f(sn.get('mae'))} "
                f"| {d.get('cells', 0)} ({d.get('cells_missing_from_release', 0)} / "
                f"{sn.get('cells_missing_from_release', 0)}) |")
    return lines


def coverage_md(data: dict[str, Any]) -> list[str]:
    suite = data.get("smartnoise_suite")
    lines = ["#### TPC-H's 22 queries verbatim", "", *tpch_md(data["tpch"]), ""]
    lines += ["#### Refusals by reason", "",
              *tally_md(data["tpch"], suite if suite and "summary" in suite else None), ""]
    if suite is not None:
        lines += ["#### SmartNoise SQL's own PUMS test queries", "", *suite_md(suite)]
    return lines
