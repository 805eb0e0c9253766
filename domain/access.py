"""Principals and effective access (docs/design.md §Tenants, §Workareas).

A principal is an API key bound to one identity with one role and one or
more workarea roots. Its **effective access** is the union of the subtrees
under its roots; steering tips in the ancestors of its roots apply to it as
well (standing instructions inherit downward), ancestor facts do not.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from .claims import ancestors, is_within

KEY_FORMAT = re.compile(r"^oml_([0-9a-f]{16})_([0-9a-f]{64})$")


@dataclass(frozen=True)
class Principal:
    tenant: str
    principal_id: str
    identity_id: str
    role: str
    roots: tuple[str, ...]          # workarea node ids
    root_paths: tuple[str, ...]     # their derived paths, in the snapshot that read them (services/reads/scope.py)

    def can_access(self, path: str) -> bool:
        """True when ``path`` lies within one of the principal's subtrees."""
        return any(is_within(path, r) for r in self.root_paths)

    def steering_paths(self, scope_path: str) -> list[str]:
        """Paths whose steering tips apply to a read scoped at ``scope_path``: it and its ancestors."""
        return ancestors(scope_path) + [scope_path]


def new_api_key() -> tuple[str, str, bytes]:
    """Returns (key id, full key ``oml_<id>_<secret>``, SHA-256 of the secret). The key is shown once."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_hex(32)
    return key_id, f"oml_{key_id}_{secret}", hashlib.sha256(secret.encode()).digest()


def parse_api_key(value: str) -> tuple[str, str] | None:
    m = KEY_FORMAT.match(value or "")
    return (m.group(1), m.group(2)) if m else None


def secret_matches(secret: str, stored_hash: bytes) -> bool:
    return hmac.compare_digest(hashlib.sha256(secret.encode()).digest(), stored_hash)
