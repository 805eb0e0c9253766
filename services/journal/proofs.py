"""Inclusion and consistency proofs over a tenant's journal tree (docs/journal-format.md, "Merkle tree and checkpoints").

Leaves come from ``journal_events.hash`` (leaf ``seq - 1`` is
``SHA-256(0x00 ‖ h_seq)``). Proofs are built against **stored** checkpoints
only, and the tree rebuilt from the journal must reproduce the checkpoint's
root first: a journal edited after a checkpoint was signed yields
``proof.chain_mismatch`` rather than a proof nobody can verify.

Formats (byte for byte, :mod:`oml.domain.checkpoint`):

* inclusion — a C2SP ``tlog-proof@v1`` file, empty ``extra`` (no line),
  ``index <seq - 1>``, the path, a blank line, the checkpoint note verbatim;
* consistency — one base64 hash per ``\\n``-terminated line (empty when the
  sizes are equal).

Reads run as ``oml_server`` by default (the HTTP process). Errors:
``proof.not_checkpointed`` (409: no stored checkpoint covers the seq yet —
issue one), ``checkpoint.not_found`` (404), ``proof.invalid_range`` (422),
``proof.chain_mismatch`` (409).
"""
from __future__ import annotations

import sqlalchemy as sa

from oml.domain import merkle
from oml.domain.checkpoint import format_consistency_proof, format_inclusion_proof
from oml.domain.errors import OMLError
from oml.services.journal import checkpoints as cps
from oml.services.journal.checkpoints import StoredCheckpoint

ROLE = "oml_server"
PAGE = 20000


def leaf_hashes(conn: sa.Connection, tenant: str, size: int) -> list[bytes]:
    """Chain hashes of seq 1..``size`` in order (raises ``proof.chain_mismatch`` on a gap)."""
    out: list[bytes] = []
    while len(out) < size:
        rows = conn.execute(
            sa.text("SELECT seq, hash FROM journal_events WHERE tenant_id = :t AND seq > :a AND seq <= :b ORDER BY seq LIMIT :n"),
            {"t": tenant, "a": len(out), "b": size, "n": PAGE},
        ).all()
        if not rows:
            break
        for r in rows:
            if int(r.seq) != len(out) + 1:
                raise OMLError("proof.chain_mismatch", "the journal has a gap below the checkpoint", 409, {"seq": len(out) + 1})
            out.append(bytes(r.hash))
    if len(out) != size:
        raise OMLError("proof.chain_mismatch", "the journal is shorter than the checkpoint", 409, {"seq": len(out) + 1})
    return out


def tree_for(conn: sa.Connection, tenant: str, cp: StoredCheckpoint) -> merkle.MerkleTree:
    """The tree over the first ``cp.tree_size`` events; its root must be the checkpoint's."""
    tree = merkle.MerkleTree(merkle.event_leaf(h) for h in leaf_hashes(conn, tenant, cp.tree_size))
    if tree.root() != cp.root:
        raise OMLError("proof.chain_mismatch", "the journal does not reproduce the checkpoint's root", 409,
                       {"tree_size": cp.tree_size})
    return tree


SIZES_SHOWN = 20


def _checkpoint(conn, tenant: str, tree_size: int | None) -> StoredCheckpoint:
    cp = cps.load(conn, tenant, tree_size)
    if cp is None:
        if tree_size is None:
            raise OMLError("proof.not_checkpointed", "no checkpoint has been issued for this tenant yet", 409)
        # The sizes that do exist, newest first (at most SIZES_SHOWN): a proof is only between stored checkpoints.
        sizes = [int(n) for n in conn.execute(sa.text(
            "SELECT tree_size FROM checkpoints WHERE tenant_id = :t ORDER BY tree_size DESC LIMIT :n"),
            {"t": tenant, "n": SIZES_SHOWN}).scalars()]
        raise OMLError("checkpoint.not_found", "no checkpoint at this tree size; a proof runs between stored "
                       "checkpoints: pick one of stored_sizes (the newest)", 404,
                       {"tree_size": tree_size, "stored_sizes": sizes})
    return cp


def inclusion_proof(ctx, tenant: str, seq: int, *, tree_size: int | None = None, role: str = ROLE) -> bytes:
    """``tlog-proof@v1`` for event ``seq`` against the checkpoint at ``tree_size`` (default: newest)."""
    if not isinstance(seq, int) or seq < 1:
        raise OMLError("proof.invalid_range", "seq must be an integer >= 1", 422, {"field": "seq"})
    with ctx.db.tenant(role, tenant) as conn:
        cp = _checkpoint(conn, tenant, tree_size)
        if seq > cp.tree_size:
            head = int(conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar() or 0)
            if seq > head:  # no checkpoint will ever cover it: the event does not exist
                raise OMLError("proof.invalid_range", "seq is beyond the chain head: the journal has no such event", 422,
                               {"field": "seq", "head": head})
            raise OMLError("proof.not_checkpointed", "the newest checkpoint does not cover this seq yet; issue a checkpoint", 409,
                           {"seq": seq, "tree_size": cp.tree_size})
        tree = tree_for(conn, tenant, cp)
    return format_inclusion_proof(seq - 1, tree.inclusion_proof(seq - 1), cp.note)


def consistency_proof(ctx, tenant: str, from_size: int, to_size: int | None = None, *, role: str = ROLE) -> tuple[bytes, StoredCheckpoint, StoredCheckpoint]:
    """Consistency proof from the checkpoint at ``from_size`` to the one at ``to_size`` (default newest).

    Both must be stored checkpoints. Returns ``(proof file, old, new)``.
    """
    if not isinstance(from_size, int) or from_size < 1:
        raise OMLError("proof.invalid_range", "from must be a tree size >= 1", 422, {"field": "from"})
    with ctx.db.tenant(role, tenant) as conn:
        new = _checkpoint(conn, tenant, to_size)
        old = _checkpoint(conn, tenant, from_size)
        if old.tree_size > new.tree_size:
            raise OMLError("proof.invalid_range", "from must not be larger than to", 422, {"field": "from"})
        tree = tree_for(conn, tenant, new)
        if tree.root(old.tree_size) != old.root:
            raise OMLError("proof.chain_mismatch", "the journal does not reproduce the older checkpoint's root", 409,
                           {"tree_size": old.tree_size})
    return format_consistency_proof(tree.consistency_proof(old.tree_size, new.tree_size)), old, new
