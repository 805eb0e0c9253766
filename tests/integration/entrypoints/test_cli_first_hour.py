"""The first hour of a new user: anchoring exit statuses, keys written 0600, errors a person can act on,
list commands, and the embedding model loaded before `oml serve` / `oml mcp` report ready."""
from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from support.admission import run_cli
from support.mcp_calls import env_for
from support.processes import stop


@pytest.fixture(scope="module")
def tenant(ctx):
    r = run_cli(ctx, ["tenant", "create", "fh-t", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_tenant_create_records_the_anchor_that_verify_and_reconcile_read(ctx, tenant, tmp_path):
    anchors = ctx.settings.home / "trust-anchors"
    assert f"fh-t {tenant['fingerprint']}" in anchors.read_text()
    # journal verify: anchored from the file with no --trusted-key (exit 0) …
    r = run_cli(ctx, ["journal", "verify", "-t", "fh-t"])
    assert r.exit_code == 0, r.output
    assert "anchored" in r.stdout and "NOT ANCHORED" not in r.stdout
    # … and it honours OML_TRUST_ANCHORS: an anchors file without the tenant is NOT ANCHORED (exit 3).
    other = tmp_path / "anchors"
    other.write_text("# no line for fh-t\n")
    r = run_cli(ctx, ["journal", "verify", "-t", "fh-t"], env={"OML_TRUST_ANCHORS": str(other)})
    assert r.exit_code == 3, r.output
    # reconcile follows the same rule: 0 anchored, 3 NOT ANCHORED (formerly "OK", exit 0).
    r = run_cli(ctx, ["reconcile", "-t", "fh-t", "-o", str(tmp_path / "rep"), "--no-record"])
    assert r.exit_code == 0, r.output
    assert "OK" in r.stdout
    r = run_cli(ctx, ["reconcile", "-t", "fh-t", "-o", str(tmp_path / "rep"), "--no-record"],
                env={"OML_TRUST_ANCHORS": str(other)})
    assert r.exit_code == 3, r.output
    assert "NOT ANCHORED" in r.stdout
    # An explicit --trusted-key wins over the file.
    r = run_cli(ctx, ["journal", "verify", "-t", "fh-t", "--trusted-key", tenant["fingerprint"]],
                env={"OML_TRUST_ANCHORS": str(other)})
    assert r.exit_code == 0, r.output


def test_tenant_create_out_file_is_0600_and_keeps_secrets_off_stdout(ctx, tmp_path):
    out = tmp_path / "acme.json"
    r = run_cli(ctx, ["tenant", "create", "fh-out", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    data = json.loads(out.read_text())
    assert data["admin_key"] not in r.output and data["recovery_private_key"] not in r.output
    assert data["fingerprint"] in r.stderr  # the public trust anchor is shown, so it can be pinned off-machine
    # An existing file is never overwritten (it may hold another tenant's keys).
    again = run_cli(ctx, ["tenant", "create", "fh-out2", "--out", str(out)])
    assert again.exit_code == 2 and "exists" in again.stderr
    assert json.loads(out.read_text())["tenant"] == "fh-out"


def test_rule_text_keeps_its_square_brackets(ctx):
    r = run_cli(ctx, ["tenant", "create", "Not_A_Slug"])
    assert r.exit_code == 2
    assert "[a-z0-9][a-z0-9-]{0,62}" in r.stderr


def test_missing_or_empty_key_file_is_a_message_not_a_traceback(ctx, tmp_path):
    missing = run_cli(ctx, ["identity", "create", "--kind", "person", "--key-file", str(tmp_path / "nope.key")])
    assert missing.exit_code == 2 and "no such file" in missing.stderr and "Traceback" not in missing.output
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    r = run_cli(ctx, ["identity", "create", "--kind", "person", "--key-file", str(empty)])
    assert r.exit_code == 2 and "the file is empty" in r.stderr and "pass --key-file" not in r.stderr
    none = run_cli(ctx, ["identity", "create", "--kind", "person"], env={"OML_API_KEY": ""})
    assert none.exit_code == 2 and "OML_API_KEY" in none.stderr


def test_an_unknown_key_says_which_database_was_asked(ctx):
    r = run_cli(ctx, ["workarea", "list"], env={"OML_API_KEY": "oml_0123456789abcdef_" + "0" * 64})
    assert r.exit_code == 2
    assert "access.unauthenticated" in r.stderr
    name = ctx.db.owner_url.database
    assert "asked the database" in r.stderr and name in r.stderr and "OML_HOME" in r.stderr


def test_list_commands_and_the_apikey_rename(ctx, tenant):
    env = {"OML_API_KEY": tenant["admin_key"]}
    tenants = json.loads(run_cli(ctx, ["tenant", "list", "--json"]).stdout)["items"]
    mine = next(t for t in tenants if t["tenant"] == "fh-t")
    assert mine["trust_anchor"] == tenant["fingerprint"] and mine["head_seq"] >= 1
    idents = json.loads(run_cli(ctx, ["identity", "list", "--json"], env=env).stdout)["items"]
    assert tenant["admin_identity"] in {i["identity_id"] for i in idents}
    keys = run_cli(ctx, ["apikey", "list", "--json"], env=env)
    assert keys.exit_code == 0, keys.output
    items = json.loads(keys.stdout)["items"]
    assert [k["principal_id"] for k in items] == [tenant["admin_principal"]]
    assert tenant["admin_key"] not in keys.stdout  # key ids only, never secrets
    assert run_cli(ctx, ["key", "list", "--json"], env=env).exit_code == 0  # the hidden old name still works


def _cached_models():
    from oml.workers.index import embedding

    return embedding._cache


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("args", [["serve", "--no-workers"], ["mcp", "--transport", "http"]])
def test_model_is_loaded_before_the_ready_line(ctx, monkeypatch, args):
    """serving.serve is where the server starts accepting: by then the model is loaded; the ready line comes after."""
    from oml.services.entrypoints.http import serving

    seen = {}
    saved = dict(_cached_models())
    _cached_models().clear()

    def accepting(app, *, on_ready, **kw):
        seen.setdefault("model_loaded", bool(_cached_models()))
        on_ready()

    monkeypatch.setattr(serving, "serve", accepting)
    try:
        r = run_cli(ctx, [*args, "--port", str(_free_port())])
    finally:
        _cached_models().update(saved)
    assert r.exit_code == 0, r.output
    assert seen == {"model_loaded": True}
    loaded = r.stderr.index("embedding model loaded")
    ready = r.stderr.index("oml serve: http://" if args[0] == "serve" else "oml mcp: ready, listening on http://")
    assert loaded < ready


@pytest.mark.parametrize("args,line", [(["serve", "--no-workers"], "oml serve: http://"),
                                       (["mcp", "--transport", "http"], "oml mcp: ready, listening on http://")])
def test_a_client_that_connects_on_the_ready_line_is_accepted(ctx, args, line):
    """The ready line is printed once the port is bound and listening: the first connection, made the moment the
    line appears, succeeds (no connection refused, no poll)."""
    port = _free_port()
    env = dict(os.environ, **env_for(ctx, ""), PYTHONUNBUFFERED="1", COLUMNS="200")
    p = subprocess.Popen([sys.executable, "-m", "oml.services.entrypoints.cli.main", *args, "--port", str(port)],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        seen = []
        for text in p.stderr:
            seen.append(text)
            if line in text:
                with socket.create_connection(("127.0.0.1", port), timeout=5):
                    pass
                break
        else:
            pytest.fail(f"exited {p.wait()} without the ready line:\n{''.join(seen)[-3000:]}")
        assert f"127.0.0.1:{port}" in text
    finally:
        stop(p)


def test_a_busy_port_fails_before_anything_says_serving(ctx):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = run_cli(ctx, ["serve", "--no-workers", "--port", str(port)])
    assert r.exit_code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "oml serve: http" not in r.output


def test_no_blank_swagger_page_offline(ctx):
    """/docs and /redoc would load Swagger UI from a CDN: they are off; /openapi.json is the contract."""
    from fastapi.testclient import TestClient

    from oml.services.entrypoints.http.app import create_app

    with TestClient(create_app(ctx)) as c:
        assert c.get("/docs").status_code == 404 and c.get("/redoc").status_code == 404
        assert c.get("/openapi.json").status_code == 200


def test_evidence_export_range_error_names_the_head(ctx, tenant, tmp_path):
    r = run_cli(ctx, ["evidence", "export", "-t", "fh-t", "--to-seq", "999999", "-o", str(tmp_path / "x.tar")],
                env={"OML_API_KEY": ""})
    assert r.exit_code == 2, r.output
    assert "evidence.invalid_range" in r.stderr and "head " in r.stderr and "field to_seq" in r.stderr
    assert not (tmp_path / "x.tar").exists()


def test_an_unwritable_anchors_file_does_not_lose_the_keys_shown_once(ctx, tmp_path):
    """The tenant exists once create_tenant returns: its once-only keys are printed even when the anchor cannot be written."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = run_cli(ctx, ["tenant", "create", "fh-ro", "--json"], env={"OML_TRUST_ANCHORS": str(blocker / "anchors")})
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["admin_key"].startswith("oml_")
    assert "NOT recorded" in r.stderr and "fh-ro " in r.stderr


def test_a_malformed_anchors_file_is_named_not_a_traceback(ctx, tenant, tmp_path):
    bad = tmp_path / "anchors"
    bad.write_text("fh-t not-a-fingerprint\n")
    for args in (["journal", "verify", "-t", "fh-t"], ["reconcile", "-t", "fh-t", "--no-record", "-o", str(tmp_path)]):
        r = run_cli(ctx, args, env={"OML_TRUST_ANCHORS": str(bad)})
        assert r.exit_code == 2, (args, r.output)
        assert "trust anchors file line 1" in r.stderr and "not-a-fingerprint" not in r.stderr


def test_mcp_stdio_with_an_unknown_key_names_the_database_before_loading_the_model(ctx):
    r = run_cli(ctx, ["mcp"], env={"OML_API_KEY": "oml_0123456789abcdef_" + "0" * 64})
    assert r.exit_code == 2
    assert "access.unauthenticated" in r.stderr and "asked the database" in r.stderr
    assert "embedding model loaded" not in r.stderr


# Every command that names a tenant, with the other arguments it requires.
TENANT_COMMANDS = {
    "checkpoint issue": [], "checkpoint show": [], "erase report": ["00000000-0000-4000-8000-000000000001"],
    "erase rewrite": [], "evidence export": ["-o", "never-written.tar"], "index catch-up": [], "index enroll": [],
    "index rebuild": [], "index verify": [], "journal verify": [], "keys encryption-versions": [], "keys retire": [], "keys rewrap": [],
    "keys rotate": [], "keys rotate-encryption": [], "lake catch-up": [], "lake compact": [], "lake purge": [],
    "lake status": [], "projections rebuild": [], "proof consistency": ["--from", "1"], "proof inclusion": ["--seq", "1"],
    "readlog seal": [], "readlog verify": [], "reconcile": ["--no-record"], "restore reapply-erasures": [],
    "retention apply": [], "status": [],
}


def _commands_with_a_tenant_option() -> set[str]:
    import typer

    from oml.services.entrypoints.cli.main import PLUGIN_GROUP, app

    plugins = {e.name for e in entry_points(group=PLUGIN_GROUP)}
    found = set()

    def walk(cmd, ctx, path):
        if hasattr(cmd, "list_commands"):  # a group (typer carries its own click)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if not sub.hidden:
                    walk(sub, type(ctx)(sub, parent=ctx, info_name=name), [*path, name])
        elif any("--tenant" in p.opts for p in cmd.params):
            found.add(" ".join(path))

    root = typer.main.get_command(app)
    walk(root, root.make_context("oml", [], resilient_parsing=True), [])
    return {c for c in found if c.split()[0] not in plugins}  # `oml bench`, `oml demo`: tools/, not the wheel


def test_every_command_that_names_a_tenant_is_checked_below():
    assert _commands_with_a_tenant_option() == set(TENANT_COMMANDS)


@pytest.mark.parametrize("command", sorted(TENANT_COMMANDS))
def test_an_unknown_tenant_is_not_found_not_nothing_to_do(ctx, command, tmp_path, monkeypatch):
    """A mistyped --tenant is tenant.not_found (exit 2), as reconcile answers, not "0 rows appended", a purge
    reported clean or a traceback (fresh-user runs)."""
    monkeypatch.chdir(tmp_path)
    r = run_cli(ctx, [*command.split(), *TENANT_COMMANDS[command], "--tenant", "no-such-tenant"], env={"OML_API_KEY": ""})
    assert r.exit_code == 2, r.output
    assert "tenant.not_found" in r.stderr and "Traceback" not in r.output
    assert list(tmp_path.iterdir()) == []


def test_lake_status_shows_a_long_tenant_id_whole(ctx):
    """At 80 columns a long tenant id wraps inside its cell instead of ending in an ellipsis: it is copied into
    other commands (fresh-user run)."""
    long_id = "fh-" + "a-rather-long-tenant-id-" * 2 + "x" * 9  # 60 characters
    assert run_cli(ctx, ["tenant", "create", long_id, "--json"]).exit_code == 0
    r = run_cli(ctx, ["lake", "status", "--tenant", long_id])
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout
    first_cells = [line.split("│")[1].strip() for line in r.stdout.splitlines() if line.startswith("│")]
    assert "".join(first_cells) == long_id


def test_a_wrong_or_malformed_master_key_is_one_line_not_a_traceback(ctx, tenant, capsys):
    """Another home's master key used to give integrity.body warnings and a traceback ending in InvalidTag."""
    assert run_cli(ctx, ["tenant", "create", "fh-mk"]).exit_code == 0
    # Its first checkpoint must be signed: the signing key is read from the key store.
    wrong = run_cli(ctx, ["checkpoint", "issue", "-t", "fh-mk"], env={"OML_MASTER_KEY": "ab" * 32})
    assert wrong.exit_code == 2, wrong.output
    assert "keys.master_key_mismatch" in wrong.stderr and str(ctx.settings.keys) in wrong.stderr
    assert "Traceback" not in wrong.output and "InvalidTag" not in wrong.output
    from oml.services.entrypoints.cli.main import main

    for bad in ("abc", "zz" * 32):
        with pytest.raises(SystemExit) as exit_:
            _run_main(main, ["checkpoint", "issue", "-t", "fh-t"], {"OML_MASTER_KEY": bad})
        assert exit_.value.code == 2
        said = capsys.readouterr().err
        assert "OML_MASTER_KEY: must be 64 hex characters" in said and bad not in said and "Traceback" not in said


def _run_main(main, args, env):
    """``main()`` (the console script, which turns a bad setting into one line) with argv and environment set."""
    import sys
    from unittest import mock

    with mock.patch.object(sys, "argv", ["oml", *args]), mock.patch.dict(os.environ, env):
        main()


def test_apikey_create_out_writes_the_key_alone_for_key_file(ctx, tenant, tmp_path):
    """The auditor guide's `auditor.key`: written 0600 by `--out`, never printed, refused when it exists."""
    env = {"OML_API_KEY": tenant["admin_key"]}
    root = json.loads(run_cli(ctx, ["workarea", "list", "--json"], env=env).stdout)["items"][0]["node_id"]
    out = tmp_path / "auditor.key"
    args = ["apikey", "create", "--identity", tenant["admin_identity"], "--role", "auditor", "--root", root, "--out", str(out)]
    r = run_cli(ctx, args, env=env)
    assert r.exit_code == 0, r.output
    key = out.read_text().strip()
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600 and key.startswith("oml_") and key not in r.output
    again = run_cli(ctx, args, env=env)
    assert again.exit_code == 2 and "the file exists" in again.stderr and out.read_text().strip() == key
    r = run_cli(ctx, ["evidence", "export", "-t", "fh-t", "--key-file", str(out), "-o", str(tmp_path / "ev.tar")])
    assert r.exit_code == 0 and "local operator" not in r.stderr, r.output


def test_mcp_with_keys_of_two_tenants_refuses_at_start(ctx, tenant):
    """It used to start, report ready and fail every call."""
    other = json.loads(run_cli(ctx, ["tenant", "create", "fh-mcp2", "--json"]).stdout)
    r = run_cli(ctx, ["mcp"], env={"OML_API_KEY": f"{tenant['admin_key']},{other['admin_key']}"})
    assert r.exit_code == 2, r.output
    assert "mcp.keys_of_several_tenants" in r.stderr and "embedding model loaded" not in r.stderr
    assert tenant["admin_key"] not in r.output


def test_a_malformed_key_is_called_malformed_not_from_another_home(ctx):
    r = run_cli(ctx, ["workarea", "list"], env={"OML_API_KEY": "hunter2"})
    assert r.exit_code == 2 and "access.unauthenticated" in r.stderr
    assert "not an OML API key" in r.stderr and "another home" not in r.stderr and "hunter2" not in r.output


def test_a_proof_beyond_the_head_says_the_seq_does_not_exist(ctx, tenant):
    assert run_cli(ctx, ["checkpoint", "issue", "-t", "fh-t"]).exit_code == 0
    r = run_cli(ctx, ["proof", "inclusion", "-t", "fh-t", "--seq", "50000"])
    assert r.exit_code == 2 and "proof.invalid_range" in r.stderr and "no such event" in r.stderr
    assert "issue a checkpoint" not in r.stderr


def test_recall_at_80_columns_keeps_statements_readable(ctx):
    """A seven-column table gave the statement one word per line at 80 columns."""
    from support.recall import make_world

    w = make_world(ctx, "fh-recall")
    statement = "The backup of the orders database runs every night at two and is checked by the on-call engineer."
    w.remember("main", statement, source={"uri": "https://wiki.example/backups"})
    w.index()
    reader = w.key("reader")
    r = run_cli(ctx, ["recall", "orders database backup", "--retriever", "fts"],
                env={"OML_API_KEY": w.keys[reader.principal_id], "COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert any(line.startswith("1.  hit") and "main" in line for line in lines), r.stdout
    words = [line for line in lines if line.strip() and " " not in line.strip()]
    assert words == [], r.stdout  # no line of one word
    assert " ".join(" ".join(lines).split()).count(statement) == 1 and "source: https://wiki.example/backups" in r.stdout


def test_recall_names_a_steering_row_once(ctx):
    from support.recall import make_world

    w = make_world(ctx, "fh-steer")
    w.remember("main", "Deploys need a second approver.", kind="steering")
    w.index()
    reader = w.key("reader")
    r = run_cli(ctx, ["recall", "deploys", "--retriever", "fts"], env={"OML_API_KEY": w.keys[reader.principal_id]})
    assert r.exit_code == 0, r.output
    assert "1.  steering  main" in r.stdout.splitlines(), r.stdout  # the segment, not the kind again


def test_recall_loads_the_query_embedder_before_the_recall_and_not_the_indexers_model(ctx, monkeypatch):
    """`oml recall` loads the query embedder under its spinner, before the recall, so a one-shot call's
    diagnostics.elapsed_ms times the recall, not the ONNX session's load; the indexer's torch model (seconds) it
    never uses stays unloaded."""
    from oml.workers.index import embedding

    from support.recall import make_world

    w = make_world(ctx, "fh-recall-warm")
    w.remember("main", "The orders database is backed up every night at two.")
    w.index()
    reader = w.key("reader")
    order: list[str] = []
    warm, call = embedding.QueryEmbedder.warm, embedding.QueryEmbedder.__call__

    def not_loaded(*a, **k):
        raise AssertionError("oml recall loaded the indexer's model")

    monkeypatch.setattr(embedding, "get_embedder", not_loaded)
    monkeypatch.setattr(embedding.QueryEmbedder, "warm", lambda self: (order.append("warm"), warm(self))[1])
    monkeypatch.setattr(embedding.QueryEmbedder, "__call__", lambda self, text: (order.append("embed"), call(self, text))[1])
    r = run_cli(ctx, ["recall", "orders database backup", "--json"], env={"OML_API_KEY": w.keys[reader.principal_id]})
    assert r.exit_code == 0, r.output
    assert order == ["warm", "embed"]
    out = json.loads(r.stdout)
    assert out["diagnostics"]["degraded"] == [] and out["hits"], out


@pytest.mark.parametrize("auto_migrate", ["true", "false"])
@pytest.mark.parametrize("args", [["tenant", "list"], ["status"], ["journal", "verify", "-t", "acme"], ["recall", "x"]])
def test_a_database_that_does_not_answer_is_refused_in_one_line(ctx, args, auto_migrate):
    """OML_DATABASE_URL at a port where nothing listens: `db.unavailable`, exit 2, as `oml db` answers it, not a
    traceback; with OML_AUTO_MIGRATE=false the first connection is the command's own, not the migration's."""
    r = run_cli(ctx, args, env={"OML_DATABASE_URL": "postgresql://nobody:s3cret@127.0.0.1:1/none",
                                "OML_AUTO_MIGRATE": auto_migrate, "OML_API_KEY": "oml_" + "0" * 16 + "_" + "0" * 64})
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("db.unavailable: could not connect to the database none on 127.0.0.1:1"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "s3cret" not in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize("args", [["tenant", "list"], ["status"], ["journal", "verify", "-t", "acme"], ["workarea", "list"],
                                  ["mcp"]])
def test_a_typod_home_is_not_created_by_a_command_that_only_reads(ctx, tmp_path, args):
    """A typo in OML_HOME (or a command run from another folder) used to create a home and leave a new embedded
    PostgreSQL running; only `tenant create`, `serve` and `worker` may create one."""
    typo = tmp_path / "oml-hmoe"
    r = run_cli(ctx, args, env={"OML_HOME": str(typo), "OML_DATABASE_URL": "", "OML_KEY_DIR": "",
                                "OML_API_KEY": "oml_0123456789abcdef_" + "0" * 64})
    assert r.exit_code == 2, r.output
    assert "home.not_found" in r.stderr and str(typo) in r.stderr and "OML_HOME is set" in r.stderr
    assert not typo.exists()
