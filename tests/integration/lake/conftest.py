"""The S3 endpoint of the lake tests that write to an ``s3://`` lake."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import backends
from support.processes import stop


def _moto_server(log_path: Path):
    """moto's S3 server in a child process on a free port; (process, endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.1)


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """An S3 endpoint for the ``s3://`` lake: ``{"endpoint", "access_key", "secret_key"}``.

    moto's server (a child process, not ``ThreadedMotoServer``: some deltalake calls hold the GIL
    while they wait for S3) by default; the session's MinIO container under ``containers``.
    """
    if backends.current().name == "containers":
        yield backends.minio()
        return
    proc, endpoint = _moto_server(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield {"endpoint": endpoint, "access_key": "lake-writer", "secret_key": "lake-writer-secret"}
    finally:
        stop(proc, timeout=10)
