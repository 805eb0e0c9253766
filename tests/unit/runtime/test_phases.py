"""Phases of one call: marks add up to the call, collector pauses are counted (services/runtime/phases.py)."""
from __future__ import annotations

import gc

import pytest

from oml.services.runtime.phases import Phases, gc_pauses


def test_marks_add_up_to_the_total_in_first_marked_order():
    ph = Phases()
    ph.mark("a")
    ph.mark("b")
    ph.mark("a")
    ph.add("beside", 5_000_000)
    got = ph.ms()
    assert list(got)[:3] == ["a", "b", "beside"]
    assert got["a"] + got["b"] == pytest.approx(got["total"], rel=1e-9)
    assert got["beside"] == 5.0


def test_collections_during_a_call_are_counted_full_ones_apart():
    gc_pauses()  # installs the hook
    ph = Phases()
    gc.collect()
    count, pause_ns, full = ph.gc()
    assert count >= 1 and full >= 1 and pause_ns >= 0
    assert ph.ms()["gc_collections"] >= 1
