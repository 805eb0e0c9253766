"""Fetch, lineage and journal pages: the same predicate as recall, decrypt on serve, every read logged."""
from __future__ import annotations

import base64
import json

import pytest

from oml.domain.errors import OMLError
from oml.services.reads import fetch as F

from support.recall import make_world, read_events


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "fetch-a")
    w.a = w.remember("main.eng", "Source measurement A.", source={"uri": "https://x/a"})
    w.b = w.remember("main.eng", "Derived conclusion B.", derived_from=[w.a["claim_id"]])
    w.c = w.remember("main.eng", "Further conclusion C.", derived_from=[w.b["claim_id"]])
    w.b2 = w.remember("main.eng", "Derived conclusion B, revised.", claim_id=w.b["claim_id"], supersedes=w.b["version_id"],
                      derived_from=[w.a["claim_id"]])
    w.held = w.remember("main.eng", "Held, not reviewed.", promote=False)
    w.steer = w.remember("main", "Root steering applies everywhere.", kind="steering")
    w.rootfact = w.remember("main", "A fact at the root.")
    w.sales = w.remember("main.sales", "A sales fact.")
    w.demoted = w.remember("main.eng", "To be demoted.")
    ctx.admission.review(w.reviewer, w.demoted["version_id"], "demote", "inaccurate")
    w.area("main.eng.dev", development=True)
    w.ss = w.remember("main.eng.dev", "Self-signed dev note.", reviewer=w.key("reviewer", "main", identity=w.writer_identity))
    w.gone = w.remember("main.eng", "Erased source.", )
    w.child = w.remember("main.eng", "Derived from the erased source.", derived_from=[w.gone["claim_id"]])
    from oml.services.erasure.acts import Erasure

    Erasure(ctx).erase_claim(w.key("operator"), w.gone["claim_id"], "data_subject_request")
    w.reader = w.key("reader", "main.eng")
    return w


def fetch(w, **kw):
    return F.fetch(w.ctx, kw.pop("principal", w.reader), **kw)


def code(fn):
    with pytest.raises(OMLError) as e:
        fn()
    return e.value.code


def test_fetch_tip_and_versions(world):
    tip = fetch(world, claim_id=world.b["claim_id"])
    assert tip["version_id"] == world.b2["version_id"] and tip["is_tip"] is True
    assert tip["body"]["statement"] == "Derived conclusion B, revised."
    old = fetch(world, version_id=world.b["version_id"])
    assert old["is_tip"] is False and old["body"]["statement"] == "Derived conclusion B."
    a = fetch(world, claim_id=world.a["claim_id"])
    assert a["source"] == {"uri": "https://x/a"}
    assert a["workarea"]["path"] == "main.eng"


def test_fetch_refuses_what_recall_would_not_serve(world):
    assert code(lambda: fetch(world, version_id=world.held["version_id"])) == "claim.not_found"
    assert code(lambda: fetch(world, claim_id=world.held["claim_id"])) == "claim.not_found"
    assert code(lambda: fetch(world, version_id=world.demoted["version_id"])) == "claim.not_found"
    assert code(lambda: fetch(world, claim_id=world.sales["claim_id"])) == "claim.not_found"
    assert code(lambda: fetch(world, claim_id=world.rootfact["claim_id"])) == "claim.not_found"  # ancestor fact
    assert fetch(world, claim_id=world.steer["claim_id"])["kind"] == "steering"  # ancestor steering applies
    assert code(lambda: fetch(world, claim_id=world.ss["claim_id"])) == "claim.not_found"
    assert fetch(world, claim_id=world.ss["claim_id"], workarea_id=world.workareas["main.eng.dev"])["self_signed"] is True
    assert code(lambda: fetch(world, claim_id=world.gone["claim_id"])) == "claim.erased"
    assert code(lambda: fetch(world, claim_id="00000000-0000-0000-0000-000000000000")) == "claim.not_found"
    assert code(lambda: fetch(world, claim_id="not-a-uuid")) == "recall.invalid"
    other = make_world(world.ctx, "fetch-b")
    assert code(lambda: fetch(world, principal=other.key("reader"), claim_id=world.a["claim_id"])) == "claim.not_found"


def test_lineage_both_ways_with_tombstones(world):
    lin = F.lineage(world.ctx, world.reader, world.b["claim_id"])
    assert [v["version_id"] for v in lin["versions"]] == [world.b["version_id"], world.b2["version_id"]]
    assert [v["is_tip"] for v in lin["versions"]] == [False, True]
    ids = {n["claim_id"] for n in lin["nodes"]}
    assert ids == {world.a["claim_id"], world.b["claim_id"], world.c["claim_id"]}
    edges = {(e["claim_id"], e["derived_from"]) for e in lin["edges"]}
    assert edges == {(world.b["claim_id"], world.a["claim_id"]), (world.c["claim_id"], world.b["claim_id"])}
    assert all("body" not in v for v in lin["versions"])
    up = F.lineage(world.ctx, world.reader, world.child["claim_id"])
    tomb = next(n for n in up["nodes"] if n["claim_id"] == world.gone["claim_id"])
    assert tomb == {"claim_id": world.gone["claim_id"], "erased": True}
    erased = F.lineage(world.ctx, world.reader, world.gone["claim_id"])
    assert erased["erased"] is True and erased["versions"] == [{"version_id": world.gone["version_id"], "erased": True}]
    assert {n["claim_id"] for n in erased["nodes"]} == {world.gone["claim_id"], world.child["claim_id"]}
    assert code(lambda: F.lineage(world.ctx, world.reader, world.sales["claim_id"])) == "claim.not_found"
    assert code(lambda: F.lineage(world.ctx, world.reader, world.held["claim_id"])) == "claim.not_found"
    shallow = F.lineage(world.ctx, world.reader, world.c["claim_id"], depth=1)
    assert {n["claim_id"] for n in shallow["nodes"]} == {world.c["claim_id"], world.b["claim_id"]} and shallow["truncated"]


def test_journal_pages_for_auditors_only(world):
    auditor = world.key("auditor")
    page = F.journal_page(world.ctx, auditor, after_seq=0, limit=3)
    assert [e["seq"] for e in page["events"]] == [1, 2, 3] and page["next_after_seq"] == 3
    ev = json.loads(base64.b64decode(page["events"][0]["canonical"]))
    assert ev["type"] == "tenant.created" and ev["seq"] == 1
    for p in (world.reader, world.writer, world.admin):
        assert code(lambda: F.journal_page(world.ctx, p)) == "access.denied"


def test_every_read_path_is_logged(world):
    before = len(read_events(world.ctx, world.tenant))
    fetch(world, claim_id=world.a["claim_id"])
    F.lineage(world.ctx, world.reader, world.b["claim_id"])
    F.journal_page(world.ctx, world.key("auditor"), limit=1)
    rows = read_events(world.ctx, world.tenant)[before:]
    assert [r.op for r in rows] == ["fetch", "lineage", "journal"]
    assert [str(c) for c in rows[0].claim_ids] == [world.a["claim_id"]]
    assert {str(c) for c in rows[1].claim_ids} == {world.a["claim_id"], world.b["claim_id"], world.c["claim_id"]}
    assert all(r.query_digest is None for r in rows)
    # A refused fetch serves nothing and logs nothing.
    code(lambda: fetch(world, claim_id=world.sales["claim_id"]))
    assert len(read_events(world.ctx, world.tenant)) == before + 3
