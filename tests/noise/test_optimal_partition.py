"""dpsql.noise.optimal_partition: the drawn table is the optimal recurrence of Desfontaines et
al. (PoPETs 2022) up to rounding, satisfies the (epsilon, delta) conditions EXACTLY (60-digit
decimal arithmetic over every n, both directions), is tight where the paper says, and a table
weakened to 2 epsilon fails the same exact check. The planner draws it under a unit with
kappa = 1 unless the selection's noisy counts are released as a COUNT(*)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from decimal import Decimal, localcontext

import numpy as np
import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.analysis.explain import explain, explain_text
from dpsql.budget import Budget
from dpsql.metadata import Column, Metadata
from dpsql.noise import optimal_partition, partition, unit_partition
from dpsql.noise.optimal_partition import MAX_TABLE, MECHANISM, keep_probability, keep_table
from tests.noise.randomness import assert_secure_randomness
from tests.units import tiny

ONE = 1 << 53
GRID = [(e, d) for e in (0.1, 0.5, 1.0, 2.0, 5.0) for d in (1e-10, 1e-5, 1e-2)]


def _violation(table: tuple[float, ...], epsilon: float, delta: float) -> Decimal:
    """The largest hockey-stick divergence of order e^eps between pi(n) and pi(n+1), both
    directions, over every n (the table extended by 1), minus delta: <= 0 iff (eps, delta)-DP
    for a group whose number of units moves by one. Exact: the table's values are multiples
    of 2^-53 and e^eps is computed to 60 digits."""
    with localcontext() as ctx:
        ctx.prec = 60
        e = Decimal(epsilon).exp()
        pi = [Decimal(p) for p in table] + [Decimal(1)]
        worst = Decimal(-1)
        for a, b in itertools.pairwise(pi):
            for p, q in ((a, b), (b, a)):  # law(p) against law(q): keep and drop buckets
                div = max(p - e * q, Decimal(0)) + max((1 - p) - e * (1 - q), Decimal(0))
                worst = max(worst, div - Decimal(delta))
        return worst


def test_randomness_only_through_the_bernoulli_module():
    assert_secure_randomness(optimal_partition, reads_urandom=False)


def test_reference_points_at_eps_1_delta_1e_5():
    """The issue's goal: 50% kept at n = 12, 99% at n = 16; pi(1) = delta."""
    t = keep_table(1.0, 1e-5)
    assert t is not None and t[0] == 0.0 and t[-1] == 1.0 and 1.0 not in t[:-1]
    assert next(n for n, p in enumerate(t) if p >= 0.5) == 12
    assert next(n for n, p in enumerate(t) if p >= 0.99) == 16
    assert t[1] == pytest.approx(1e-5, rel=1e-11) and t[1] <= 1e-5
    assert all(a < b for a, b in itertools.pairwise(t))
    assert len(t) == 24  # pi(n) = 1 from n = 23
    assert keep_probability(t, 0) == 0.0 and keep_probability(t, 10**9) == 1.0


@pytest.mark.parametrize(("epsilon", "delta"), GRID)
def test_table_is_the_recurrence_up_to_rounding(epsilon, delta):
    t = keep_table(epsilon, delta)
    assert t is not None
    pi = unit_partition.optimal_keep(epsilon, delta, len(t) + 5)
    for n, (got, want) in enumerate(zip(t, pi, strict=False)):
        assert got <= want * (1 + 1e-12) + 1e-15, n  # rounded down
        # each floor loses < 2^-53, relative 2^-53/delta at pi(1) = delta, carried along
        assert got == pytest.approx(want, rel=1e-9 + 2.0**-52 / delta, abs=1e-15), n
    assert all(p == 1.0 for p in pi[len(t):])
    assert all(g * ONE == math.floor(g * ONE) for g in t)  # on the Bernoulli's grid


@pytest.mark.parametrize(("epsilon", "delta"), GRID)
def test_table_is_the_papers_closed_form(epsilon, delta):
    """Desfontaines et al., Thm. 1: delta (e^(n eps) - 1)/(e^eps - 1) up to the crossover
    n1 = 1 + floor(ln(1 + tanh(eps/2)(1/delta - 1))/eps), then
    pi(n1) - (1 - pi(n1) + delta/(e^eps - 1)) (e^(-(n - n1) eps) - 1) until 1."""
    t = keep_table(epsilon, delta)
    assert t is not None
    n1 = 1 + math.floor(math.log1p(math.tanh(epsilon / 2) * (1 / delta - 1)) / epsilon)

    def closed(n: int) -> float:
        if n <= n1:
            return delta * math.expm1(n * epsilon) / math.expm1(epsilon)
        p1 = closed(n1)
        return min(1.0, p1 - (1 - p1 + delta / math.expm1(epsilon)) * math.expm1(
            -(n - n1) * epsilon))

    for n, got in enumerate(t):
        assert got == pytest.approx(closed(n), rel=1e-7 + 2.0**-52 / delta, abs=1e-12), n


@pytest.mark.parametrize(("epsilon", "delta"), GRID)
def test_the_table_is_epsilon_delta_exactly_and_tight(epsilon, delta):
    t = keep_table(epsilon, delta)
    assert t is not None
    assert _violation(t, epsilon, delta) <= 0
    # tight: every step is the paper's min up to rounding (no room left to keep more)
    e = math.exp(epsilon)
    for a, b in itertools.pairwise(t):
        bound = min(e * a + delta, 1 + (a + delta - 1) / e, 1.0)
        assert b >= bound * (1 - 2.0**-36) - 2.0**-52


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-5), (0.5, 1e-6), (2.0, 1e-3)])
def test_a_table_at_twice_epsilon_fails_the_exact_check(epsilon, delta):
    weak = keep_table(2 * epsilon, delta)
    assert weak is not None and _violation(weak, epsilon, delta) > delta


def test_a_too_long_table_is_none():
    # about 2 ln(1/delta)/eps > MAX_TABLE steps
    assert keep_table(1e-4, 1e-6) is None
    assert 2 * math.log(1e6) / 1e-4 > MAX_TABLE
    with pytest.raises(ValueError):
        keep_table(0.0, 1e-5)
    with pytest.raises(ValueError):
        keep_table(1.0, 0.0)


class Words:
    def __init__(self, value: int) -> None:
        self.value = value

    def uniform_words(self, size: int) -> np.ndarray:
        return np.full(size, self.value, dtype=np.int64)


def test_select_draws_pi_of_each_count():
    t = keep_table(1.0, 1e-5)
    assert t is not None
    counts = np.array([0, 1, 11, 12, 40, 10**6])
    # the word 2^52 (U = 1/2): kept iff pi(n) > 1/2
    kept = optimal_partition.select(counts, t, 100, Words(1 << 52))
    assert kept.tolist() == [3, 4, 5]
    # the largest word: kept iff pi(n) = 1
    assert optimal_partition.select(counts, t, 100, Words(ONE - 1)).tolist() == [4, 5]
    # the word 0: kept iff pi(n) > 0 (never an empty group)
    assert optimal_partition.select(counts, t, 100, Words(0)).tolist() == [1, 2, 3, 4, 5]
    assert optimal_partition.select(np.zeros(0), t, 100).shape == (0,)


def test_at_most_max_kept_a_random_subset_of_the_kept():
    t = keep_table(1.0, 1e-5)
    assert t is not None
    counts = np.array([50] * 20 + [0] * 5)
    seen = set()
    for _ in range(20):
        kept = optimal_partition.select(counts, t, 3)
        assert len(kept) == 3 and all(k < 20 for k in kept) and list(kept) == sorted(kept)
        seen |= set(kept.tolist())
    assert len(seen) > 3  # not always the same three


# ------------------------------------------------------------------ the planner's choice


def _metadata(kappa: int, c: int) -> Metadata:
    md = tiny.metadata(max_groups=kappa, max_rows_per_group=c)
    items = md.tables["items"]
    columns = dict(items.columns)
    columns["kind"] = Column("kind", type="INTEGER", releasable=True, partition_selection=True)
    return dataclasses.replace(md, tables={**md.tables, "items": dataclasses.replace(
        items, columns=columns)})


@pytest.mark.parametrize(("sql", "kappa", "c", "optimal"), [
    ("SELECT DISTINCT kind FROM items", 1, 1, True),
    ("SELECT kind FROM items GROUP BY kind", 1, 3, True),
    ("SELECT kind, SUM(qty) FROM items GROUP BY kind", 1, 1, True),
    ("SELECT kind, COUNT(*) FROM items GROUP BY kind", 1, 3, True),  # C = 3: not __n
    # the shared COUNT(*) (C = 1): its noisy counts are the selection's -- thresholding
    ("SELECT kind, COUNT(*) FROM items GROUP BY kind", 1, 1, False),
    ("SELECT kind, COUNT(*), SUM(qty) FROM items GROUP BY kind", 1, 1, False),
    ("SELECT DISTINCT kind FROM items", 2, 1, False),
    ("SELECT kind, SUM(qty) FROM items GROUP BY kind", 2, 2, False),
])
def test_the_optimal_mechanism_is_drawn_when_one_unit_touches_one_group(sql, kappa, c,
                                                                        optimal):
    analysis = analyze_request(sql, _metadata(kappa, c))
    plans, selection = partition.plan_with_selection(analysis, Budget(1.0, 1e-5))
    n_private = len(plans) if selection.shared is None else 0
    assert (selection.mechanism == MECHANISM) == optimal
    if optimal:
        assert selection.keep_table == keep_table(selection.epsilon, 1e-5)
        assert selection.threshold is None and selection.scale is None
        assert selection.shared is None and selection.delta == 1e-5
        # the same share as thresholding would get: eps / (1 + private measurements)
        assert selection.epsilon == pytest.approx(1.0 / (1 + n_private))
        assert math.fsum([selection.epsilon, *(p.epsilon for p in plans)]) == pytest.approx(
            1.0) or not plans
    else:
        assert selection.mechanism == partition.LAPLACE_THRESHOLDING
        assert selection.keep_table is None and selection.threshold is not None


def test_tiny_epsilon_keeps_thresholding():
    analysis = analyze_request("SELECT DISTINCT kind FROM items", _metadata(1, 1))
    _, selection = partition.plan_with_selection(analysis, Budget(1e-4, 1e-6))
    assert selection.mechanism == partition.LAPLACE_THRESHOLDING


def test_explain_names_the_mechanism_and_shows_pi():
    md = _metadata(1, 1)
    report = explain("SELECT DISTINCT kind FROM items", md, epsilon=1.0, delta=1e-5)
    sel = report["partition_selection"]
    t = keep_table(1.0, 1e-5)
    assert t is not None
    assert sel["mechanism"] == MECHANISM and sel["threshold"] is None
    assert sel["keep_probability"] == {n: keep_probability(t, n) for n in (1, 5, 10, 20, 50)}
    text = explain_text("SELECT DISTINCT kind FROM items", md, epsilon=1.0, delta=1e-5)
    assert "optimal (Desfontaines et al. 2022)" in text
    assert "pi(n) = 1 from n = 23" in text and "n=1: 1e-05" in text
    shared = explain("SELECT kind, COUNT(*) FROM items GROUP BY kind", md, epsilon=1.0,
                     delta=1e-5)["partition_selection"]
    assert shared["mechanism"] == "laplace_thresholding" and shared["threshold"] == 13
