"""Known-answer vectors for the journal formats (published in docs/journal-format.md, "Known-answer vectors").

Everything here is fixed: keys are SHA-256 of ASCII labels, ids and times
are constants, the body's DEK and nonce are constants. Ed25519 is
deterministic (RFC 8032), so every hash and signature is reproducible; an
independent implementation that rebuilds the same events must produce the
same bytes. HPKE encapsulation is randomised by design (RFC 9180), so the
DEK-wrap vector is one recorded encapsulation that must *decrypt* to the
given DEK.

Regenerate the published JSON and Markdown with::

    python -m oml.domain.vectors --json > docs/vectors/journal-v1.json
    python -m oml.domain.vectors --markdown   # the section pasted into docs/journal-format.md

``tests/unit/journal/test_vectors.py`` asserts both outputs are current.
"""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import sys
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from . import chain, checkpoint, envelope, merkle, signing
from .canonical import canonical
from .events import Actor, encode, event_object

TENANT = "example"
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def seed(label: str) -> bytes:
    """32 fixed bytes: SHA-256 of ``"oml.vectors." + label`` (ASCII)."""
    return hashlib.sha256(f"oml.vectors.{label}".encode()).digest()


def uid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012x}"


SIGNING = [Ed25519PrivateKey.from_private_bytes(seed(f"signing.{i}")) for i in (1, 2, 3)]
RECOVERY = Ed25519PrivateKey.from_private_bytes(seed("recovery"))
ENCRYPTION = X25519PrivateKey.from_private_bytes(seed("encryption.1"))
DEK = seed("dek.1")
NONCE = seed("nonce.1")[:12]
API_SECRET = seed("api-secret").hex()
BODY = {"statement": "The build cache is flushed every night at 02:00 UTC.",
        "source": {"title": "ops runbook", "uri": "https://example.org/runbook"}, "tags": ["ops"]}
MANIFEST = canonical({"example": "any manifest bytes", "tenant": TENANT})

# One HPKE encapsulation of DEK to ENCRYPTION's public key, recorded once
# (encapsulation is randomised); info = dek_info(TENANT, artifact, 1).
WRAPPED_DEK = (
    "0549423d3c4a168ea54ebafae0bf3f4693d49c21eb507672dcb5171f9e620472"
    "76c26043129dc7e33bec559c205bd225c0824f67bbe1167ca2aa199d85ccbd2d"
    "4fac793abe4eac7b5c468e1f03176b35"
)

NODE, IDENTITY_W, IDENTITY_R, CLAIM, VERSION, ARTIFACT = uid(0x10), uid(0x20), uid(0x21), uid(0x30), uid(0x31), uid(0x32)
WRITER, REVIEWER = "0123456789abcdef", "fedcba9876543210"


def _pub(k: Ed25519PrivateKey) -> bytes:
    return signing.raw_public(k)


def body_vector() -> dict[str, Any]:
    aad = envelope.body_aad(TENANT, CLAIM, VERSION, ARTIFACT)
    plain = canonical(BODY)
    ct = NONCE + AESGCM(DEK).encrypt(NONCE, plain, aad)
    return {"aad": aad.decode(), "dek": DEK.hex(), "nonce": NONCE.hex(), "plaintext_jcs": plain.decode(),
            "ciphertext": ct.hex(), "ciphertext_sha256": hashlib.sha256(ct).hexdigest()}


def _events() -> list[tuple[str, Actor, dict[str, Any], Ed25519PrivateKey]]:
    """(type, actor, data, signing key) in seq order."""
    k1, k2, k3 = SIGNING
    p1, p2, p3 = (_pub(k) for k in SIGNING)
    writer, reviewer = Actor(WRITER, IDENTITY_W), Actor(REVIEWER, IDENTITY_R)
    body = body_vector()
    return [
        ("tenant.created", Actor(None, None), {"signing_key": p1.hex(), "encryption_key": envelope.x25519_public_raw(ENCRYPTION).hex(),
                                               "recovery_key": _pub(RECOVERY).hex()}, k1),
        ("workarea.created", Actor(None, None), {"node_id": NODE, "parent_id": None, "label": "main", "development": False,
                                                 "pii_policy": "deny"}, k1),
        ("identity.created", Actor(None, None), {"identity_id": IDENTITY_W, "kind": "service"}, k1),
        ("identity.created", Actor(None, None), {"identity_id": IDENTITY_R, "kind": "person"}, k1),
        ("principal.created", Actor(None, None), {"principal_id": WRITER, "identity_id": IDENTITY_W, "role": "writer", "roots": [NODE],
                                                  "secret_sha256": hashlib.sha256(API_SECRET.encode()).hexdigest()}, k1),
        ("claim.submitted", writer, {"claim_id": CLAIM, "version_id": VERSION, "version_no": 1, "workarea_id": NODE, "kind": "fact",
                                     "provenance": "observed", "supersedes": None, "derived_from": [], "valid_from": None,
                                     "valid_to": None, "confidence": 900, "artifact_id": ARTIFACT,
                                     "ciphertext_sha256": body["ciphertext_sha256"], "key_version": 1}, k1),
        ("claim.promoted", reviewer, {"claim_id": CLAIM, "version_id": VERSION, "reason": "accurate", "self_signed": False}, k1),
        ("signing_key.rotated", Actor(None, None), {"new_key": p2.hex(), "pop": k2.sign(signing.pop_message(TENANT, p1, p2)).hex(),
                                                    "authorised_by": "current"}, k1),
        ("claim.demoted", reviewer, {"claim_id": CLAIM, "version_id": VERSION, "reason": "outdated"}, k2),
        ("signing_key.rotated", Actor(None, None), {"new_key": p3.hex(), "pop": k3.sign(signing.pop_message(TENANT, p2, p3)).hex(),
                                                    "authorised_by": "recovery"}, RECOVERY),
        ("workarea.policy_set", Actor(None, None), {"node_id": NODE, "development": True, "pii_policy": "declare"}, k3),
    ]


def generate() -> dict[str, Any]:
    """All vectors as one JSON-ready object (hex for bytes, canonical bytes as UTF-8 text)."""
    keys = {f"signing_{i}": {"private_seed": seed(f"signing.{i}").hex(), "public": _pub(k).hex(), "kid": signing.kid(_pub(k)),
                             "fingerprint": signing.fingerprint(_pub(k))} for i, k in zip((1, 2, 3), SIGNING)}
    keys["recovery"] = {"private_seed": seed("recovery").hex(), "public": _pub(RECOVERY).hex(), "kid": signing.kid(_pub(RECOVERY)),
                        "fingerprint": signing.fingerprint(_pub(RECOVERY))}
    keys["encryption_1"] = {"private": seed("encryption.1").hex(), "public": envelope.x25519_public_raw(ENCRYPTION).hex()}
    h = chain.genesis(TENANT)
    out_events = []
    for i, (etype, actor, data, key) in enumerate(_events()):
        seq = i + 1
        kid = signing.kid(_pub(key))
        ev = event_object(tenant=TENANT, seq=seq, type=etype, event_id=uid(0x1000 + seq), at=T0 + dt.timedelta(seconds=seq),
                          actor=actor, kid=kid, data=data)
        c = encode(ev)
        prev, h = h, chain.link(h, c)
        sig = key.sign(signing.event_message(h))
        out_events.append({"seq": seq, "type": etype, "kid": kid, "canonical": c.decode(), "prev_hash": prev.hex(),
                           "hash": h.hex(), "signature": sig.hex()})
    leaves = [merkle.event_leaf(bytes.fromhex(str(e["hash"]))) for e in out_events]
    root = merkle.root(leaves)
    origin = checkpoint.oml_origin(TENANT)
    k3 = SIGNING[2]
    note = checkpoint.sign_note(checkpoint.checkpoint_body(origin, len(leaves), root), origin, k3.sign, _pub(k3))
    wrap_info = envelope.dek_info(TENANT, ARTIFACT, 1)
    return {
        "tenant": TENANT,
        "genesis": chain.genesis(TENANT).hex(),
        "keys": keys,
        "api_key": {"principal_id": WRITER, "secret": API_SECRET, "key": f"oml_{WRITER}_{API_SECRET}",
                    "secret_sha256": hashlib.sha256(API_SECRET.encode()).hexdigest()},
        "events": out_events,
        "body": body_vector(),
        "dek_wrap": {"suite": "DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-256-GCM; base mode", "info": wrap_info.decode(),
                     "recipient_private": seed("encryption.1").hex(), "wrapped": WRAPPED_DEK, "dek": DEK.hex()},
        "merkle": {"leaves": [x.hex() for x in leaves], "root": root.hex(), "size": len(leaves)},
        "checkpoint": {"verifier_key": checkpoint.verifier_key(origin, _pub(k3)), "note": note.decode()},
        "manifest": {"bytes": MANIFEST.decode(), "sha256": hashlib.sha256(MANIFEST).hexdigest(),
                     "signature": k3.sign(signing.manifest_message(MANIFEST)).hex(), "signed_by": signing.kid(_pub(k3)),
                     "signature_base64": base64.b64encode(k3.sign(signing.manifest_message(MANIFEST))).decode()},
    }


def markdown(v: dict[str, Any]) -> str:
    """The vectors as the Markdown section published in docs/journal-format.md."""
    L: list[str] = []
    w = L.append
    w("<!-- generated by `python -m oml.domain.vectors --markdown`; do not edit by hand -->")
    w(f"Tenant `T` = `{v['tenant']}`; genesis `h_0` = `{v['genesis']}`.\n")
    w("| key | private (seed, hex) | public (hex) | kid | fingerprint |")
    w("|---|---|---|---|---|")
    for name, k in v["keys"].items():
        kid, fp = (f"`{k[x]}`" if x in k else "—" for x in ("kid", "fingerprint"))
        w(f"| {name} | `{k.get('private_seed', k.get('private'))}` | `{k['public']}` | {kid} | {fp} |")
    w("")
    w(f"API key of principal `{v['api_key']['principal_id']}`: `{v['api_key']['key']}`; stored SHA-256 of the secret "
      f"(its hex text as UTF-8): `{v['api_key']['secret_sha256']}`.\n")
    for e in v["events"]:
        w(f"**seq {e['seq']}** `{e['type']}` (kid `{e['kid']}`)\n")
        w("```")
        w(e["canonical"])
        w("```")
        w(f"- prev_hash `{e['prev_hash']}`")
        w(f"- hash `{e['hash']}`")
        w(f"- signature `{e['signature']}`\n")
    b = v["body"]
    w("**Body ciphertext** (fixed DEK and nonce; production draws both at random)\n")
    w(f"- aad `{b['aad']}`")
    w(f"- dek `{b['dek']}`, nonce `{b['nonce']}`")
    w(f"- plaintext (JCS) `{b['plaintext_jcs']}`")
    w(f"- ciphertext `{b['ciphertext']}`")
    w(f"- SHA-256(ciphertext) `{b['ciphertext_sha256']}` (the `ciphertext_sha256` of seq 6)\n")
    d = v["dek_wrap"]
    w("**DEK wrap** (HPKE is randomised: this recorded encapsulation must open to the DEK)\n")
    w(f"- suite: {d['suite']}; info `{d['info']}`")
    w(f"- recipient private key `{d['recipient_private']}`")
    w(f"- wrapped (enc ‖ ciphertext) `{d['wrapped']}`")
    w(f"- opens to DEK `{d['dek']}`\n")
    m = v["merkle"]
    w(f"**Merkle tree** over the {m['size']} events: root `{m['root']}`\n")
    w("**Checkpoint** (signed by signing_3, the current key after the rotation at seq 10)\n")
    w(f"- verifier key `{v['checkpoint']['verifier_key']}`")
    w("```")
    w(v["checkpoint"]["note"].rstrip("\n"))
    w("```\n")
    mf = v["manifest"]
    w("**Manifest signature** (signing_3)\n")
    w(f"- manifest bytes `{mf['bytes']}`, SHA-256 `{mf['sha256']}`")
    w(f"- signature `{mf['signature']}` (base64 `{mf['signature_base64']}`)")
    return "\n".join(L) + "\n"


def main(argv: list[str]) -> int:
    v = generate()
    if "--markdown" in argv:
        sys.stdout.write(markdown(v))
    else:
        sys.stdout.write(json.dumps(v, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
