"""dpsql/release/cache.py: the answer cache's key and payload codec."""

import datetime as dt
import decimal
import json
import math
import uuid

import pytest

from dpsql.release.cache import Uncacheable, _decode, _encode, cache_key, dump_payload, load_payload
from dpsql.release.record import ColumnRelease, Release, Result


def test_payload_encoding_round_trips_every_value_type():
    values = [None, True, False, 0, -(2**70), 1.5, -0.0, float("inf"), float("-inf"), "héllo",
              decimal.Decimal("12.340"), dt.date(2024, 2, 29), dt.datetime(2024, 1, 2, 3, 4, 5, 6),
              dt.datetime(2024, 1, 2, tzinfo=dt.UTC), dt.time(1, 2, 3), dt.timedelta(days=-1,
              seconds=5), uuid.UUID(int=7), b"\x00\xff", [1, [2, None]], (1, "a"),
              {"k": 1, "$": [2]}]
    for v in values:
        back = _decode(json.loads(json.dumps(_encode(v))))
        assert back == v and type(back) is type(v), v
    nan = _decode(json.loads(json.dumps(_encode(float("nan")))))
    assert math.isnan(nan)
    with pytest.raises(Uncacheable):
        _encode(object())


def test_cache_key_is_stable_and_typed():
    key = cache_key("SELECT 1", [1, "a"], 0.5, 0.0, scope="v1:m1")
    assert key == cache_key("SELECT 1", (1, "a"), 0.5, 0, scope="v1:m1")
    assert len(key) == 64 and int(key, 16) >= 0
    variants = {
        key,
        cache_key("SELECT 2", [1, "a"], 0.5, 0.0, scope="v1:m1"),
        cache_key("SELECT 1", [1.0, "a"], 0.5, 0.0, scope="v1:m1"),
        cache_key("SELECT 1", [True, "a"], 0.5, 0.0, scope="v1:m1"),
        cache_key("SELECT 1", ["1", "a"], 0.5, 0.0, scope="v1:m1"),
        cache_key("SELECT 1", [1, "a"], 0.25, 0.0, scope="v1:m1"),
        cache_key("SELECT 1", [1, "a"], 0.5, 1e-9, scope="v1:m1"),
        cache_key("SELECT 1", [[1, "a"]], 0.5, 0.0, scope="v1:m1"),
        # another data version or another metadata: another entry
        cache_key("SELECT 1", [1, "a"], 0.5, 0.0, scope="v2:m1"),
        cache_key("SELECT 1", [1, "a"], 0.5, 0.0, scope="v1:m2"),
    }
    assert len(variants) == 10


def test_a_result_round_trips_and_comes_back_marked_cached():
    release = Release(0.5, 1e-9, "discrete_laplace", (
        ColumnRelease("region", None, 0.0, 0.0, None),
        ColumnRelease("n", "discrete_laplace", 0.5, 0.0, 3.2)), "abc123")
    result = Result(("region", "n"), ("VARCHAR", "BIGINT"),
                    [("east", 3), (None, -1)], release)
    back = load_payload(dump_payload(result))
    assert back.rows == result.rows and back.names == result.names
    assert back.types == result.types and back.release.cached
    assert back.release == Release(**{**release.to_json(), "cached": True,
                                      "columns": release.columns})
