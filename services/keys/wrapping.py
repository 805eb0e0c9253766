"""Classification and sealing of a group commit's claims in a worker process (docs/adr/0001-admission-write-path.md,
docs/adr/0002-envelope-encryption-and-hpke-sharing.md).

Sealing (a fresh DEK per artifact, the design's shredding unit, wrapped with HPKE) and the personal-data
classifier are the largest costs of admitting a claim after its signature, and both are mostly Python or hold the GIL
(the classifier; ``cryptography``'s AES-GCM and HPKE), so a thread cannot overlap them. A batch of :data:`~oml.services.journal.batch.WORKER_MIN`
or more checks out a worker -- ``python -m oml.services.keys.wrapping``, started with
:mod:`subprocess`, so it never re-imports the caller's main module as ``multiprocessing``'s spawn
would -- and hands it, right after the head lock, every body of the batch in groups: the worker
classifies each and seals each new claim's (AES-256-GCM under a fresh DEK, the DEK wrapped with HPKE
to the tenant's public key, under the ids admission drew for it), while admission validates, links and
signs. Crossing the pipe: the bodies and their canonical bytes (already in admission's memory), the
AAD and DEK info, the public key; back, findings, ciphertexts and wrapped DEKs. The DEK of a body
sealed here exists only in the worker (other bodies are sealed in admission); no tenant private key is
ever here, and the worker's environment keeps none of the server's credentials (:func:`worker_environment`).

``OML_ADMISSION_WRAP_PROCESSES`` (default 1) caps the idle workers kept per server process; 0: none,
admission classifies and seals in-process. A worker that fails is dropped and its items are classified
and sealed in-process. The worker wraps the DEKs of one request under one HPKE encapsulation, at most
``OML_ADMISSION_WRAP_SHARE`` (default 10) per encapsulation, each under its own ``info``
(:func:`oml.domain.envelope.wrap_many`; docs/adr/0002-envelope-encryption-and-hpke-sharing.md).
"""
from __future__ import annotations

import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from typing import BinaryIO

from oml.domain import envelope

_HEADER = struct.Struct(">I")
_lock = threading.Lock()
_idle: list[Worker] = []


def _frame(obj: object) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def _send(stream: BinaryIO, obj: object) -> None:
    stream.write(_frame(obj))
    stream.flush()


def _ready(fd: int, event: int, timeout: float) -> bool:
    """Whether ``fd`` is ready for ``event`` (``select.POLLIN`` or ``POLLOUT``) within ``timeout`` seconds. poll, not
    select: a server with many connections holds descriptors beyond select's 1,024."""
    p = select.poll()
    p.register(fd, event)
    return bool(p.poll(max(timeout, 0) * 1000))


def _write(fd: int, data: bytes, timeout: float) -> None:
    """Write all of ``data`` to the non-blocking ``fd`` (the worker's stdin); ``TimeoutError`` when the pipe stays
    full for ``timeout`` seconds in all (a worker stopped while its requests exceed what the pipe holds)."""
    end = time.monotonic() + timeout
    view = memoryview(data)
    while view:
        if not _ready(fd, select.POLLOUT, end - time.monotonic()):
            raise TimeoutError("the worker did not take its request in time")
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            pass


# How long admission waits for one answer, or for the pipe to take one request, before it gives the worker up and
# seals in-process (a worker stopped or starved; the slowest answer is the first, behind the worker's start-up,
# well under a second here).
ANSWER_TIMEOUT_S = 10.0
# How long a refused batch reads the answers it will not use, so the worker can be kept (else it is killed).
DRAIN_S = 0.5


def _receive(fd: int, timeout: float) -> object:
    """One answer from the worker's stdout ``fd``; ``TimeoutError`` when none starts within ``timeout`` seconds
    (an answer that has started is read to its end: the worker writes whole answers)."""
    if not _ready(fd, select.POLLIN, timeout):
        raise TimeoutError("the worker did not answer in time")
    (n,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    return pickle.loads(_read_exact(fd, n))


# What the worker's environment keeps of the server's: what a Python interpreter and its imports read, and the
# worker's own two settings. Nothing else passes, so no credential the server holds in its environment
# (OML_MASTER_KEY, a database URL with a password, a token PIN, cloud keys) reaches the worker.
_ENVIRONMENT = frozenset({
    "PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONIOENCODING",
    "PYTHONUTF8", "VIRTUAL_ENV", "HOME", "TMPDIR", "TZ", "LANG", "LC_ALL", "LC_CTYPE", "SYSTEMROOT",
    "LD_LIBRARY_PATH", "OPENSSL_CONF", "OPENSSL_MODULES",  # a libpython or an OpenSSL provider (FIPS) where it lives
    "OML_ADMISSION_WRAP_SHARE", "OML_ADMISSION_WRAP_BATCH"})


def worker_environment() -> dict[str, str]:
    """The worker's environment: the server's, keeping only :data:`_ENVIRONMENT`'s names."""
    return {k: v for k, v in os.environ.items() if k in _ENVIRONMENT}


class Worker:
    """One worker process; requests are answered in order (one batch uses it at a time), and each answer is
    taken by the id its request returned, so a batch can read them in another order."""

    def __init__(self) -> None:
        # stdout unbuffered: answers are read from its descriptor after select (services/keys/wrapping.py _receive).
        self.proc = subprocess.Popen([sys.executable, "-m", "oml.services.keys.wrapping"], env=worker_environment(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        # Requests are written under the head lock: with a deadline (_write), never a write that waits for ever.
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.sent = 0
        self.read = 0
        self.answers: dict[int, object] = {}
        self.unclaimed: list[int] = []  # ids sent and not yet taken, oldest first

    @property
    def pending(self) -> int:
        """Answers not yet taken (a worker is reused only with none)."""
        return len(self.unclaimed)

    def _request(self, message: tuple) -> int:
        # The worker reads requests on a thread of its own, so the pipe drains while it runs; a stopped one is
        # given up after ANSWER_TIMEOUT_S (OSError: the batch drops the worker and seals in-process).
        _write(self.proc.stdin.fileno(), _frame(message), ANSWER_TIMEOUT_S)
        rid, self.sent = self.sent, self.sent + 1
        self.unclaimed.append(rid)
        return rid

    def seal(self, regions: tuple[str, ...] | None, public_key: bytes,
             items: list[tuple[dict, bytes | None, bytes | None, bytes | None]]) -> int:
        """Ask, for each item ``(body, canonical bytes, AAD, DEK info)``, for ``(findings, sealed)``: the body's
        :func:`oml.domain.pii.classify_body` under ``regions`` (its findings, or the exception it raised) and,
        when the item carries its bytes, ``(ciphertext, SHA-256, HPKE-wrapped DEK)`` under a fresh DEK
        (:func:`seal_all`), else ``None``; returns the request's id."""
        return self._request(("seal", (regions, public_key), items))

    def result(self, rid: int | None = None, *, timeout: float | None = None) -> list:
        """The answer to request ``rid`` (default: the oldest not yet taken). Raises ``TimeoutError`` when the
        worker starts no answer within ``timeout`` seconds (default :data:`ANSWER_TIMEOUT_S`), ``EOFError`` when
        it has gone."""
        timeout = ANSWER_TIMEOUT_S if timeout is None else timeout
        if rid is None:
            rid = self.unclaimed[0]
        while rid not in self.answers:
            self.answers[self.read] = _receive(self.proc.stdout.fileno(), timeout)
            self.read += 1
        self.unclaimed.remove(rid)
        return self.answers.pop(rid)  # type: ignore[return-value]

    def drain(self, seconds: float = DRAIN_S) -> bool:
        """Read and drop every answer not taken yet, for at most ``seconds`` (a refused batch's); True when none
        is left, so the worker can serve the next batch."""
        end = time.monotonic() + seconds
        try:
            while self.unclaimed:
                self.result(self.unclaimed[0], timeout=end - time.monotonic())
        except (OSError, EOFError, TimeoutError, pickle.UnpicklingError):
            return False
        return True

    def close(self, *, kill: bool = False) -> None:
        """End the worker: at once with ``kill`` (one that may be stuck writing answers nobody will read), else by
        closing its stdin, which it takes as the end."""
        try:
            if kill:
                self.proc.kill()
            else:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
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
    worker.close(kill=not healthy or worker.pending > 0)


def _read_exact(fd: int, n: int) -> bytes:
    parts, left = [], n
    while left:
        part = os.read(fd, left)
        if not part:
            raise EOFError("wrap worker's stdin closed")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def share() -> int:
    """``OML_ADMISSION_WRAP_SHARE``: at most this many DEKs (1 to 10) are wrapped under one HPKE encapsulation (1: a
    fresh one each); checked at ``oml``'s start (services/runtime/settings.py), held to 1..10 here for library use."""
    return min(10, max(1, int(os.environ.get("OML_ADMISSION_WRAP_SHARE", "10"))))


def seal_all(public_key: bytes, items: list[tuple[dict, bytes, bytes, bytes]]) -> list[tuple[bytes, bytes, bytes]]:
    """For each ``(body, canonical bytes, AAD, DEK info)``: the body under a fresh DEK
    (:func:`oml.domain.envelope.encrypt`), the DEK wrapped to ``public_key`` with HPKE
    (:func:`oml.domain.envelope.wrap_many`, :func:`share` DEKs to an encapsulation). Returns
    ``(ciphertext, sha256(ciphertext), wrapped DEK)`` per item."""
    encrypted = [envelope.encrypt(body, aad=aad, plaintext=plaintext) for body, plaintext, aad, _ in items]
    wrapped = envelope.wrap_many([(dek, item[3]) for (dek, _, _), item in zip(encrypted, items)],
                                 public_key=public_key, share=share())
    return [(ciphertext, digest, w) for (_, ciphertext, digest), w in zip(encrypted, wrapped)]


def classify_all(regions: tuple[str, ...] | None, bodies: list[dict]) -> list:
    """For each body, :func:`oml.domain.pii.classify_body` under ``regions``, or the exception it raised."""
    import oml.domain.pii as pii

    out: list = []
    for body in bodies:
        try:
            out.append(pii.classify_body(body, phone_regions=regions))
        except Exception as exc:  # noqa: BLE001 -- re-raised by admission where it would have been raised
            out.append(exc)
    return out


def _serve() -> None:
    """The worker's loop: read a ``seal`` request (:meth:`Worker.seal`), answer it, until stdin closes."""
    fd, stdout = sys.stdin.fileno(), sys.stdout.buffer
    if os.environ.get("OML_ADMISSION_WRAP_BATCH", "1") != "0":
        try:
            # SCHED_BATCH: woken by a request, the worker does not preempt admission on its core (a wake-up
            # placed it there and took the core for milliseconds); it runs where a core is free, at the same share.
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        except (AttributeError, OSError):
            pass
    # Requests are read on their own thread, whatever the answers are doing: admission writes a batch's requests
    # before it reads their answers, and answers carry ciphertexts, so a loop that stopped reading while its
    # answer waited in a full stdout pipe would leave both processes blocked on each other's pipe (a batch of
    # 100 bodies of 2,000 characters did; test_admission_batch.py::test_a_batch_larger_than_the_pipes_commits).
    requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def read_requests() -> None:
        try:
            while True:
                (n,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
                requests.put(_read_exact(fd, n))
        except (EOFError, OSError):
            pass
        finally:
            requests.put(None)

    threading.Thread(target=read_requests, name="oml-wrap-requests", daemon=True).start()
    while True:
        data = requests.get()
        if data is None:
            return
        kind, (regions, public_key), items = pickle.loads(data)
        if kind != "seal":
            raise ValueError(f"unknown request {kind!r}")
        findings = classify_all(regions, [it[0] for it in items])
        sealed = iter(seal_all(public_key, [it for it in items if it[1] is not None]))
        _send(stdout, [(f, None if it[1] is None else next(sealed)) for f, it in zip(findings, items)])
        del data, items, findings, sealed  # no body or ciphertext kept while the worker waits for the next request


if __name__ == "__main__":
    _serve()
