"""The executed query of a release over two privacy units (dpsql.units.multi): the join
grouped by the pair of unit ids.

:func:`pair_contributions` takes the exact query as the other passes leave it (``SELECT
<aggregates> AS __m<j> FROM .. WHERE ..``, no GROUP BY, every aggregate clamped and total),
computes each row's id in both units (``__u0``, ``__u1``: each along its unit path by LEFT JOINs
to unique keys, as dpsql.units.rewrite computes one) and groups by the pair, with one column
``__p<i>`` per R2T part: the pair's row count (COUNT) or sum of clamped non-negative /
non-positive values (a SUM's two parts) -- psi(q) of R2T's LP, per result pair. One database
query; the truncation (dpsql.units.flow) runs on its rows.

A row whose path to one unit does not resolve (NULL or orphan keys) has that id NULL: it
belongs to no unit of that table (it stays in every neighbour that keeps its other unit); the
truncation treats each unit table's NULL as one more node, never removed.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.units.analysis import UnitRelease
from dpsql.units.rewrite import add_unit_id, select_parts


def pair_contributions(select: exp.Select, release: UnitRelease) -> exp.Select:
    """The exact query grouped by (``__u0``, ``__u1``) with each part's psi (module
    docstring). Precondition: ``release.more`` holds the second unit, ``release.parts`` the
    R2T parts (no GROUP BY)."""
    assert len(release.more) == 1
    add_unit_id(select, release.source, "__u0")
    add_unit_id(select, release.more[0][1], "__u1")
    select_parts(select, release, sums_as_double=True)
    return select
