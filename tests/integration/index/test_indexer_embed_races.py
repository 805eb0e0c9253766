"""Acts that commit while the indexer's batch runs the model (before its first index write), two indexers on one
tenant, and an indexer killed mid-batch: afterwards the index equals the tip intervals and ``oml index verify``
names no index or BM25 finding. Real PostgreSQL, the real model, admission, tenancy and erasure."""
from __future__ import annotations

import threading

import pytest

from oml.workers.index import indexer, verify

from support.workers import assert_index_exact, promote, setup_tenant


def _index_clean(ctx, tenant: str) -> None:
    assert_index_exact(ctx, tenant)
    kinds = verify.verify(ctx, tenant).counts()
    assert not {k for k in kinds if k.startswith(("index.", "cursor."))}, kinds


def _during_encode(monkeypatch, ctx, act) -> dict:
    """Run ``act`` in its own thread the first time the batch calls the model; wait for it while the model 'runs'
    (up to 20 s: an act that waits on the batch's locks finishes after the batch commits instead)."""
    real = indexer.embedder_for(ctx)
    state: dict = {}

    class Probe:
        def __getattr__(self, name):
            return getattr(real, name)

        def encode(self, texts):
            if "thread" not in state:
                def go():
                    try:
                        act()
                    except Exception as exc:  # noqa: BLE001 - reported by the test
                        state["error"] = exc
                t = threading.Thread(target=go)
                state["thread"] = t
                t.start()
                t.join(20)
                state["finished_during_encode"] = not t.is_alive()
            return real.encode(texts)

    monkeypatch.setattr(indexer, "embedder_for", lambda _ctx: Probe())
    return state


@pytest.mark.parametrize("what", ["erase", "demote", "supersede", "reparent", "erase_other"])
def test_an_act_committing_while_the_batch_embeds(ctx, monkeypatch, what):
    env = setup_tenant(ctx, f"race-{what.replace('_', '-')}")
    area = ctx.tenancy.create_workarea(env.admin, "alpha", env.root)
    other = ctx.tenancy.create_workarea(env.admin, "beta", env.root)
    old = promote(ctx, env, "the lighthouse keeper logs every ship", workarea=area["node_id"])
    indexer.catch_up(ctx, env.tenant)
    new = promote(ctx, env, "the lighthouse lamp is cleaned on fridays", workarea=area["node_id"])
    acts = {
        "erase": lambda: ctx.acts.system_event(env.tenant, "claim.erased",
                                               {"claim_id": new["claim_id"], "reason": "data_subject_request"}),
        "erase_other": lambda: ctx.acts.system_event(env.tenant, "claim.erased",
                                                     {"claim_id": old["claim_id"], "reason": "data_subject_request"}),
        "demote": lambda: ctx.admission.review(env.reviewer, new["version_id"], "demote", "inaccurate"),
        "supersede": lambda: promote(ctx, env, "the lamp is cleaned on mondays", claim_id=new["claim_id"],
                                     supersedes=new["version_id"], workarea=area["node_id"]),
        "reparent": lambda: ctx.tenancy.reparent_workarea(env.admin, area["node_id"], other["node_id"]),
    }
    state = _during_encode(monkeypatch, ctx, acts[what])
    indexer.catch_up(ctx, env.tenant)
    state["thread"].join(60)
    assert "error" not in state and state["finished_during_encode"], state
    monkeypatch.undo()
    indexer.catch_up(ctx, env.tenant)
    _index_clean(ctx, env.tenant)


def test_two_indexers_racing_on_one_tenant(ctx):
    env = setup_tenant(ctx, "race-two-indexers")
    for i in range(12):
        promote(ctx, env, f"harbour note number {i} about cranes and boats")
    errors: list[BaseException] = []

    def run():
        try:
            indexer.catch_up(ctx, env.tenant, batch_events=5)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    _index_clean(ctx, env.tenant)


@pytest.mark.parametrize("what", ["reparent", "erase", "promote"])
def test_rebuild_with_an_act_committing_meanwhile_leaves_verify_clean(ctx, monkeypatch, what):
    env = setup_tenant(ctx, f"rebuild-race-{what}")
    area = ctx.tenancy.create_workarea(env.admin, "alpha", env.root)
    other = ctx.tenancy.create_workarea(env.admin, "beta", env.root)
    first = promote(ctx, env, "the lighthouse keeper logs every ship", workarea=area["node_id"])
    promote(ctx, env, "the lighthouse lamp is cleaned on fridays", workarea=area["node_id"])
    indexer.catch_up(ctx, env.tenant)
    acts = {
        "reparent": lambda: ctx.tenancy.reparent_workarea(env.admin, area["node_id"], other["node_id"]),
        "erase": lambda: ctx.acts.system_event(env.tenant, "claim.erased",
                                               {"claim_id": first["claim_id"], "reason": "data_subject_request"}),
        "promote": lambda: promote(ctx, env, "a ferry docks at noon", workarea=area["node_id"]),
    }
    state = _during_encode(monkeypatch, ctx, acts[what])
    indexer.rebuild(ctx, env.tenant)
    state["thread"].join(60)
    if "error" in state:
        # The rebuild holds the tenant's index rows from its first statement to its commit: a move that waits on
        # them longer than the workload lock_timeout is refused as retryable, and its retry goes through.
        assert "lock timeout" in str(state["error"]), state
        acts[what]()
    monkeypatch.undo()
    indexer.catch_up(ctx, env.tenant)
    _index_clean(ctx, env.tenant)
