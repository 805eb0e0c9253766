"""The demo's step bookkeeping: a Ctrl-C is never lost (tools/oml_tools/demo/steps.py)."""
from __future__ import annotations

import io
import signal
import sys

import pytest
from rich.console import Console

from oml_tools.demo.steps import Steps


def test_a_ctrl_c_dropped_inside_a_finalizer_is_raised_at_the_next_step(monkeypatch):
    dropped: list = []
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)
    steps = Steps(Console(file=io.StringIO()))

    class Finalized:
        def __del__(self) -> None:  # as when SIGINT lands during a pooled connection's check-in
            steps.on_sigint(signal.SIGINT, None)

    Finalized()  # the interpreter hands the KeyboardInterrupt to sys.unraisablehook and drops it
    assert [type(u.exc_value) for u in dropped] == [KeyboardInterrupt]
    with pytest.raises(KeyboardInterrupt), steps.step("the next step"):
        pass
    assert steps.records == []  # the step never began


def test_a_ctrl_c_during_a_step_ends_it_as_interrupted():
    steps = Steps(Console(file=io.StringIO()))
    with pytest.raises(KeyboardInterrupt), steps.step("a step"):
        steps.on_sigint(signal.SIGINT, None)
    assert steps.interrupted and steps.records[0].outcome == "interrupted"
    with pytest.raises(KeyboardInterrupt), steps.step("never runs"):
        pass
