"""An operator's day without tracebacks: the frictions a new user met after the first hour, through the real CLI.

Each test is one finding: a mistyped anchor is a usage error, secrets stay out of repr(), one *.invalid code per
area whatever the entry point, a revoked key is called revoked, the verifier key reaches the terminal, a second
erasure does not claim a rewrite, and recall's text output carries the claim ids an operator acts on.
"""
from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from support.admission import run_cli
from support.recall import make_world


@pytest.fixture(scope="module")
def world(ctx):
    w = make_world(ctx, "od-t")
    w.claim = w.remember("main", "The release checklist lives in the ops runbook and is reviewed every quarter.")
    w.index()
    return w


def _head(ctx, tenant: str) -> int:
    with ctx.db.system("oml_server") as conn:
        return conn.execute(sa.text("SELECT max(seq) FROM journal_events WHERE tenant_id = :t"), {"t": tenant}).scalar()


def test_reconcile_with_a_malformed_trusted_key_is_a_usage_error_that_records_nothing(ctx, world, tmp_path):
    """It ran, exited 1 (DISCREPANCIES FOUND) and journalled a failed reconciliation.completed."""
    before = _head(ctx, "od-t")
    r = run_cli(ctx, ["reconcile", "-t", "od-t", "--trusted-key", "deadbeef", "-o", str(tmp_path / "rep")])
    assert r.exit_code == 2, r.output
    assert "--trusted-key must be a 64-hex fingerprint" in r.stderr and "DISCREPANCIES" not in r.output
    assert _head(ctx, "od-t") == before and not (tmp_path / "rep").exists()
    # The three verifying commands agree (docs/anchoring.md).
    assert run_cli(ctx, ["journal", "verify", "-t", "od-t", "--trusted-key", "deadbeef"]).exit_code == 2


def test_returned_secrets_are_not_in_repr(ctx):
    from oml.client.wire import PrincipalCreated

    created = PrincipalCreated(seq=3, principal_id="0123456789abcdef", api_key="oml_0123456789abcdef_" + "a" * 64)
    assert "oml_" not in repr(created) and "oml_" not in str(created)
    assert created.api_key.startswith("oml_")  # still readable once
    t = ctx.tenancy.create_tenant("od-repr")
    assert t.admin_key not in repr(t) and t.recovery_private_key not in repr(t) and t.fingerprint in repr(t)


def test_erasure_input_is_erasure_invalid_from_the_cli_as_over_http(ctx, world):
    op = world.key("operator")
    env = {"OML_API_KEY": world.keys[op.principal_id]}
    r = run_cli(ctx, ["erase", "subject", "--kind", "emial", "--reason", "other"], input="a@example.com", env=env)
    assert r.exit_code == 2, r.output
    assert "erasure.invalid" in r.stderr and "admission.invalid" not in r.stderr and "a@example.com" not in r.output
    r = run_cli(ctx, ["erase", "claim", "not-a-uuid", "--reason", "other"], env=env)
    assert r.exit_code == 2 and "erasure.invalid" in r.stderr, r.output


def test_recall_input_is_recall_invalid_from_the_cli_and_mcp_as_over_http(ctx, world):
    reader = world.key("reader")
    r = run_cli(ctx, ["recall", "checklist", "--retriever", "fts", "-k", "1000"],
                env={"OML_API_KEY": world.keys[reader.principal_id]})
    assert r.exit_code == 2, r.output
    assert "recall.invalid" in r.stderr and "admission.invalid" not in r.stderr
    from fastapi.testclient import TestClient

    from oml.services.entrypoints.http.app import create_app

    with TestClient(create_app(ctx)) as c:
        got = c.post("/v1/recall", json={"query": "checklist", "k": 1000},
                     headers={"Authorization": f"Bearer {world.keys[reader.principal_id]}"})
    assert got.status_code == 422 and got.json()["code"] == "recall.invalid"


def test_a_revoked_key_is_called_revoked_not_from_another_home(ctx, world):
    reader = world.key("reader")
    admin = {"OML_API_KEY": world.keys[world.admin.principal_id]}
    r = run_cli(ctx, ["apikey", "revoke", reader.principal_id], env=admin)
    assert r.exit_code == 0, r.output
    r = run_cli(ctx, ["recall", "checklist", "--retriever", "fts"], env={"OML_API_KEY": world.keys[reader.principal_id]})
    assert r.exit_code == 2 and "access.unauthenticated" in r.stderr
    assert f"key {reader.principal_id} was revoked (seq " in r.stderr and "another home" not in r.stderr
    # A wrong secret for a revoked id is not told apart from any unknown key.
    wrong = f"oml_{reader.principal_id}_" + "0" * 64
    r = run_cli(ctx, ["recall", "checklist", "--retriever", "fts"], env={"OML_API_KEY": wrong})
    assert r.exit_code == 2 and "revoked" not in r.stderr and "another home" in r.stderr


def test_tenant_create_out_shows_the_public_verifier_key(ctx, tmp_path):
    out = tmp_path / "acme.json"
    r = run_cli(ctx, ["tenant", "create", "od-out", "--out", str(out)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert f"checkpoint verifier key: {data['verifier_key']}" in r.stderr
    assert data["admin_key"] not in r.output and data["recovery_private_key"] not in r.output


def test_recall_text_shows_claim_ids_and_a_second_erasure_claims_no_rewrite(ctx, world, tmp_path):
    """As docs/operator-guide.md (Routine acts) does it: an operator key made with --out, the id read off recall."""
    reader = world.key("reader")
    r = run_cli(ctx, ["recall", "release checklist", "--retriever", "fts"], env={"OML_API_KEY": world.keys[reader.principal_id]})
    assert r.exit_code == 0, r.output
    assert f"claim {world.claim['claim_id']}" in r.stdout
    admin = {"OML_API_KEY": world.keys[world.admin.principal_id]}
    ident = json.loads(run_cli(ctx, ["identity", "create", "--kind", "person", "--name", "ops on call", "--json"],
                               env=admin).stdout)["identity_id"]
    key = tmp_path / "operator.key"
    made = run_cli(ctx, ["apikey", "create", "--identity", ident, "--role", "operator", "--root", world.root,
                         "--out", str(key)], env=admin)
    assert made.exit_code == 0 and key.read_text().strip() not in made.output, made.output
    op = ["--key-file", str(key)]
    first = run_cli(ctx, ["erase", "claim", world.claim["claim_id"], "--reason", "other", *op], env={"OML_API_KEY": ""})
    assert first.exit_code == 0 and "rewrite of touched relations: done" in first.stdout, first.output
    again = run_cli(ctx, ["erase", "claim", world.claim["claim_id"], "--reason", "other", *op], env={"OML_API_KEY": ""})
    assert again.exit_code == 0, again.output
    assert "already erased" in again.stdout and "rewrite: nothing to do (already erased)" in again.stdout
    assert "rewrite of touched relations" not in again.stdout


def test_recall_text_shows_control_characters_of_stored_text_escaped(ctx, world):
    """A claim body is a writer's text: its escape sequences (OSC 52 clipboard write, clear screen, colours), bidi
    overrides and line breaks reach the operator's terminal shown, never acted on, and cannot print a line of their
    own such as a fake ``claim <id>`` an operator might erase."""
    decoy = "00000000-0000-4000-8000-00000000dead"
    statement = (f"termesc \x1b]52;c;ZWNobyBwd25lZA==\x07 \x1b[2J\x1b[31mRED\x1b[0m \u202egnp.exe\u202c"
                 f" \x9b31m done\r\nclaim {decoy}\n[bold]kept[/bold]")
    item = world.remember("main", statement, source={"uri": "https://x/\x1b[2Jsrc"})
    world.index()
    reader = world.key("reader")
    r = run_cli(ctx, ["recall", "termesc", "--retriever", "fts"],
                env={"OML_API_KEY": world.keys[reader.principal_id], "COLUMNS": "40"})  # narrow: wrapped lines too
    assert r.exit_code == 0, r.output
    for raw in ("\x1b", "\x07", "\x9b", "\u202e", "\u202c", "\r"):
        assert raw not in r.stdout, repr(raw)
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in r.stdout and "\\u202e" in r.stdout and "[bold]kept[/bold]" in r.stdout
    assert "https://x/\\x1b[2Jsrc" in r.stdout
    claim_lines = [ln for ln in r.stdout.splitlines() if ln.startswith("claim ")]
    assert claim_lines == [f"claim {item['claim_id']}"], claim_lines
    assert "done\\r\\nclaim" in r.stdout
