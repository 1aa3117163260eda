"""Noise plans: the grid of snapped sums never weakens the charged epsilon, never leaks a
data-dependent scale, and smoothed counts stay on the integers."""

import math

import pytest

from dpsql.analysis.elastic import analyze
from dpsql.budget import Budget
from dpsql.metadata import Column, Metadata, Table
from dpsql.noise import mechanisms
from dpsql.noise.plan import plan_noise
from tests.typed_metadata import typed


def shop(mf_customer: int) -> Metadata:
    return typed(Metadata(tables={
        "orders": Table("orders", {
            "customer_id": Column("customer_id", mf_customer),
            "cost": Column("cost", bounds=(-5.0, 1000.0)),
        }),
        "recs": Table("recs", {"customer_id": Column("customer_id", 250)}),
    }))


def test_pure_sum_scale_absorbs_the_grid():
    (plan,) = plan_noise(analyze("SELECT SUM(cost) FROM orders", shop(100)), Budget(0.3, 0.0))
    es = 1005.0  # max(u,0) - min(l,0) = 1000 - (-5)
    g = plan.granularity
    assert g == mechanisms.sum_granularity(plan.scale)
    # a neighbour moves the snapped sum by at most ceil(ES/g)*g <= ES + g grid units
    assert math.ceil(es / g) * g / plan.scale <= 0.3 * (1 + 1e-12)
    assert plan.scale >= es / 0.3
    # the grid is at most scale * 2^-19, so the inflation is at most that, relative to ES
    assert plan.scale <= es / 0.3 * (1 + 2**-19 / 0.3 * 1.01)


def test_smoothed_sum_grid_does_not_depend_on_the_data():
    sql = ("SELECT SUM(o.cost) FROM orders o JOIN recs r ON o.customer_id = r.customer_id")
    small = plan_noise(analyze(sql, shop(3)), Budget(0.5, 1e-8))[0]
    large = plan_noise(analyze(sql, shop(90_000)), Budget(0.5, 1e-8))[0]
    assert small.smoothed and large.smoothed
    assert small.scale < large.scale
    # fixed by the bounds and epsilon alone: 2 * 1005 / 0.5
    expected = mechanisms.sum_granularity(2 * 1005 / 0.5) * 2**12
    assert small.granularity == large.granularity == expected
    assert large.scale == pytest.approx(
        2 * (large.smoothed.smooth_sensitivity + large.granularity) / 0.5)


def test_smoothed_count_is_grid_free_discrete():
    sql = "SELECT COUNT(*) FROM orders o JOIN recs r ON o.customer_id = r.customer_id"
    (plan,) = plan_noise(analyze(sql, shop(100)), Budget(0.1, 1e-8))
    assert plan.granularity is None
    assert plan.scale == pytest.approx(5411.631357659228, rel=1e-12)


def test_absurd_noise_is_rejected_before_anything_runs():
    from dpsql.errors import NotSupportedError

    with pytest.raises(NotSupportedError, match="too large"):
        plan_noise(analyze("SELECT COUNT(*) FROM orders", shop(1)), Budget(1e-10, 0.0))


def test_public_measurements_get_no_share_and_no_noise():
    import dataclasses

    from dpsql.analysis.kexpr import Const
    from dpsql.noise.plan import is_public, is_public_query

    private = analyze("SELECT COUNT(*) AS n, SUM(cost) AS s FROM orders", shop(100))
    count, total = private.measurements
    public = dataclasses.replace(total, sensitivity=Const(0.0))
    mixed = dataclasses.replace(private, measurements=(count, public))
    assert not is_public(count) and is_public(public) and not is_public_query(mixed)
    plans = plan_noise(mixed, Budget(0.5, 0.0))
    # basic composition over the private measurements only: all of epsilon goes to the count
    assert [p.epsilon for p in plans] == [0.5, 0.0]
    assert plans[0].scale == 1 / 0.5 and plans[1].scale == 0.0
    only_public = dataclasses.replace(private, measurements=(public,))
    assert is_public_query(only_public)
    assert [p.epsilon for p in plan_noise(only_public, None)] == [0.0]
    with pytest.raises(Exception, match="no epsilon"):
        plan_noise(mixed, None)


# --------------------------------------------------------------------------- split_budget


def test_split_budget_gives_every_private_measurement_the_same_share():
    from dpsql.noise.plan import split_budget

    md = shop(100)
    count = analyze("SELECT COUNT(*) FROM orders", md)  # 1 pure
    avg = analyze("SELECT AVG(cost) FROM orders", md)  # 2 pure (SUM and COUNT)
    join = analyze("SELECT COUNT(*) FROM orders o JOIN recs r "
                   "ON o.customer_id = r.customer_id", md)  # 1 smoothed
    shares = split_budget([count, avg, join], Budget(0.8, 1e-6))
    assert [s.epsilon for s in shares] == pytest.approx([0.2, 0.4, 0.2])
    assert [s.delta for s in shares] == [0.0, 0.0, 1e-6]  # delta to smoothed ones only
    plans = [p for a, s in zip([count, avg, join], shares, strict=True)
             for p in plan_noise(a, s)]
    assert [p.epsilon for p in plans] == pytest.approx([0.2] * 4)
    assert math.fsum(p.epsilon for p in plans) == pytest.approx(0.8)


def test_split_budget_leaves_public_releases_free_and_needs_epsilon_otherwise():
    from dpsql.budget import Budget as B
    from dpsql.errors import ProgrammingError
    from dpsql.noise.plan import split_budget

    md = typed(Metadata(tables={
        "p": Table("p", {"x": Column("x", bounds=(0.0, 1.0))}, public=True),
        "orders": shop(1).tables["orders"]}))
    public = analyze("SELECT COUNT(*) FROM p", md)
    private = analyze("SELECT COUNT(*) FROM orders", md)
    assert split_budget([public], None) == (None,)
    assert split_budget([public, private], B(1.0)) == (None, B(1.0, 0.0))
    with pytest.raises(ProgrammingError, match="no epsilon"):
        split_budget([public, private], None)
