"""Recall's bounded wait for its query vector (docs/recall.md, "Waiting for the query vector"): the runs in flight (services/reads/recall.py ``_QueryVectors``): one per query, a started run left to finish,
a queued run that no read waits for any more cancelled. The read path itself is tested on PostgreSQL
(tests/integration/reads/test_recall_embed_wait.py); the setting that bounds it, with the other durations
(tests/unit/runtime/test_duration_settings.py)."""
from __future__ import annotations

import concurrent.futures
import threading

import pytest

from oml.services.reads.recall import _QueryVectors
from oml.services.runtime.phases import Phases


@pytest.fixture
def pool():
    p = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    yield p
    p.shutdown(wait=True, cancel_futures=True)


def test_reads_of_one_query_share_one_run_that_outlives_their_wait(pool):
    gate, calls = threading.Event(), []

    def embed(text: str) -> list[float]:
        calls.append(text)
        gate.wait(10)
        return [1.0]

    vectors = _QueryVectors(pool)
    try:
        a = vectors.start(embed, "q", Phases())
        b = vectors.start(embed, "q", Phases())
        assert a[1] is b[1] and vectors.in_flight() == 1
        assert not vectors.wait(a[1], 0.05) and not vectors.wait(b[1], 0.05)
        vectors.release(*a)
        vectors.release(*b)
        # Started before both let go: it runs to its end (the embedder caches what it returns), unread.
        assert vectors.in_flight() == 1 and not a[1].future.cancelled()
        c = vectors.start(embed, "q", Phases())
        assert c[1] is a[1]
    finally:
        gate.set()
    assert vectors.wait(c[1], 5) and c[1].future.result() == [1.0]
    vectors.release(*c)
    assert calls == ["q"] and vectors.in_flight() == 0
    d = vectors.start(embed, "q", Phases())  # a run that ended is not reused: the embedder's cache answers
    assert d[1] is not a[1] and vectors.wait(d[1], 5)
    vectors.release(*d)
    assert calls == ["q", "q"]


def test_a_queued_run_no_read_waits_for_is_cancelled(pool):
    gate, calls = threading.Event(), []
    busy = pool.submit(gate.wait, 10)  # the only worker, taken
    vectors = _QueryVectors(pool)
    try:
        a = vectors.start(lambda text: calls.append(text) or [1.0], "queued", Phases())
        b = vectors.start(lambda text: calls.append(text) or [1.0], "other", Phases())
        assert vectors.in_flight() == 2 and not vectors.wait(a[1], 0.05)
        vectors.release(*a)
        assert a[1].future.cancelled() and vectors.in_flight() == 1
        # The next read of that text starts a fresh run.
        c = vectors.start(a[0][0], "queued", Phases())
        assert c[1] is not a[1] and not c[1].future.cancelled()
    finally:
        gate.set()
    busy.result(5)
    assert vectors.wait(b[1], 5) and vectors.wait(c[1], 5)
    vectors.release(*b)
    vectors.release(*c)
    assert sorted(calls) == ["other", "queued"] and vectors.in_flight() == 0
