"""Trust anchors: the ``<tenant> <fingerprint>`` lines an operator keeps outside the database.

One file, one rule for every verifying command (docs/anchoring.md): the file
is ``OML_TRUST_ANCHORS`` or, by default, ``<home>/trust-anchors``;
``--trusted-key`` on the command line wins over it. ``oml tenant create``
appends the new tenant's line, so ``oml reconcile`` and ``oml journal
verify`` are anchored from the first run.

File format: one ``<tenant> <64-hex SHA-256 fingerprint>`` per line; ``#``
starts a comment. The fingerprint is the one ``oml tenant create`` prints
(SHA-256 of the tenant's first signing public key, docs/design.md §The journal).
"""
from __future__ import annotations

import os
from pathlib import Path

HEX = frozenset("0123456789abcdefABCDEF")


def is_fingerprint(text: str) -> bool:
    return len(text) == 64 and all(c in HEX for c in text)


def anchors_path(settings) -> Path:
    """``OML_TRUST_ANCHORS`` or ``<home>/trust-anchors``."""
    return Path(getattr(settings, "trust_anchors", None) or (Path(settings.home) / "trust-anchors"))


def load_trust_anchors(path: Path | str | None) -> dict[str, str]:
    """Parse an anchors file into ``{tenant: lower-case fingerprint}``; a missing file is empty.

    Raises ``ValueError`` naming the line of a malformed entry (never its content).
    """
    if path is None:
        return {}
    p = Path(path)
    if not p.exists():
        return {}
    out: dict[str, str] = {}
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not is_fingerprint(parts[1]):
            raise ValueError(f"trust anchors file line {n}: expected '<tenant> <64 hex fingerprint>'")
        out[parts[0]] = parts[1].lower()
    return out


def trust_anchor_for(settings, tenant: str, explicit: str | None = None) -> str | None:
    """``explicit`` (``--trusted-key``) wins; else the tenant's line in :func:`anchors_path`; else ``None``."""
    if explicit:
        return explicit.lower()
    return load_trust_anchors(anchors_path(settings)).get(tenant)


def record_anchor(settings, tenant: str, fingerprint: str) -> tuple[Path, str | None]:
    """Write ``tenant``'s line into :func:`anchors_path`; returns the path and the fingerprint it replaced, if any.

    A line for the same tenant with another fingerprint is a tenant of that
    name in an earlier database: it is replaced, and the caller says so.
    """
    path = anchors_path(settings)
    old = load_trust_anchors(path).get(tenant)
    if old == fingerprint.lower():
        return path, None
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = []
    if path.exists():
        kept = [ln for ln in path.read_text(encoding="utf-8").splitlines()
                if ln.split("#", 1)[0].split()[:1] != [tenant]]
    kept.append(f"{tenant} {fingerprint.lower()}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(kept) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path, old
