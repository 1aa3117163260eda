"""Two independent numpy passes at once, on a second core when one is free (the flow truncation
over two privacy units, dpsql.noise.r2t_flow: each side's loads, a SUM's levels).

Why: the flat read of a release over two units (TPC-H Q7 at SF1: 6M results) is followed by
~120 ms of whole-array numpy passes (bincounts, minimum, floor, sums) on one core while the
machine's other cores idle; the raw query it is measured against runs on all of DuckDB's threads
(issue #17's goal: the exact side within 2x of raw DuckDB). numpy releases the GIL inside those
loops, so two threads overlap them (about 1.4x on two cores: the passes are memory-bound).

Contract: :func:`both` and :func:`ordered_map` return exactly what the sequential calls would
(the same functions on the same arguments, results in order); only which thread runs what
changes. Callers pass functions that share no mutable state (dpsql.noise.r2t_certify.Pairs
keeps one scratch array per thread). An exception raised by either call is raised here. Work is
handed to the one helper thread only when it is idle (another query's work never delays this
one) and when the input is large enough to pay for the hand-off; otherwise everything runs on
the caller's thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["MIN_ENTRIES", "both", "ordered_map", "worth_it"]

A = TypeVar("A")
B = TypeVar("B")
T = TypeVar("T")

#: below this many entries per pass a hand-off (~50 us) is not worth it
MIN_ENTRIES = 1 << 20

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
#: held while the helper thread works for some caller: a second caller runs alone meanwhile
_helper_free = threading.Lock()


def worth_it(entries: int) -> bool:
    """Whether passes over ``entries`` entries should be split over two threads: large
    enough, and a second core exists."""
    return entries >= MIN_ENTRIES and (os.cpu_count() or 1) >= 2


def _helper() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpsql-numpy")
        return _pool


def _hand_off(fn: Callable[[], T]) -> Future[T] | None:
    """``fn`` started on the helper thread, or None when it is busy (run it yourself)."""
    if not _helper_free.acquire(blocking=False):
        return None

    def run() -> T:
        try:
            return fn()
        finally:
            _helper_free.release()

    try:
        return _helper().submit(run)
    except BaseException:
        _helper_free.release()
        raise


def both(first: Callable[[], A], second: Callable[[], B], parallel: bool = True
         ) -> tuple[A, B]:
    """``(first(), second())``, ``second`` on the helper thread when ``parallel`` and it is
    free (module contract)."""
    future = _hand_off(second) if parallel else None
    if future is None:
        return first(), second()
    try:
        head = first()
    finally:
        tail = future.result()  # waits (and re-raises) before anything leaves this frame
    return head, tail


def ordered_map(fn: Callable[[A], T], items: Sequence[A], parallel: bool = True) -> list[T]:
    """``[fn(x) for x in items]``, the items shared between the caller and the helper thread
    (whoever is free takes the next) when ``parallel`` and the helper is free."""
    if not parallel or len(items) < 2:
        return [fn(x) for x in items]
    results: list[T | None] = [None] * len(items)
    taken = threading.Lock()
    position = [0]

    def drain() -> None:
        while True:
            with taken:
                i = position[0]
                position[0] += 1
            if i >= len(items):
                return
            results[i] = fn(items[i])

    future = _hand_off(drain)
    try:
        drain()
    finally:
        if future is not None:
            future.result()
    return results  # type: ignore[return-value]  # every slot filled by drain()
