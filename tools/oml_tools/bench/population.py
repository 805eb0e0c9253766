"""Bulk population of a tenant's serving state with COPY — for benchmarks and search-correctness tests only.

Going through admission and the indexer costs a signed journal event and a
model call per claim; at 100k claims on two cores that is the benchmark's
whole budget. This loader writes, as the schema owner and in one
transaction, exactly the rows recall reads: ``claims``, ``claim_versions``
(promoted, reviewed by a second identity), ``tip_intervals`` (one open
interval each), ``artifacts`` + ``wrapped_deks`` (each body really
encrypted under its own DEK and HPKE-wrapped to the tenant's public key, so
decrypt on serve is measured), ``memories_fts`` (``to_tsvector`` computed by
PostgreSQL from a staging table) and ``memory_embeddings`` (binary COPY of
the vectors given). So that verified reads (docs/security-model.md) have
something genuine to check (and the authority guards of
``97_authority_guards.sql`` accept the rows), each version gets a signed
``claim.submitted`` and ``claim.promoted`` appended to the tenant's chain
(and their ``version_status_log`` rows) — built here, not by admission: no
personal-data check, idempotency record or outbox row, so a population
loaded this way is not an auditable history (reconciliation would report the
index rows it never derived) and must never be used outside benchmarks and
tests. docs/benchmarks.md says so next to every
figure measured on it.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa

from oml.domain import envelope
from oml.domain.canonical import new_id, now
from oml.domain.chain import link
from oml.domain.events import Actor, encode, event_object
from oml.domain.recall import FTS_CONFIG

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from oml.services.runtime.context import Context


@dataclass(frozen=True)
class Item:
    """One claim to load: its workarea (node id and path), statement, embedding (unit vector) and kind."""

    workarea_id: str
    path: str
    statement: str
    embedding: np.ndarray
    kind: str = "fact"
    provenance: str = "observed"


@dataclass(frozen=True)
class Loaded:
    claim_id: str
    version_id: str


def bulk_load(ctx: Context, tenant: str, items: Sequence[Item], *, author: tuple[str, str], reviewer: tuple[str, str],
              encrypt: bool = True, maintenance: bool = True) -> list[Loaded]:
    """Load ``items`` as promoted current tips of ``tenant``; returns their ids in input order.

    ``author`` and ``reviewer`` are ``(principal_id, identity_id)`` pairs of
    existing principals. One transaction; then (``maintenance``) analyses the
    touched tables and vacuums the index tables.
    """
    import numpy as np

    from oml.services.journal.journal import Head

    out: list[Loaded] = []
    eng = ctx.db.engine(None)
    signer = ctx.admission.signer
    with eng.begin() as conn:
        conn.execute(sa.text("SELECT set_config('oml.tenant_id', :t, true)"), {"t": tenant})
        head = Head(conn, tenant)  # locked: nothing else appends meanwhile
        seq, prev = head.seq, head.hash
        kv, pub = conn.execute(sa.text(
            "SELECT version, public_key FROM tenant_keys WHERE tenant_id = :t AND purpose = 'encryption' AND retired_seq IS NULL"),
            {"t": tenant}).one()
        pub = bytes(pub)
        at = now()
        raw = conn.connection.driver_connection
        from pgvector.psycopg import register_vector

        register_vector(raw)
        claims, versions, tips, arts, deks, texts, embs, journal, log = [], [], [], [], [], [], [], [], []
        for it in items:
            cid, vid, aid = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
            body = {"statement": it.statement}
            if encrypt:
                sealed = envelope.seal(body, aad=envelope.body_aad(tenant, cid, vid, aid), info=envelope.dek_info(tenant, aid, kv),
                                       public_key=pub, key_version=kv)
                ct, digest, wrapped = sealed.ciphertext, sealed.digest, sealed.wrapped_dek
            else:  # pragma: no cover - only for timing experiments
                ct, digest, wrapped = b"", b"\x00" * 32, b""
            submitted = {"claim_id": cid, "version_id": vid, "version_no": 1, "workarea_id": it.workarea_id, "kind": it.kind,
                         "provenance": it.provenance, "artifact_id": aid, "ciphertext_sha256": digest.hex()}
            promoted = {"claim_id": cid, "version_id": vid, "reason": "accurate", "self_signed": False}
            for etype, who, data in (("claim.submitted", author, submitted), ("claim.promoted", reviewer, promoted)):
                seq += 1
                ev = event_object(tenant=tenant, seq=seq, type=etype, event_id=new_id(), at=at, actor=Actor(who[0], who[1]),
                                  kid=head.signing_kid, data=data)
                body_bytes = encode(ev)
                h = link(prev, body_bytes)
                journal.append((tenant, seq, ev["event_id"], etype, head.signing_kid, at, body_bytes, h, prev,
                                signer.sign_event(tenant, head.signing_kid, h)))
                prev = h
                log.append((tenant, vid, seq, "held" if etype == "claim.submitted" else "promoted"))
            claims.append((tenant, cid, it.workarea_id, it.kind, seq - 1))
            versions.append((tenant, vid, cid, 1, it.workarea_id, it.kind, it.provenance, "promoted", False, author[0], author[1],
                             reviewer[0], reviewer[1], False, aid, digest, at, seq - 1, seq, seq))
            tips.append((tenant, cid, vid, seq, at))
            arts.append((tenant, aid, "body", cid, vid, ct, digest, seq - 1))
            deks.append((tenant, aid, kv, wrapped))
            texts.append((vid, cid, it.workarea_id, it.path, it.kind, it.provenance, it.statement, seq))
            embs.append((tenant, uuid.UUID(vid), uuid.UUID(cid), uuid.UUID(it.workarea_id), it.path, it.kind, it.provenance, False, seq, at,
                         np.asarray(it.embedding, dtype=np.float32)))
            out.append(Loaded(cid, vid))

        def copy(sql: str, rows: Iterable[tuple]) -> None:
            with raw.cursor() as cur:
                with cur.copy(sql) as cp:
                    for r in rows:
                        cp.write_row(r)

        copy("COPY journal_events (tenant_id, seq, event_id, type, kid, at, canonical, hash, prev_hash, signature) FROM STDIN",
             journal)
        conn.execute(sa.text("UPDATE chain_heads SET seq = :s, hash = :h WHERE tenant_id = :t"), {"t": tenant, "s": seq, "h": prev})
        copy("COPY version_status_log (tenant_id, version_id, seq, status) FROM STDIN", log)
        copy("COPY claims (tenant_id, claim_id, workarea_id, kind, created_seq) FROM STDIN", claims)
        copy("COPY claim_versions (tenant_id, version_id, claim_id, version_no, workarea_id, kind, provenance, status, tainted,"
             " author_principal, author_identity, reviewer_principal, reviewer_identity, self_signed, artifact_id,"
             " ciphertext_sha256, created_at, submitted_seq, decided_seq, status_seq) FROM STDIN", versions)
        copy("COPY tip_intervals (tenant_id, claim_id, version_id, from_seq, from_at) FROM STDIN", tips)
        copy("COPY artifacts (tenant_id, artifact_id, kind, claim_id, version_id, ciphertext, sha256, created_seq) FROM STDIN", arts)
        copy("COPY wrapped_deks (tenant_id, artifact_id, key_version, wrapped) FROM STDIN", deks)
        conn.execute(sa.text("CREATE TEMP TABLE oml_pop_text (version_id uuid, claim_id uuid, workarea_id uuid, path text,"
                             " kind text, provenance text, statement text, seq bigint) ON COMMIT DROP"))
        copy("COPY oml_pop_text FROM STDIN", texts)
        conn.execute(sa.text(
            "INSERT INTO memories_fts (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance, self_signed,"
            " tip_from_seq, tip_from_at, tsv) SELECT :t, version_id, claim_id, workarea_id, path, kind, provenance, false,"
            f" seq, :at, to_tsvector('{FTS_CONFIG}'::regconfig, statement) FROM oml_pop_text"), {"t": tenant, "at": at})
        with raw.cursor() as cur:
            with cur.copy("COPY memory_embeddings (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance,"
                          " self_signed, tip_from_seq, tip_from_at, embedding) FROM STDIN WITH (FORMAT BINARY)") as cp:
                cp.set_types(["text", "uuid", "uuid", "uuid", "text", "text", "text", "bool", "int8", "timestamptz", "vector"])
                for r in embs:
                    cp.write_row(r)
    if not maintenance:
        return out
    with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        for table in ("claims", "claim_versions", "tip_intervals", "artifacts", "wrapped_deks"):
            c.execute(sa.text(f"ANALYZE {table}"))
        # VACUUM merges GIN's pending list (fastupdate): until then every FTS search reads all of it.
        for table in ("memories_fts", "memory_embeddings", "bm25_postings", "bm25_df", "bm25_groups"):
            c.execute(sa.text(f"VACUUM ANALYZE {table}"))
    return out


def unit_vectors(n: int, dim: int = 384, *, seed: int = 0, clusters: int = 0, spread: float = 0.35) -> np.ndarray:
    """``n`` random unit vectors; with ``clusters`` > 0, drawn around that many random centres (more like real text)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if clusters > 0:
        centres = rng.standard_normal((clusters, dim)).astype(np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        v = centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, dim)).astype(np.float32) / np.sqrt(dim)
    else:
        v = rng.standard_normal((n, dim)).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
