"""Generate (once per scale) the benchmark's TPC-H DuckDB database and its dpsql metadata.

Generators, in order of preference for ``generator="auto"``:

1. ``tpchgen-cli`` (PyPI, the optional ``bench`` dependency): a Rust port of the official
   dbgen, byte-identical to it, writing Parquet; SF1 takes about 10 s on 2 cores.
2. the built-in numpy generator :mod:`benchmarks.tpch_gen` (no optional dependency): TPC-H
   schema, cardinalities and key distributions, but not dbgen's exact values. ``--smoke``
   always uses it.

(DuckDB's own ``tpch`` extension would be the simplest, but its PyPI wheels, e.g.
``duckdb-extension-tpch``, are built for DuckDB <= 1.5 and fail to load in DuckDB 2.x, and
``INSTALL tpch`` needs the network.)

Layout: ``<data_dir>/sf<scale>/tpch.duckdb``, ``tpch.yaml`` and ``info.json`` (which generator
made it, how long it took, row counts). An existing directory is reused; delete ``tpch.yaml``
to re-profile the metadata only, or the folder to regenerate everything.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import duckdb

from . import tpch_gen
from .tpch_metadata import write_metadata

DEFAULT_DATA_DIR = Path(__file__).resolve().parent / "data"
TPCHGEN_HINT = (
    "tpchgen-cli is not installed: install the benchmark extra (pip install -e '.[bench]', "
    "or pip install tpchgen-cli), or pass --generator builtin to use the built-in generator"
)


@dataclass(frozen=True)
class Dataset:
    """A generated TPC-H database and its metadata file."""

    scale: float
    db_path: str
    metadata_path: str
    generator: str
    generate_seconds: float
    metadata_seconds: float
    rows: dict[str, int]


def scale_label(scale: float) -> str:
    return f"{scale:g}"


def tpchgen_path() -> str | None:
    """The tpchgen-cli executable (on PATH or next to this Python), or None."""
    found = shutil.which("tpchgen-cli")
    if found:
        return found
    candidate = Path(sys.executable).parent / "tpchgen-cli"
    return str(candidate) if candidate.exists() else None


def ensure_dataset(
    scale: float,
    data_dir: str | Path = DEFAULT_DATA_DIR,
    generator: str = "auto",
    log=print,
) -> Dataset:
    """Return the dataset for ``scale``, generating database and metadata if missing.

    ``generator`` is ``"auto"`` (tpchgen-cli if installed, else built-in), ``"tpchgen"``
    (fails with a clear message if it is missing) or ``"builtin"``.
    """
    if generator not in ("auto", "tpchgen", "builtin"):
        raise ValueError(f"unknown generator {generator!r}: use auto, tpchgen or builtin")
    exe = tpchgen_path()
    if generator == "tpchgen" and exe is None:
        raise SystemExit(TPCHGEN_HINT)
    chosen = "tpchgen" if generator == "tpchgen" or (generator == "auto" and exe) else "builtin"
    if generator == "auto" and exe is None:
        log("tpchgen-cli is not installed: using the built-in generator (install the bench "
            "extra for dbgen-identical data)")
    folder = Path(data_dir) / f"sf{scale_label(scale)}-{chosen}"
    info_path = folder / "info.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        if Path(info["db_path"]).exists():
            if not Path(info["metadata_path"]).exists():  # deleted: rebuild only the metadata
                log("profiling max frequencies for the metadata ...")
                start = time.perf_counter()
                write_metadata(info["db_path"], scale, info["metadata_path"])
                info["metadata_seconds"] = time.perf_counter() - start
                info_path.write_text(json.dumps(info, indent=2))
            return Dataset(**info)
    db_path = folder / "tpch.duckdb"
    log(f"generating TPC-H SF {scale_label(scale)} with the {chosen} generator ...")

    def fill(con: duckdb.DuckDBPyConnection) -> None:
        if chosen == "tpchgen":
            assert exe is not None
            _load_tpchgen(con, exe, scale)
        else:
            tpch_gen.load_into(con, tpch_gen.generate(scale))
        _add_supplier_names(con, scale)

    rows, gen_seconds = write_database(db_path, fill, (*tpch_gen.TABLES, "supplier_names"))

    log("profiling max frequencies for the metadata ...")
    start = time.perf_counter()
    md_path = write_metadata(db_path, scale, folder / "tpch.yaml")
    md_seconds = time.perf_counter() - start
    ds = Dataset(scale, str(db_path), str(md_path), chosen, gen_seconds, md_seconds, rows)
    info_path.write_text(json.dumps(asdict(ds), indent=2))
    return ds


def write_database(db_path: Path, fill: Callable[[duckdb.DuckDBPyConnection], None],
                   tables: Sequence[str]) -> tuple[dict[str, int], float]:
    """Make ``db_path`` with ``fill(con)``, atomically (built under a temporary name, renamed
    when complete, so an interrupted run leaves no half-filled database to be reused).

    Returns the row count of each of ``tables`` and the seconds it took.
    """
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_db = db_path.with_name(db_path.name + ".tmp")
    for p in (db_path, tmp_db, Path(str(tmp_db) + ".wal")):
        p.unlink(missing_ok=True)
    start = time.perf_counter()
    con = duckdb.connect(str(tmp_db))
    try:
        con.execute("SET enable_progress_bar=false")
        fill(con)
        rows = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
        con.execute("CHECKPOINT")
    finally:
        con.close()
    tmp_db.rename(db_path)
    return rows, time.perf_counter() - start


def _load_tpchgen(con: duckdb.DuckDBPyConnection, exe: str, scale: float) -> None:
    with tempfile.TemporaryDirectory(prefix="tpchgen-") as tmp:
        subprocess.run(
            [exe, "parquet", "-s", scale_label(scale), "-o", tmp],
            check=True, stdout=subprocess.DEVNULL,
        )
        for table in tpch_gen.TABLES:
            src = Path(tmp) / f"{table}.parquet"
            con.execute(
                f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM read_parquet(?)", [str(src)]
            )


def _add_supplier_names(con: duckdb.DuckDBPyConnection, scale: float) -> None:
    """The public table of supplier names: 'Supplier#' + the 9-digit key, 1 .. SF * 10,000.

    TPC-H fixes these names for a scale factor, so publishing them reveals nothing about the
    private rows; they are the declared domain (bins) of ``supplier.s_name``.
    """
    n = max(round(10_000 * scale), 4)  # the built-in generator's minimum is 4
    con.execute(
        "CREATE OR REPLACE TABLE supplier_names AS SELECT 'Supplier#' || "
        "lpad(CAST(i AS VARCHAR), 9, '0') AS s_name FROM range(1, ? + 1) t(i)", [n]
    )
