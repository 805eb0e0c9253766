"""Shared by the evidence unit tests: an insider's re-signing of an archive after editing it."""
from __future__ import annotations

import base64
import json
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from oml.domain import signing
from oml.domain.canonical import canonical
from oml.services.audit.evidence import archive
from oml.services.audit.evidence import format as fmt


def rebuild(data: bytes, sign_key: Ed25519PrivateKey, edit: Callable[[dict, dict], None]) -> bytes:
    """Open an archive, let ``edit(files, manifest)`` change it, fix every digest and re-sign the manifest with ``sign_key``."""
    files = {m.name: m.data for m in archive.read(data)}
    manifest = json.loads(files.pop(fmt.MANIFEST))
    files.pop(fmt.MANIFEST_SIG)
    edit(files, manifest)
    files.pop(fmt.SUMS, None)
    digests = {n: fmt.sha256_hex(d) for n, d in files.items()}
    files[fmt.SUMS] = fmt.sums_text(digests)
    digests[fmt.SUMS] = fmt.sha256_hex(files[fmt.SUMS])
    manifest["files"] = dict(sorted(digests.items()))
    mb = canonical(manifest)
    files[fmt.MANIFEST] = mb
    files[fmt.MANIFEST_SIG] = base64.b64encode(sign_key.sign(signing.manifest_message(mb))) + b"\n"
    return archive.pack(files)
