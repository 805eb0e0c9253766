"""Wall time of one call, phase by phase, and the garbage collector's pauses inside it (docs/recall.md, "Latency").

A :class:`Phases` is a list of marks: :meth:`Phases.mark` charges the time since the previous mark (or since the
object was made) to a phase name, so the phases of one call add up to its wall time. Marks cost one
``time.perf_counter_ns()`` and a dict update (well under a microsecond; with ``cpu=True`` a ``time.thread_time_ns()``
too); they carry names and nanoseconds only, never a query or a body.

Collector pauses are counted process-wide by a ``gc.callbacks`` hook installed on first use
(:func:`gc_pauses`): a collection holds the GIL, so one that runs while a call is in flight — on its thread or on
another, such as the query-embedding worker — stops that call for its duration. :class:`Phases` reads the
counters at its start and in :meth:`Phases.gc`; the pause overlaps the phases it fell in (it is not one of them).
"""
from __future__ import annotations

import gc
import threading
import time
from typing import Any

_lock = threading.Lock()
_installed = False
# [collections, pause ns, collections of generation 2]; only the collector's callback writes (it holds the GIL).
_totals = [0, 0, 0]
_started: dict[int, int] = {}


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    now = time.perf_counter_ns()
    tid = threading.get_ident()
    if phase == "start":
        _started[tid] = now
        return
    began = _started.pop(tid, None)
    if began is None:
        return
    _totals[0] += 1
    _totals[1] += now - began
    if info.get("generation") == 2:
        _totals[2] += 1


def gc_pauses() -> tuple[int, int, int]:
    """``(collections, pause nanoseconds, generation-2 collections)`` since the hook was installed (first call)."""
    global _installed
    if not _installed:
        with _lock:
            if not _installed:
                gc.callbacks.append(_on_gc)
                _installed = True
    return _totals[0], _totals[1], _totals[2]


class Phases:
    """Nanoseconds per phase of one call, in the order first marked; plus the collector's pauses meanwhile.

    ``cpu``: also charge each phase the CPU time of the marking thread (``time.thread_time_ns``, a system call per
    mark, so only benchmarks ask for it): a phase's wall time less its CPU time is what the thread waited for — on
    PostgreSQL, on the query embedding, or for a core."""

    __slots__ = ("_cpu_last", "_gc0", "_last", "cpu_ns", "ns", "started")

    def __init__(self, *, cpu: bool = False) -> None:
        self._gc0 = gc_pauses()
        self.started = self._last = time.perf_counter_ns()
        self.ns: dict[str, int] = {}
        self.cpu_ns: dict[str, int] | None = {} if cpu else None
        self._cpu_last = time.thread_time_ns() if cpu else 0

    def mark(self, name: str) -> None:
        """Charge the time since the previous mark to ``name`` (added, when the phase is marked again)."""
        now = time.perf_counter_ns()
        self.ns[name] = self.ns.get(name, 0) + now - self._last
        self._last = now
        if self.cpu_ns is not None:
            cpu = time.thread_time_ns()
            self.cpu_ns[name] = self.cpu_ns.get(name, 0) + cpu - self._cpu_last
            self._cpu_last = cpu

    def add(self, name: str, ns: int) -> None:
        """Record ``ns`` under ``name`` without moving the mark (work that overlapped the phases: another thread's)."""
        self.ns[name] = self.ns.get(name, 0) + ns

    def gc(self) -> tuple[int, int, int]:
        """``(collections, pause ns, generation-2 collections)`` since this object was made."""
        c, ns, full = gc_pauses()
        return c - self._gc0[0], ns - self._gc0[1], full - self._gc0[2]

    def ms(self) -> dict[str, float]:
        """Each phase in milliseconds, then ``total`` (first to last mark), ``gc`` (pause) and ``gc_collections``."""
        out = {k: v / 1e6 for k, v in self.ns.items()}
        c, ns, _ = self.gc()
        out["total"] = (self._last - self.started) / 1e6
        out["gc"] = ns / 1e6
        out["gc_collections"] = float(c)
        return out

    def cpu_ms(self) -> dict[str, float]:
        """Each phase's CPU time on the marking thread in milliseconds (empty unless made with ``cpu=True``)."""
        return {k: v / 1e6 for k, v in (self.cpu_ns or {}).items()}
