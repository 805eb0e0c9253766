"""The time a query names, as a window of valid time (docs/recall.md, "Time leg").

A parser (``services/reads/timeleg.py``, the ``dateparser`` library) turns an
expression such as "in May 2023", "last week" or "yesterday" into an instant
and the calendar unit it names (``day``, ``week``, ``month``, ``year``); this
module turns that pair into the half-open interval ``[start, end)`` of the
whole unit, in UTC: a day is its calendar day, a week its ISO 8601 week
(Monday to Monday), a month its calendar month, a year its calendar year. A
claim is in the window when its ``valid_from`` lies inside it (the instant
the claim became valid — for a reported turn, when it was said).

Pure: no I/O.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

PERIODS = ("day", "week", "month", "year")


@dataclass(frozen=True)
class TimeWindow:
    """``[start, end)`` in UTC, the calendar unit it spans (one of :data:`PERIODS`) and the query's words that
    named it."""

    start: dt.datetime
    end: dt.datetime
    period: str
    expression: str

    def contains(self, instant: dt.datetime | None) -> bool:
        """Whether ``instant`` (a zoned time, or None: never) lies in ``[start, end)``."""
        return instant is not None and self.start <= instant < self.end

    def describe(self) -> dict[str, str]:
        """The diagnostics' ``legs.time.window``: ISO 8601 ``from``/``to`` and the ``period``."""
        return {"from": self.start.isoformat(), "to": self.end.isoformat(), "period": self.period}


def window(instant: dt.datetime, period: str, expression: str = "") -> TimeWindow:
    """The calendar ``period`` containing ``instant`` as a :class:`TimeWindow`.

    ``instant`` without a zone is taken as UTC; a zoned one is converted to
    UTC first. Raises ``ValueError`` for a period outside :data:`PERIODS`.
    """
    if period not in PERIODS:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}")
    t = instant.replace(tzinfo=dt.UTC) if instant.tzinfo is None else instant.astimezone(dt.UTC)
    day = dt.datetime(t.year, t.month, t.day, tzinfo=dt.UTC)
    if period == "day":
        start, end = day, day + dt.timedelta(days=1)
    elif period == "week":
        start = day - dt.timedelta(days=day.weekday())
        end = start + dt.timedelta(days=7)
    elif period == "month":
        start = day.replace(day=1)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    else:
        start = day.replace(month=1, day=1)
        end = start.replace(year=start.year + 1)
    return TimeWindow(start, end, period, expression)
