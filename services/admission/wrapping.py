"""HPKE wraps of a group commit's DEKs in a worker process (issue 14; docs/decisions.md T7).

One HPKE wrap per artifact (the design's shredding unit) is the largest single cost of admitting a
claim, and ``cryptography`` holds the GIL while it runs, so a thread cannot overlap it. A batch checks
out a worker -- ``python -m oml.services.admission.wrapping``, started with :mod:`subprocess`, so it
never re-imports the caller's main module as ``multiprocessing``'s spawn would -- hands it each
chunk's ``(dek, info)`` pairs and reads the wrapped DEKs one chunk later, while it classifies, seals
and signs the next. Only a public key and the DEKs of the artifacts being written cross the pipe (both
already in admission's memory); no private key.

``OML_ADMISSION_WRAP_PROCESSES`` (default 1) caps the idle workers kept per server process; 0 wraps
in-process. A worker that fails is dropped and its jobs are wrapped in-process.
"""
from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import threading
from typing import BinaryIO

from oml.domain import envelope

_HEADER = struct.Struct(">I")
_lock = threading.Lock()
_idle: list["Worker"] = []


def wrap_many(public_key: bytes, jobs: list[tuple[bytes, bytes]]) -> list[bytes]:
    """``[envelope.wrap(dek, info=info, public_key=public_key) for dek, info in jobs]``."""
    return [envelope.wrap(dek, info=info, public_key=public_key) for dek, info in jobs]


def _send(stream: BinaryIO, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: BinaryIO) -> object:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("wrap worker closed its pipe")
    (n,) = _HEADER.unpack(head)
    return pickle.loads(stream.read(n))


class Worker:
    """One worker process; requests are answered in order, so one batch uses it at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "oml.services.admission.wrapping"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.pending = 0

    def submit(self, public_key: bytes, jobs: list[tuple[bytes, bytes]]) -> None:
        _send(self.proc.stdin, (public_key, jobs))
        self.pending += 1

    def result(self) -> list[bytes]:
        self.pending -= 1
        return _receive(self.proc.stdout)  # type: ignore[return-value]

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 -- best effort on a worker being dropped
            self.proc.kill()


def checkout() -> Worker | None:
    """An idle worker or a new one; ``None`` when workers are off or one cannot start."""
    if int(os.environ.get("OML_ADMISSION_WRAP_PROCESSES", "1")) <= 0:
        return None
    with _lock:
        if _idle:
            return _idle.pop()
    try:
        return Worker()
    except OSError:
        return None


def checkin(worker: Worker | None, *, healthy: bool) -> None:
    """Return ``worker`` for the next batch (or close it: unhealthy, answers pending, or enough idle)."""
    if worker is None:
        return
    with _lock:
        if healthy and worker.pending == 0 and len(_idle) < int(os.environ.get("OML_ADMISSION_WRAP_PROCESSES", "1")):
            _idle.append(worker)
            return
    worker.close()


def _serve() -> None:
    """The worker's loop: read ``(public key, jobs)``, answer the wrapped DEKs, until stdin closes."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            public_key, jobs = _receive(stdin)  # type: ignore[misc]
        except EOFError:
            return
        _send(stdout, wrap_many(public_key, jobs))


if __name__ == "__main__":
    _serve()
