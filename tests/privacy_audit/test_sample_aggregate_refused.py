"""dpsql.privacy_audit refuses SAMPLE_AGGREGATE queries by name (it audits ordinary releases)."""

from __future__ import annotations

import pytest

from dpsql.errors import NotSupportedError
from dpsql.privacy_audit import audit
from tests.sample_aggregate.world import build, metadata


def test_sample_aggregate_queries_are_refused_with_the_reason(tmp_path):
    database = build(tmp_path / "world.duckdb")
    with pytest.raises(NotSupportedError, match="ordinary releases only, not SAMPLE_AGGREGATE"):
        audit(database, metadata(), "SELECT SAMPLE_AGGREGATE(MEDIAN(x), 0, 100) FROM t",
              epsilon=1.0)
