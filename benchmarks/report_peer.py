"""Summary sections of the parts on their own data: ``peer-<dataset>.json``, ``scale.json`` and
``server.json`` (:mod:`benchmarks.report_server`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .report import _f, _met

_PEER = re.compile(r"^peer-([a-z0-9]+)\.json$")
_DATASET_ORDER = {"pums": -1.0}


def _size(label: str) -> float:
    if label in _DATASET_ORDER:
        return _DATASET_ORDER[label]
    m = re.match(r"^(\d+)([km]?)$", label)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6}[m.group(2)] if m else 1e18


def _engine_cell(side: dict[str, Any]) -> tuple[str, str]:
    """(time, MAE) cells for one engine's side of a query."""
    if side["status"] == "ok":
        exact = f" ({_f(side['exact_ms'])})" if side.get("exact_ms") is not None else ""
        return _f(side["ms"]) + exact, _f(side["mae"])
    if side["status"] == "skipped":
        return "skipped", ""
    r = side["rejection"]
    msg = r["message"].replace("|", "\\|")
    return f"rejected: {r['class']} ({msg[:60]})", ""


def peer_md(data: dict[str, Any]) -> list[str]:
    s, env = data["summary"], data["environment"]
    lines = [
        f"{s['rows']:,} rows; epsilon {s['epsilon']} per query for both engines (SmartNoise's "
        f"per-column epsilon scaled to that total), delta {s['delta']:.3g}; median of "
        f"{s['runs']} interleaved runs; MAE = mean absolute error per cell over {s['draws']} "
        f"releases, averaged over the cells present in the data. SmartNoise SQL "
        f"{env.get('smartnoise') or '(not installed)'} over {env['smartnoise_backend']}; "
        f"load average {env['load_average_start']} -> {env['load_average_end']}.",
        "",
        "| query | raw DuckDB ms | dpsql ms (its SQL alone) | SmartNoise ms (its SQL alone) "
        "| speedup | dpsql MAE "
        "| SmartNoise MAE | MAE ratio | dpsql mechanism | SmartNoise sensitivity |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for q in data["queries"]:
        d_ms, d_mae = _engine_cell(q["dpsql"])
        s_ms, s_mae = _engine_cell(q["smartnoise"])
        mech = q["dpsql"].get("spent", {}).get("mechanism", "")
        sens = q["smartnoise"].get("spent", {}).get("sensitivities")
        speedup = "" if q["speedup"] is None else f"{q['speedup']:.1f}x"
        ratio = "" if q["mae_ratio"] is None else f"{q['mae_ratio']:.2f}"
        sens_s = ", ".join(_f(x) for x in sens) if sens else ""
        lines.append(f"| {q['name']} | {_f(q['raw_ms'])} | {d_ms} | {s_ms} | {speedup} "
                     f"| {d_mae} | {s_mae} | {ratio} | {mech} | {sens_s} |")
    both = len([q for q in data["queries"] if q["speedup"] is not None])
    if s["smartnoise_skipped"]:
        lines += ["", "- SmartNoise SQL skipped: smartnoise-sql is not installed."]
    else:
        lines += [
            "",
            f"- dpsql >= {s['speedup_target']:g}x faster: {_met(len(s['speed_met']) == both)} "
            f"— met by {len(s['speed_met'])} of the {both} queries both answer "
            f"({', '.join(s['speed_met']) or 'none'}); median speedup "
            f"{_f(s['median_speedup'])}x",
            f"- dpsql error equal or lower (within 1.96 standard errors): "
            f"{_met(len(s['error_met']) == both)} — met by {len(s['error_met'])} of {both} "
            f"({', '.join(s['error_met']) or 'none'})",
            f"- rejected by dpsql: {', '.join(s['dpsql_rejects']) or 'none'}; by SmartNoise: "
            f"{', '.join(s['smartnoise_rejects']) or 'none'}",
        ]
    return lines


def scale_md(data: dict[str, Any]) -> list[str]:
    env = data["environment"]
    lines = [
        f"Median of {data['summary']['runs']} interleaved runs; dpsql end to end with uncached "
        f"analysis. Load average at the end {env.get('load_average_end')}. "
        + (f"Plot: ![scale]({data['plot']})" if data.get("plot") else
           f"No plot: {data.get('plot_skipped', '')}"),
        "",
        "| query | rows | raw DuckDB ms | dpsql ms | ratio | exact SQL ms | analysis ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in data["points"]:
        if p["status"] != "ok":
            lines.append(f"| {p['name']} | {p['rows']:,} | {_f(p['raw_ms'])} | rejected: "
                         f"{p['rejection']['class']} | | | |")
            continue
        lines.append(f"| {p['name']} | {p['rows']:,} | {_f(p['raw_ms'])} | {_f(p['dpsql_ms'])} "
                     f"| {p['ratio']:.2f} | {_f(p['exact_ms'])} "
                     f"| {_f(p['analysis_ms']['total'])} |")
    return lines


def own_data_sections(folder: Path) -> list[str]:
    """The ``## Peer``, ``## Scale`` and ``## Server`` sections for the files in ``folder``."""
    lines: list[str] = []
    peers = sorted((m.group(1), p) for p in folder.glob("peer-*.json")
                   if (m := _PEER.match(p.name)))
    if peers:
        lines += ["## Peer: SmartNoise SQL side by side", ""]
        for label, path in sorted(peers, key=lambda x: _size(x[0])):
            title = "PUMS sample" if label == "pums" else f"PUMS-shaped, {label.upper()} rows"
            lines += [f"### {title}", "", *peer_md(json.loads(path.read_text())), ""]
    scale = folder / "scale.json"
    if scale.exists():
        lines += ["## Scale: time against rows", "", *scale_md(json.loads(scale.read_text())),
                  ""]
    server = folder / "server.json"
    if server.exists():
        from .report_server import server_md

        lines += ["## Server: `dpsql serve` latency and throughput", "",
                  *server_md(json.loads(server.read_text())), ""]
    return lines
