"""The shared test SparkContext's driver result limit, changed for a test (not a test module)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def max_result_size(spark: Any, value: str) -> Iterator[None]:
    """The shared SparkContext's ``spark.driver.maxResultSize`` set to ``value`` (an owner's
    setting; each new task set reads it), restored after."""
    conf = spark.sparkContext._conf  # the JVM context's own SparkConf, not a copy
    old = conf.get("spark.driver.maxResultSize", None)
    conf.set("spark.driver.maxResultSize", value)
    try:
        yield
    finally:
        if old is None:  # the JVM conf's own remove (PySpark's SparkConf has no unset)
            conf._jconf.remove("spark.driver.maxResultSize")
        else:
            conf.set("spark.driver.maxResultSize", old)
