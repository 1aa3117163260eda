"""Red team of dpsql.backends.spark_collect (c6fb1ca, d2e0ae7; issue #17): a Spark result past
the driver's ``spark.driver.maxResultSize`` is read in parts, "the same rows in the same order",
so that no exact read fails on its number of rows (a refunded failure: a free oracle).

Claims attacked (each test names its claim):

1. the rows and their order are a plain ``collect``'s, whatever the limit: ORDER BY with NULLS
   LAST / DESC, several keys, ties, NULL keys, DECIMAL sums, strings, dates, NaN / -0.0,
   empty results, one row, a result exactly at the limit, several scan and shuffle partitions;
   through ``Session``: a partition-selected GROUP BY and a two-unit SUM;
2. no read dpsql generates fails on its number of rows at a realistic (scaled-down) limit,
   ``over_result_size`` recognises every place the limit is enforced, and the JVM keeps
   working after a refused result;
3. a read that fits runs exactly a plain collect's jobs, and a cancel during a read in parts
   gives QueryCancelledError with nothing charged.

What broke (strict xfails in the red team's first commit, each with its counterexample in its
docstring; the second and third are fixed by the commit after it, the first by sorting such
reads on one partition, dpsql.backends.spark_sql._sorted_on_one_partition):

* claim 2 -- the groups query of a partition selection ends in ``ORDER BY``; on Spark a global
  sort over more than one shuffle partition first samples its keys to the driver (the range
  partitioner's sketch, a job of its own under the same limit). The read in parts re-runs that
  sketch at every try, so the read still fails once there are enough groups:
  ``test_a_partition_selection_over_many_groups_reads_as_over_few``;
* claim 3 -- a cancel that arrives between two of the read's jobs (after the failed collect,
  after the count, between two parts) cancels nothing (``cancelJobGroup`` stops running jobs
  only) and the read completes: the answer is released and charged:
  ``test_a_cancel_between_the_jobs_of_a_read_in_parts_is_not_lost``;
* claim 1, at the backend's level only -- a result column named ``__dpsql_row`` (any case) is
  replaced by the row number: ``test_a_column_named_like_the_row_number_is_kept``.

Default run: ~5 CPU-s (JVM included, measured on a loaded 2-core host) on the shared session,
every read in parts taking two parts; ``DPSQL_REDTEAM_DEEP=1`` adds the sorted shapes (ties,
NaN / -0.0 keys, dates, DECIMAL sums), the same reads under 2 KiB (hundreds of parts), empty
and one-row results, a bisection of the exact boundary, two-unit COUNT / SUM through a
Session, and cancels landing in the part jobs.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from dpsql.backends import spark_collect
from dpsql.errors import OperationalError, QueryCancelledError
from dpsql.metadata import loads_metadata
from tests.ledgers import charged, ledger_session, open_ledger
from tests.recording import with_sources
from tests.shop_fixture import ZeroNoise
from tests.spark_limits import max_result_size

pytestmark = pytest.mark.spark

DEEP = os.environ.get("DPSQL_REDTEAM_DEEP") == "1"

ROWS = 1_500


# --------------------------------------------------------------------------- helpers


def _same(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    """Rows equal value for value and type for type (NaN equals NaN, -0.0 is not 0.0)."""
    return repr(a) == repr(b)


def _plain(backend: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in backend.session.sql(sql).collect()]


def _plain_fails(backend: Any, sql: str) -> bool:
    try:
        backend.session.sql(sql).collect()
    except Exception as err:  # py4j's error
        assert spark_collect.over_result_size(err), str(err)[:300]
        return True
    return False


def _jobs(spark: Any, group: str) -> list[int]:
    return sorted(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@contextmanager
def _conf(backend: Any, key: str, value: str) -> Iterator[None]:
    """One SQL setting of the backend's own session, restored after."""
    conf = backend.session.conf
    old = conf.get(key)
    conf.set(key, value)
    try:
        yield
    finally:
        conf.set(key, old)


def _check_in_parts(backend: Any, spark: Any, sql: str, limit: str) -> None:
    """``backend.execute(sql)`` under ``limit`` is the plain collect without it, and was read
    in parts (its collect failed: the count of the read in parts ran)."""
    from dpsql.backends.spark import duckdb_type_name

    frame = backend.session.sql(sql)
    want = [tuple(r) for r in frame.collect()]
    with max_result_size(spark, limit), _after_count(lambda: None) as seen:
        got, types = backend.execute(sql)
    assert seen == [len(want)], f"{sql} fits {limit}: not a read in parts"
    assert _same(got, want), (sql, got[:3], want[:3])
    assert types == [duckdb_type_name(f.dataType) for f in frame.schema.fields]


# --------------------------------------------------------------------------- the data


@pytest.fixture(scope="module")
def mixed(spark, tmp_path_factory):
    """A Spark backend over m: 1,500 rows in 3 Parquet files (3 scan partitions), with a
    64-digit hex h (so that lz4 shrinks a collect little), NULL and tied int keys, strings
    (empty, NULL, non-ASCII), dates, DECIMALs and doubles (NaN, -0.0, -inf, NULL)."""
    from dpsql.backends.spark import SparkBackend

    path = tmp_path_factory.mktemp("collect_rt") / "m.parquet"
    spark.sql(f"""
        SELECT id AS i, sha2(CAST(id AS STRING), 256) AS h,
               IF(id % 11 = 0, NULL, CAST(id % 37 AS INT)) AS k,
               CASE WHEN id % 13 = 0 THEN NULL WHEN id % 17 = 0 THEN ''
                    ELSE concat('\u00e9', CAST(id % 101 AS STRING), '\u2603') END AS s,
               IF(id % 19 = 0, NULL, date_add(DATE'2020-02-27', CAST(id % 50 AS INT))) AS d,
               CAST((id * 7919) % 100000 AS DECIMAL(20, 3)) / 7 AS dec,
               CASE id % 23 WHEN 0 THEN CAST('NaN' AS DOUBLE) WHEN 1 THEN CAST(-0.0 AS DOUBLE)
                    WHEN 2 THEN NULL WHEN 3 THEN CAST('-Infinity' AS DOUBLE)
                    ELSE id / 3.0 END AS f
        FROM range({ROWS})""").repartition(3).write.parquet(str(path))
    backend = SparkBackend(None, spark)
    backend.session.conf.set("spark.sql.files.maxPartitionBytes", "4m")  # a file a split
    backend.register("m", str(path))
    assert backend.session.table("m").rdd.getNumPartitions() >= 3
    yield backend
    backend.close()


# --------------------------------------------------------------------------- claim 1

# (sql, a limit between half the pickled rows (a part of two) and the plain collect's lz4'd
# result: the read in parts takes two parts; the deep run reads each under 2 KiB as well,
# where the parts quadruple to hundreds)
SORTED = [
    # two keys, DESC NULLS LAST and NULLS FIRST, ties (NULL k with NULL or empty s): the rows
    # tied on both come in the sort's input order (~105 KiB)
    ("SELECT k, s, h FROM m ORDER BY k DESC NULLS LAST, s NULLS FIRST", "96k"),
]
SORTED_DEEP = [
    # a total order over several keys, NULLS LAST / FIRST, DESC, strings (143.8 KiB)
    ("SELECT * FROM m ORDER BY k NULLS LAST, s DESC NULLS FIRST, i", "128k"),
    # ties: only k orders the rows, the rest come in the sort's input order (104.6 KiB)
    ("SELECT k, h, s FROM m ORDER BY k DESC NULLS LAST", "96k"),
    # doubles (NaN, -0.0, -inf, NULL) and dates as keys, with ties (119.6 KiB)
    ("SELECT f, d, dec, h FROM m ORDER BY f NULLS LAST, d DESC", "112k"),
    ("SELECT k, COUNT(*) AS n, SUM(dec) AS sd, SUM(CAST(i AS DECIMAL(38, 0))) AS si FROM m "
     "GROUP BY k ORDER BY k NULLS LAST", "1k"),
    ("SELECT s, d, COUNT(*) AS n FROM m GROUP BY s, d ORDER BY s NULLS LAST, d DESC NULLS LAST",
     "8k"),
    ("SELECT i, s FROM m ORDER BY s", "8k"),
    ("SELECT i FROM m ORDER BY i DESC", "6k"),
]
UNSORTED = [
    # the order is the aggregate's hash partitions (4 of them), then each partition's
    ("SELECT h, s, COUNT(*) AS n FROM m GROUP BY h, s", "90k"),
]
UNSORTED_DEEP = [
    ("SELECT s, d, COUNT(*) AS n, SUM(dec) AS sd, SUM(CAST(i AS DECIMAL(38, 0))) AS si, "
     "MAX(f) AS mf FROM m GROUP BY s, d", "32k"),
    ("SELECT * FROM m", "12k"),  # the scan's 3 partitions in order
    ("SELECT * FROM m WHERE k IS NULL OR s = '' OR f IS NULL", "3k"),
    ("SELECT k, s, COUNT(*) AS n FROM m GROUP BY k, s", "8k"),
]


@pytest.mark.skipif(not DEEP, reason="the partition selection's groups query is the default "
                    "run's sorted read (DPSQL_REDTEAM_DEEP=1)")
@pytest.mark.parametrize(("sql", "limit"), SORTED + SORTED_DEEP)
def test_claim1_a_sorted_result_read_in_parts_is_the_plain_collect(mixed, spark, sql, limit):
    """One shuffle partition (the tests' setting; see claim 2 for more): the order among ties
    too is the plain collect's. Each limit is ~2/3 of the plain collect's (compressed) result,
    so 2 parts fail and 8 are read (a part is pickled rows, ~3-4x larger); the deep run
    reads them again under 2 KiB (a part to a few rows, hundreds of parts)."""
    _check_in_parts(mixed, spark, sql, limit)
    if limit != "1k":  # and in hundreds of parts
        _check_in_parts(mixed, spark, sql, "2k")


@pytest.mark.parametrize(("sql", "limit"), UNSORTED + (UNSORTED_DEEP if DEEP else []))
def test_claim1_an_unsorted_result_over_several_partitions_is_the_plain_collect(
        mixed, spark, sql, limit):
    """4 shuffle partitions and 3 scan partitions: the order a plain collect gives (partition
    after partition) is the order read in parts."""
    with _conf(mixed, "spark.sql.shuffle.partitions", "4"):
        _check_in_parts(mixed, spark, sql, limit)
        if DEEP:
            _check_in_parts(mixed, spark, sql, "2k")


@pytest.mark.skipif(not DEEP, reason="DPSQL_REDTEAM_DEEP=1")
def test_claim1_empty_and_one_row_results_under_a_tiny_limit(mixed, spark):
    """An empty result, and a single row, read as a plain collect even at 1 KiB."""
    with max_result_size(spark, "1k"):
        assert mixed.execute("SELECT * FROM m WHERE i < 0")[0] == []
        rows, _ = mixed.execute("SELECT COUNT(*), SUM(dec), MIN(s), MAX(d) FROM m")
    assert _same(rows, _plain(mixed, "SELECT COUNT(*), SUM(dec), MIN(s), MAX(d) FROM m"))


def _boundary(backend: Any, spark: Any, sql: str) -> int:
    """The largest limit in bytes a plain collect of ``sql`` does not fit."""
    low, high = 256, 1 << 20  # fails at low, fits at high
    assert _plain_fails_at(backend, spark, sql, low)
    assert not _plain_fails_at(backend, spark, sql, high)
    while high - low > 1:
        mid = (low + high) // 2
        if _plain_fails_at(backend, spark, sql, mid):
            low = mid
        else:
            high = mid
    return low


def _plain_fails_at(backend: Any, spark: Any, sql: str, limit: int) -> bool:
    with max_result_size(spark, str(limit)):
        return _plain_fails(backend, sql)


@pytest.mark.skipif(not DEEP, reason="a bisection: ~20 collects (DPSQL_REDTEAM_DEEP=1)")
@pytest.mark.parametrize("sql", [SORTED[0][0], UNSORTED[0][0], SORTED_DEEP[2][0]])
def test_claim1_at_the_exact_boundary_the_rows_are_the_same(mixed, spark, sql):
    """One byte below the size a plain collect needs the rows are read in parts, at that size
    by the plain collect itself: the same rows either way."""
    want = _plain(mixed, sql)
    edge = _boundary(mixed, spark, sql)
    for limit in (edge, edge + 1):
        with max_result_size(spark, str(limit)):
            got, _ = mixed.execute(sql)
        assert _same(got, want), limit


# Broke on c6fb1ca (a strict xfail on the red team's branch); fixed in the commit after
def test_a_column_named_like_the_row_number_is_kept(mixed, spark):
    """Claim 1 at the backend's level. ``collect_rows`` adds the row number with
    ``withColumn('__dpsql_row', ...)``, which *replaces* an existing column of that name
    (compared case-insensitively) instead of adding one; ``row[:-1]`` then drops the result's
    real last column and the number stays in the other's place.

    Counterexample: ``SELECT i, h AS __dpsql_row, s AS __DPSQL_ROW FROM m`` under 96 KiB
    (its plain collect needs ~110) gives ``(i, <row number>)``: h is the number, s is gone.
    dpsql's own generated SQL names its columns ``__k<i>``, ``__m<j>``, ``__n``, so an
    analyst does not reach this through a Session (the owner's metadata builder runs ``SELECT
    DISTINCT <owner's column>``); any other caller of ``SparkBackend.execute`` does. Fix:
    ``frame.select('*', monotonically_increasing_id().alias(_ORDINAL))`` (a duplicate name is
    fine: the number is always the last field), the commit after the red team's."""
    _check_in_parts(mixed, spark, "SELECT i, h AS __dpsql_row, s AS __DPSQL_ROW FROM m", "96k")


# --------------------------------------------------------------------------- Sessions

PARTITIONED = loads_metadata("""
tables:
  ev:
    columns:
      city: {max_freq: 64, releasable: true, partition_selection: true, type: VARCHAR}
      g: {type: INTEGER}
      amount: {bounds: [0, 100], type: INTEGER}
  st:
    columns:
      street: {max_freq: 64, releasable: true, partition_selection: true, type: VARCHAR}
      g: {type: INTEGER}
      amount: {bounds: [0, 100], type: INTEGER}
""")



@pytest.fixture(scope="module")
def events(spark, tmp_path_factory):
    """ev: 400 cities of 40 rows each (g = the city's number); a city is ~135 bytes of hex
    (a URL, a product name: lz4 does not shrink it much). st: 16 streets of 40 rows, ~1.6 KB
    each (the hex 12 times: a long text key)."""
    folder = tmp_path_factory.mktemp("collect_rt_ev")
    path, streets = folder / "ev.parquet", folder / "st.parquet"
    spark.sql("""SELECT concat(repeat(sha2(CAST(id % 16 AS STRING), 512), 12), '/',
                                CAST(id % 16 AS STRING)) AS street,
                         CAST(id % 16 AS INT) AS g, CAST(id % 101 AS INT) AS amount
                  FROM range(640)""").write.parquet(str(streets))
    spark.sql("""SELECT concat(sha2(CAST(id % 400 AS STRING), 512), '/',
                                lpad(CAST(id % 400 AS STRING), 4, '0')) AS city,
                         CAST(id % 400 AS INT) AS g, CAST(id % 101 AS INT) AS amount
                  FROM range(16000)""").write.parquet(str(path))
    return with_sources(PARTITIONED, {"ev": str(path), "st": str(streets)})


def _session(metadata, spark, tmp_path, name: str) -> Any:
    from dpsql.backends.spark import SparkBackend

    backend = SparkBackend(metadata, spark)
    ledger = open_ledger(tmp_path / f"{name}.sqlite")
    return ledger_session(metadata, backend, ledger, sampler=ZeroNoise())


GROUPED = "SELECT city, COUNT(*) AS n, SUM(amount) AS s FROM ev WHERE g < {n} GROUP BY city"


def _answers(metadata: Any, spark: Any, tmp_path: Any, name: str, sqls: list[str], *,
             limit: str | None = None, epsilon: float = 4.0, shuffle: str = "1"
             ) -> tuple[list[Any], list[int]]:
    """The answers of a new charging session (so no answer cache) to ``sqls`` under the
    driver result ``limit`` (None: Spark's default) with ``shuffle`` shuffle partitions, and
    the counts of the reads done in parts."""
    session = _session(metadata, spark, tmp_path, name)
    session.backend.session.conf.set("spark.sql.shuffle.partitions", shuffle)
    try:
        with (max_result_size(spark, limit) if limit else _nothing()), \
                _after_count(lambda: None) as seen:
            answers = [session.run(sql, epsilon=epsilon, delta=1e-6) for sql in sqls]
        assert len(charged(session)) == len(sqls)
        return answers, seen
    finally:
        session.backend.close()
        session.ledger.close()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def test_claim1_a_partition_selection_read_in_parts_releases_the_same_rows(
        events, spark, tmp_path):
    """The groups query (ORDER BY its keys) of 400 groups, one shuffle partition: under 48 KiB
    (its plain collect needs 52.7) the released rows and their order are those read without
    a limit."""
    sql = GROUPED.format(n=400)
    session = _session(events, spark, tmp_path, "parts")
    try:
        want = session.run(sql, epsilon=4.0, delta=1e-6)
        assert len(want.rows) == 400
        with max_result_size(spark, "48k"), _after_count(lambda: None) as seen:
            # raw_counts: the same zero-noise answer, not from the answer cache
            got = session.run(sql, epsilon=4.0, delta=1e-6, raw_counts=True)
        assert seen == [400]  # read in parts
        assert _same(got.rows, want.rows)
        assert len(charged(session)) == 2
    finally:
        session.backend.close()
        session.ledger.close()


# Broke on c6fb1ca (a strict xfail on the red team's branch); fixed since: the Spark
# translation sorts a result ordered by its output columns on one partition
# (dpsql.backends.spark_sql._sorted_on_one_partition), which needs no key sample.
def test_a_partition_selection_over_many_groups_reads_as_over_few(events, spark, tmp_path):
    """Claim 2. The groups query (``dpsql.execute.layout.write_selected``) ends in ``ORDER BY
    __k0 NULLS LAST``. Over more than one shuffle partition Spark sorts by range
    partitioning, whose RangePartitioner first *collects a sample of the sort keys to the
    driver* (``RangePartitioner.sketch``: up to 3 x min(100 x partitions, 10^6) keys,
    ``spark.sql.execution.rangeExchange.sampleSizePerPartition`` = 100) -- a job of its own,
    under the same ``spark.driver.maxResultSize``. Its size grows with the number of groups
    (every key when there are fewer than the sample) and with the keys' length. The read in
    parts re-plans the same sort at every try (``numbered.repartition(parts)``), so the
    sketch fails again each time, until ``parts >= n`` re-raises: the exact read fails on the
    number of groups, the refunded oracle the change was meant to close.

    Counterexample: 8 shuffle partitions (an owner's setting; Spark's default is 200), a
    16 KiB limit (8 tasks' overhead is ~3 KiB), ~1.6 KB street keys: ``WHERE g < 2`` (2
    groups) is answered, ``WHERE g < 12`` (12 groups) raises OperationalError after 3 reads
    of the whole query in parts. The same with ~135-byte city keys, 5 groups against 120
    (``Total size of serialized results of 6 tasks (17.8 KiB)``: the 8-task sketch; a part is
    one task). Measured at Spark's default 200 partitions: 256 KiB (200 tasks' overhead
    ~80-180 KiB) answers 2,000 groups of 38-byte keys and fails at 4,000.

    At the default 1 GiB the sketch holds at most 60,000 keys at 200 shuffle partitions (so
    keys of ~18 KB would be needed), 600,000 at 2,000 partitions (~1.8 KB keys) and 3 x 10^6
    from 10,000 partitions on (~360-byte keys: URLs, user agents) -- far rarer than the
    collect the change fixed, but the same oracle, and its threshold is set by the data.

    Fix (not made: a choice for the maintainer): no range partitioning in the sorted reads --
    sort the groups query in one partition (its keys are unique, so the order is total and the
    same: e.g. Spark's ``REPARTITION(1)`` under the ORDER BY, or ``DISTRIBUTE BY`` a constant
    ``SORT BY`` the keys), or read it unsorted and sort on the driver."""
    streets = GROUPED.replace("city", "street").replace("ev", "st")
    try:
        (few, many), _ = _answers(events, spark, tmp_path, "sketch",
                                  [streets.format(n=2), streets.format(n=12)],
                                  limit="16k", shuffle="8")
    except OperationalError:
        pytest.fail("2 groups answered, 12 groups failed: the number of groups shows")
    assert len(few.rows) == 2 and len(many.rows) == 12
    if DEEP:  # the ~135-byte keys: 5 groups against 120
        (few, many), _ = _answers(events, spark, tmp_path, "sketch_city",
                                  [GROUPED.format(n=5), GROUPED.format(n=120)],
                                  limit="16k", shuffle="8")
        assert len(few.rows) == 5 and len(many.rows) == 120


@pytest.mark.skipif(not DEEP, reason="7 reads of 3,000 pairs in parts: ~18 s (DEEP=1)")
@pytest.mark.parametrize("sql", ["SELECT COUNT(*) AS n FROM items",
                                 "SELECT SUM(qty) AS s FROM items"])
def test_claim1_a_two_unit_release_through_a_session_reads_past_the_limit(spark, tmp_path, sql):
    """The grouped fallback's pairs (Spark's only two-unit read), through ``Session.run``:
    100 x 30 pairs; under 8 KiB the released COUNT and SUM are those read without a limit
    (the SUM reads the pairs 7 times, each in parts; tests/backends/test_spark_collect.py
    reads them once at the read's level, in the default run)."""
    from tests.db_files import writing
    from tests.recording import export_parquet
    from tests.units import tiny_multi

    db: tiny_multi.Database = {
        "customer": [(c, 1) for c in range(100)],
        "supplier": [(s, 1) for s in range(30)],
        "orders": [(c, c) for c in range(100)],
        "items": [(c, s, 1 + (c * s) % 4) for c in range(100) for s in range(30)],
        "stock": [], "nations": [],
    }
    path = tmp_path / "pairs.duckdb"
    with writing(path) as con:
        tiny_multi.load(db, con)
    md = with_sources(tiny_multi.metadata(max_contribution=2**8),
                      export_parquet(path, tmp_path / "parquet"))
    (want,), _ = _answers(md, spark, tmp_path, "pairs", [sql])
    (got,), seen = _answers(md, spark, tmp_path, "pairs_parts", [sql], limit="8k")
    assert seen and set(seen) == {100 * 30}  # the pairs, read in parts
    assert _same(got.rows, want.rows)


# --------------------------------------------------------------------------- claim 2


def test_claim2_the_limit_is_recognised_on_collect_and_on_a_part(mixed, spark):
    """pyspark 4.3: the error of a refused collect and of a refused part (``toLocalIterator``,
    whose error comes back through the iterator's socket) both name the setting; a count's
    results are one row a task (shuffle-map results are not counted at all). After either,
    the JVM and the backend go on."""
    sql = "SELECT * FROM m"
    with max_result_size(spark, "4k"):
        with pytest.raises(Exception) as collected:
            mixed.session.sql(sql).collect()
        with pytest.raises(Exception) as iterated:
            list(mixed.session.sql(sql).repartition(1).toLocalIterator())
        assert mixed.session.sql(sql).count() == ROWS
    for err in (collected.value, iterated.value):
        assert spark_collect.over_result_size(err), str(err)[:300]
        assert "Total size of serialized results" in str(err)
    assert not spark.sparkContext._jsc.sc().isStopped()
    assert mixed.execute("SELECT COUNT(*) FROM m")[0] == [(ROWS,)]


def test_claim2_other_errors_are_not_retried(mixed, spark):
    """A failure that is not the limit propagates from the first collect (one job, no count,
    no parts), as OperationalError naming only its class."""
    group = mixed._job_group
    before = _jobs(spark, group)
    with max_result_size(spark, "4k"), pytest.raises(OperationalError, match="could not run"):
        mixed.execute("SELECT raise_error(concat('secret ', s)) FROM m")
    assert len(_jobs(spark, group)) - len(before) == 1


# --------------------------------------------------------------------------- claim 3


@pytest.mark.parametrize("sql", [SORTED[0][0]] + ([UNSORTED[0][0]] if DEEP else []))
def test_claim3_a_read_that_fits_runs_the_plain_collects_jobs(mixed, spark, sql):
    """Spark's status tracker: the backend's read of a result that fits runs exactly as many
    jobs as a plain collect of it (no count, no numbering, no parts)."""
    group = mixed._job_group
    before = _jobs(spark, group)
    rows, _ = mixed.execute(sql)
    read = len(_jobs(spark, group)) - len(before)
    plain_group = f"collect-rt-plain-{hash(sql):x}"
    spark.sparkContext.setJobGroup(plain_group, "plain")
    try:
        plain = [tuple(r) for r in mixed.session.sql(sql).collect()]
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert read == len(_jobs(spark, plain_group)) >= 1
    assert _same(rows, plain)


@contextmanager
def _after_count(action: Any) -> Iterator[list[int]]:
    """Call ``action`` each time a DataFrame's ``count`` returns (in collect_rows: after the
    refused collect, before the parts are read). Yields the list of the counts seen."""
    from pyspark.sql.classic.dataframe import DataFrame

    seen: list[int] = []
    real = DataFrame.count

    def count(self: Any) -> int:
        n = real(self)
        seen.append(n)
        action()
        return n

    DataFrame.count = count  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        DataFrame.count = real  # type: ignore[method-assign]


# Broke on c6fb1ca (a strict xfail on the red team's branch); fixed in the commit after
def test_a_cancel_between_the_jobs_of_a_read_in_parts_is_not_lost(events, spark, tmp_path):
    """Claim 3. ``Session.cancel`` -> ``SparkBackend.interrupt`` sets ``_cancelled`` and
    ``cancelJobGroup``, which cancels the group's *running* jobs only; the read in parts runs
    a job for the collect, one for the count, then one a part, with Python work between them
    (each part's rows are unpickled while no job runs). A cancel in such a gap stops nothing,
    the next job runs, ``execute`` returns the rows without looking at ``_cancelled``, and the
    answer is released and charged -- against Session.cancel's contract ("it raises
    QueryCancelledError and its charge is refunded").

    Counterexample: a cancel as the count returns (``_after_count``): the 400 groups are
    released and the ledger holds the charge. (The gap existed before c6fb1ca too, but only
    while a plain collect's rows were unpickled; the read in parts adds one a part. The pg
    server is not affected: its CancellableBackend checks its flag after every read.)

    Fix: ``SparkBackend.execute`` raises QueryCancelledError when ``_cancelled`` is set after
    the read too (the commit after the red team's)."""
    session = _session(events, spark, tmp_path, "gap")
    try:
        with max_result_size(spark, "48k"), _after_count(session.cancel) as seen, \
                pytest.raises(QueryCancelledError):
            session.run(GROUPED.format(n=400), epsilon=4.0, delta=1e-6)
        assert seen, "the read was not in parts"
        assert charged(session) == []
    finally:
        session.backend.close()
        session.ledger.close()


@pytest.mark.skipif(not DEEP, reason="the fixed xfail above covers the default run (DEEP=1)")
def test_claim3_a_cancel_while_the_parts_are_read_is_refunded(events, spark, tmp_path):
    """Cancels every few ms from the moment the count returns until the read ends (they land
    on the part jobs, which are cancelled): QueryCancelledError, nothing charged, and the
    session goes on -- the next query is answered and charged once. (Before the fix of the
    test above a cancel could in principle fall in every gap and none in a job.)"""
    session = _session(events, spark, tmp_path, "cancel")
    done = threading.Event()

    def keep_cancelling() -> None:
        while not done.wait(0.003):
            session.cancel()

    threads: list[threading.Thread] = []

    def start() -> None:
        if not threads:
            threads.append(threading.Thread(target=keep_cancelling, daemon=True))
            threads[0].start()

    try:
        with max_result_size(spark, "48k"), _after_count(start) as seen:
            try:
                with pytest.raises(QueryCancelledError):
                    session.run(GROUPED.format(n=400), epsilon=4.0, delta=1e-6)
            finally:
                done.set()
                for t in threads:
                    t.join(5)
        assert seen, "the read was not in parts"
        assert charged(session) == []
        time.sleep(0.01)
        again = session.run(GROUPED.format(n=3), epsilon=4.0, delta=1e-6)
        assert len(again.rows) == 3
        assert [c.epsilon for c in charged(session)] == [4.0]
    finally:
        session.backend.close()
        session.ledger.close()
