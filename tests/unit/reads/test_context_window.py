"""Context declarations (domain/context_window.py): only a well-formed {thread, position} counts."""
from __future__ import annotations

import pytest

from oml.domain import context_window as W


def test_parse_accepts_only_the_closed_shape():
    assert W.parse({"statement": "x", "context": {"thread": "chat", "position": 3}}) == W.Context("chat", 3)
    for bad in (None, {}, {"context": "chat"}, {"context": {"thread": "chat"}},
                {"context": {"thread": "chat", "position": 1, "extra": 1}}, {"context": {"thread": "", "position": 1}},
                {"context": {"thread": "c", "position": -1}}, {"context": {"thread": "c", "position": True}},
                {"context": {"thread": "c", "position": 1.0}}, {"context": {"thread": "x" * 201, "position": 1}},
                {"context": {"thread": "c", "position": 2 ** 53}}):
        assert W.parse(bad) is None, bad


def test_windows_and_digests():
    assert W.window_range(5, 2) == (3, 4) and W.window_range(0, 1) == (0, -1) and W.window_range(4, 0) == (4, 3)
    assert W.dependents_range(5, 2) == (6, 7)
    assert W.window_text("own", ["one", "two"]) == "one\ntwo\nown"
    # The full-text text counts the own text OWN_WEIGHT times, with or without neighbours (one scale per corpus).
    assert W.OWN_WEIGHT == 2
    assert W.lexical_text("own", ["one", "two"]) == "one\ntwo\nown\nown" and W.lexical_text("own", []) == "own\nown"
    assert W.lexical_text("own", ["one"], own_weight=1) == W.window_text("own", ["one"])
    assert W.thread_digest("t1", "chat") != W.thread_digest("t2", "chat") and len(W.thread_digest("t", "c")) == 32
    assert W.check_before(0) == 0
    for bad in (-1, 9, True, 1.5):
        with pytest.raises(ValueError):
            W.check_before(bad)
