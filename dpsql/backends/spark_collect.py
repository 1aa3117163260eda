"""Reading a Spark result to the driver whatever its size, so that no read fails on a row count.

``DataFrame.collect`` runs one job and fails when its serialized result passes
``spark.driver.maxResultSize`` (the owner's setting, 1 GiB by default). How large a result
is depends on the private data (the pairs of a two-unit read, the groups a partition selection
considers), and a failed exact read is refunded (docs/privacy.md, "What is charged, and when"),
so such a failure would be a free oracle on the number of rows: a WHERE clause that adds or
drops one unit near the limit could tell, again and again, whether it is there.

:func:`collect_rows` therefore reads a result that does not fit in parts. It numbers the rows
in the order ``collect`` gives them (``monotonically_increasing_id``: the partition's index,
then the row's place in it), deals them round robin into enough partitions and reads one
partition a job (``toLocalIterator``), quadrupling the partitions while a part is still too
large; then it puts the rows back in their numbered order. Round robin needs no sample of the
data (a range partitioning's sample grows with its partitions and is itself a job's result).
So the caller sees the same rows in the same order however they were read; only the time
differs (timing is outside the model, docs/privacy.md section 2). Jobs of the query's own can
send data to the driver too: a global sort samples its keys there (so the Spark translation
sorts a result ordered by its own columns on one partition, dpsql.backends.spark_sql), and a
broadcast join collects its build side (bounded by the owner's broadcast threshold). What is
left is a limit so low that one row does not fit it: no real setting comes near.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: rows a partition in the first read in parts: ~5-100 bytes a row serialized, so a part is
#: far below the default limit (the parts quadruple under an owner's lower one)
ROWS_PER_PART = 1 << 16

_ORDINAL = "__dpsql_row"


def over_result_size(err: BaseException) -> bool:
    """Whether ``err`` is Spark's refusal of a job result larger than maxResultSize."""
    return "spark.driver.maxResultSize" in str(err)


def collect_rows(frame: DataFrame) -> list[tuple[Any, ...]]:
    """The rows of ``frame``, in the order ``frame.collect()`` gives them.

    Precondition: the data ``frame`` reads does not change during the read.
    Guarantee: the rows of ``frame.collect()`` when it succeeds; when its result passes
    ``spark.driver.maxResultSize``, the same rows in the same order, read in parts (module
    docstring). Other errors propagate.
    """
    try:
        return [tuple(row) for row in frame.collect()]
    except Exception as err:  # py4j's Py4JJavaError, or pyspark's wrapper of it
        if not over_result_size(err):
            raise
    from pyspark.sql.functions import monotonically_increasing_id

    n = frame.count()
    # appended, never withColumn: that replaces a column of the same name (any case), and
    # row[-1] must be the number whatever the result's own names
    numbered = frame.select("*", monotonically_increasing_id().alias(_ORDINAL))
    parts = max(2, -(-n // ROWS_PER_PART))
    while True:
        try:
            rows = [tuple(row) for row in numbered.repartition(parts).toLocalIterator()]
            break
        except Exception as err:
            if not over_result_size(err) or parts >= n:
                raise
        parts = min(n, parts * 4)
    rows.sort(key=itemgetter(-1))
    return [row[:-1] for row in rows]
