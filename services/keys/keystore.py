"""KeyStore: private keys outside PostgreSQL (docs/design.md §Bodies and keys).

Holds, per tenant: Ed25519 signing keys (``signing/<kid>``), X25519 body
keys by version (``encryption/<n>``), the subject HMAC key
(``subject-hmac``) and the read-query HMAC key (``query-hmac``). The
recovery private key is never stored: it is printed once at tenant creation.

``LocalKeyStore`` seals each key in its own file with AES-256-GCM under a
32-byte master key (``OML_MASTER_KEY``, 64 hex characters; on the embedded
default a generated ``<home>/master.key`` with a warning). A Vault-transit or
cloud-KMS implementation provides the same five methods; see
``docs/key-management.md``. Database backups therefore never hold a key that
can unwrap a DEK.
"""
from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from oml.domain.errors import OMLError

log = logging.getLogger(__name__)


class KeyNotFound(KeyError):
    pass


class KeyStore(Protocol):
    def put(self, tenant: str, name: str, secret: bytes) -> None: ...
    def get(self, tenant: str, name: str) -> bytes: ...
    def exists(self, tenant: str, name: str) -> bool: ...
    def destroy(self, tenant: str, name: str) -> None: ...
    def names(self, tenant: str) -> list[str]: ...


_NAME = __import__("re").compile(r"^[a-z0-9][a-z0-9-]{0,62}(/[a-z0-9-]{1,64})?$")


def _safe(part: str) -> str:
    if not _NAME.match(part):
        raise ValueError("invalid tenant or key name")
    return part


class LocalKeyStore:
    """Files ``<dir>/<tenant>/<name>.key`` = nonce(12) ‖ AES-GCM(master, key, aad)."""

    def __init__(self, directory: Path, master_key: bytes) -> None:
        if len(master_key) != 32:
            raise ValueError("master key must be 32 bytes")
        self.dir = Path(directory)
        self._aead = AESGCM(master_key)

    def _path(self, tenant: str, name: str) -> Path:
        _safe(tenant)
        _safe(name)
        return self.dir / tenant / (name.replace("/", "__") + ".key")

    @staticmethod
    def _aad(tenant: str, name: str) -> bytes:
        return f"oml.keystore.v1|{tenant}|{name}".encode()

    def put(self, tenant: str, name: str, secret: bytes) -> None:
        p = self._path(tenant, name)
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        nonce = os.urandom(12)
        tmp = p.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(nonce + self._aead.encrypt(nonce, secret, self._aad(tenant, name)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)

    def get(self, tenant: str, name: str) -> bytes:
        p = self._path(tenant, name)
        try:
            blob = p.read_bytes()
        except FileNotFoundError:
            raise KeyNotFound(f"{tenant}/{name}") from None
        try:
            return self._aead.decrypt(blob[:12], blob[12:], self._aad(tenant, name))
        except InvalidTag:
            # Almost always the wrong master key (another home's OML_MASTER_KEY or master.key), not tampering with
            # the stored bodies: say so, rather than let callers report each body as failing authentication.
            raise OMLError("keys.master_key_mismatch",
                           f"the master key (OML_MASTER_KEY, or <home>/master.key when it is unset) does not open the "
                           f"key store {self.dir}: it is not the key that sealed it, or the file {p.name} is damaged",
                           500) from None

    def exists(self, tenant: str, name: str) -> bool:
        return self._path(tenant, name).exists()

    def destroy(self, tenant: str, name: str) -> None:
        p = self._path(tenant, name)
        if p.exists():
            # Overwrite before unlinking; on copy-on-write or journaling file systems
            # this is best effort, which docs/key-management.md states.
            size = p.stat().st_size
            with open(p, "r+b") as f:
                f.write(secrets.token_bytes(size))
                f.flush()
                os.fsync(f.fileno())
            p.unlink()

    def names(self, tenant: str) -> list[str]:
        d = self.dir / _safe(tenant)
        if not d.exists():
            return []
        return sorted(p.name[:-4].replace("__", "/") for p in d.glob("*.key"))


def query_hmac_subkey(keystore: KeyStore, tenant: str, info: bytes) -> bytes:
    """A 32-byte key for one purpose, derived (HKDF-SHA256, RFC 5869, no salt, ``info`` naming the purpose) from the
    tenant's ``query-hmac`` key: the server holds it, no database role does. Raises :class:`KeyNotFound`."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(keystore.get(tenant, "query-hmac"))


def load_master_key(value: str | None, home: Path) -> bytes:
    """``OML_MASTER_KEY`` (64 hex chars) or, on the embedded default, ``<home>/master.key`` (created if absent)."""
    if value:
        try:
            key = bytes.fromhex(value.strip())
        except ValueError:
            raise ValueError("OML_MASTER_KEY must be 64 hex characters") from None
        if len(key) != 32:
            raise ValueError("OML_MASTER_KEY must be 64 hex characters")
        return key
    path = home / "master.key"
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        # Warn once per home, when the file is made; repeating it on every command teaches people to ignore warnings.
        log.warning("OML_MASTER_KEY is not set: generated the master key file %s (embedded default; not for production)", path)
    else:
        log.info("OML_MASTER_KEY is not set: using the master key file %s", path)
    return bytes.fromhex(path.read_text().strip())
