"""``python -m benchmarks``: dpsql's TPC-H benchmarks (see benchmarks/README.md).

    python -m benchmarks [--scale 0.1|1|10]
                         [--parts overhead,analysis,accuracy,noise,coverage,units,peer,scale,server]
                         [--smoke] [--out DIR] [--generator auto|tpchgen|builtin]

Writes ``<out>/<part>-sf<scale>.json`` for the TPC-H parts, ``<out>/peer-<dataset>.json`` and
``<out>/scale.json`` (+ ``scale.png``) for the parts on their own PUMS-shaped data,
``<out>/server.json`` for ``--parts server`` (not run by default: a `dpsql serve` process and
16 client processes on the demo shop), ``<out>/units-sf<scale>.json`` and ``.md`` for ``--parts
units`` (not run by default: privacy units, issue #17, ~10 min at SF1), and regenerates
``<out>/summary.md`` from every such file in ``<out>``. ``--smoke`` runs everything at SF
0.01 with the built-in generator (peer and scale on 1,000- to 20,000-row tables; server on a
20,000-order shop, 4 clients, 1 s) and a few repetitions (seconds; what CI runs), writing to
benchmarks/data/smoke-results by default.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from .report import DEFAULT_PARTS, OWN_DATA_PARTS, PARTS, write_summary

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SMOKE_SCALE = 0.01


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description="dpsql TPC-H benchmarks (see benchmarks/README.md)")
    p.add_argument("--scale", type=float, default=None,
                   help="TPC-H scale factor (default 1; 0.01 with --smoke)")
    p.add_argument("--parts", default=",".join(DEFAULT_PARTS),
                   help=f"comma-separated subset of {','.join(PARTS)} (default: all but "
                        "server)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny scale, built-in generator, few repetitions (seconds)")
    p.add_argument("--out", type=Path, default=None,
                   help="results folder (default benchmarks/results; "
                        "benchmarks/data/smoke-results with --smoke)")
    p.add_argument("--data-dir", type=Path, default=HERE / "data",
                   help="where generated databases are kept (default benchmarks/data)")
    p.add_argument("--generator", choices=("auto", "tpchgen", "builtin"), default="auto",
                   help="TPC-H data generator (auto: tpchgen-cli if installed, else built-in)")
    p.add_argument("--runs", type=int, default=None, help="end-to-end runs per query")
    p.add_argument("--draws", type=int, default=None, help="noise draws per cell (accuracy)")
    p.add_argument("--no-profile", action="store_true", help="skip the analysis profile")
    p.add_argument("--save-schema", type=Path, default=None, metavar="PATH",
                   help="also copy the generated metadata there (schemas/tpch.yaml is the SF1 "
                        "copy)")
    p.add_argument("--quiet", action="store_true", help="print only the result paths")
    args = p.parse_args(argv)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = [x for x in parts if x not in PARTS]
    if unknown or not parts:
        p.error(f"unknown part(s) {', '.join(unknown) or '(none)'}: choose from {', '.join(PARTS)}")
    args.parts = parts
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from .common import Handles, Settings, environment, write_json
    from .tpch_data import ensure_dataset

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

    if args.smoke:
        scale = args.scale if args.scale is not None else SMOKE_SCALE
        if scale > SMOKE_SCALE:
            print(f"--smoke runs at SF <= {SMOKE_SCALE}", file=sys.stderr)
            return 2
        settings = Settings(scale=scale, runs=2, analysis_reps=1, draws=5,
                            noise_size=200_000, noise_repeats=2, memory=False, smoke=True)
        generator = "builtin"
        out = args.out or (args.data_dir / "smoke-results")
    else:
        scale = args.scale if args.scale is not None else 1.0
        settings = Settings(scale=scale)
        generator = args.generator
        out = args.out or RESULTS
    if args.runs is not None:
        if args.runs < 1:
            print("--runs must be >= 1", file=sys.stderr)
            return 2
        settings = replace(settings, runs=args.runs)
    if args.draws is not None:
        settings = replace(settings, draws=max(args.draws, 1))
    if args.no_profile:
        settings = replace(settings, profile=False)
    out.mkdir(parents=True, exist_ok=True)

    needs_data = [p for p in args.parts if p not in ("noise", *OWN_DATA_PARTS)]
    dataset = ensure_dataset(scale, args.data_dir, generator, log=log) if needs_data else None
    if args.save_schema is not None:
        if dataset is None:
            print("--save-schema needs a part that uses the database", file=sys.stderr)
            return 2
        args.save_schema.write_text(Path(dataset.metadata_path).read_text(encoding="utf-8"),
                                    encoding="utf-8")
        log(f"metadata copied to {args.save_schema}")
    handles = Handles.open(dataset) if dataset is not None else None
    label = f"{scale:g}"
    written = []
    try:
        for part in args.parts:
            start = time.perf_counter()
            load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
            if part in OWN_DATA_PARTS:  # their own data, files and environment records
                module = importlib.import_module(f".{part}", __package__)
                written += module.write(settings, args.data_dir, out, log)
                continue
            env_settings = settings
            if part == "noise":
                from . import noise
                data = noise.run(settings, log)
            elif part == "coverage":  # also its own PUMS database, under --data-dir
                from . import coverage
                data = coverage.run(handles, settings, log, args.data_dir)
                env_settings = replace(settings, epsilon=coverage.EPSILON, delta=coverage.DELTA)
            elif part == "units":  # R2T's queries at 0.8 (pure); FLEX's at 0.1, 1e-8: summary
                from . import units
                data = units.run(handles, settings, log, out)
                env_settings = replace(settings, epsilon=units.R2T_EPSILON, delta=0.0)
            else:
                module = importlib.import_module(f".{part}", __package__)
                data = module.run(handles, settings, log)
            data["environment"] = environment(env_settings, dataset)
            data["environment"]["part_seconds"] = round(time.perf_counter() - start, 2)
            data["environment"]["load_average_1m_start"] = (
                round(load_start, 2) if load_start is not None else None)
            path = out / f"{part}-sf{label}.json"
            written.append(write_json(path, data))
            if part == "units":  # its own markdown beside the JSON (and a summary.md section)
                from .report_units import units_document
                md_path = out / f"units-sf{label}.md"
                md_path.write_text(units_document(data), encoding="utf-8")
                written.append(md_path)
    finally:
        if handles is not None:
            handles.close()
    summary = write_summary(out)
    for path in [*written, summary]:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
