"""The time leg and accent folding end to end: admission (with valid_from) → the real indexer and model → recall.

A small corpus built here: the same kind of event on different dates, so only
the date a query names tells them apart; and statements whose accents differ
from the query's.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from oml.services.reads.recall import Recaller, RecallRequest

from support.recall import make_world

HIKES = [
    ("2023-03-14T10:00:00+00:00", "Ana went hiking in the hills with her brother and took many photos."),
    ("2023-05-20T10:00:00+00:00", "Ana went hiking by the lake with her brother and took many photos."),
    ("2023-08-02T10:00:00+00:00", "Ana went hiking in the forest with her brother and took many photos."),
    ("2023-12-28T10:00:00+00:00", "Ana went hiking up the mountain with her brother and took many photos."),
]
ASKED = "2024-01-04T12:00:00+00:00"  # a Thursday: "last week" is 25–31 December 2023


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "recall-time")
    w.hikes = [w.remember("main", s, valid_from=at) for at, s in HIKES]
    w.cafe = w.remember("main", "The team meets at the Café Noir on Fridays.")
    w.naive = w.remember("main", "The new intern asked a naive question about the build.")
    w.index()
    w.reader = w.key("reader", "main")
    return w


def ask(w, query, *, time_leg=True, **kw):
    return Recaller(w.ctx, time_leg=time_leg).recall(w.reader, RecallRequest(query=query, k=4, **kw))


@pytest.mark.parametrize(("query", "expected", "period"), [
    ("Where did Ana go hiking in May 2023?", 1, "month"),
    ("Where did Ana go hiking on 2 August 2023?", 2, "day"),
    ("Where did Ana go hiking last week?", 3, "week"),
])
def test_the_time_leg_parses_and_applies_the_date(world, query, expected, period):
    out = ask(world, query, valid_at=ASKED)
    d = out["diagnostics"]
    assert d["legs"]["time"]["window"]["period"] == period
    assert d["fusion"]["time"] == 1.0
    top = out["hits"][0]
    assert top["claim_id"] == world.hikes[expected]["claim_id"]
    assert "time" in top["retrievers"]
    # only the claim whose valid_from lies in the window is in the time leg
    in_leg = [h["claim_id"] for h in out["hits"] if "time" in h["retrievers"]]
    assert in_leg == [world.hikes[expected]["claim_id"]]


def test_the_reference_is_the_reads_valid_time(world):
    # Asked in mid-August 2023, "last week" is 31 July – 6 August: the forest hike.
    out = ask(world, "Where did Ana go hiking last week?", valid_at="2023-08-10T12:00:00+00:00")
    assert out["diagnostics"]["legs"]["time"]["window"]["from"].startswith("2023-07-31")
    assert out["hits"][0]["claim_id"] == world.hikes[2]["claim_id"]


def test_no_time_named_no_time_leg(world):
    for kw in ({}, {"time_leg": False}):  # on (as asked here) or off
        out = ask(world, "Where did Ana go hiking with her brother?", valid_at=ASKED, **kw)
        assert "time" not in out["diagnostics"]["legs"]
        assert "time" not in out["diagnostics"]["fusion"]
    off = ask(world, "Where did Ana go hiking in May 2023?", valid_at=ASKED, time_leg=False)
    assert "time" not in off["diagnostics"]["legs"]


def test_off_by_default(world):
    out = Recaller(world.ctx).recall(world.reader, RecallRequest(query="Where did Ana go hiking in May 2023?",
                                                                 valid_at=ASKED))
    assert "time" not in out["diagnostics"]["legs"]


def test_fts_and_vector_retrievers_have_no_time_leg(world):
    for retriever in ("fts", "vector"):
        out = ask(world, "Where did Ana go hiking in May 2023?", valid_at=ASKED, retriever=retriever)
        assert "time" not in out["diagnostics"]["legs"]


@pytest.mark.parametrize(("query", "which"), [("cafe noir", "cafe"), ("Café Noir", "cafe"),
                                              ("naïve question", "naive"), ("naive question", "naive")])
def test_accents_fold_on_both_sides(world, query, which):
    out = ask(world, query, retriever="fts", valid_at=ASKED)
    assert out["hits"], out["diagnostics"]
    assert out["hits"][0]["claim_id"] == getattr(world, which)["claim_id"]


def test_the_index_holds_folded_lexemes(world, ctx):
    with ctx.db.tenant("oml_server", world.tenant) as conn:
        lex = conn.execute(sa.text("SELECT tsvector_to_array(tsv) FROM memories_fts WHERE claim_id = :c"),
                           {"c": world.cafe["claim_id"]}).scalar()
    assert "cafe" in lex and "café" not in lex
