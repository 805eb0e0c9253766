"""``oml journal verify``: recompute a tenant's chain from the database (docs/design.md §The journal; docs/journal-format.md).

Runs as the keyless ``oml_reconciler`` role: it reads ``journal_events`` and
``chain_heads`` for one tenant (bound per transaction, RLS behind the
explicit ``tenant_id`` predicate), feeds every row in ``seq`` order to
:class:`oml.domain.chain.ChainVerifier` and reports the first bad ``seq``
and why. Every verified row also goes to the authority replay
(:class:`oml.domain.replay.AuthorityReplay`): an act whose actor was not
permitted to make it when it was made fails the verification, by ``seq``
and rule, however good its signature. The recorded chain head must name the last row: a deleted tail is
reported at the first missing ``seq``.

Trust: without ``trusted_fingerprint`` the result only says the chain is
internally consistent (a history re-signed by someone with database write
access passes); it is **anchored** only when the key registered by
``tenant.created`` has the fingerprint the operator recorded at creation.

Exit statuses of the CLI (docs/anchoring.md): 0 verified and
anchored, 3 verified but NOT ANCHORED, 1 a bad row (or an empty or unknown
journal), 2 a usage error.
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from oml.domain.chain import ChainVerifier, JournalRow, VerifyResult
from oml.domain.replay import AuthorityReplay, Finding
from oml.services.storage.db import Database

ROLE = "oml_reconciler"
PAGE = 2000

EXIT_OK = 0
EXIT_BAD = 1
EXIT_UNANCHORED = 3


@dataclass(frozen=True)
class JournalReport:
    """The outcome of a verification; ``result`` is the verifier's own record."""

    tenant: str
    result: VerifyResult
    head_seq: int | None      # what chain_heads says, None when the tenant has no head
    findings: tuple[Finding, ...] = ()   # acts the authority replay (domain/replay.py) does not accept

    @property
    def ok(self) -> bool:
        return self.result.ok and not self.findings

    @property
    def exit_code(self) -> int:
        if not self.ok:
            return EXIT_BAD
        return EXIT_OK if self.result.anchored else EXIT_UNANCHORED

    def lines(self) -> list[str]:
        """Plain-text report, first line the verdict; no event content is printed."""
        r = self.result
        if not r.ok:
            return [f"FAILED: tenant {self.tenant}: seq {r.bad_seq}: {r.reason}",
                    f"verified {r.last_seq} event(s) before the first bad row"]
        if self.findings:
            return ([f"FAILED: tenant {self.tenant}: seq {self.findings[0].seq}: act not permitted: {self.findings[0].rule}",
                     f"every hash, link and signature of {r.last_seq} event(s) verified, but {len(self.findings)} act(s)"
                     " were not permitted when they were made (authority replay):"]
                    + [f"  {f.line()}" for f in self.findings])
        out = [f"OK: tenant {self.tenant}: {r.last_seq} event(s), every hash, link and signature verified",
               f"head: seq {r.last_seq} hash {r.head.hex()}"]
        if r.anchored:
            out.append("anchored: event 1 registers the signing key with the trusted fingerprint")
        else:
            out.append("NOT ANCHORED: the chain is internally consistent, but nothing ties it to a key recorded "
                       "outside the database; pass --trusted-key <fingerprint printed by `oml tenant create`>, or add "
                       "the tenant's line to OML_TRUST_ANCHORS or <home>/trust-anchors (docs/anchoring.md)")
        return out


def iter_rows(conn: sa.Connection, tenant: str, page: int = PAGE):
    """Yield :class:`JournalRow` in ``seq`` order, ``page`` rows per query (keyset pagination)."""
    after = 0
    while True:
        rows = conn.execute(
            sa.text("SELECT seq, canonical, hash, prev_hash, signature, kid FROM journal_events"
                    " WHERE tenant_id = :t AND seq > :after ORDER BY seq LIMIT :n"),
            {"t": tenant, "after": after, "n": page},
        ).all()
        if not rows:
            return
        for r in rows:
            yield JournalRow(int(r.seq), bytes(r.canonical), bytes(r.hash), bytes(r.prev_hash), bytes(r.signature), r.kid)
        after = rows[-1].seq


def verify_rows(conn: sa.Connection, tenant: str, trusted_fingerprint: str | None = None) -> JournalReport:
    """Verify ``tenant``'s journal through ``conn`` (a transaction bound to ``tenant``).

    Never raises for a bad chain: the first failure is in ``result.bad_seq`` /
    ``result.reason``. An empty journal fails at seq 1.
    """
    v = ChainVerifier(tenant, trusted_fingerprint)
    authority = AuthorityReplay(tenant)
    for row in iter_rows(conn, tenant):
        if not v.add(row):
            break
        authority.add_bytes(row.seq, row.canonical)
    head_seq = conn.execute(sa.text("SELECT seq FROM chain_heads WHERE tenant_id = :t"), {"t": tenant}).scalar()
    if v.bad_seq is None:
        if v.seq == 0:
            v._fail(1, "the tenant has no journal rows")
        elif head_seq is None:
            v._fail(v.seq + 1, "the tenant has no chain head")
        elif int(head_seq) > v.seq:
            # The head was moved by appends whose rows are gone: a truncated tail.
            v._fail(v.seq + 1, f"truncated: the chain head is at seq {head_seq} but the journal ends at seq {v.seq}")
        elif int(head_seq) < v.seq:
            v._fail(int(head_seq) + 1, f"rows beyond the chain head (head at seq {head_seq})")
    return JournalReport(tenant, v.result(), None if head_seq is None else int(head_seq), tuple(authority.findings))


def verify_journal(db: Database, tenant: str, trusted_fingerprint: str | None = None, *, role: str = ROLE) -> JournalReport:
    """Verify ``tenant``'s journal in one read transaction as ``role`` (default ``oml_reconciler``)."""
    # One snapshot for rows and head, so a concurrent append cannot look like a gap or a stray row.
    with db.snapshot(role, tenant) as (conn, _):
        return verify_rows(conn, tenant, trusted_fingerprint)
