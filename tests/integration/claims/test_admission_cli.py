"""The admin CLI end to end: ``oml tenant create`` bootstrap, then admin acts with the printed key."""
from __future__ import annotations

import json

from oml.domain import signing
from oml.domain.checkpoint import parse_verifier_key

from support.admission import run_cli


def test_bootstrap_and_admin_commands(ctx, tmp_path):
    r = run_cli(ctx, ["tenant", "create", "cli-t", "--json"])
    assert r.exit_code == 0, r.output
    t = json.loads(r.stdout)
    assert len(t["fingerprint"]) == 64 and t["admin_key"].startswith("oml_") and len(t["recovery_private_key"]) == 64
    name, pub = parse_verifier_key(t["verifier_key"])
    assert name == "oml/cli-t" and signing.fingerprint(pub) == t["fingerprint"]
    assert run_cli(ctx, ["tenant", "create", "cli-t"]).exit_code == 2  # tenant.exists
    plain = run_cli(ctx, ["tenant", "create", "cli-u"]).stdout
    assert "trust anchor" in plain and "shown once" in plain

    env = {"OML_API_KEY": t["admin_key"]}
    ident = json.loads(run_cli(ctx, ["identity", "create", "--kind", "service", "--name", "bot", "--json"], env=env).stdout)
    wa = json.loads(run_cli(ctx, ["workarea", "create", "team", "--parent", t["root_workarea"], "--json"], env=env).stdout)
    assert wa["path"] == "main.team"
    keyfile = tmp_path / "admin.key"
    keyfile.write_text(t["admin_key"] + "\n")
    k = run_cli(ctx, ["key", "create", "--identity", ident["identity_id"], "--role", "writer", "--root", wa["node_id"],
                      "--key-file", str(keyfile), "--json"])
    assert k.exit_code == 0, k.output
    key = json.loads(k.stdout)
    assert key["api_key"].startswith(f"oml_{key['principal_id']}_")
    sub = run_cli(ctx, ["workarea", "create", "sub", "--parent", wa["node_id"], "--json"], env=env)
    node = json.loads(sub.stdout)["node_id"]
    moved = run_cli(ctx, ["workarea", "reparent", node, "--parent", t["root_workarea"], "--json"], env=env)
    assert json.loads(moved.stdout)["path"] == "main.sub"
    pol = run_cli(ctx, ["workarea", "policy", node, "--development", "--pii-policy", "declare", "--json"], env=env)
    assert json.loads(pol.stdout)["pii_policy"] == "declare"
    listing = run_cli(ctx, ["workarea", "list"], env=env).stdout
    assert "main.sub" in listing and "main.team" in listing
    assert run_cli(ctx, ["key", "revoke", key["principal_id"]], env=env).exit_code == 0
    # The revoked writer key cannot act; a writer key cannot run admin commands; no key at all is a usage error.
    assert run_cli(ctx, ["workarea", "list"], env={"OML_API_KEY": key["api_key"]}).exit_code == 2
    assert run_cli(ctx, ["identity", "create", "--kind", "person"], env={"OML_API_KEY": ""}).exit_code == 2
    assert run_cli(ctx, ["workarea", "reparent", node], env=env).exit_code == 2
    ok = run_cli(ctx, ["journal", "verify", "--tenant", "cli-t", "--trusted-key", t["fingerprint"]])
    assert ok.exit_code == 0, ok.stdout


def test_bench_admission_runs_small(ctx):
    """The benchmark's plumbing (not its numbers): four measurements, ratios, a tenant that verifies."""
    from oml.services.journal.verify import verify_journal
    from oml_tools.bench.admission import render, run

    res = run(ctx, single=3, batched=10, batch=4, rounds=2)
    for k in ("admission_single", "admission_batched", "raw_single", "raw_batched"):
        assert res[k]["claims"] in (3, 10) and res[k]["claims_per_s"] > 0
    assert len(res["rounds"]) == 2 and res["ratio_batched"] in [r["ratio"] for r in res["rounds"]]
    lines = render(res)
    assert len(lines) == 13 and lines[8].startswith("batched rounds") and lines[9].startswith("CPU per claim, batched")
    assert lines[10].startswith("first group commit of 4, before the timed ones")
    assert lines[11].startswith("CPU time taken by the hypervisor") and 0 <= res["stolen_share"] <= 1  # Linux: /proc/stat
    assert lines[12].startswith("WAL per claim, batched")
    assert verify_journal(ctx.db, res["tenant"]).ok
