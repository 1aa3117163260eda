"""dpsql.units.multi_execute: unit ids coded for the flow (equal ids one code, distinct ids
distinct codes, NULL its own), and the executed query's columns read per part."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.errors import ProgrammingError
from dpsql.units.multi_execute import pair_levels, unit_codes


def _same_partition(ids, codes) -> bool:
    """Equal ids <-> equal codes (NULL, None, equal to NULL only)."""
    ids = list(ids)
    codes = [int(c) for c in codes]
    return all((ids[i] == ids[j]) == (codes[i] == codes[j])
               for i in range(len(ids)) for j in range(len(ids)))


@pytest.mark.parametrize("ids", [
    np.array([5, 3, 9, 3], dtype=np.int64),            # own codes: no pass
    np.array([10**12, 10**12 + 2, 10**12], dtype=np.int64),  # offset
    np.array([-100, 100, -99, 0] * 20, dtype=np.int8),  # narrow: subtracted in int64
    np.array([-100, 100], dtype=np.int8),              # sparse: dense codes
    np.array([2**63 + 5, 2**63 + 1], dtype=np.uint64),
    np.array(["b", "a", "b"], dtype=object),
    np.array([1.5, 2.5, 1.5]),
])
def test_codes_keep_exactly_the_partition_of_the_ids(ids):
    codes = unit_codes(ids)
    assert codes.dtype == np.int64 and (codes >= 0).all()
    assert _same_partition(ids.tolist(), codes)


def test_null_is_one_more_code_never_a_units():
    ids = np.ma.masked_array([1, 2, 1, 7], mask=[False, True, False, True])
    codes = unit_codes(ids)
    assert codes[1] == codes[3] and len({int(codes[0]), int(codes[1])}) == 2
    assert codes[0] == codes[2]
    objects = np.array([None, "x", None], dtype=object)
    c = unit_codes(objects)
    assert c[0] == c[2] != c[1]


def test_columns_of_the_wrong_shape_are_a_programming_error():
    from dpsql.analysis.blocks import analyze_request
    from tests.units import tiny_multi

    release = analyze_request("SELECT COUNT(*), SUM(qty) FROM items",
                              tiny_multi.metadata()).unit
    assert release is not None and len(release.parts) == 3
    with pytest.raises(ProgrammingError, match="malformed"):
        pair_levels([np.array([1]), np.array([2]), np.array([3])], release)
