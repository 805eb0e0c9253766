"""``oml bench recall --replica``'s probe against a real hot standby of the test server; no timing is asserted."""
from __future__ import annotations

import pytest
import typer

from oml_tools.bench import replica, scale

from support.replica import start_standby, stop_standby


def test_refuses_to_build_a_standby_of_an_external_database(ctx):
    assert ctx.settings.database_url  # the tests' context names its database, as OML_DATABASE_URL would
    with pytest.raises(typer.BadParameter, match="--replica-url"):
        replica.ReplicaProbe(ctx)


def test_the_standby_path_is_served_by_the_standby(ctx, pg_server):
    corpus = scale.Corpus(ctx, queries=3, base_texts=20)
    t = scale.scaled_tenant(ctx, "bench-rep", 0)
    scale.load(ctx, t, corpus, 40)
    scale.index(ctx, t.bt.tenant)
    sb = start_standby(pg_server)
    probe = replica.ReplicaProbe(ctx, sb.url_for_database(ctx.db.owner_url.database))
    try:
        got = probe(t.bt.tenant, t.keys["reader"], corpus.questions)["replica"]
    finally:
        probe.close()
        stop_standby(sb)
    # One warm-up and three questions per retriever, every one on the standby: no fallback to the primary.
    assert got["served"] == {"replica:0": 3 * (1 + 3)}
    for r in replica.RETRIEVERS:
        assert set(got[r]) == {"primary", "standby", "ratio"}
    lines = replica.render({"sizes": {"40": {"replica": got}}})
    assert any("standby path served by: replica:0 12" in line for line in lines)
