"""The ranking legs sent to psycopg directly (services/storage/pipelined.py) with ids returned as text, under attack:
a leg's backend terminated, a leg waiting on a lock, hostile text over HTTP, index rows forged by ``oml_indexer``
naming another tenant's versions or versions that do not exist. What must hold: a stable RFC 9457 problem (503
where a retry is safe), no statement, query or value in it, nothing logged, an unbound connection for the pool's next
borrower, and never another tenant's claim."""
from __future__ import annotations

import json
import logging

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.reads import bm25
from oml.services.reads.recall import RecallRequest

from support.owner import owner
from support.recall import constant_vector, leg_calls, read_events, reader_world
from support.spans import exported, recorded_spans

SECRET = "glacier"


@pytest.fixture(scope="module")
def world(ctx):
    return reader_world(ctx, "legs-a", [f"The {SECRET} survey measured less ice than planned.",
                                            f"The {SECRET} melt doubled in spring."])


@pytest.fixture(scope="module")
def other(ctx):
    return reader_world(ctx, "legs-b", [f"The {SECRET} survey of tenant b is confidential moraine data."])


def _bound(ctx) -> str | None:
    with ctx.db.system("oml_server") as conn:
        return conn.execute(sa.text("SELECT current_setting('oml.tenant_id', true)")).scalar()


def _post(client, world, body, raw: bytes | None = None):
    headers = {"Authorization": f"Bearer {world.keys[world.reader.principal_id]}"}
    if raw is not None:
        return client.post("/v1/recall", content=raw, headers=headers | {"Content-Type": "application/json"})
    return client.post("/v1/recall", json=body, headers=headers)


def _self_terminating(leg: str, monkeypatch) -> None:
    """The leg's statement ends its own backend (57P01, FATAL: what ``pg_terminate_backend`` from another session
    does to it), so the connection dies in the middle of the leg."""
    leg_calls(monkeypatch, leg, "pg_terminate_backend(pg_backend_pid())")


@pytest.mark.parametrize("leg", ["lexical", "vector"])
def test_a_leg_whose_backend_is_terminated_fails_closed_and_the_pool_recovers(world, ctx, monkeypatch, caplog, leg):
    before = len(read_events(ctx, world.tenant))
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    _self_terminating(leg, monkeypatch)
    with caplog.at_level(logging.DEBUG):
        r = _post(client, world, {"query": f"{SECRET} survey", "k": 3,
                                  "retriever": "fts" if leg == "lexical" else "vector"})
    assert r.status_code in (500, 503), r.text
    got = r.json()
    assert r.headers["content-type"].startswith("application/problem+json")
    assert got["code"] in ("internal.error", "service.unavailable"), got
    for leak in (SECRET, "SELECT", "pg_terminate_backend", "oml_bm25_topk", "memory_embeddings"):
        assert leak not in r.text, leak
        assert leak not in caplog.text, leak
    assert len(read_events(ctx, world.tenant)) == before
    monkeypatch.undo()
    assert _bound(ctx) in (None, "")
    for _ in range(4):  # every pooled connection serves the next reads
        ok = _post(client, world, {"query": f"{SECRET} survey", "k": 3})
        assert ok.status_code == 200, ok.text


def test_a_lexical_leg_past_its_lock_wait_is_a_503(world, ctx, monkeypatch):
    from oml.services.runtime.context import Context
    from oml.services.storage.db import Database

    monkeypatch.setattr(bm25, "_TOPK", sa.text(
        "SELECT CAST(NULL AS text) AS version_id, 0.0 AS score, 0 AS tip_from_seq, true AS exact, 0.0 AS bound"
        " FROM pg_advisory_xact_lock(7007001)"))
    db = Database(ctx.db.owner_url.render_as_string(hide_password=False), None, 1, lock_timeout_ms=200)
    try:
        limited = Context(ctx.settings, db, ctx.keystore)
        before = len(read_events(ctx, world.tenant))
        client = TestClient(create_app(limited), raise_server_exceptions=False)
        with owner(ctx) as o:
            o.execute(sa.text("SELECT pg_advisory_xact_lock(7007001)"))
            r = _post(client, world, {"query": f"{SECRET} survey", "k": 3, "retriever": "fts"})
        assert r.status_code == 503, r.text
        assert r.json()["code"] == "service.unavailable" and r.json()["reason"] == "lock_timeout", r.text
        assert SECRET not in r.text and "SELECT" not in r.text and "advisory" not in r.text
        assert len(read_events(ctx, world.tenant)) == before
        with db.system("oml_server") as conn:
            assert conn.execute(sa.text("SELECT current_setting('oml.tenant_id', true)")).scalar() in (None, "")
    finally:
        db.dispose()


_HOSTILE = ["%s", "%(x)s", "%(q)s %(t)s", "$1 $2", "a::b", "glacier::tsquery", "\\", "glacier\\' OR 1=1 --",
            "'\"", "glacier & !survey | <-> :*", "glacier' | 'survey", "%%", "{}", "E'\\x00'", "ünï—cødé 🧊 glacier",
            "glacier " * 500, "x" * 4000]


@pytest.mark.parametrize("query", _HOSTILE)
@pytest.mark.parametrize("retriever", ["fts", "hybrid"])
def test_hostile_query_text_is_answered_or_refused_never_a_500(world, other, ctx, query, retriever):
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    r = _post(client, world, {"query": query, "k": 5, "retriever": retriever})
    assert r.status_code in (200, 422), r.text
    if r.status_code == 200:
        assert "moraine" not in r.text and "confidential" not in r.text


@pytest.mark.parametrize("raw", [
    b'{"query": "glacier\\u0000survey"}', b'{"query": "\\ud800glacier"}', b'{"query": "glacier\\udfff"}',
    b'{"query": "' + b"g" * 100_000 + b'"}', b'{"query": "glacier", "workarea_id": "%s"}',
    b'{"query": "glacier", "workarea_id": "00000000-0000-0000-0000-00000000000\\u0000"}',
    b'{"query": "glacier", "filters": {"kinds": ["fact\\u0000"]}}', b'{"query": "glacier", "filters": {"kinds": ["%s"]}}',
    b'{"query": "glacier", "filters": {"provenances": ["observed\'; --"]}}',
    b'{"query": "glacier", "filters": {"provenances": ["$1"]}}', b'{"query": "glacier", "k": 1e400}',
    b'{"query": "glacier", "k": 99999999999999999999999}'])
def test_hostile_bodies_are_422_problems(world, ctx, raw):
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    r = _post(client, world, None, raw=raw)
    assert r.status_code in (400, 422), r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "glacier" not in r.text


def test_hostile_filters_sent_below_http_are_answered_or_refused_never_another_tenants(world, other, ctx):
    """The Recaller called directly (the MCP and CLI paths validate less than HTTP): odd kinds and provenances."""
    from oml.domain.errors import OMLError

    for kinds in (["%s"], ["fact' OR '1'='1"], ["$1"], ["fact::text"], ["\\"], ["fact\x00"]):
        for req in (RecallRequest(query=f"{SECRET} survey", k=5, kinds=kinds),
                    RecallRequest(query=f"{SECRET} survey", k=5, provenances=kinds)):
            with pytest.raises(OMLError) as e:
                world.recaller.recall(world.reader, req)
            assert e.value.code == "recall.invalid" and e.value.status in (400, 422)
    for wa in ("%s", "$1", "00000000-0000-0000-0000-00000000000\x00", "' OR 1=1 --"):
        with pytest.raises(OMLError) as e:
            world.recaller.recall(world.reader, RecallRequest(query=f"{SECRET} survey", k=5, workarea_id=wa))
        assert e.value.status in (400, 403, 404, 422), e.value.code


def _forge(ctx, attacker, victim_version: dict, *, version_id: str | None = None) -> None:
    """As ``oml_indexer`` bound to ``attacker``'s tenant, index rows in its own partitions that name
    ``victim_version``'s ids (or ``version_id``), scoring first for the query's words and embedding."""
    vec = "[" + ",".join(str(x) for x in constant_vector("")) + "]"
    wa, path = attacker.workareas["main"], "main"
    vid = version_id or victim_version["version_id"]
    with ctx.db.tenant("oml_indexer", attacker.tenant) as c:
        c.execute(sa.text(
            "INSERT INTO memories_fts (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance, self_signed,"
            " tip_from_seq, tip_from_at, tsv) VALUES (:t, CAST(:v AS uuid), CAST(:c AS uuid), CAST(:w AS uuid), :p,"
            " 'fact', 'observed', false, 9000000, now(),"
            " to_tsvector('english', 'glacier glacier glacier survey survey moraine'))"),
            {"t": attacker.tenant, "v": vid, "c": victim_version["claim_id"], "w": wa, "p": path})
        c.execute(sa.text(
            "INSERT INTO memory_embeddings (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance,"
            " self_signed, tip_from_seq, tip_from_at, embedding) VALUES (:t, CAST(:v AS uuid), CAST(:c AS uuid),"
            " CAST(:w AS uuid), :p, 'fact', 'observed', false, 9000000, now(), CAST(:e AS vector))"),
            {"t": attacker.tenant, "v": vid, "c": victim_version["claim_id"], "w": wa, "p": path, "e": vec})


@pytest.mark.parametrize("which", ["other_tenants", "absent"])
def test_forged_index_rows_never_serve_another_tenants_claim(world, other, ctx, which):
    victim = other.remember("main", f"The {SECRET} moraine report of tenant b, forged at.")
    other.index()
    import uuid

    _forge(ctx, world, victim, version_id=None if which == "other_tenants" else str(uuid.uuid4()).upper())
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    for retriever in ("fts", "vector", "hybrid"):
        out = world.recaller.recall(world.reader, RecallRequest(query=f"{SECRET} survey moraine", retriever=retriever, k=10))
        served = {h["claim_id"] for h in out["hits"]} | {h["version_id"] for h in out["hits"]}
        assert victim["claim_id"] not in served and victim["version_id"] not in served, out
        assert "moraine" not in json.dumps(out["hits"])
        r = _post(client, world, {"query": f"{SECRET} survey moraine", "k": 10, "retriever": retriever})
        assert r.status_code == 200, r.text
        assert victim["claim_id"] not in r.text and victim["version_id"] not in r.text
        assert "moraine" not in r.text


def test_an_upper_case_workarea_id_scopes_like_its_canonical_form(world, ctx):
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    wa = world.workareas["main"]
    got = {}
    for form in (wa.lower(), wa.upper()):
        r = _post(client, world, {"query": f"{SECRET} survey", "k": 10, "workarea_id": form, "retriever": "hybrid"})
        assert r.status_code in (200, 422), r.text
        got[form] = r.json().get("hits") if r.status_code == 200 else r.status_code
    if isinstance(got[wa.upper()], list):
        assert [h["version_id"] for h in got[wa.upper()]] == [h["version_id"] for h in got[wa.lower()]]


def test_leg_ids_are_canonical_text_and_ties_keep_uuid_order(world, ctx):
    """Ids leave the legs as PostgreSQL's canonical text; equal scores and equal tips are ordered by the uuid inside
    SQL, which for canonical lower-case hex text is also their text order."""
    out = world.recaller.recall(world.reader, RecallRequest(query=f"{SECRET}", retriever="fts", k=10))
    ids = [h["version_id"] for h in out["hits"]]
    import uuid

    assert ids and all(i == str(uuid.UUID(i)) for i in ids)
    # PostgreSQL orders uuids by their bytes; Python breaks ties by the text the legs now return: the same order
    # for canonical text, in the database's collation or in code points.
    with ctx.db.system("oml_server") as conn:
        by_uuid, by_text = conn.execute(sa.text(
            "SELECT array_agg(CAST(u AS text) ORDER BY u), array_agg(CAST(u AS text) ORDER BY CAST(u AS text))"
            " FROM (SELECT gen_random_uuid() AS u FROM generate_series(1, 4000)"
            "       UNION ALL SELECT CAST(x AS uuid) FROM unnest(ARRAY['00000000-0000-0000-0000-00000000000a',"
            "       '00000000-0000-0000-0000-000000000009', 'ffffffff-ffff-ffff-ffff-ffffffffffff',"
            "       'a0000000-0000-0000-0000-000000000000', '9fffffff-ffff-ffff-ffff-ffffffffffff']) x) z")).one()
    assert by_uuid == sorted(by_uuid) == by_text


@pytest.fixture
def raising(ctx):
    """``leg_refuses(state, v)``: raises SQLSTATE ``state`` with a message quoting ``v`` (what a server message
    may do with a statement's value), callable by every role; dropped after the test."""
    with owner(ctx) as o:
        o.execute(sa.text("CREATE OR REPLACE FUNCTION leg_refuses(state text, v text) RETURNS void"
                          " LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'zqx-leaked %', v USING ERRCODE = state; END $$"))
        o.execute(sa.text("GRANT EXECUTE ON FUNCTION leg_refuses(text, text) TO PUBLIC"))
    yield
    with owner(ctx) as o:
        o.execute(sa.text("DROP FUNCTION IF EXISTS leg_refuses(text, text)"))


@pytest.mark.parametrize("state,status,reason", [
    ("40P01", 503, "deadlock"), ("55P03", 503, "lock_timeout"), ("57014", 503, "statement_timeout"),
    ("42501", 500, None), ("22P02", 500, None), ("40X99", 500, None)])
@pytest.mark.parametrize("leg", ["lexical", "vector"])
def test_a_leg_refused_by_the_server_is_a_stable_problem_quoting_nothing(world, ctx, monkeypatch, caplog, raising,
                                                                         state, status, reason, leg):
    leg_calls(monkeypatch, leg, f"leg_refuses('{state}', CAST(:q AS text))" if leg == "lexical"
              else f"leg_refuses('{state}', :t || :q)")
    before = len(read_events(ctx, world.tenant))
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    with recorded_spans() as exporter, caplog.at_level(logging.DEBUG):
        r = _post(client, world, {"query": f"{SECRET} survey", "k": 3,
                                  "retriever": "fts" if leg == "lexical" else "vector"})
    assert r.status_code == status, r.text
    got = r.json()
    assert got["code"] == ("service.unavailable" if status == 503 else "internal.error"), got
    assert got.get("reason") == reason
    if status == 503:
        assert r.headers["retry-after"]
    for leak in (SECRET, "zqx-leaked", "SELECT", "leg_refuses"):
        assert leak not in r.text, leak
        assert leak not in caplog.text, leak
    assert len(read_events(ctx, world.tenant)) == before
    assert _bound(ctx) in (None, "")
    text = exported(exporter)
    for leak in (SECRET, "zqx-leaked", "SELECT", "leg_refuses", "legs-a["):
        assert leak not in text, leak
    failed = {s.name: (s.attributes or {}).get("error.type") for s in exporter.get_finished_spans() if not s.status.is_ok}
    assert failed.get("recall.fts" if leg == "lexical" else "recall.vector", "").startswith("sqlalchemy.exc."), failed


@pytest.mark.parametrize("query", ["glacier\x00survey", "\ud800glacier", "glacier\udfff survey", "g" * 100_000,
                                   "%(q)s\x00", "glacier " + "\\" * 3000])
@pytest.mark.parametrize("retriever", ["fts", "hybrid"])
def test_hostile_query_text_below_http_is_refused_or_answered_and_leaves_the_pool_clean(world, ctx, query, retriever):
    """The Recaller called directly (what the MCP tools and the CLI call): text HTTP's schema would refuse."""
    from oml.domain.errors import OMLError

    before = len(read_events(ctx, world.tenant))
    try:
        out = world.recaller.recall(world.reader, RecallRequest(query=query, retriever=retriever, k=5))
    except OMLError as e:
        assert 400 <= e.status < 500, e.code
        assert len(read_events(ctx, world.tenant)) == before
    else:
        assert "moraine" not in json.dumps(out)
    assert _bound(ctx) in (None, "")
    ok = world.recaller.recall(world.reader, RecallRequest(query=f"{SECRET} survey", retriever=retriever, k=5))
    assert ok["hits"]


@pytest.mark.parametrize("ranking", ["bounded", "exhaustive"])
def test_index_rows_stripped_of_positions_are_refused_at_write_and_recall_still_answers(ctx, ranking):
    """``oml_indexer`` rewriting its tenant's rows with ``strip(tsv)`` (lexemes without positions: every row's length
    0, and so the scope's average length, which the BM25 formula divides by) is refused by the postings' trigger."""
    w = reader_world(ctx, f"legs-strip-{ranking}", [f"The {SECRET} survey measured less ice than planned."])
    with pytest.raises(sa.exc.IntegrityError):
        with ctx.db.tenant("oml_indexer", w.tenant) as c:
            got = c.execute(sa.text("DELETE FROM memories_fts WHERE tenant_id = :t RETURNING version_id, claim_id,"
                                    " workarea_id, path, tip_from_seq, tip_from_at, strip(tsv) AS tsv"), {"t": w.tenant}).all()
            assert len(got) == 1
            c.execute(sa.text(
                "INSERT INTO memories_fts (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance,"
                " self_signed, tip_from_seq, tip_from_at, tsv) VALUES (:t, :v, :c, :w, :p, 'fact', 'observed', false,"
                " :s, :a, CAST(:tsv AS tsvector))"),
                {"t": w.tenant, "v": got[0].version_id, "c": got[0].claim_id, "w": got[0].workarea_id, "p": got[0].path,
                 "s": got[0].tip_from_seq, "a": got[0].tip_from_at, "tsv": got[0].tsv})
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    body = {"query": f"{SECRET} survey", "k": 3, "retriever": "fts"}
    if ranking == "exhaustive":
        body["filters"] = {"kinds": ["fact"]}
    r = _post(client, w, body)
    assert r.status_code == 200 and len(r.json()["hits"]) == 1, r.text


@pytest.mark.parametrize("retriever", ["vector", "hybrid"])
def test_a_zero_embedding_written_by_the_indexer_is_no_nan_and_no_null_distance(ctx, retriever):
    """``oml_indexer`` replaces a version's embedding with the zero vector, whose cosine distance to any query is NaN
    (pgvector): the vector leg's exact search reads it (services/reads/recall.py, ``_counted_exact``)."""
    w = reader_world(ctx, f"legs-zero-{retriever}", [f"The {SECRET} survey measured less ice than planned.",
                                                        f"The {SECRET} melt doubled in spring."])
    with ctx.db.tenant("oml_indexer", w.tenant) as c:
        got = c.execute(sa.text("DELETE FROM memory_embeddings WHERE tenant_id = :t RETURNING version_id, claim_id,"
                                " workarea_id, path, kind, provenance, self_signed, tip_from_seq, tip_from_at,"
                                " CAST(embedding AS text) AS embedding"),
                        {"t": w.tenant}).all()
        assert len(got) == 2
        for n, row in enumerate(got):
            c.execute(sa.text(
                "INSERT INTO memory_embeddings (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance,"
                " self_signed, tip_from_seq, tip_from_at, embedding) VALUES (:t, :v, :c, :w, :p, :k, :pr, :ss, :s, :a,"
                " CASE WHEN :zero THEN CAST(array_fill(0, ARRAY[vector_dims(CAST(:e AS vector))]) AS vector)"
                " ELSE CAST(:e AS vector) END)"),
                {"t": w.tenant, "v": row.version_id, "c": row.claim_id, "w": row.workarea_id, "p": row.path,
                 "k": row.kind, "pr": row.provenance, "ss": row.self_signed, "s": row.tip_from_seq,
                 "a": row.tip_from_at, "e": row.embedding, "zero": n == 0})
    out = w.recaller.recall(w.reader, RecallRequest(query=f"{SECRET} survey", retriever=retriever, k=5))
    # The zero embedding has no distance: the vector leg leaves it out; the lexical leg still finds its version.
    assert len(out["hits"]) == (1 if retriever == "vector" else 2), out["hits"]
    assert all(h["score"] == h["score"] for h in out["hits"])  # no NaN
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    r = _post(client, w, {"query": f"{SECRET} survey", "k": 5, "retriever": retriever})
    assert r.status_code == 200, r.text
    assert "NaN" not in r.text  # JSON has no NaN: the server sends null for a score it cannot state
    from oml.client import wire as W

    W.Recalled.model_validate(r.json())  # still the published shape
