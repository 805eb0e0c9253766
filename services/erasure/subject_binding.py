"""Which claims a subject erasure may erase: those whose signed bodies declare the subject (docs/erasure.md,
"Subject erasure"; docs/security-model.md, "The subject link").

``claim_subjects`` is a lookup, not the authority: ``oml_admission`` may insert a row there, and one row linking an
unrelated claim to a subject's HMAC would have a subject erasure destroy that claim. The authority is the claim's
body: admission computes the HMAC rows from the body's ``data_subjects``, and the body's ciphertext is the one the
signed ``claim.submitted`` names (``ciphertext_sha256``). So before erasing, each matched claim's version bodies are
opened as a verified read does (:func:`oml.services.reads.bodies.decrypt_versions`: the signed digest, the wrapped
DEK's signed digest, the tenant's key) and the subject must be among the subjects one of them declares, normalised
and keyed as at admission. Neither the subject nor its HMAC goes into the journal (docs/design.md §Erasure), and the
check needs no new event member: claims admitted before it are judged the same way.

Runs as ``oml_server`` (the one role that reads wrapped DEKs) in a read transaction of its own, inside the
erasure's act, which holds the tenant's chain-head lock; nothing decrypted leaves this module.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain import pii
from oml.domain.errors import OMLError

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

#: Why a matched claim was left alone (the finding's ``reason``).
NOT_DECLARED = "subject.not_declared"    # its verified bodies open and none declares the subject
UNVERIFIED_BODY = "subject.body_unverified"  # no body of it opens as a verified read: the link cannot be checked

_VERSIONS = sa.text("SELECT claim_id, version_id FROM claim_versions WHERE tenant_id = :t AND claim_id = ANY(CAST(:c AS uuid[]))")


def _declares(body: dict[str, Any], subject_hmac: bytes, keyed: Callable[[str, str], bytes]) -> bool:
    """Whether ``body``'s ``data_subjects`` hold the subject whose keyed HMAC is ``subject_hmac``."""
    for s in body.get(pii.DATA_SUBJECTS_KEY) or []:
        if not isinstance(s, dict) or not isinstance(s.get("kind"), str) or not isinstance(s.get("value"), str):
            continue
        try:
            normalised = pii.normalise_subject(s["kind"], s["value"])
        except ValueError:
            continue
        if keyed(s["kind"], normalised) == subject_hmac:
            return True
    return False


def check(ctx: Context, tenant: str, subject_hmac: bytes, claim_ids: list[str],
          keyed: Callable[[str, str], bytes]) -> tuple[list[str], list[dict[str, str]]]:
    """Split ``claim_ids`` (matched by ``subject_hmac`` in ``claim_subjects``) into the claims a verified body of which
    declares the subject, and findings ``{"claim_id", "reason"}`` for the others (:data:`NOT_DECLARED`,
    :data:`UNVERIFIED_BODY`). ``keyed(kind, normalised)``: the tenant's subject HMAC (admission's). Ids only out."""
    from oml.services.reads.bodies import decrypt_versions

    if not claim_ids:
        return [], []
    with ctx.db.tenant("oml_server", tenant) as conn:
        versions: dict[str, list[str]] = {}
        for r in conn.execute(_VERSIONS, {"t": tenant, "c": sorted(set(claim_ids))}):
            versions.setdefault(str(r.claim_id), []).append(str(r.version_id))
        bodies = decrypt_versions(conn, ctx.keystore, tenant, [v for vs in versions.values() for v in vs])
    bound, findings = [], []
    for cid in sorted(set(claim_ids)):
        opened = [b for v in versions.get(cid, []) if not isinstance(b := bodies.get(v), OMLError) and b is not None]
        if any(_declares(b, subject_hmac, keyed) for b in opened):
            bound.append(cid)
        else:
            findings.append({"claim_id": cid, "reason": NOT_DECLARED if opened else UNVERIFIED_BODY})
    return bound, findings
