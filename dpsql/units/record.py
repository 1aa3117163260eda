"""The release record's view of R2T: each bare COUNT/SUM column's 95% interval.

The interval is computed from the noisy truncation levels alone (post-processing, so it costs
no budget and reveals nothing more than the release): :mod:`dpsql.noise.r2t` states what it
covers. Columns computed from several measurements (AVG, arithmetic) get none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from dpsql.release.record import ColumnSource, Release
from dpsql.units.noise import R2TOutcome


def with_intervals(record: Release, columns: Sequence[ColumnSource],
                   outcomes: Sequence[R2TOutcome | None]) -> Release:
    """``record`` with ``interval_95`` set on every column that is one bare R2T measurement."""
    out = []
    for col, rel in zip(columns, record.columns, strict=True):
        outcome = outcomes[col.measurements[0]] if len(col.measurements) == 1 else None
        if outcome is not None and col.bare_aggregate:
            rel = dataclasses.replace(rel, interval_95=(outcome.lower95, outcome.upper95))
        out.append(rel)
    return dataclasses.replace(record, columns=tuple(out))
