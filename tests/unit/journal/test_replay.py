"""The authority replay (domain/replay.py): every rule has a case, and a genuine history has no finding."""
from __future__ import annotations

import pytest

from oml.domain import replay as R
from oml.domain.signing import kid

from support.paths import REPO

T = "acme"
SK, RK, EK, SK2 = ("11" * 32, "22" * 32, "33" * 32, "44" * 32)
ROOT, DEV = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"
ADMIN_ID, ALICE, BOB = ("00000000-0000-4000-8000-0000000000a1", "00000000-0000-4000-8000-0000000000a2",
                        "00000000-0000-4000-8000-0000000000a3")
ADMIN, WRITER, REVIEWER, OPERATOR, READER = "a" * 16, "b" * 16, "c" * 16, "d" * 16, "e" * 16
SYS = (None, None)


def uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012x}"


class History:
    """Builds a tenant's decoded events; ``ev`` appends one and returns its seq."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.kid = kid(bytes.fromhex(SK))

    def ev(self, type: str, data: dict, actor: tuple = SYS, **over) -> int:
        seq = len(self.events) + 1
        e = {"v": 1, "tenant": T, "seq": seq, "type": type, "event_id": uid(10_000 + seq),
             "at": "2026-01-01T00:00:00.000000Z", "actor": {"principal": actor[0], "identity": actor[1]},
             "kid": self.kid, "data": data}
        e.update(over)
        self.events.append(e)
        return seq

    def findings(self) -> list[R.Finding]:
        return R.replay(T, self.events)[1]

    def rules(self) -> set[tuple[int, str]]:
        return {(f.seq, f.rule) for f in self.findings()}


ADM = (ADMIN, ADMIN_ID)
WR = (WRITER, ALICE)
RV = (REVIEWER, BOB)
OP = (OPERATOR, BOB)


def bootstrap() -> History:
    h = History()
    h.ev("tenant.created", {"signing_key": SK, "encryption_key": EK, "recovery_key": RK})
    h.ev("workarea.created", {"node_id": ROOT, "parent_id": None, "label": "main", "development": False, "pii_policy": "deny"})
    h.ev("identity.created", {"identity_id": ADMIN_ID, "kind": "person"})
    h.ev("principal.created", {"principal_id": ADMIN, "identity_id": ADMIN_ID, "role": "admin", "roots": [ROOT], "secret_sha256": "ab" * 32})
    h.ev("workarea.created", {"node_id": DEV, "parent_id": ROOT, "label": "dev", "development": True, "pii_policy": "deny"}, ADM)
    for ident in (ALICE, BOB):
        h.ev("identity.created", {"identity_id": ident, "kind": "person"}, ADM)
    for pid, ident, role in ((WRITER, ALICE, "writer"), (REVIEWER, BOB, "reviewer"), (OPERATOR, BOB, "operator"),
                             (READER, ALICE, "reader")):
        h.ev("principal.created", {"principal_id": pid, "identity_id": ident, "role": role, "roots": [ROOT],
                                   "secret_sha256": "cd" * 32}, ADM)
    return h


def submit(h: History, claim: str, version: str, *, no: int = 1, wa: str = ROOT, supersedes: str | None = None,
           actor=WR, sim: str | None = None, **extra) -> int:
    data = {"claim_id": claim, "version_id": version, "version_no": no, "workarea_id": wa, "kind": "fact",
            "provenance": "simulation" if sim else "observed", "supersedes": supersedes, "derived_from": [],
            "valid_from": None, "valid_to": None, "confidence": None, "artifact_id": uid(90_000 + len(h.events)),
            "ciphertext_sha256": "ef" * 32, "key_version": 1}
    if sim:
        data.update(simulation_id=sim, tainted=True)
    data.update(extra)
    return h.ev("claim.submitted", data, actor)


def review(h: History, type: str, claim: str, version: str, actor=RV, **extra) -> int:
    data = {"claim_id": claim, "version_id": version, "reason": "accurate"}
    if type == "claim.promoted":
        data["self_signed"] = False
    data.update(extra)
    return h.ev(type, data, actor)


C1, V1, V2, V3 = uid(1), uid(2), uid(3), uid(4)
SIM = uid(50)


def genuine() -> History:
    """Every kind of act, each permitted: the replay finds nothing."""
    h = bootstrap()
    submit(h, C1, V1)
    review(h, "claim.promoted", C1, V1)
    submit(h, C1, V2, no=2, supersedes=V1)
    review(h, "claim.promoted", C1, V2)
    review(h, "claim.demoted", C1, V2)
    submit(h, uid(5), uid(6), wa=DEV)
    review(h, "claim.promoted", uid(5), uid(6), actor=(WRITER, ALICE), self_signed=True)   # wrong role: see below
    h.events.pop()
    h.ev("principal.created", {"principal_id": "f" * 16, "identity_id": ALICE, "role": "reviewer", "roots": [ROOT],
                               "secret_sha256": "cd" * 32}, ADM)
    review(h, "claim.promoted", uid(5), uid(6), actor=("f" * 16, ALICE), self_signed=True)
    h.ev("claim.hold_placed", {"claim_id": uid(5), "reason": "legal_request"}, OP)
    h.ev("claim.hold_released", {"claim_id": uid(5), "reason": "legal_request"}, OP)
    h.ev("claim.erased", {"claim_id": uid(5), "reason": "data_subject_request", "artifacts": []}, OP)
    h.ev("simulation.opened", {"simulation_id": SIM, "audience": sorted([WRITER, REVIEWER])}, OP)
    submit(h, C1, V3, no=3, supersedes=V1, sim=SIM)
    review(h, "claim.promoted", C1, V3, overlay=True, simulation_id=SIM)
    h.ev("simulation.closed", {"simulation_id": SIM, "reason": "simulation_closed",
                               "demoted": [{"claim_id": C1, "version_id": V3}]}, OP)
    h.ev("signing_key.rotated", {"new_key": SK2, "pop": "00" * 64, "authorised_by": "current"}, ADM)
    h.kid = kid(bytes.fromhex(SK2))
    h.ev("encryption_key.rotated", {"new_key": "55" * 32, "version": 2}, OP)
    h.ev("workarea.policy_set", {"node_id": DEV, "development": False, "pii_policy": "declare"}, ADM)
    h.ev("workarea.reparented", {"node_id": DEV, "new_parent_id": None}, ADM)
    h.ev("retention.policy_set", {"readlog_days": 30}, OP)
    h.ev("readlog.anchored", {"batch_no": 1}, SYS)
    h.ev("reconciliation.completed", {"digest": "00" * 32}, SYS)
    h.ev("principal.revoked", {"principal_id": READER}, ADM)
    return h


def test_a_genuine_history_has_no_finding_and_its_state():
    h = genuine()
    reg, findings = R.replay(T, h.events)
    assert findings == []
    assert reg.last_seq == len(h.events)
    assert reg.tips == {C1: V1}                              # V2 demoted: V1 is the tip again; V3 only ever an overlay
    assert reg.versions[V3]["status"] == "demoted" and reg.sim_tips == {}
    assert reg.claims[uid(5)]["erased_seq"] is not None and reg.versions[uid(6)]["status"] == "erased"
    assert reg.principals[READER]["revoked_seq"] == len(h.events)
    assert [k["version"] for k in reg.keys if k["purpose"] == "signing"] == [1, 2]
    assert reg.key("signing")["kid"] == kid(bytes.fromhex(SK2)) and reg.readlog_days == 30
    assert reg.workareas[DEV]["parent"] is None and reg.path(DEV) == "dev"


def test_registry_snapshot_round_trips_and_continues():
    h = genuine()
    cut = 20
    reg, _ = R.replay(T, h.events[:cut])
    snap = reg.to_json()
    again = R.Registry.from_json(snap)
    assert again.digest() == reg.digest() and len(reg.digest()) == 64
    full, findings = R.replay(T, h.events[cut:], again)
    assert findings == [] and full.digest() == R.replay(T, h.events)[0].digest()
    with pytest.raises(ValueError):
        R.Registry.from_json({"tenant": T})


def last(h: History) -> int:
    return len(h.events)


# ---------------------------------------------------------------- actor rules

def test_actor_unregistered_and_everything_it_created_is_flagged():
    h = bootstrap()
    forged = "9" * 16
    s = h.ev("principal.created", {"principal_id": "8" * 16, "identity_id": ADMIN_ID, "role": "admin", "roots": [ROOT],
                                   "secret_sha256": "ab" * 32}, (forged, ADMIN_ID))
    t = h.ev("identity.created", {"identity_id": uid(77), "kind": "person"}, ("8" * 16, ADMIN_ID))
    assert h.rules() == {(s, "actor.unregistered"), (t, "actor.unauthorised_origin")}
    f = h.findings()[0]
    assert forged in f.detail and f.seq == s


def test_actor_identity_mismatch_revoked_role_and_system():
    h = bootstrap()
    a = submit(h, C1, V1, actor=(WRITER, BOB))
    b = h.ev("identity.created", {"identity_id": uid(70), "kind": "person"}, WR)                 # writer may not admin
    h.ev("principal.revoked", {"principal_id": WRITER}, ADM)
    c = submit(h, uid(9), uid(10))
    d = review(h, "claim.promoted", C1, V1, actor=SYS)                                          # system may not review
    assert h.rules() == {(a, "actor.identity_mismatch"), (b, "actor.role"), (c, "actor.revoked"),
                         (d, "actor.system_not_permitted")}


def test_system_may_create_only_the_bootstrap_admin_root_and_indexer_keys():
    h = bootstrap()
    ok = h.ev("principal.created", {"principal_id": "7" * 16, "identity_id": ALICE, "role": "indexer", "roots": [ROOT],
                                    "secret_sha256": "ab" * 32})
    bad = h.ev("principal.created", {"principal_id": "6" * 16, "identity_id": ALICE, "role": "admin", "roots": [ROOT],
                                     "secret_sha256": "ab" * 32})
    w = h.ev("workarea.created", {"node_id": uid(80), "parent_id": None, "label": "x", "development": False, "pii_policy": "deny"})
    assert h.rules() == {(bad, "system.principal_role"), (w, "system.workarea")}
    assert ok not in {s for s, _ in h.rules()}


def test_actor_must_be_well_formed_and_scope_is_checked():
    h = bootstrap()
    a = h.ev("identity.created", {"identity_id": uid(70), "kind": "person"}, (ADMIN, None))
    h.ev("workarea.created", {"node_id": uid(81), "parent_id": None, "label": "other", "development": False, "pii_policy": "deny"}, ADM)
    b = submit(h, C1, V1, wa=uid(81))
    h.ev("principal.created", {"principal_id": "9" * 16, "identity_id": ALICE, "role": "writer", "roots": [uid(81)],
                               "secret_sha256": "cd" * 32}, ADM)
    submit(h, uid(30), uid(31), wa=uid(81), actor=("9" * 16, ALICE))
    c = submit(h, uid(32), uid(33), derived_from=[uid(30)])                   # derived from outside the writer's roots
    assert h.rules() == {(a, "event.malformed"), (b, "actor.scope"), (c, "actor.scope")}


# ---------------------------------------------------------------- reviews

def test_self_promotion_outside_development_is_separation_of_duties():
    h = bootstrap()
    h.ev("principal.created", {"principal_id": "f" * 16, "identity_id": ALICE, "role": "reviewer", "roots": [ROOT],
                               "secret_sha256": "cd" * 32}, ADM)
    submit(h, C1, V1)
    s = review(h, "claim.promoted", C1, V1, actor=("f" * 16, ALICE))
    assert h.rules() == {(s, "review.separation_of_duties")}
    assert R.replay(T, h.events)[0].versions[V1]["status"] == "promoted"  # applied: reported once, not cascading


def test_self_signed_must_match_and_transitions_are_checked():
    h = bootstrap()
    submit(h, C1, V1)
    a = review(h, "claim.promoted", C1, V1, self_signed=True)         # not the author, not development
    b = review(h, "claim.rejected", C1, V1)                           # promoted cannot be rejected
    c = review(h, "claim.promoted", C1, uid(99))
    d = review(h, "claim.demoted", uid(98), V1)
    e = review(h, "claim.promoted", C1, V1, decision="x")
    assert h.rules() == {(a, "review.self_signed"), (b, "transition.invalid"), (c, "version.unknown"),
                         (d, "claim.mismatch"), (e, "transition.invalid")}


def test_a_promotion_must_supersede_the_current_tip():
    h = bootstrap()
    submit(h, C1, V1)
    submit(h, C1, V2, no=2)                  # supersedes nothing while V1 becomes tip
    review(h, "claim.promoted", C1, V1)
    s = review(h, "claim.promoted", C1, V2)
    assert h.rules() == {(s, "supersession.not_tip")}


# ---------------------------------------------------------------- named things exist

def test_claims_versions_workareas_identities_principals_exist():
    h = bootstrap()
    a = submit(h, C1, V1, wa=uid(404))
    b = submit(h, uid(11), uid(12), no=2)
    c = h.ev("principal.created", {"principal_id": "5" * 16, "identity_id": uid(405), "role": "writer", "roots": [ROOT],
                                   "secret_sha256": "ab" * 32}, ADM)
    d = h.ev("principal.created", {"principal_id": "4" * 16, "identity_id": ALICE, "role": "god", "roots": [uid(406)],
                                   "secret_sha256": "ab" * 32}, ADM)
    e = h.ev("principal.revoked", {"principal_id": "3" * 16}, ADM)
    f = h.ev("claim.erased", {"claim_id": uid(407), "reason": "other", "artifacts": []}, OP)
    g = h.ev("claim.hold_placed", {"claim_id": uid(408), "reason": "other"}, OP)
    i = h.ev("workarea.policy_set", {"node_id": uid(409), "development": True, "pii_policy": "deny"}, ADM)
    j = h.ev("workarea.reparented", {"node_id": ROOT, "new_parent_id": DEV}, ADM)
    assert h.rules() == {(a, "workarea.unknown"), (b, "claim.unknown"), (c, "identity.unknown"),
                         (d, "principal.role_unknown"), (d, "workarea.unknown"), (e, "principal.unknown"),
                         (f, "claim.unknown"), (g, "claim.unknown"), (i, "workarea.unknown"), (j, "workarea.cycle")}


def test_duplicates_are_findings():
    h = bootstrap()
    a = h.ev("identity.created", {"identity_id": ALICE, "kind": "person"}, ADM)
    b = h.ev("principal.created", {"principal_id": WRITER, "identity_id": ALICE, "role": "admin", "roots": [ROOT],
                                   "secret_sha256": "ab" * 32}, ADM)
    c = h.ev("workarea.created", {"node_id": DEV, "parent_id": ROOT, "label": "x", "development": False, "pii_policy": "deny"}, ADM)
    d = h.ev("workarea.created", {"node_id": uid(82), "parent_id": ROOT, "label": "dev", "development": False, "pii_policy": "deny"}, ADM)
    submit(h, C1, V1)
    e = submit(h, C1, V1)
    g = submit(h, C1, uid(13))
    i = h.ev("principal.revoked", {"principal_id": READER}, ADM)
    j = h.ev("principal.revoked", {"principal_id": READER}, ADM)
    assert h.rules() == {(a, "identity.exists"), (b, "principal.exists"), (c, "workarea.exists"),
                         (d, "workarea.path_exists"), (e, "version.exists"), (g, "claim.exists"), (j, "principal.revoked")}
    assert i not in {s for s, _ in h.rules()}


def test_versions_follow_their_claim():
    h = bootstrap()
    h.ev("workarea.created", {"node_id": uid(83), "parent_id": ROOT, "label": "b", "development": False, "pii_policy": "deny"}, ADM)
    submit(h, C1, V1)
    a = submit(h, C1, V2, no=3)
    b = submit(h, C1, V3, no=4, wa=uid(83))
    c = submit(h, C1, uid(14), no=5, supersedes=uid(15))
    d = submit(h, uid(16), uid(17), supersedes=V1)
    e = submit(h, uid(18), uid(19), derived_from=[uid(20)])
    assert h.rules() == {(a, "version.number"), (b, "claim.workarea_mismatch"), (c, "supersession.claim"),
                         (d, "supersession.claim"), (e, "claim.unknown")}


def test_erasure_hold_and_erased_claims():
    h = bootstrap()
    submit(h, C1, V1)
    h.ev("claim.hold_placed", {"claim_id": C1, "reason": "legal_request"}, OP)
    a = h.ev("claim.hold_placed", {"claim_id": C1, "reason": "legal_request"}, OP)
    b = h.ev("claim.erased", {"claim_id": C1, "reason": "other", "artifacts": []}, OP)
    c = h.ev("claim.erased", {"claim_id": C1, "reason": "other", "artifacts": []}, OP)
    d = submit(h, C1, V2, no=2)
    e = review(h, "claim.promoted", C1, V1)
    g = h.ev("claim.hold_released", {"claim_id": C1, "reason": "other"}, OP)
    assert h.rules() == {(a, "hold.unchanged"), (b, "erasure.legal_hold"), (c, "claim.erased"), (d, "claim.erased"),
                         (e, "claim.erased"), (g, "claim.erased")}


# ---------------------------------------------------------------- simulations

def test_simulation_writes_and_reviews_come_from_the_audience():
    h = bootstrap()
    h.ev("principal.created", {"principal_id": "1" * 16, "identity_id": ALICE, "role": "writer", "roots": [ROOT],
                               "secret_sha256": "cd" * 32}, ADM)
    a = h.ev("simulation.opened", {"simulation_id": SIM, "audience": [WRITER, "2" * 16]}, OP)
    submit(h, C1, V1, sim=SIM)
    b = submit(h, uid(21), uid(22), actor=("1" * 16, ALICE), sim=SIM)
    c = review(h, "claim.promoted", C1, V1, overlay=True, simulation_id=SIM)        # reviewer not in audience
    d = submit(h, uid(23), uid(24), sim=uid(51))
    e = h.ev("simulation.opened", {"simulation_id": SIM, "audience": [WRITER]}, OP)
    assert h.rules() == {(a, "simulation.audience_unknown"), (b, "simulation.audience"), (c, "simulation.audience"),
                         (d, "simulation.unknown"), (e, "simulation.exists")}


def test_taint_overlay_and_closed_simulations():
    h = bootstrap()
    h.ev("simulation.opened", {"simulation_id": SIM, "audience": [REVIEWER, WRITER]}, OP)
    submit(h, C1, V1)
    review(h, "claim.promoted", C1, V1)
    a = submit(h, C1, V2, no=2, supersedes=V1, sim=None, simulation_id=SIM, tainted=True)  # tainted without provenance
    submit(h, C1, V3, no=3, supersedes=V1, sim=SIM)
    b = review(h, "claim.promoted", C1, V3)                                  # tainted as a default tip
    h2 = bootstrap()
    h2.ev("simulation.opened", {"simulation_id": SIM, "audience": [REVIEWER, WRITER]}, OP)
    submit(h2, C1, V1, sim=SIM)
    review(h2, "claim.promoted", C1, V1, overlay=True, simulation_id=SIM)
    c = h2.ev("simulation.closed", {"simulation_id": SIM, "reason": "simulation_closed", "demoted": []}, OP)
    d = h2.ev("simulation.closed", {"simulation_id": SIM, "reason": "simulation_closed", "demoted": []}, OP)
    e = submit(h2, C1, V2, no=2, sim=SIM)
    g = h2.ev("simulation.closed", {"simulation_id": uid(52), "reason": "simulation_closed", "demoted": []}, OP)
    assert h.rules() == {(a, "simulation.taint"), (b, "simulation.tip_refused"), (b, "simulation.taint")}
    assert h2.rules() == {(c, "simulation.demotions"), (d, "simulation.closed"), (e, "simulation.closed"),
                          (g, "simulation.unknown")}


def test_material_from_two_simulations_never_mixes():
    h = bootstrap()
    h.ev("simulation.opened", {"simulation_id": SIM, "audience": [WRITER]}, OP)
    h.ev("simulation.opened", {"simulation_id": uid(51), "audience": [WRITER]}, OP)
    submit(h, C1, V1, sim=SIM)
    s = submit(h, uid(25), uid(26), sim=uid(51), derived_from=[C1])
    assert (s, "simulation.mixed") in h.rules()


# ---------------------------------------------------------------- keys, position, shape

def test_rotations():
    h = bootstrap()
    a = h.ev("signing_key.rotated", {"new_key": SK2, "pop": "00" * 64, "authorised_by": "recovery"}, ADM)   # signed by the current key
    b = h.ev("signing_key.rotated", {"new_key": "66" * 32, "pop": "00" * 64, "authorised_by": "someone"}, ADM)
    h.ev("principal.revoked", {"principal_id": OPERATOR}, ADM)
    c = h.ev("signing_key.rotated", {"new_key": "77" * 32, "pop": "00" * 64, "authorised_by": "current"}, OP)
    d = h.ev("encryption_key.rotated", {"new_key": "55" * 32, "version": 5}, ADM)
    h3 = bootstrap()
    ok = h3.ev("signing_key.rotated", {"new_key": SK2, "pop": "00" * 64, "authorised_by": "recovery"}, SYS, kid=kid(bytes.fromhex(RK)))
    assert h.rules() >= {(a, "rotation.kid"), (b, "rotation.authorised_by"), (c, "actor.revoked"), (d, "key.version")}
    assert ok not in {s for s, _ in h3.rules()}


def test_tenant_created_position_type_seq_and_tenant():
    h = bootstrap()
    a = h.ev("tenant.created", {"signing_key": SK, "encryption_key": EK, "recovery_key": RK})
    b = h.ev("no.such_type", {}, ADM)
    c = h.ev("tenant.policy_set", {}, ADM, tenant="other")
    assert h.rules() == {(a, "tenant.created.position"), (b, "event.type_unknown"), (c, "event.tenant")}
    r = R.AuthorityReplay(T)
    for e in h.events:
        r.add(e["seq"], e)
    d = len(h.events) + 1
    assert [f.rule for f in r.add(d, dict(h.events[-1], seq=1, tenant=T))] == ["event.seq_mismatch"]
    first = History()
    s = first.ev("identity.created", {"identity_id": ALICE, "kind": "person"})
    assert (s, "tenant.created.position") in first.rules()


def test_malformed_data_is_a_finding_never_an_exception():
    h = bootstrap()
    bad = [
        h.ev("principal.created", {"principal_id": "5" * 16}, ADM),
        h.ev("claim.submitted", {"claim_id": 3, "version_id": V1}, WR),
        h.ev("simulation.opened", {"simulation_id": SIM, "audience": "everyone"}, OP),
        h.ev("claim.promoted", "not an object", RV),
        h.ev("retention.policy_set", {"readlog_days": 1.5}, OP),
    ]
    h.events.append("not an event")
    h.events.append({"seq": len(h.events) + 1, "type": "claim.promoted", "tenant": T, "actor": [], "data": {}})
    rules = h.rules()
    for s in bad:
        assert (s, "event.malformed") in rules
    assert (len(h.events) - 1, "event.malformed") in rules and (len(h.events), "event.malformed") in rules


def test_replay_order_and_add_api():
    r = R.AuthorityReplay(T)
    h = bootstrap()
    for e in h.events:
        assert r.add(e["seq"], e) == []
    out = r.add(len(h.events) + 5, dict(h.events[-1], seq=len(h.events) + 5, data={"identity_id": uid(3), "kind": "person"},
                                        type="identity.created"))
    assert [f.rule for f in out] == ["seq.order"] and r.findings == out
    assert out[0].as_json() == {"seq": out[0].seq, "rule": "seq.order", "detail": out[0].detail}


def test_every_rule_is_listed_tested_and_documented():
    import re
    from pathlib import Path

    root = REPO
    src = (root / "domain/replay.py").read_text()
    made = set(re.findall(r'\bf\("([a-z_.]+)"', src)) | set(R._RULE_OF_CODE.values())
    assert made == R.RULES
    tests = Path(__file__).read_text()
    assert {r for r in R.RULES if f'"{r}"' not in tests} == set()
    doc = (root / "docs/security-model.md").read_text()
    assert {r for r in R.RULES if f"`{r}`" not in doc} == set()
