"""One real server process per test module (tests/server/serving.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.server.serving import ServerProcess, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("server"), "--max-failed-logins", "5")
    yield proc
    proc.stop()
