"""A forged window (docs/security-model.md: ``index_threads`` is not compared) reorders only candidates the read
admitted: written as ``oml_indexer``, the one workload that may write ``window_claims``, a window naming another
tenant's claim, a claim of a workarea the reader cannot read, a claim the read refuses, the row's own claim,
repeats, NULLs or a two-dimensional array moves exactly what the admitted claims it names would move, serves
nothing else, and leaves another tenant's reads as they were."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from oml.domain import fusion as F

from support.recall import make_world
from support.window_propagation import ENDED, THREAD, recall, server_windows

SECRET = "Secret: the Boston marathon sponsor pays double."


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "window-forgery")
    w.claims = [w.remember("main.docs", s, context={"thread": "chat-1", "position": i}, **(ENDED if i == 4 else {}))
                ["claim_id"] for i, s in enumerate(THREAD)]
    w.secret = w.remember("main.secret", SECRET, context={"thread": "chat-1", "position": 1})["claim_id"]
    w.index()
    w.reader = w.key("reader", "main.docs")
    other = make_world(ctx, "window-forgery-b")
    other.claim = other.remember("main", "Tenant B ran the Boston marathon too.", context={"thread": "chat-1", "position": 0})["claim_id"]
    other.remember("main", "Tenant B's marathon results.", context={"thread": "chat-1", "position": 1})
    other.index()
    other.reader = other.key("reader")
    w.other = other
    return w


def _scores(out: dict) -> list[tuple[str, float]]:
    return [(h["version_id"], h["score"]) for h in out["hits"]]


def _set_window(ctx, tenant: str, claim: str, expr: str, params: dict) -> None:
    with ctx.db.tenant("oml_indexer", tenant) as c:
        c.execute(sa.text(f"UPDATE index_threads SET window_claims = {expr} WHERE claim_id = :c"), {"c": claim, **params})


@pytest.mark.parametrize("forged", ["strangers", "repeats", "nulls", "two_dimensional"])
def test_a_forged_window_moves_only_the_admitted_claims_it_names(ctx, world, forged):
    t = world.claims
    admitted_named = [t[0], t[1]]
    strangers = [world.other.claim, world.secret, t[4], t[3]]  # another tenant, unreadable, valid time ended, itself
    expr, params = {
        "strangers": ("CAST(:w AS uuid[])", {"w": strangers + admitted_named}),
        "repeats": ("CAST(:w AS uuid[])", {"w": [t[1], t[0], t[1], t[0]]}),
        "nulls": ("CAST(:w AS uuid[])", {"w": [None, t[0], None, t[1]]}),
        "two_dimensional": ("ARRAY[CAST(:w AS uuid[]), CAST(:w AS uuid[])]", {"w": admitted_named}),
    }[forged]
    with ctx.db.tenant("oml_indexer", world.tenant) as c:
        honest = [str(x) for x in c.execute(sa.text("SELECT window_claims FROM index_threads WHERE claim_id = :c"),
                                            {"c": t[3]}).scalar()]
    other_before = _scores(recall(ctx, world.other, 0.5))
    plain = recall(ctx, world, 0.0)
    try:
        _set_window(ctx, world.tenant, t[3], expr, params)
        got = recall(ctx, world, 0.5)
        other_after = _scores(recall(ctx, world.other, 0.5))
    finally:
        _set_window(ctx, world.tenant, t[3], "CAST(:w AS uuid[])", {"w": honest})
    version_of = {h["claim_id"]: h["version_id"] for h in plain["hits"]}
    assert world.secret not in version_of and t[4] not in version_of
    windows = server_windows(ctx, world.tenant)
    # What the honest windows of the other turns give, and t3's forged window read as its admitted claims alone
    # (a two-dimensional array names nothing: its elements are no claim ids).
    held = {v: [version_of[c] for c in cs if c in version_of and version_of[c] != v] for v, cs in windows.items()
            if v in version_of.values()}
    held[version_of[t[3]]] = [] if forged == "two_dimensional" else [version_of[c] for c in admitted_named]
    want = F.propagate([F.Ranked(h["version_id"], h["score"]) for h in plain["hits"]], held, 0.5, ctx.settings.index_context_before)
    assert [(v, pytest.approx(s)) for v, s in _scores(got)] == [(x.key, x.score) for x in want]
    assert {h["claim_id"] for h in got["hits"]} == set(version_of)
    assert other_after == other_before


def test_an_indexer_bound_to_one_tenant_cannot_write_another_tenants_window(ctx, world):
    with pytest.raises(sa.exc.ProgrammingError), ctx.db.tenant("oml_indexer", world.tenant) as c:
        c.execute(sa.text("UPDATE index_threads SET tenant_id = :o WHERE claim_id = :c"),
                  {"o": world.other.tenant, "c": world.claims[3]})
    with ctx.db.tenant("oml_indexer", world.tenant) as c:
        assert c.execute(sa.text("UPDATE index_threads SET window_claims = '{}' WHERE claim_id = :c"),
                         {"c": world.other.claim}).rowcount == 0
