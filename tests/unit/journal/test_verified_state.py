"""The verified state's derivation (services/journal/verified_state.py), on chains built in memory: no database."""
from __future__ import annotations

import uuid

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from oml.domain import chain, signing
from oml.domain.canonical import now
from oml.domain.events import SYSTEM, encode, event_object
from oml.services.journal.journal import Row
from oml.services.journal.verified_state import TenantState

T = "vs-unit"
C1 = str(uuid.uuid4())
P1 = "0123456789abcdef"


def _raw(k: Ed25519PrivateKey) -> bytes:
    return k.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


class Chain:
    """A tenant chain signed by ``key`` (or, per event, by another key: a forgery)."""

    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()
        self.rows: list[Row] = []
        self.head = chain.genesis(T)

    def add(self, type: str, data: dict, *, signer: Ed25519PrivateKey | None = None) -> Row:
        seq = len(self.rows) + 1
        kid = signing.kid(_raw(self.key))
        body = encode(event_object(tenant=T, seq=seq, type=type, event_id=str(uuid.uuid4()), at=now(), actor=SYSTEM,
                                   kid=kid, data=data))
        h = chain.link(self.head, body)
        row = Row(seq, "e", type, kid, None, body, h, self.head, (signer or self.key).sign(signing.event_message(h)))
        self.rows.append(row)
        self.head = h
        return row


def _journal_row(r: Row) -> chain.JournalRow:
    return chain.JournalRow(r.seq, r.canonical, r.hash, r.prev_hash, r.signature, r.kid)


def _tenant(c: Chain) -> TenantState:
    c.add("tenant.created", {"signing_key": _raw(c.key).hex(), "recovery_key": _raw(Ed25519PrivateKey.generate()).hex(),
                             "encryption_key": "11" * 32})
    s = TenantState(T, chain.ChainVerifier(T))
    assert s.verify(_journal_row(c.rows[0]))
    return s


def test_verified_events_carry_keys_workareas_holds_and_simulations():
    c = Chain()
    s = _tenant(c)
    root, child, claim, sim = (str(uuid.uuid4()) for _ in range(4))
    for type, data in [("encryption_key.rotated", {"new_key": "22" * 32, "version": 2}),
                       ("workarea.created", {"node_id": root, "parent_id": None, "label": "main", "development": False,
                                             "pii_policy": "deny"}),
                       ("workarea.created", {"node_id": child, "parent_id": root, "label": "ops", "development": False,
                                             "pii_policy": "deny"}),
                       ("workarea.policy_set", {"node_id": child, "development": True, "pii_policy": "allow"}),
                       ("claim.hold_placed", {"claim_id": claim, "reason": "legal_request"}),
                       ("simulation.opened", {"simulation_id": sim, "audience": [P1]}),
                       ("simulation.closed", {"simulation_id": sim, "demoted": []})]:
        assert s.verify(_journal_row(c.add(type, data)))
    assert s.encryption_key() == (2, bytes.fromhex("22" * 32))
    assert s.path(child) == "main.ops" and s.workareas[child]["pii_policy"] == "allow" and s.workareas[child]["development"]
    assert s.holds == {claim: True}
    assert s.simulations[sim]["closed_seq"] == 8 and s.simulations[sim]["audience"] == frozenset({P1})


def test_a_mis_signed_event_stops_the_state_before_it():
    c = Chain()
    s = _tenant(c)
    forged = c.add("encryption_key.rotated", {"new_key": "33" * 32, "version": 2}, signer=Ed25519PrivateKey.generate())
    assert not s.verify(_journal_row(forged))
    assert s.broken is not None and s.broken[0] == 2 and "signature" in s.broken[1]
    assert s.encryption_key() == (1, bytes.fromhex("11" * 32)) and s.seq == 1
    assert not s.verify(_journal_row(c.add("claim.hold_placed", {"claim_id": str(uuid.uuid4()), "reason": "x"})))


def test_own_rows_are_linked_without_a_signature_check_and_only_onto_the_head():
    c = Chain()
    s = _tenant(c)
    # A claim.submitted of this process is linked, not verified: its signature is not looked at.
    sub = c.add("claim.submitted", {}, signer=Ed25519PrivateKey.generate())
    held = c.add("claim.hold_placed", {"claim_id": C1, "reason": "legal_request"})
    s.own([sub, held])
    assert s.seq == 3 and s.head == held.hash and s.holds == {C1: True}
    # A row that does not follow the head (another process appended first) is left for the catch-up.
    c.add("claim.submitted", {})
    s.own([c.add("claim.submitted", {})])
    assert s.seq == 3
