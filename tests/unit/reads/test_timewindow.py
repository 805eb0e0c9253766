"""The time leg's windows (domain/timewindow.py) and its parser (services/reads/timeleg.py, dateparser)."""
from __future__ import annotations

import datetime as dt

import pytest

from oml.domain.timewindow import window
from oml.services.reads import timeleg

UTC = dt.UTC
REF = dt.datetime(2024, 1, 4, 15, 0, tzinfo=UTC)  # a Thursday


def d(*a: int) -> dt.datetime:
    return dt.datetime(*a, tzinfo=UTC)


@pytest.mark.parametrize(("period", "start", "end"), [
    ("day", d(2023, 5, 17), d(2023, 5, 18)),
    ("week", d(2023, 5, 15), d(2023, 5, 22)),
    ("month", d(2023, 5, 1), d(2023, 6, 1)),
    ("year", d(2023, 1, 1), d(2024, 1, 1)),
])
def test_window_is_the_whole_calendar_unit(period, start, end):
    w = window(dt.datetime(2023, 5, 17, 13, 30), period)
    assert (w.start, w.end, w.period) == (start, end, period)
    assert w.contains(start) and not w.contains(end) and not w.contains(None)


def test_december_and_zones():
    assert window(d(2023, 12, 31, 23), "month").end == d(2024, 1, 1)
    east = dt.timezone(dt.timedelta(hours=5))
    assert window(dt.datetime(2023, 6, 1, 2, tzinfo=east), "day").start == d(2023, 5, 31)
    with pytest.raises(ValueError):
        window(REF, "fortnight")


@pytest.mark.parametrize(("query", "start", "end", "period"), [
    ("What did Maria do in May 2023?", d(2023, 5, 1), d(2023, 6, 1), "month"),
    ("What painting did Melanie show on October 13, 2023?", d(2023, 10, 13), d(2023, 10, 14), "day"),
    ("What did Gina find on 1 February, 2023?", d(2023, 2, 1), d(2023, 2, 2), "day"),
    ("What did I do yesterday?", d(2024, 1, 3), d(2024, 1, 4), "day"),
    ("Where did John go last year?", d(2023, 1, 1), d(2024, 1, 1), "year"),
    # a month without a year is the last one before the reference (memories are of the past)
    ("When did Melanie go camping in June?", d(2023, 6, 1), d(2023, 7, 1), "month"),
])
def test_parse_relative_to_the_reference(query, start, end, period):
    w = timeleg.parse(query, REF)
    assert w is not None
    assert (w.start, w.end, w.period) == (start, end, period)
    assert w.expression and w.expression in query


@pytest.mark.parametrize("query", ["What is Caroline's identity?", "", "Where did we go camping?",
                                   "What may Caroline do next?"])
def test_no_time_named(query):
    assert timeleg.parse(query, REF) is None
