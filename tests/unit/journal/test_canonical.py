"""The fast RFC 8785 encoder agrees byte for byte with the ``rfc8785`` library.

A Hypothesis differential test over the JSON subset OML writes — strings
(including non-BMP code points, escapes and control characters), integers up
to ±(2^53−1), booleans, null, lists and objects whose keys mix BMP and
non-BMP characters (where UTF-16 order and code point order differ).
"""
from __future__ import annotations

import datetime as dt

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oml.domain.canonical import MAX_DEPTH, MAX_SAFE_INT, CanonicalError, canonical, reference_canonical

# Code points where JCS needs care: controls, quote and backslash, DEL, line separators,
# the top of the BMP (sorted after U+10000 in UTF-16 order) and astral characters.
_TRICKY = st.sampled_from(["\x00", "\x1f", "\b", "\f", "\n", "\r", "\t", '"', "\\", "/", "\x7f", "\u2028",
                           "\u2029", "\ue000", "\uffff", "\U00010000", "\U0001f600", "é", "€"])
_TEXT = st.text(alphabet=st.one_of(st.characters(exclude_categories=["Cs"]), _TRICKY), max_size=12)
_INT = st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT)


def _json(keys: st.SearchStrategy[str]) -> st.SearchStrategy:
    """JSON values without floats, whose object keys are drawn from ``keys``."""
    return st.recursive(st.none() | st.booleans() | _INT | _TEXT,
                        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5),
                        max_leaves=30)


_JSON = _json(_TEXT)
# ASCII keys, as every document OML writes has: the path through the standard library's C encoder.
_ASCII_JSON = _json(st.text(alphabet=st.characters(max_codepoint=127), max_size=8))
_MANY = settings(max_examples=1500, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@_MANY
@given(_JSON)
def test_fast_encoder_matches_rfc8785(value):
    assert canonical(value) == rfc8785.dumps(value)


@_MANY
@given(_ASCII_JSON)
def test_ascii_key_documents_match_rfc8785(value):
    assert canonical(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("keys", [["\uffff", "\U00010000"], ["b", "a", "\u00e9", "\U0001f600", "\ue000"]])
def test_keys_sort_by_utf16_code_units(keys):
    value = {k: 1 for k in keys}
    assert canonical(value) == rfc8785.dumps(value)
    # U+10000 is D800 DC00 in UTF-16, so it sorts before U+FFFF although its code point is larger.
    if "\uffff" in keys:
        assert canonical(value).index("\U00010000".encode()) < canonical(value).index("\uffff".encode())


@pytest.mark.parametrize("value", [1.5, {"a": 0.0}, [2**53], {"n": -(2**53)}, {1: "x"}, b"bytes", {"s": "\ud800"}])
def test_refusals_match_reference(value):
    with pytest.raises(CanonicalError):
        canonical(value)
    with pytest.raises(CanonicalError):
        reference_canonical(value)


def _nested(levels: int, make) -> object:
    v = make()
    for _ in range(levels - 1):
        w = make()
        if isinstance(w, dict):
            w["k"] = v
        else:
            w.append(v)
        v = w
    return v


@pytest.mark.parametrize("make", [list, dict])
def test_depth_is_bounded_the_same_on_both_paths(make):
    """MAX_DEPTH arrays or objects one inside another encode (as rfc8785 does); one more is a CanonicalError on the
    fast path and the reference alike, not a RecursionError."""
    ok = _nested(MAX_DEPTH, make)
    assert canonical(ok) == reference_canonical(ok) == rfc8785.dumps(ok)
    for deep in (_nested(MAX_DEPTH + 1, make), _nested(5000, make)):
        with pytest.raises(CanonicalError, match="nest deeper"):
            canonical(deep)
        with pytest.raises(CanonicalError, match="nest deeper"):
            reference_canonical(deep)


def test_a_value_that_contains_itself_is_refused_not_walked_forever():
    d: dict = {"a": 1}
    d["b"] = d
    loop: list = [1]
    loop.append({"x": loop})
    for v in (d, loop):
        with pytest.raises(CanonicalError, match="contains itself"):
            canonical(v)


def test_rfc8785_appendix_b_style_example():
    # Escapes and literal non-ASCII exactly as RFC 8785 §3.2.2.2 prescribes.
    value = {"literals": [None, True, False], "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/", "int": -(2**53 - 1)}
    assert canonical(value) == b'{"int":-9007199254740991,"literals":[null,true,false],"string":"\xe2\x82\xac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'


def test_new_id_is_a_lowercase_uuid4():
    import uuid

    from oml.domain.canonical import new_id

    ids = {new_id() for _ in range(2000)}
    assert len(ids) == 2000
    for s in ids:
        u = uuid.UUID(s)
        assert (u.version, u.variant, str(u)) == (4, uuid.RFC_4122, s)


def test_new_ids_differ_across_threads_and_a_fork():
    """The buffered draws: no two threads, and no forked child and its parent, hand out the same ids."""
    import os
    import threading

    from oml.domain.canonical import new_id

    new_id()  # the buffer now holds this thread's next ids
    seen: list[str] = []
    threads = [threading.Thread(target=lambda: seen.extend(new_id() for _ in range(300))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child writes its next ids and leaves at once
        os.write(w, "".join(new_id() for _ in range(10)).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    child = os.read(r, 4096).decode()
    os.close(r)
    mine = [new_id() for _ in range(10)]
    theirs = [child[i:i + 36] for i in range(0, len(child), 36)]
    assert len(theirs) == 10 and not set(theirs) & set(mine)
    assert len(set(seen)) == 1200 and not set(seen) & set(mine)


@given(st.datetimes(min_value=dt.datetime(1, 1, 1), timezones=st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=5, minutes=30))])))
def test_format_time_fast_path_matches_strftime(t):
    from oml.domain.canonical import format_time

    assert format_time(t) == t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _strptime_or_none(s: str):
    try:
        return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


@given(st.datetimes(min_value=dt.datetime(1000, 1, 1), timezones=st.just(dt.UTC)))
def test_parse_time_inverts_format_time(t):  # (format_time writes years below 1000 with fewer digits: not a time it parses)
    from oml.domain.canonical import format_time, parse_time

    assert parse_time(format_time(t)) == t


@given(st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z\Z"))
def test_parse_time_reads_its_shape_as_strptime_did(s):
    """fromisoformat on the checked shape: the same instant as strptime, and the same refusals (month 13, Feb 30, hour 24)."""
    from oml.domain.canonical import parse_time

    expected = _strptime_or_none(s)
    if expected is None:
        with pytest.raises(ValueError):
            parse_time(s)
    else:
        assert parse_time(s) == expected


@pytest.mark.parametrize("s", ["2026-1-02T03:04:05.000000Z", "2026-01-02T03:04:05.1Z", "2026-01-02T03:04:05Z",
                               "2026-01-02T03:04:05.000000+00:00", "20260102T030405.000000Z", "2026-01-02 03:04:05.000000Z",
                               "\u0662\u0660\u0662\u0666-01-02T03:04:05.000000Z", "2026-01-02T03:04:05.000000Z\n", " 2026-01-02T03:04:05.000000Z"])
def test_parse_time_refuses_every_other_shape(s):
    from oml.domain.canonical import parse_time

    with pytest.raises(ValueError):
        parse_time(s)
