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


def test_cpu_is_charged_per_phase_only_when_asked_and_a_wait_costs_little_of_it():
    import time

    assert Phases().cpu_ms() == {}
    ph = Phases(cpu=True)
    time.sleep(0.02)  # a wait: wall time, no CPU
    ph.mark("wait")
    end = time.thread_time() + 0.02
    while time.thread_time() < end:  # work on this thread
        pass
    ph.mark("work")
    cpu, wall = ph.cpu_ms(), ph.ms()
    assert list(cpu) == ["wait", "work"]
    assert cpu["wait"] < wall["wait"] / 2
    assert cpu["work"] >= 20.0 and cpu["work"] <= wall["work"] + 1.0


def test_the_bench_prints_each_phase_with_its_cpu_beside_it():
    from oml_tools.bench.peers import CPU, phase_table, render_phases

    calls = [(10.0 + i, {"lexical": 4.0, "lexical" + CPU: 1.0, "statements": 2.0}) for i in range(20)]
    lines = render_phases(phase_table(calls))
    assert any(line.split()[:5] == ["lexical", "4.00", "1.00", "4.00", "1.00"] for line in lines)
    assert not any(CPU in line for line in lines)


def test_a_phase_some_calls_skip_is_listed_where_the_calls_that_mark_it_put_it():
    from oml_tools.bench.peers import phase_table

    calls = [(10.0, {"parse": 0.1, "embed": 6.0, "lexical": 4.0, "vector": 2.0}),
             (11.0, {"parse": 0.1, "lexical": 4.0, "embed": 6.0, "lexical_rows": 1.0, "vector": 2.0})]
    assert list(phase_table(calls)["middle_10pct"]) == ["latency", "parse", "embed", "lexical", "lexical_rows", "vector"]
