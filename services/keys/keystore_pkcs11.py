"""A KeyStore in a hardware security module over PKCS#11 (docs/key-management.md).

Configured by ``OML_KEYSTORE`` as an RFC 7512 PKCS#11 URI naming the token
and, in its query, the module and where the user PIN is read from::

    pkcs11:token=oml?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/run/secrets/oml-pin

What lives in the token, per key name (``services/keys/keystore.py`` lists them):

- **Signing keys** (``signing/<kid>``) become Ed25519 private-key objects
  (``CKK_EC_EDWARDS``, ``CKA_SENSITIVE``, not extractable) when the token
  offers ``CKM_EDDSA``; :meth:`Pkcs11KeyStore.sign` signs inside the token and
  :meth:`get` refuses to return them (:class:`KeyNotExtractable`). The key is
  generated in the process and imported at creation or rotation (admission
  computes its proof of possession first); from then on it exists only in
  the token.
- **Everything else** (the X25519 body-encryption private keys that unwrap
  DEKs, the subject and query HMAC keys), and signing keys on a token without
  ``CKM_EDDSA``, is sealed with AES-256-GCM **inside the token** under the
  token's sealing key (``oml/sealing-key``: generated in the token,
  sensitive, never extractable) and stored as a private data object. The
  plaintext secret exists in the process only while it is used (HPKE unwrap
  on serve), never on disk.

Every object is labelled ``oml/<tenant>/<name>``; :meth:`destroy` calls
``C_DestroyObject`` on it, which is what erasure's key retirement does. Any
compliant token works; SoftHSM2 is the one tested (``tests/integration/
keys/test_keystore_contract.py``).
"""
from __future__ import annotations

import os
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oml.services.keys.keystore import KeyNotFound, _safe

SEALING_LABEL = "oml/sealing-key"
APPLICATION = "oml"


class KeyNotExtractable(KeyError):
    """The key exists but lives in the token and is used there (sign with :meth:`Pkcs11KeyStore.sign`)."""


@dataclass(frozen=True)
class Pkcs11Config:
    module: str
    token: str
    pin: str

    @classmethod
    def from_uri(cls, uri: str) -> Pkcs11Config:
        """Parse ``pkcs11:token=L?module-path=M&pin-source=file:P`` (RFC 7512 §2.3); ``pin-value`` is refused.

        Raises ``ValueError`` naming the missing or refused attribute (never its value).
        """
        if not uri.startswith("pkcs11:"):
            raise ValueError("OML_KEYSTORE must be 'local' or a pkcs11: URI")
        path, _, query = uri[len("pkcs11:"):].partition("?")
        attrs = dict(urllib.parse.parse_qsl(path.replace(";", "&"), keep_blank_values=True))
        q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        if "pin-value" in q:
            raise ValueError("pkcs11 URI: pin-value is refused; give pin-source=file:<path>")
        for name, where in (("token", attrs), ("module-path", q), ("pin-source", q)):
            if not where.get(name):
                raise ValueError(f"pkcs11 URI: {name} is required")
        source = q["pin-source"]
        if not source.startswith("file:"):
            raise ValueError("pkcs11 URI: pin-source must be file:<path>")
        pin = Path(urllib.parse.unquote(source[len("file:"):])).read_text().strip()
        return cls(q["module-path"], attrs["token"], pin)


class Pkcs11KeyStore:
    """The KeyStore protocol of ``services/keys/keystore.py`` over one PKCS#11 token, plus in-token signing.

    Args:
        config: module path, token label and user PIN.
        sign_in_token: force (``True``) or forbid (``False``) in-token Ed25519;
            default: whatever the token's mechanism list says.

    Raises ``pkcs11`` exceptions when the module, token or PIN is wrong.
    """

    def __init__(self, config: Pkcs11Config, *, sign_in_token: bool | None = None) -> None:
        import pkcs11
        from pkcs11 import Attribute, KeyType, Mechanism

        self._p11 = pkcs11
        self.config = config
        self._lock = threading.Lock()
        token = pkcs11.lib(config.module).get_token(token_label=config.token)
        offered = set(token.slot.get_mechanisms())
        self.sign_in_token = (Mechanism.EDDSA in offered) if sign_in_token is None else sign_in_token
        try:
            self._session = token.open(user_pin=config.pin, rw=True)
        except pkcs11.exceptions.UserAlreadyLoggedIn:
            # PKCS#11 login state is per application, not per session: another store in this process logged in.
            self._session = token.open(rw=True)
        found = list(self._session.get_objects({Attribute.LABEL: SEALING_LABEL, Attribute.CLASS: pkcs11.ObjectClass.SECRET_KEY}))
        self._sealing = found[0] if found else self._session.generate_key(
            KeyType.AES, 256, label=SEALING_LABEL, store=True,
            template={Attribute.SENSITIVE: True, Attribute.EXTRACTABLE: False, Attribute.PRIVATE: True})

    def describe(self) -> str:
        return f"PKCS#11 token {self.config.token!r}"

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _label(tenant: str, name: str) -> str:
        return f"oml/{_safe(tenant)}/{_safe(name)}"

    @staticmethod
    def _aad(tenant: str, name: str) -> bytes:
        return f"oml.keystore.v1|{tenant}|{name}".encode()

    def _objects(self, label: str) -> list[Any]:
        return list(self._session.get_objects({self._p11.Attribute.LABEL: label}))

    def _gcm(self, nonce: bytes, aad: bytes):
        from pkcs11.mechanisms import GCMParams

        return GCMParams(nonce, aad)

    # ------------------------------------------------------------------ the KeyStore protocol
    def put(self, tenant: str, name: str, secret: bytes) -> None:
        """Store ``secret`` under (tenant, name), replacing any previous object of that name."""
        from pkcs11 import Attribute, KeyType, Mechanism, ObjectClass
        from pkcs11.util.ec import encode_named_curve_parameters

        label = self._label(tenant, name)
        with self._lock:
            for old in self._objects(label):
                old.destroy()
            if name.startswith("signing/") and self.sign_in_token:
                self._session.create_object({
                    Attribute.CLASS: ObjectClass.PRIVATE_KEY, Attribute.KEY_TYPE: KeyType.EC_EDWARDS,
                    Attribute.EC_PARAMS: encode_named_curve_parameters("1.3.101.112"),  # id-Ed25519, RFC 8410
                    Attribute.VALUE: secret, Attribute.LABEL: label, Attribute.TOKEN: True, Attribute.PRIVATE: True,
                    Attribute.SENSITIVE: True, Attribute.EXTRACTABLE: False, Attribute.SIGN: True})
                return
            nonce = os.urandom(12)
            sealed = self._sealing.encrypt(secret, mechanism=Mechanism.AES_GCM, mechanism_param=self._gcm(nonce, self._aad(tenant, name)))
            self._session.create_object({
                Attribute.CLASS: ObjectClass.DATA, Attribute.LABEL: label, Attribute.APPLICATION: APPLICATION,
                Attribute.VALUE: nonce + bytes(sealed), Attribute.TOKEN: True, Attribute.PRIVATE: True})

    def get(self, tenant: str, name: str) -> bytes:
        """The secret, unsealed inside the token. Raises :class:`KeyNotFound`, or :class:`KeyNotExtractable`
        for a signing key held as a token key (use :meth:`sign`)."""
        from pkcs11 import Attribute, Mechanism, ObjectClass

        label = self._label(tenant, name)
        with self._lock:
            objs = self._objects(label)
            if not objs:
                raise KeyNotFound(f"{tenant}/{name}")
            obj = objs[0]
            if obj[Attribute.CLASS] != ObjectClass.DATA:
                raise KeyNotExtractable(f"{tenant}/{name}")
            blob = bytes(obj[Attribute.VALUE])
            return bytes(self._sealing.decrypt(blob[12:], mechanism=Mechanism.AES_GCM,
                                               mechanism_param=self._gcm(blob[:12], self._aad(tenant, name))))

    def exists(self, tenant: str, name: str) -> bool:
        with self._lock:
            return bool(self._objects(self._label(tenant, name)))

    def destroy(self, tenant: str, name: str) -> None:
        """``C_DestroyObject`` on every object of that name; a missing name is not an error."""
        with self._lock:
            for obj in self._objects(self._label(tenant, name)):
                obj.destroy()

    def names(self, tenant: str) -> list[str]:
        from pkcs11 import Attribute

        prefix = f"oml/{_safe(tenant)}/"
        with self._lock:
            labels = {o[Attribute.LABEL] for o in self._session.get_objects() if str(o[Attribute.LABEL]).startswith(prefix)}
        return sorted(label[len(prefix):] for label in labels)

    # ------------------------------------------------------------------ in-token use
    def can_sign(self, tenant: str, name: str) -> bool:
        """True when ``name`` is a token-held signing key (so :meth:`sign` must be used)."""
        from pkcs11 import Attribute, ObjectClass

        with self._lock:
            objs = self._objects(self._label(tenant, name))
            return bool(objs) and objs[0][Attribute.CLASS] == ObjectClass.PRIVATE_KEY

    def sign(self, tenant: str, name: str, message: bytes) -> bytes:
        """Ed25519 signature (RFC 8032, ``CKM_EDDSA``) of ``message`` by the token key ``name``."""
        from pkcs11 import Attribute, Mechanism, ObjectClass

        with self._lock:
            keys = [o for o in self._objects(self._label(tenant, name)) if o[Attribute.CLASS] == ObjectClass.PRIVATE_KEY]
            if not keys:
                raise KeyNotFound(f"{tenant}/{name}")
            return bytes(keys[0].sign(message, mechanism=Mechanism.EDDSA))

    def close(self) -> None:
        with self._lock:
            self._session.close()
