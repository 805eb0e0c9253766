"""Read-your-writes positions: an opaque token for "read after this write" (docs/operations.md, "Recall from hot standbys").

After a write, the primary's WAL write position (``pg_current_wal_lsn()``)
tells a hot standby when it has caught up with that write. The position is
cluster-wide: it moves with every tenant's writes and with every simulated
act, so handing it out in clear would let a key count acts it must not see
(docs/simulations.md: "no row, count, sequence number or version counter it
can see changes"). The token is therefore the position sealed with
AES-256-GCM under a key derived (HKDF-SHA256, RFC 5869, info
``oml.read-position.v2``) from the tenant's ``query-hmac`` KeyStore key, with
the tenant as associated data: opaque, unforgeable, and useless to another
tenant. The sealed position is the 64-bit LSN in 8 bytes, so every token has the
same length: the ``pg_lsn`` text would leak its own length, a coarse measure of
how far the cluster's WAL has moved. It is not plaintext-derived and holds no
content.
"""
from __future__ import annotations

import base64
import os
import re
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from oml.domain.errors import OMLError
from oml.services.keys.keystore import query_hmac_subkey

HEADER = "OML-Read-After"
_LSN = re.compile(r"^([0-9A-F]{1,8})/([0-9A-F]{1,8})$")
#: nonce(12) ‖ sealed LSN(8) ‖ GCM tag(16), URL-safe base64 without padding.
TOKEN_CHARS = 48


def _key(keystore, tenant: str) -> bytes:
    return query_hmac_subkey(keystore, tenant, b"oml.read-position.v2")


def issue(keystore, tenant: str, lsn: str) -> str:
    """The token for ``lsn`` (``pg_lsn`` text such as ``0/3000148``): URL-safe base64 of nonce(12) ‖ AES-GCM of
    the LSN as a big-endian 64-bit integer, :data:`TOKEN_CHARS` characters. Raises ``ValueError`` for text that is
    not a ``pg_lsn``."""
    m = _LSN.match(lsn.upper())
    if m is None:
        raise ValueError("not a pg_lsn")
    packed = struct.pack(">Q", int(m[1], 16) << 32 | int(m[2], 16))
    nonce = os.urandom(12)
    sealed = AESGCM(_key(keystore, tenant)).encrypt(nonce, packed, tenant.encode())
    return base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")


def parse(keystore, tenant: str, token: str) -> str:
    """The position inside ``token``.

    Raises ``read.invalid_position`` (422, field ``OML-Read-After``) for a token that is not one this
    installation issued to this tenant.
    """
    refused = OMLError("read.invalid_position", "OML-Read-After is not a position issued to this tenant", 422,
                       {"field": HEADER})
    if len(token) != TOKEN_CHARS:
        raise refused
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        packed = AESGCM(_key(keystore, tenant)).decrypt(raw[:12], raw[12:], tenant.encode())
        (value,) = struct.unpack(">Q", packed)
    except (ValueError, InvalidTag, TypeError, struct.error):
        raise refused from None
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
