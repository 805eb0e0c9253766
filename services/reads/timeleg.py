"""The time leg's parser: the first time expression of a query as a :class:`~oml.domain.timewindow.TimeWindow`.

``dateparser`` (``search.search_dates`` to find the expression, then
``DateDataParser.get_date_data`` for the calendar unit it names; English
only, so the language is never guessed) parses relative to the query's
reference time — the read's valid-time instant (``valid_at``, else ``as_of``,
else now) — preferring the past ("in June" is the last June, not the next:
memories are of what happened). Why a library and not rules:
docs/adr/0016-time-leg-and-accent-folding.md. Its data ship inside the wheel;
nothing is downloaded at run time.

A match that is one short word ("we", "may", "sat") is a verb or pronoun far
more often than a date and is ignored; a match must carry a digit, two words
or four letters.
"""
from __future__ import annotations

import datetime as dt
import logging
import threading

from oml.domain.timewindow import PERIODS, TimeWindow, window

log = logging.getLogger(__name__)

_LANGUAGES = ["en"]
_lock = threading.Lock()
_warm = False


def _settings(reference: dt.datetime) -> dict[str, object]:
    ref = reference.astimezone(dt.UTC).replace(tzinfo=None)
    return {"RELATIVE_BASE": ref, "PREFER_DATES_FROM": "past", "RETURN_AS_TIMEZONE_AWARE": False,
            "TIMEZONE": "UTC", "TO_TIMEZONE": "UTC"}


def _plausible(expression: str) -> bool:
    words = expression.split()
    return any(c.isdigit() for c in expression) or len(words) >= 2 or len(expression.strip()) >= 4


def parse(text: str, reference: dt.datetime) -> TimeWindow | None:
    """The window of the first time expression in ``text`` relative to ``reference`` (a zoned time), or None
    when it names no time (or the parser fails: the leg is then skipped, never the read)."""
    if not text.strip():
        return None
    try:
        from dateparser.date import DateDataParser
        from dateparser.search import search_dates

        settings = _settings(reference)
        found = search_dates(text, languages=_LANGUAGES, settings=settings) or []
        for expression, _ in found:
            if not _plausible(expression):
                continue
            data = DateDataParser(languages=_LANGUAGES, settings=settings).get_date_data(expression)
            if data.date_obj is None or data.period not in PERIODS:
                continue
            return window(data.date_obj, data.period, expression)
    except Exception as exc:  # noqa: BLE001 - a parser failure skips the time leg; the read goes on
        log.warning("recall: time expression not parsed (%s)", type(exc).__name__)
    return None


def warm() -> None:
    """Load the parser's language data now (its first parse is the slow one) so the first read does not wait."""
    global _warm
    with _lock:
        if not _warm:
            parse("in May 2023", dt.datetime(2024, 1, 1, tzinfo=dt.UTC))
            _warm = True
