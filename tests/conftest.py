"""Fixtures shared by every suite: one local Spark session per test run, ``make_backend``,
which runs a test module once per execution backend (DuckDB, Spark), and the shop database.

Spark tests need the ``spark`` extra (``pip install -e '.[test,spark]'``) and Java 17+; without
pyspark they are skipped with that reason. ``-m "not spark"`` deselects them.
"""

from __future__ import annotations

import compileall
import gc
import os
import re
from pathlib import Path

import duckdb
import pytest

from dpsql.backends.duckdb import DuckDBBackend
from tests.assert_cache import prewrite
from tests.recording import (
    RecordingDuckDBBackend,
    export_parquet,
    spark_backend_class,
    with_sources,
)
from tests.shop_fixture import build_shop

_duckdb_connect = duckdb.connect


def _one_thread_connect(database: str = ":memory:", read_only: bool = False,
                        config: dict | None = None, **kwargs):
    """``duckdb.connect`` with ``threads=1`` unless the caller names a thread count.

    The suite's tables hold a few rows, one row group (122,880 rows) each, so DuckDB runs every
    pipeline of their queries as one task whatever its threads: a second thread only adds
    wake-ups and hand-offs, ~10% of the CPU of a DuckDB-heavy file (three red-team and
    brute-force files run alone: 26.2 -> 23.4 CPU-s), more on a 2-core machine running three
    workers. Results do not change: the tests that read DuckDB at several thread counts (large
    tables, tests/redteam/float_sums.py, tests/rewrite/test_fixed_point.py,
    test_two_stage_choice_attacks.py) still ``SET threads`` to 2 and 4, and a connection to an
    instance already open in the process keeps that instance's setting (DuckDB compares the
    config of a second connect with the first connect's, which was this one's too). Processes
    the tests start (CLI runs, servers) run DuckDB as shipped."""
    merged = {"threads": 1, **(config or {})}
    return _duckdb_connect(database, read_only=read_only, config=merged, **kwargs)


duckdb.connect = _one_thread_connect

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "1",  # tiny tables: one partition per shuffle
    "spark.default.parallelism": "1",
    "spark.sql.adaptive.enabled": "false",  # no re-planning of plans this small
    "spark.driver.memory": "1g",
    # The driver JVM runs a few hundred tiny queries: the C1 compiler alone (no C2 recompiling
    # hot code on the side) and one GC thread halve its CPU time on a shared 2-core machine.
    # Spark's own jars are not bytecode-verified as they load (HotSpot's check of untrusted
    # classes; it changes no result): -1.4 CPU-s at start-up, ~2.3 in all over the Spark
    # backend tests.
    # The JVM sized for one core (its own thread pools, Spark's local[*] task threads, one JIT
    # compiler thread): the tests' tables are tiny and the other core runs the other worker;
    # -5.5 CPU-s over the Spark tests (69.7 / 66.0 -> 62.7 / 62.1, run alone, side by side).
    # Spark's results do not depend on its parallelism (dpsql sorts nothing it does not ask for).
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
                                     "-XX:ActiveProcessorCount=1 -XX:CICompilerCount=1 "
                                     "-XX:+UnlockDiagnosticVMOptions "
                                     "-XX:-BytecodeVerificationRemote",
    # Tiny tables, a few hundred short queries: generating and compiling Java for each plan
    # (whole-stage codegen, Janino) costs more CPU than it saves: the Spark group's CPU fell
    # from 87.5 to 77.8 s. Spark SQL's semantics do not depend on whole-stage codegen -- each
    # operator falls back to its own implementation with the same results (Spark tests both
    # paths) -- so the backend's SQL is tested as it runs. The same holds one level down for
    # expressions: spark.sql.codegen.factoryMode=NO_CODEGEN evaluates them interpreted (the
    # switch Spark's own suites use to check that both paths agree): 61.3 -> 56.8 CPU-s over
    # the Spark tests, measured side by side. (It breaks only spark.catalog.listTables, whose
    # rows are decoded by generated code; the backend lists tables with SHOW TABLES.)
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # A broadcast join runs a job of its own (collect the small side, ship it) before the
    # query's: on tables of a few rows that is most of a join's CPU. With broadcasts off Spark
    # plans a sort-merge join (one shuffle partition), which returns the same rows -- the join
    # strategy is physical planning only (a join of two tiny Parquet tables: -35% CPU; the
    # corpus and totality files: 39.5 -> 38.8 CPU-s, most of their queries read one table).
    "spark.sql.autoBroadcastJoinThreshold": "-1",
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """The one local[2] SparkSession of this test run (skips when pyspark is missing)."""
    pytest.importorskip(
        "pyspark", reason="pyspark is not installed: pip install -e '.[test,spark]' to run the "
        "Spark backend tests")
    from pyspark.sql import SparkSession

    # catalog tables written by tests go to a temporary warehouse, not ./spark-warehouse
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = SparkSession.builder.master("local[2]").appName("dpsql-tests")
    builder = builder.config("spark.sql.warehouse.dir", str(warehouse))
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


BACKENDS = ["duckdb", pytest.param("spark", marks=pytest.mark.spark)]


@pytest.fixture(scope="module", params=BACKENDS)
def backend_name(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def make_backend(request, backend_name, tmp_path_factory):
    """A factory ``(database, metadata, recording=False) -> Backend`` for ``backend_name``."""
    if backend_name == "duckdb":
        def duckdb_backend(database, metadata, *, recording=False):
            cls = RecordingDuckDBBackend if recording else DuckDBBackend
            return cls(database, metadata)
        return duckdb_backend

    session = request.getfixturevalue("spark")
    exported: dict[str, dict[str, str]] = {}

    def spark_backend(database, metadata, *, recording=False):
        key = str(database)
        if key not in exported:
            exported[key] = export_parquet(database, tmp_path_factory.mktemp("parquet"))
        cls = spark_backend_class(recording)
        return cls(with_sources(metadata, exported[key]), session)
    return spark_backend


@pytest.fixture(scope="session")
def tiny_tpch(tmp_path_factory) -> Path:
    """A TPC-H database at scale 0.01 from the built-in generator (~0.5 s, once per worker):
    the TPC-H schema and keys, for tests that need real TPC-H tables rather than the
    benchmarks' generated data (which a fresh clone does not have)."""
    from benchmarks.tpch_data import ensure_dataset

    folder = tmp_path_factory.mktemp("tiny_tpch")
    return Path(ensure_dataset(0.01, folder, "builtin", log=lambda *_: None).db_path)


@pytest.fixture(scope="module")
def shop(request, tmp_path_factory):
    """The shop database (tests/shop_fixture.py), one file per test module: DuckDB shares
    one database instance per file within a process and dpsql locks its configuration."""
    folder = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    return build_shop(folder / "shop.duckdb")


@pytest.fixture(scope="module")
def reference(shop):
    """A plain read-only DuckDB connection to the shop: what the analyst's SQL returns."""
    con = duckdb.connect(str(shop.path), read_only=True)
    yield con
    con.close()


#: suites marked ``slow`` by where they live: brute force over neighbours, statistical tests
#: of the noise, and the differential fuzzer (``-m "not slow"`` leaves them out; CI runs them)
SLOW_FOLDERS = ("bruteforce", "statistical", "fuzz")


#: modules whose module fixtures or cached readings (the shop, engines, neighbour databases,
#: a fuzzer's worlds) are worth building once: their DuckDB cases run on one worker, not once
#: per worker that happens to get one of their tests (the timing plugin, tests/timing.py, put
#: ~15 CPU-s of a run on three workers in such repeated set-ups). Not a module-level
#: xdist_group mark: xdist joins every group name of an item, which would take the Spark cases
#: out of the spark group (a second JVM).
ONE_WORKER_MODULES = ("tests/test_blocks.py", "tests/units/test_selection_session.py",
                      "tests/rewrite/test_rewrite_equivalence.py",
                      "tests/rewrite/test_gaussian_equivalence.py",
                      "tests/fuzz/test_error_fuzzer.py",
                      "tests/bruteforce/test_units_keyed_derived.py",
                      "tests/rewrite/test_safe_compare.py", "tests/test_correlated.py",
                      "tests/rewrite/test_totality.py", "tests/system/test_shell_batch.py",
                      "tests/backends/test_domain_tables_tpch.py",
                      "tests/rewrite/test_partition_selection.py",
                      "tests/rewrite/test_derived_keys.py",
                      "tests/sample_aggregate/test_rewrite.py", "tests/rewrite/test_selection.py",
                      "tests/rewrite/test_keyed_groups.py", "tests/test_sqlalchemy_dialect.py")


#: the sources the workers and the processes tests start import: compiled once before the run
COMPILED = ("dpsql", "benchmarks", "tests")


def pytest_configure(config: pytest.Config) -> None:
    """Write the bytecode of the repository's own modules once, before the workers start: in a
    fresh clone, or wherever PYTHONDONTWRITEBYTECODE is set (as on this project's machines),
    each worker and each of the ~100 processes the suite starts (CLI runs, servers, ledger
    writers) would otherwise compile every dpsql module it imports, ~0.15 CPU-s per process.
    A clean tree costs ~0.3 CPU-s once; a compiled one only the file checks. Test modules are
    left out (pytest compiles its own assertion-rewritten copy). compileall writes next to the
    sources, in the ``__pycache__`` folders .gitignore names, and nothing else. The test
    modules' rewritten asserts are written once too, for the workers (tests/assert_cache.py)."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller compiled
    root = Path(__file__).resolve().parents[1]
    skip = re.compile(r"[/\\](test_[^/\\]*|conftest)\.py$")
    for name in COMPILED:
        compileall.compile_dir(root / name, quiet=2, rx=skip)
    prewrite(config)  # the test modules' rewritten asserts, once (tests/assert_cache.py)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The collected items live as long as the run: freeze them out of the garbage collector's
    generations, and collect less often (the suite allocates millions of small objects, sqlglot
    trees above all, nearly all freed by reference counting). -2 to -4% CPU on the
    brute-force and analysis folders, measured side by side. A DuckDB instance or a server a
    test drops is still closed when its last reference goes; only objects in reference cycles
    wait longer for a collection."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 50)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run without xdist has no such spec
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): one worker more than the cores this process may use.
    Many tests wait on another process (a server, a CLI run, the Spark JVM, a pseudo-terminal),
    ~15 s of wall per worker in a run on two cores, and a third worker fills those waits: the
    whole suite 197 -> 189 s on the 2-core machine, measured side by side (4 workers: 198 s,
    each pays its own collection and more of them contend for memory bandwidth)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) + 1


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(part in SLOW_FOLDERS for part in item.path.parts[-3:-1]):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("spark") is not None:
            # one worker runs every Spark test (--dist loadgroup): one JVM, not one per worker
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif item.nodeid.split("::")[0] in ONE_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
