"""Step bookkeeping for the demo: numbered, timed, each one asserting its own outcome.

A step that does not do what it should raises :class:`DemoFailed` through
:func:`check`; any other exception inside a step is turned into one, naming
the step and the exception's type and message (the client's problems carry
a stable code and a content-free detail, never a submitted value).
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rich.console import Console


class DemoFailed(Exception):
    """A step did not do what it should; ``str()`` says which step and why."""

    def __init__(self, message: str, step: str | None = None, *, interrupted: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.step = step
        self.interrupted = interrupted  # Ctrl-C, not a failed check: `oml demo` exits 130

    def __str__(self) -> str:
        return f"step {self.step!r} failed: {self.message}" if self.step else self.message


def check(condition: object, message: str) -> None:
    """Raise :class:`DemoFailed` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise DemoFailed(message)


@dataclass
class StepRecord:
    number: int
    title: str
    seconds: float = 0.0
    ok: bool = False
    outcome: str = ""


@dataclass
class Steps:
    console: Console
    records: list[StepRecord] = field(default_factory=list)
    interrupted: bool = False

    def on_sigint(self, signum: int, frame: object) -> None:
        """SIGINT handler for the run: remember the Ctrl-C, then raise ``KeyboardInterrupt`` as Python's own does.

        The interpreter drops an exception raised while a finalizer runs (a ``__del__``, or a weakref callback
        such as a pooled connection's check-in), printing only "Exception ignored"; the flag makes the next step
        boundary (:meth:`raise_if_interrupted`) raise it again, so a Ctrl-C is never lost.
        """
        self.interrupted = True
        raise KeyboardInterrupt

    def raise_if_interrupted(self) -> None:
        """Raise ``KeyboardInterrupt`` when a Ctrl-C arrived since the run began."""
        if self.interrupted:
            raise KeyboardInterrupt

    @contextmanager
    def step(self, title: str) -> Iterator[StepRecord]:
        self.raise_if_interrupted()
        rec = StepRecord(len(self.records) + 1, title)
        self.records.append(rec)
        self.console.rule(f"[bold cyan]{rec.number}. {title}", align="left")
        started = time.perf_counter()
        try:
            yield rec
            self.raise_if_interrupted()
        except DemoFailed as exc:
            rec.seconds = time.perf_counter() - started
            exc.step = exc.step or title
            rec.outcome = exc.message
            raise
        except KeyboardInterrupt:
            # Not a failed check: the scenario turns it into its interrupted ending (exit 130, no anchor).
            rec.seconds = time.perf_counter() - started
            rec.outcome = "interrupted"
            raise
        except Exception as exc:  # noqa: BLE001 - every failure ends the demo with a clear message
            rec.seconds = time.perf_counter() - started
            rec.outcome = f"{type(exc).__name__}: {exc}"
            raise DemoFailed(rec.outcome, title) from exc
        rec.seconds = time.perf_counter() - started
        rec.ok = True
        self.console.print(f"[green]✓[/green] {rec.outcome or 'done'} [dim]({rec.seconds:.1f} s)[/dim]")
