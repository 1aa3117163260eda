"""Brute force: the engine's truncated sums satisfy the noised increments' precondition
(dpsql.noise.r2t's module docstring): removing one unit with every row linked to it moves each
increment ``Q(tau_j) - Q(tau_(j-1))`` (``Q(tau_0) = 0``) by at most ``(tau_j - tau_(j-1)) b``.

For random tiny databases (tests/units/tiny.py, orphans included) and every R2T query of
tests/bruteforce/test_units.py and tests/bruteforce/test_r2t_value_levels.py, dpsql's EXACT plan
runs on real DuckDB (noise off) on D and on D minus each unit's cascade, on the paper's grid 2^j
(increments 2, 2, 4, ..) and on the owner's grids floor(2.5^j) and floor(5.5^j). The release
noises every part's increments with scales from this bound (dpsql.units.noise passes its
parts to dpsql.noise.r2t with the default ``increments=True``), so a truncation that moved an
increment further would be a privacy bug; the per-level bound (tau_j b) is checked by
test_units.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from dpsql.analysis.blocks import analyze_request
from dpsql.metadata import Metadata
from dpsql.noise.r2t import plan_r2t
from dpsql.rewrite.plan import plan_execution
from dpsql.units.grid import part_grid, part_levels
from tests.bruteforce.test_r2t_value_levels import SUM_QUERIES
from tests.bruteforce.test_units import R2T_QUERIES, _databases
from tests.units import tiny


def bruteforce_increments(sql: str, md: Metadata, databases: Sequence[tiny.Database]) -> None:
    """Every part's increments move by at most (tau_j - tau_(j-1)) b per removed unit."""
    analysis = analyze_request(sql, md)
    release = analysis.unit
    assert release is not None and release.r2t
    unit = md.privacy_unit
    assert unit is not None
    plan = plan_execution(analysis, md)
    grids = [(part_grid(p, unit)[0], part_levels(p, unit)) for p in release.parts]
    for p, (bound, taus) in zip(release.parts, grids, strict=True):
        # the engine's plans noise increments whenever there is more than one level
        r2t_plan = plan_r2t(unit_bound=bound, max_contribution=part_grid(p, unit)[1],
                            epsilon=1.0, integer=p.integer, base=unit.level_base)
        assert r2t_plan.increments == (len(taus) > 1)

    def increments(row: Sequence[float | None]) -> list[list[float]]:
        out, start = [], 0
        for _, taus in grids:
            values = [float(v or 0) for v in row[start:start + len(taus)]]
            out.append([b - a for a, b in zip([0.0, *values[:-1]], values, strict=True)])
            start += len(taus)
        return out

    for db in databases:
        base = increments(tiny.load(db).execute(plan.exact_sql).fetchone())
        for u in tiny.units(db):
            other = increments(tiny.load(tiny.remove_unit(db, u))
                               .execute(plan.exact_sql).fetchone())
            for part, (bound, taus), d, d_nb in zip(release.parts, grids, base, other,
                                                    strict=True):
                for j, tau in enumerate(taus):
                    step = (tau - (taus[j - 1] if j else 0)) * bound
                    assert abs(d[j] - d_nb[j]) <= step + 1e-9, (
                        f"PRIVACY BUG: {sql}\ndb={db}\nunit={u} part={part} level {j}: "
                        f"increment {d[j]} vs {d_nb[j]} (bound {step})")


@pytest.mark.parametrize("sql", R2T_QUERIES + SUM_QUERIES)
@pytest.mark.parametrize("base", [2.0, 2.5, 5.5])
def test_r2t_increments_move_by_at_most_their_step(sql, base):
    bruteforce_increments(sql, tiny.metadata(level_base=base), _databases())


@pytest.mark.parametrize("sql", SUM_QUERIES)
def test_value_level_increments_with_a_small_max_sum(sql):
    md = tiny.metadata(max_contribution=8, max_sum=7, level_base=2.5)
    bruteforce_increments(sql, md, _databases())
