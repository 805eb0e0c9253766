"""A SoftHSM2 token for the PKCS#11 KeyStore tests (not a test module).

One token per pytest process: the PKCS#11 library reads ``SOFTHSM2_CONF``
once, when it is first loaded, so the configuration and the token are made
before that and shared by every test that asks. Without SoftHSM2 the tests
skip and say how to install it (the Makefile's ``test`` target installs the
Debian package ``softhsm2`` where it can).
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

MODULE_CANDIDATES = ("/usr/lib/softhsm/libsofthsm2.so", "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
                     "/usr/local/lib/softhsm/libsofthsm2.so")
PIN = "oml-test-pin"


@functools.lru_cache(maxsize=1)
def _token() -> tuple[str, str, Path] | str:
    """(module, token label, pin file), or the reason there is none."""
    try:
        import pkcs11  # noqa: F401
    except ImportError:
        return "python-pkcs11 is not installed (it is in the test extra: pip install -e '.[test]')"
    util = shutil.which("softhsm2-util")
    module = os.environ.get("OML_TEST_PKCS11_MODULE") or next((m for m in MODULE_CANDIDATES if Path(m).exists()), None)
    if util is None or module is None:
        return "SoftHSM2 is not installed (apt-get install softhsm2; `make test` does it where apt-get works)"
    home = Path(tempfile.mkdtemp(prefix="oml-softhsm-"))
    (home / "tokens").mkdir()
    conf = home / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {home / 'tokens'}\nobjectstore.backend = file\nlog.level = ERROR\n")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    label = f"oml-test-{os.getpid()}"
    subprocess.run([util, "--init-token", "--free", "--label", label, "--pin", PIN, "--so-pin", "oml-test-so"],
                   check=True, capture_output=True)
    pin_file = home / "pin"
    pin_file.write_text(PIN)
    pin_file.chmod(0o600)
    return module, label, pin_file


def pkcs11_uri() -> str:
    """The ``OML_KEYSTORE`` value for the test token; skips the calling test when SoftHSM2 is absent."""
    got = _token()
    if isinstance(got, str):
        pytest.skip(got)
    module, label, pin_file = got
    return f"pkcs11:token={label}?module-path={module}&pin-source=file:{pin_file}"


@functools.lru_cache(maxsize=1)
def pkcs11_store():
    """One :class:`Pkcs11KeyStore` session on the test token per process."""
    from oml.services.keys.keystore_pkcs11 import Pkcs11Config, Pkcs11KeyStore

    return Pkcs11KeyStore(Pkcs11Config.from_uri(pkcs11_uri()))
