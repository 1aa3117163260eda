"""dpsql.units.multi_execute: unit ids coded for the flow (equal ids one code, distinct ids
distinct codes, NULL its own; a result NULL on one side a node of its own there), and the
executed query's columns read per part."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from dpsql.errors import ProgrammingError
from dpsql.noise.r2t_flow import flow_truncated
from dpsql.noise.r2t_levels import fine_levels
from dpsql.noise.r2t_lp import lp_truncated
from dpsql.units.multi_execute import count_levels, pair_codes, pair_levels, unit_codes


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


def test_a_result_null_on_one_side_is_a_node_of_its_own_there():
    # rows: (1, 10) (NULL, 10) (NULL, 11) (2, NULL) (NULL, NULL) (NULL, NULL) (1, NULL)
    a = np.ma.masked_array([1, 0, 0, 2, 0, 0, 1], mask=[0, 1, 1, 0, 1, 1, 0])
    b = np.array([10, 10, 11, None, None, None, None], dtype=object)
    ca, cb = pair_codes(a, b)
    real_a = {int(ca[0]), int(ca[3])}
    # one-sided NULLs: a code each, none a unit's, none shared
    assert len({int(ca[1]), int(ca[2])}) == 2 and not {int(ca[1]), int(ca[2])} & real_a
    assert len({int(cb[3]), int(cb[6])}) == 2 and not {int(cb[3]), int(cb[6])} & {
        int(cb[0]), int(cb[2])}
    # NULL on both sides: one shared code a side, no other row's
    assert ca[4] == ca[5] and cb[4] == cb[5]
    assert int(ca[4]) not in {int(ca[i]) for i in (0, 1, 2, 3, 6)}
    assert int(cb[4]) not in {int(cb[i]) for i in (0, 1, 2, 3, 6)}
    # the real units keep their codes' partition
    assert ca[0] == ca[6] != ca[3] and cb[0] == cb[1] != cb[2]
    # no NULL: the codes of unit_codes, untouched
    plain = np.array([4, 4, 9], dtype=np.int64)
    assert (pair_codes(plain, plain)[0] == unit_codes(plain)).all()


def test_rows_of_one_unit_and_no_other_are_truncated_by_their_unit_alone():
    # fourth units QA: 300 visits of no person at 3 stores (100 each), and 10 of neither.
    # Each store caps its own rows at tau; pair_codes makes the 10 rows of neither unit one
    # result (the reads leave them out of the flow and add them in full: neither_in_full).
    person = np.ma.masked_array(np.zeros(310, np.int64), mask=np.ones(310, bool))
    store = np.ma.masked_array(np.r_[np.repeat([1, 2, 3], 100), np.zeros(10, np.int64)],
                               mask=np.r_[np.zeros(300, bool), np.ones(10, bool)])
    a, b = pair_codes(person, store)
    ones = np.ones(310, np.int64)
    got = flow_truncated(a, b, ones, [5, 50, 100, 400], integer=True).tolist()
    assert got == [3 * 5 + 5, 3 * 50 + 10, 300 + 10, 310]
    # (a shared NULL person node, as before, capped all 300 at tau: 5, 50, 100, 310)


def test_columns_of_the_wrong_shape_are_a_programming_error():
    from dpsql.analysis.blocks import analyze_request
    from tests.units import tiny_multi

    release = analyze_request("SELECT COUNT(*), SUM(qty) FROM items",
                              tiny_multi.metadata()).unit
    assert release is not None and len(release.parts) == 3
    with pytest.raises(ProgrammingError, match="malformed"):
        pair_levels([np.array([1]), np.array([2]), np.array([3])], release)


def test_counts_at_fine_levels_are_the_lp_optimum_at_the_real_tau():
    # the flow in units of 2^-k (multi_execute.count_levels) equals the HiGHS LP at tau itself
    rng = random.Random(21)
    taus = list(fine_levels(40, 2.25))  # 2.25, 5.0625, 11.390625, 25.62890625, 57.66..
    assert not all(float(t).is_integer() for t in taus)
    for _ in range(25):
        rows = [(rng.randint(0, 3), rng.randint(0, 3), rng.randint(1, 9))
                for _ in range(rng.randint(1, 8))]
        a = np.array([r[0] for r in rows], dtype=np.int64)
        b = np.array([r[1] for r in rows], dtype=np.int64)
        got = count_levels(a, b, np.array([r[2] for r in rows], dtype=np.int64), taus)
        for tau, value in zip(taus, got, strict=True):
            want = lp_truncated([(p, (("a", x), ("b", y))) for x, y, p in rows], tau)
            assert value == pytest.approx(want, abs=1e-7)
        # removing a unit of either side moves each level by at most tau, never up
        for side in (a, b):
            for unit in range(4):
                keep = side != unit
                rest = count_levels(a[keep], b[keep],
                                    np.array([r[2] for r in rows], dtype=np.int64)[keep], taus)
                assert all(0 <= y <= x <= y + t for x, y, t in zip(got, rest, taus,
                                                                 strict=True))


def test_flat_counts_at_fine_levels_gain_the_fraction_of_the_level():
    # one supplier (b 0) with 40 rows from 40 customers: at 30.25 it keeps 30.25, not 30
    a = np.arange(40, dtype=np.int64)
    b = np.zeros(40, dtype=np.int64)
    ones = np.broadcast_to(np.int64(1), a.shape)
    assert count_levels(a, b, ones, [5.5, 30.25, 166.375]).tolist() == [5.5, 30.25, 40.0]
    assert count_levels(a, b, ones, [5, 30, 166]).tolist() == [5, 30, 40]


def test_huge_pair_counts_at_fine_levels_do_not_wrap():
    # base 2.1 (not dyadic): levels in steps of 2^-28, so a pair of 2^40 rows would be 2^68
    # steps; capped at the top level first
    taus = list(fine_levels(4, 2.1))
    assert len(taus) == 2 and max(Fraction(t).denominator for t in taus) == 2**28
    got = count_levels(np.array([0, 1]), np.array([0, 0]), np.array([2**40, 1]), taus)
    assert got.tolist() == taus  # the supplier (b 0) keeps tau at every level
