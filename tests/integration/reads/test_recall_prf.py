"""Pseudo-relevance feedback (RM3, services/reads/prf.py) on the real read path: expansion terms come only from rows
the reader may read.

Corpus built here: in the reader's workarea (main.eng) rows about a rocket launch; in a workarea it may not read
(main.hr) many more rows that share the query's words and add their own ("salary", "bonus"). With tenant-wide
feedback those words would be the heaviest expansion terms.
"""
from __future__ import annotations

import pytest

from oml.services.reads import prf
from oml.services.reads.recall import Recaller, RecallRequest

from support.recall import keep_results, make_world

ENG = ["zephyr launch window moved to friday", "zephyr launch checklist: fuel, telemetry, countdown",
       "the zephyr telemetry looked clean during the countdown", "lunch order for the team"]
HR = [f"zephyr launch salary bonus review {i}: bonus paid with the salary" for i in range(8)]


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "recall-prf")
    w.eng = [w.remember("main.eng", s) for s in ENG]
    w.area("main.hr")
    w.hr = [w.remember("main.hr", s) for s in HR]
    w.index()
    w.reader = w.key("reader", "main.eng")
    w.everyone = w.key("reader", "main")
    return w


@pytest.fixture
def recorded(monkeypatch):
    """The expansion terms each recall computed (the real function, its result kept)."""
    return keep_results(monkeypatch, prf, "expansion_terms")


def test_a_row_outside_the_readers_scope_never_contributes_expansion_terms(world, recorded):
    out = Recaller(world.ctx, prf="10,10").recall(world.reader, RecallRequest(query="zephyr launch", k=10))
    assert recorded and recorded[0], "feedback ran and found terms in the readable rows"
    terms = set(recorded[0])
    assert terms & {"telemetri", "countdown", "fuel", "friday", "window"}  # from main.eng
    assert not terms & {"salari", "bonus", "review", "paid"}  # main.hr's words never
    assert {h["claim_id"] for h in out["hits"]} <= {c["claim_id"] for c in world.eng}
    assert out["diagnostics"]["legs"]["prf"]["feedback_rows"] == 3  # the three readable rows that match


def test_the_same_query_over_the_whole_tenant_does_expand_with_those_words(world, recorded):
    # The control: a reader of main (both workareas) gets main.hr's words, so the test above is not vacuous.
    Recaller(world.ctx, prf="10,10").recall(world.everyone, RecallRequest(query="zephyr launch", k=10))
    assert set(recorded[0]) & {"salari", "bonus"}


def test_feedback_skips_rows_the_read_did_not_admit():
    rows = [("a", 3.0, ()), ("x", 2.5, ()), ("b", 2.0, ()), ("c", 1.0, ())]
    assert prf.feedback(rows, {"a", "b", "c"}, 2) == [("a", 3.0), ("b", 2.0)]


@pytest.mark.parametrize("spec", ["1", "0,5", "5,0", "5,5,-1", "5,5,1,sideways", "a,b"])
def test_a_malformed_setting_is_refused(spec):
    with pytest.raises(ValueError):
        prf.parse(spec)


def test_off_and_a_spec_parse():
    assert prf.parse("off") is None and prf.parse("") is None
    assert prf.parse("10,8,0.5,replace") == prf.PRF(10, 8, 0.5, "replace")


def test_a_long_querys_expansion_terms_are_searched(world, recorded, monkeypatch):
    # The lexical legs keep a query's first 64 lexemes: the rerun must keep the expansion terms it was given, not
    # drop them behind a long query's own words while legs.prf.terms counts them.
    from oml.domain import recall as R
    from oml.services.reads import recall as recall_mod

    used: list[list[str]] = []
    real = recall_mod.query_lexemes

    def keep(conn, text):
        got = real(conn, text)
        used.append(got[0])
        return got

    monkeypatch.setattr(recall_mod, "query_lexemes", keep)
    filler = " ".join(f"zq{i:03d}" for i in range(R.LEXEMES_MAX + 6))
    out = Recaller(world.ctx, prf="10,10").recall(world.reader, RecallRequest(query=f"zephyr launch {filler}", k=10))
    terms = recorded[0]
    assert terms and out["diagnostics"]["legs"]["prf"]["terms"] == len(terms)
    assert set(terms) <= set(used[-1]) and {"zephyr", "launch"} <= set(used[-1])
