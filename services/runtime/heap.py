"""Keep the cyclic garbage collector off what a long-running process loaded at start (docs/adr/0011-runtime-memory-and-gc.md).

With the embedding models, torch and the libraries in memory the heap holds hundreds of thousands of tracked
objects, and a full (generation 2) collection scans every one of them on whichever request happened to
allocate last. :func:`freeze` is called once the process has loaded what it keeps (``oml serve`` and ``oml
mcp`` after the model warm-up; the recall benchmarks after ingestion, for every system they time): frozen
objects are never scanned again (``gc.freeze``, CPython ≥ 3.7); objects created later are collected as usual.
"""
from __future__ import annotations

import gc


def freeze() -> int:
    """Collect once, then freeze every object tracked so far; returns how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
