"""Summary section of the ``server`` part (``server.json``)."""

from __future__ import annotations

from typing import Any

from .report import _f, _met


def _load(run: dict[str, Any]) -> str:
    return f"{run['load_average_start'][0]:g} -> {run['load_average_end'][0]:g}"


def server_md(data: dict[str, Any]) -> list[str]:
    s, env, lat = data["summary"], data["environment"], data["latency"]
    rows = s["rows"]
    unc, cac = lat["uncached"], lat["cached"]
    commit = s["durable_commit_ms"]
    lines = [
        f"`{s['query']}` at epsilon {s['epsilon']} on the demo shop ({rows['customers']:,} "
        f"customers, {rows['orders']:,} orders); "
        f"a real `dpsql serve` process ({s['server_workers']} query threads) on loopback, "
        f"psycopg 3 clients; dpsql commit {env.get('git_commit') or '?'}, {env['time']}, "
        f"{env['cpus']} CPUs {env['shared_machine'].split(' ', 2)[2]}.",
        "",
        f"**Added latency of a server round trip** (median over {unc['rounds']} interleaved "
        "rounds of server ms - in-process ms; the in-process side is `dpsql.connect` on the "
        "same ledger file):",
        "",
        "| request | server ms | in-process ms | added ms (median) | its 95% interval "
        "| added p10 / p90 | load 1m |",
        "|---|---:|---:|---:|---:|---:|---|",
        f"| uncached (new parameter: charge, audit row, cache write) | {_f(unc['server_ms'])} "
        f"| {_f(unc['inprocess_ms'])} | {_f(unc['added_ms'])} "
        f"| [{_f(unc['added_ms_ci95'][0])}, {_f(unc['added_ms_ci95'][1])}] "
        f"| {_f(unc['added_ms_p10_p90'][0])} / {_f(unc['added_ms_p10_p90'][1])} "
        f"| {_load(unc)} |",
        f"| cached (the same parameter: a ledger read) | {_f(cac['server_ms'])} "
        f"| {_f(cac['inprocess_ms'])} | {_f(cac['added_ms'])} "
        f"| [{_f(cac['added_ms_ci95'][0])}, {_f(cac['added_ms_ci95'][1])}] "
        f"| {_f(cac['added_ms_p10_p90'][0])} / {_f(cac['added_ms_p10_p90'][1])} "
        f"| {_load(cac)} |",
        "",
        f"- added latency <= {s['latency_goal_ms']:g} ms (uncached): {_met(s['latency_met'])} "
        f"({_f(s['latency_added_ms'])} ms; 95% interval of that median "
        f"[{_f(unc['added_ms_ci95'][0])}, {_f(unc['added_ms_ci95'][1])}] ms)",
        f"- in-process without a ledger: {_f(unc['inprocess_no_ledger_ms'])} ms (the ledger "
        f"adds {_f(unc['ledger_adds_ms'])} ms in-process); `SHOW server_version` through the "
        f"server (no query work): {_f(cac['server_show_ms'])} ms",
        "",
        "**Throughput** (client processes sending back to back; queries completed in the "
        "window). small: the query above; scan: "
        f"`{next(r['sql'] for r in data['throughput'] if r['query'] == 'scan')}` "
        f"({rows['orders']:,} rows):",
        "",
        "| run | clients | queries/s | latency median / p90 / p99 ms | server CPU ms/query "
        "| errors | load 1m |",
        "|---|---:|---:|---|---:|---:|---|",
    ]
    runs = [(f"{r['query']} count, {r['mode']}", r) for r in data["throughput"]]
    if data.get("ledger_on_tmpfs"):
        runs.append(("small count, uncached, ledger on tmpfs (diagnostic: fsync free)",
                     data["ledger_on_tmpfs"]))
    for name, r in runs:
        q = r["latency_ms"]
        lines.append(
            f"| {name} | {r['clients']} | {_f(r['queries_per_s'])} | {_f(q['median'])} / "
            f"{_f(q['p90'])} / {_f(q['p99'])} | {_f(r['server_cpu_ms_per_query'])} "
            f"| {r['errors']} | {_load(r)} |")
    lines += [
        "",
        f"- >= {s['throughput_goal_per_s']:g} uncached queries/s: {_met(s['throughput_met'])} "
        f"({_f(s['uncached_per_s'])}/s; cached {_f(s['cached_per_s'])}/s)",
        f"- one durable SQLite commit on the ledger's disk (WAL, synchronous=FULL): "
        f"{_f(commit[0])} ms before, {_f(commit[1])} ms after; an uncached release makes "
        "two (the charge; the audit rows with the cache entry), one at a time",
    ]
    return lines
