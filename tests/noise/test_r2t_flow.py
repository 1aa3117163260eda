"""dpsql.noise.r2t_flow: R2T's LP truncation over two units, solved as an exact max-flow."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from dpsql.noise.r2t_flow import flow_truncated, level_step
from dpsql.noise.r2t_lp import lp_truncated


def _flow(pairs: list[tuple[int, int, float]], taus: list[float], integer: bool = True):
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    psi = np.array([p[2] for p in pairs])
    return flow_truncated(a, b, psi, taus, integer=integer)


def test_star_and_path_by_hand():
    # one supplier (b = 0) with three customers of 3 rows each: the supplier caps at tau
    star = [(0, 0, 3), (1, 0, 3), (2, 0, 3)]
    assert _flow(star, [2, 4, 8, 16]).tolist() == [2, 4, 8, 9]
    # a path a0 - b0 - a1 - b1 (2 rows per pair): at tau = 2, x = (2, 0, 2) is optimal: 4
    path = [(0, 0, 2), (1, 0, 2), (1, 1, 2)]
    assert _flow(path, [1, 2, 3, 4, 6]).tolist() == [2, 4, 5, 6, 6]
    # each tau at least every unit's load: the untruncated total (no solving)
    assert _flow([(0, 0, 5), (1, 1, 7)], [8]).tolist() == [12]
    assert _flow([], [2, 4]).tolist() == [0, 0]


def test_sums_match_the_lp_up_to_the_flooring_of_the_level_step():
    pairs = [(0, 0, 1.5), (1, 0, 2.25), (1, 1, 0.75)]
    got = _flow(pairs, [1.0, 2.0, 8.0], integer=False)
    for tau, value in zip([1.0, 2.0, 8.0], got, strict=True):
        want = lp_truncated([(p, (("a", x), ("b", y))) for x, y, p in pairs], tau)
        assert want - len(pairs) * level_step(tau, False) <= value <= want + 1e-9


def test_agrees_with_the_highs_lp_on_random_instances():
    rng = random.Random(4)
    for _ in range(40):
        pairs: dict[tuple[int, int], int] = {}
        for _ in range(rng.randint(1, 9)):
            key = (rng.randint(0, 3), rng.randint(0, 3))
            pairs[key] = pairs.get(key, 0) + rng.randint(1, 5)
        rows = [(x, y, p) for (x, y), p in pairs.items()]
        for tau in (1, 2, 3, 5, 9):
            want = lp_truncated([(p, (("a", x), ("b", y))) for x, y, p in rows], tau)
            assert _flow(rows, [tau])[0] == round(want)


def test_removing_one_unit_moves_every_level_by_at_most_tau_and_never_up():
    rng = random.Random(9)
    taus = [1, 2, 4, 8]
    for _ in range(30):
        rows = [(rng.randint(0, 3), rng.randint(0, 3), rng.randint(1, 4))
                for _ in range(rng.randint(1, 8))]
        base = _flow(rows, taus)
        for side in (0, 1):
            for unit in range(4):
                rest = [r for r in rows if r[side] != unit]
                other = _flow(rest, taus)
                assert all(0 <= o <= v <= o + t for v, o, t in zip(base, other, taus,
                                                                   strict=True))


def test_large_levels_use_a_power_of_two_step_and_stay_sound():
    assert level_step(5, True) == 1.0
    assert level_step(2**31 - 1, True) == 1.0
    assert level_step(2**40, True) == 2.0**10
    assert level_step(3.0, False) == 2.0**-29
    tau = 2**40
    rows = [(0, 0, 2**41), (1, 0, 2**39 + 5), (1, 1, 3)]
    (value,) = _flow(rows, [tau])
    step = 2**10
    # the supplier b0 is capped at tau; customer a1's second pair is floored to the step
    assert value == tau + 0  # 3 // 1024 = 0
    assert value % step == 0
    with pytest.raises(ValueError):
        level_step(math.inf, True)


def test_negative_psi_is_a_programming_error():
    with pytest.raises(ValueError):
        _flow([(0, 0, -1)], [2])


def test_per_unit_loads_are_exact_integers_on_every_path():
    from dpsql.noise.r2t_flow import _sums

    rng = np.random.default_rng(1)
    for top, n in ((10, 50), (2**39, 120_000), (2**45, 50)):  # bincount, halves, sort
        codes = rng.integers(0, 7, n)
        values = rng.integers(0, top, n)
        want = [sum(int(v) for c, v in zip(codes, values, strict=True) if c == k)
                for k in range(7)]
        assert [int(x) for x in _sums(codes, values, 7)] == want


def test_a_saturated_side_is_certified_without_the_flow_solver(monkeypatch):
    """Many heavy customers each spread over heavy suppliers that all saturate: the cheap
    feasible flow meets the suppliers' cut, so Dinic is not needed -- and the value is the
    solver's (checked on the same instance with the shortcut off)."""
    from dpsql.noise import r2t_flow

    rng = random.Random(2)
    rows = sorted({(c, rng.randint(0, 4), 1) for c in range(40) for _ in range(6)})
    want = _flow(rows, [3])

    def refuse(*args):
        raise AssertionError("the flow solver ran")

    monkeypatch.setattr(r2t_flow, "_max_flow", refuse)
    assert _flow(rows, [3]).tolist() == want.tolist() == [15]  # 5 suppliers x tau 3
    monkeypatch.undo()
    monkeypatch.setattr(r2t_flow, "_spread", lambda *args: -1)  # never certifies
    assert _flow(rows, [3]).tolist() == [15]  # Dinic alone: the same value


def test_a_unit_moves_an_increment_by_more_than_its_width():
    """Why two units get per-level noise (dpsql.units.noise): the flow bounds each level's move
    by tau, not each increment's by its width. Customers 2 and 3 fill tau = 4 through their own
    suppliers 1 and 2, so supplier 0 adds nothing up to tau = 4 and 4 rows at tau = 6: removing
    it moves the increment Q(6) - Q(4) by 4 > 6 - 4 (each level by at most its tau)."""
    taus = [2, 4, 6, 8, 12]
    pairs = [(2, 1, 4), (3, 2, 4), (2, 0, 3), (3, 0, 2)]
    with_0 = _flow(pairs, taus)
    without_0 = _flow([p for p in pairs if p[1] != 0], taus)
    assert with_0.tolist() == [4, 8, 12, 13, 13] and without_0.tolist() == [4, 8, 8, 8, 8]
    assert ((with_0 - without_0) <= np.array(taus)).all()
    moved = np.diff(np.concatenate([[0], with_0 - without_0]))
    assert moved.tolist() == [0, 0, 4, 1, 0]
    assert moved[2] > taus[2] - taus[1]
