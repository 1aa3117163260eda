"""dpsql.noise.two_threads: the same results as sequential calls, on whichever thread; and the
flow truncation that uses it (dpsql.noise.r2t_flow) returns the same levels either way."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dpsql.noise import two_threads
from dpsql.noise.r2t_flow import flow_truncated


def test_both_and_ordered_map_return_the_sequential_results_in_order():
    assert two_threads.both(lambda: 1, lambda: "b") == (1, "b")
    assert two_threads.both(lambda: 1, lambda: 2, parallel=False) == (1, 2)
    items = list(range(50))
    assert two_threads.ordered_map(lambda x: x * x, items) == [x * x for x in items]
    assert two_threads.ordered_map(lambda x: x, []) == []
    assert two_threads.ordered_map(lambda x: -x, [3], parallel=False) == [-3]


def test_work_really_runs_on_two_threads_when_the_helper_is_free():
    seen: set[int] = set()
    barrier = threading.Barrier(2, timeout=10)

    def meet(_: int) -> int:
        seen.add(threading.get_ident())
        barrier.wait()  # both threads must be inside at once, else this times out
        return 0

    two_threads.ordered_map(meet, [0, 1])
    assert len(seen) == 2


def test_a_busy_helper_means_the_caller_does_everything():
    callers: set[int] = set()

    def record(x: int) -> int:
        callers.add(threading.get_ident())
        return x + 1

    with two_threads._helper_free:  # another query holds the helper
        assert two_threads.ordered_map(record, list(range(10))) == list(range(1, 11))
        assert two_threads.both(lambda: record(0), lambda: record(1)) == (1, 2)
    assert callers == {threading.get_ident()}
    assert two_threads._helper_free.acquire(blocking=False)  # released again
    two_threads._helper_free.release()


@pytest.mark.parametrize("where", ["first", "second"])
def test_an_error_on_either_thread_is_raised_and_frees_the_helper(where):
    def boom() -> int:
        raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError):
        if where == "first":
            two_threads.both(boom, lambda: 1)
        else:
            two_threads.both(lambda: 1, boom)
    with pytest.raises(ZeroDivisionError):
        two_threads.ordered_map(lambda x: 1 // x, [1, 0, 2, 3])
    assert two_threads._helper_free.acquire(blocking=False)
    two_threads._helper_free.release()


def test_worth_it_only_for_long_arrays():
    assert not two_threads.worth_it(two_threads.MIN_ENTRIES - 1)
    assert two_threads.worth_it(two_threads.MIN_ENTRIES) == ((__import__("os").cpu_count() or 1)
                                                             >= 2)


@pytest.mark.parametrize("integer", [True, False])
def test_the_flow_truncation_is_the_same_on_one_thread_and_two(monkeypatch, integer):
    # instances large enough for every certificate (the subset one needs 2^14 results), with
    # heavy units on both sides, a skewed psi and levels from all light to saturated
    rng = np.random.default_rng(7)  # test data, not noise
    n = 40_000
    a = rng.zipf(1.6, n) % 3_000
    b = rng.integers(0, 400, n)
    psi = (rng.integers(1, 9, n) if integer else rng.gamma(0.7, 3.0, n)).astype(
        np.int64 if integer else np.float64)
    taus = [2.0, 5.0, 30.0, 166.0, 915.0, 5032.0, 40_000.0, 400_000.0]
    one = flow_truncated(a, b, psi, taus, integer=integer)
    monkeypatch.setattr(two_threads, "MIN_ENTRIES", 1)  # every pass split from now on
    trace: list[tuple[float, str]] = []
    two = flow_truncated(a, b, psi, taus, integer=integer, trace=trace)
    assert two.dtype == one.dtype
    assert two.tolist() == one.tolist()
    assert sorted(t for t, _ in trace) == sorted(taus)  # one entry per level
