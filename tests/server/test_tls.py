"""TLS: with --tls-cert/--tls-key the server negotiates TLS and refuses plaintext clients."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.server.serving import ServerProcess, start_server

# one xdist worker runs this module: its TLS server process (and certificate) is
# built once per run, not once per worker (issue #13)
pytestmark = pytest.mark.xdist_group("server-tls")


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make a test certificate")
    tmp: Path = tmp_path_factory.mktemp("tls")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    proc = start_server(tmp, "--tls-cert", str(cert), "--tls-key", str(key))
    yield proc
    proc.stop()


def test_tls_clients_are_served(tls_server: ServerProcess) -> None:
    with psycopg.connect(tls_server.dsn(sslmode="require"), autocommit=True) as conn:
        assert conn.pgconn.ssl_in_use
        (n,) = conn.execute("SELECT COUNT(*) AS n FROM orders").fetchone()
        assert isinstance(n, int)


def test_plaintext_clients_are_refused(tls_server: ServerProcess) -> None:
    with pytest.raises(psycopg.OperationalError, match="requires TLS"):
        psycopg.connect(tls_server.dsn(sslmode="disable"))
