"""dpsql.server.statements: the release NOTICE's JSON is the release record's ``to_json``."""

from __future__ import annotations

import json

import pytest

from dpsql.release.record import ColumnRelease, Release
from dpsql.server.statements import release_notice

RELEASES = [
    Release(0.5, 0.0, "laplace", (ColumnRelease("n", "laplace", 0.5, 0.0, 5.99),), "fp"),
    Release(1.0, 1e-6, "gaussian", (ColumnRelease("status", None, 0.0, 0.0, None),
                                    ColumnRelease("total", "gaussian", 1.0, 1e-6, None)),
            "fp2", cached=True),
    Release(0.0, 0.0, "exact", (), "fp3"),
]


@pytest.mark.parametrize("release", RELEASES)
def test_the_notice_detail_is_the_release_record(release: Release) -> None:
    text, detail = release_notice(release)
    assert json.loads(detail) == json.loads(json.dumps(release.to_json(), default=str))
    assert detail == json.dumps(release.to_json(), default=str)
    assert text.startswith("dpsql: ")
