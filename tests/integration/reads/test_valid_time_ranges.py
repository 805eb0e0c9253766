"""The rows a read's instant excludes by valid time are found by range (64_valid_time_ranges.sql; docs/recall.md,
"Valid time"). In a tenant whose every claim declares a valid time, the bounded BM25 search's exclusions (``x`` in
``oml_bm25_topk_sql()``, 63_bm25_postings.sql), run as the function runs it (role ``oml_search``, its own settings,
its session's generic plan), read the rows excluded and no other dated row; the recall's answer and counts are
those of the valid-time rules."""
from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from oml.domain import recall as R
from oml.services.reads import bm25
from oml.services.reads.recall import Recaller, RecallRequest, query_lexemes
from oml_tools.bench.peers import exclusions_read, prepare_topk

from support.owner import owner
from support.recall import make_world

NOW = dt.datetime.now(dt.UTC)
# Enough dated rows that reading them all costs the planner more than two range scans (with a few dozen, one scan
# of the tenant's rows is the cheaper plan, and the right one).
DATED = 600


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "valid-ranges")
    w.remember_many("main", [f"The tide gauge at pier {i} logged the morning level." for i in range(DATED)],
                    valid_from="2020-01-01T00:00:00Z")
    w.expired = [w.remember("main", f"The tide gauge at pier {i} was closed for repairs.", valid_from="2020-01-01T00:00:00Z",
                            valid_to=_iso(NOW - dt.timedelta(days=2))) for i in range(2)]
    w.future = w.remember("main", "The tide gauge at the new pier opens next year.",
                          valid_from=_iso(NOW + dt.timedelta(days=365)))
    w.index()
    w.reader = w.key("reader")
    with owner(ctx) as c:
        c.execute(sa.text("ANALYZE memories_fts"))
    return w


def _rows_read_for_exclusions(ctx, tenant: str, query: str, at: dt.datetime) -> int:
    """Rows of ``memories_fts`` the bounded search's ``x`` reads, under EXPLAIN ANALYZE of the function's statement
    prepared as the function keeps it."""
    with owner(ctx) as c:
        path = c.execute(sa.text("SELECT path FROM workareas WHERE tenant_id = :t AND path = 'main'"), {"t": tenant}).scalar()
        lex = sorted(query_lexemes(c, query)[0])
        cur, execute = prepare_topk(c, "ranges_x")
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + execute,
                    [R.tsquery_text(lex, "|"), [path], None, None, None, at, None, 20, tenant, lex, bm25.DEPTH, bm25.FETCHED])
        read = exclusions_read(cur.fetchone()[0][0]["Plan"])
        c.rollback()
    assert read >= 0
    return read


def test_the_bounded_search_reads_only_the_rows_its_instant_excludes(world, ctx):
    read = _rows_read_for_exclusions(ctx, world.tenant, "tide gauge pier", NOW)
    assert read == 3  # the two expired rows and the one not yet valid, of DATED + 3 dated rows


def test_an_instant_that_excludes_every_dated_row_reads_them_all_and_no_more(world, ctx):
    read = _rows_read_for_exclusions(ctx, world.tenant, "tide gauge pier", dt.datetime(2019, 1, 1, tzinfo=dt.UTC))
    assert read == DATED + 3


def test_the_answer_and_the_count_follow_the_valid_time_rules(world, ctx):
    out = Recaller(ctx).recall(world.reader, RecallRequest(query="tide gauge pier closed repairs", retriever="fts", k=50))
    served = {h["claim_id"] for h in out["hits"]}
    assert not served & ({e["claim_id"] for e in world.expired} | {world.future["claim_id"]})
    assert len(served) == 50
    assert out["diagnostics"]["valid_time"]["excluded_hits"] == {"expired": 2, "not_yet_valid": 1, "truncated": False}
    assert out["diagnostics"]["legs"]["fts"]["search"] == "bounded"
