"""Simulations over HTTP and the CLI: open, write inside, review, supersede, recall as audience and outsider, close."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app

from support.admission import run_cli
from support.recall import make_world


@pytest.fixture(scope="module")
def w(ctx):
    w = make_world(ctx, "sims-http")
    w.real = w.remember("main.ops", "The status page is updated by the incident commander.")
    w.index()
    w.inside_writer, w.inside_reviewer, w.inside_reader, w.outside_reader = (w.key(r) for r in ("writer", "reviewer", "reader", "reader"))
    w.operator = w.key("operator")
    w.client = TestClient(create_app(ctx))
    return w


def h(w, p):
    return {"Authorization": f"Bearer {w.keys[p.principal_id]}"}


def test_the_simulation_routes(w, ctx):
    c = w.client
    audience = [w.inside_writer.principal_id, w.inside_reviewer.principal_id, w.inside_reader.principal_id]
    r = c.post("/v1/simulations", json={"name": "status page drill", "audience": audience}, headers=h(w, w.operator))
    assert r.status_code == 200, r.text
    sim = r.json()["simulation_id"]
    assert r.json()["audience"] == sorted(audience)
    # Refusals never echo input; a writer may not open; an outsider cannot see it.
    bad = c.post("/v1/simulations", json={"name": "x", "audience": ["SECRETVALUE"]}, headers=h(w, w.operator))
    assert bad.status_code == 422 and "SECRETVALUE" not in bad.text
    assert c.post("/v1/simulations", json={"name": "x", "audience": audience}, headers=h(w, w.writer)).json()["code"] == "access.denied"
    assert c.get(f"/v1/simulations/{sim}", headers=h(w, w.outside_reader)).json()["code"] == "simulation.not_found"
    record = c.get(f"/v1/simulations/{sim}", headers=h(w, w.inside_reader)).json()
    assert record["name"] == "status page drill"
    # A journal seq counts every simulation's acts: audience members get none, admins and operators do.
    assert record["opened_seq"] is None and record["closed_seq"] is None
    assert isinstance(c.get(f"/v1/simulations/{sim}", headers=h(w, w.operator)).json()["opened_seq"], int)
    assert c.get("/v1/simulations", headers=h(w, w.outside_reader)).json()["items"] == []

    sup = c.post(f"/v1/simulations/{sim}/claims/{w.real['claim_id']}/supersede",
                 json={"body": {"statement": "During the drill the status page is updated by the scribe."}},
                 headers={**h(w, w.inside_writer), "Idempotency-Key": "drill-1"})
    assert sup.status_code == 200, sup.text
    ov = sup.json()
    assert ov["version_no"] == 2
    again = c.post(f"/v1/simulations/{sim}/claims/{w.real['claim_id']}/supersede",
                   json={"body": {"statement": "During the drill the status page is updated by the scribe."}},
                   headers={**h(w, w.inside_writer), "Idempotency-Key": "drill-1"})
    assert again.json()["version_id"] == ov["version_id"] and again.json()["replayed"] is True
    outsider_write = c.post(f"/v1/simulations/{sim}/claims", json={"workarea_id": w.area("main.ops"), "body": {"statement": "x"}},
                            headers=h(w, w.writer))
    assert outsider_write.status_code == 404 and outsider_write.json()["code"] == "simulation.not_found"
    born = c.post(f"/v1/simulations/{sim}/claims", json={"workarea_id": w.area("main.ops"),
                                                         "body": {"statement": "The drill status page lives on a staging host."}},
                  headers=h(w, w.inside_writer)).json()
    for v in (ov["version_id"], born["version_id"]):
        rv = c.post(f"/v1/versions/{v}/review", json={"decision": "promote", "reason": "accurate"}, headers=h(w, w.inside_reviewer))
        assert rv.status_code == 200, rv.text
    w.index()
    q = {"query": "who updates the status page", "k": 10}
    inside = c.post("/v1/recall", json=q, headers=h(w, w.inside_reader)).json()
    outside = c.post("/v1/recall", json=q, headers=h(w, w.outside_reader)).json()
    assert ov["version_id"] in [x["version_id"] for x in inside["hits"]]
    assert w.real["version_id"] in [x["version_id"] for x in outside["hits"]]
    assert {ov["version_id"], born["version_id"]}.isdisjoint(x["version_id"] for x in outside["hits"])
    assert c.get(f"/v1/claims/{w.real['claim_id']}", headers=h(w, w.inside_reader)).json()["version_id"] == ov["version_id"]
    assert c.get(f"/v1/versions/{ov['version_id']}", headers=h(w, w.outside_reader)).status_code == 404

    closed = c.post(f"/v1/simulations/{sim}/close", headers=h(w, w.operator))
    assert closed.status_code == 200, closed.text
    assert {d["version_id"] for d in closed.json()["demoted"]} == {ov["version_id"], born["version_id"]}
    assert c.get(f"/v1/claims/{w.real['claim_id']}", headers=h(w, w.inside_reader)).json()["version_id"] == w.real["version_id"]
    spec = c.get("/openapi.json").json()
    assert "/v1/simulations/{simulation_id}/close" in spec["paths"]


def test_the_simulation_cli(w, ctx, tmp_path):
    env = {"OML_API_KEY": w.keys[w.admin.principal_id]}
    namefile = tmp_path / "name"
    namefile.write_text("cli drill\n")
    r = run_cli(ctx, ["simulation", "open", "--audience", w.inside_reader.principal_id, "--name-file", str(namefile), "--json"], env=env)
    assert r.exit_code == 0, r.output
    sim = json.loads(r.stdout)["simulation_id"]
    assert run_cli(ctx, ["simulation", "list"], env=env).exit_code == 0
    listing = run_cli(ctx, ["simulation", "list", "--json"], env=env)
    assert sim in [i["simulation_id"] for i in json.loads(listing.stdout)["items"]]
    shown = json.loads(run_cli(ctx, ["simulation", "show", sim], env={"OML_API_KEY": w.keys[w.inside_reader.principal_id]}).stdout)
    assert shown["name"] == "cli drill" and shown["status"] == "open"
    assert run_cli(ctx, ["simulation", "show", sim], env={"OML_API_KEY": w.keys[w.outside_reader.principal_id]}).exit_code == 2
    assert run_cli(ctx, ["simulation", "open", "--audience", w.inside_reader.principal_id, "--name", "x"],
                   env={"OML_API_KEY": w.keys[w.writer.principal_id]}).exit_code == 2
    done = run_cli(ctx, ["simulation", "close", sim, "--json"], env=env)
    assert done.exit_code == 0 and json.loads(done.stdout)["already_closed"] is False
