"""``OML-Read-After`` tokens (services/reads/positions.py): opaque, of one length whatever the position, bound to
their tenant, and refused with ``read.invalid_position`` however they are damaged."""
import os

import pytest

from oml.domain.errors import OMLError
from oml.services.reads import positions


class _KeyStore:
    """Only ``get``: each tenant's ``query-hmac`` key."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}

    def get(self, tenant: str, name: str) -> bytes:
        assert name == "query-hmac"
        return self.keys.setdefault(tenant, os.urandom(32))


@pytest.fixture
def ks():
    return _KeyStore()


@pytest.mark.parametrize("lsn", ["0/0", "1/0", "0/3000148", "0/B3D7DA8", "FF/FFFFFFFF", "FFFFFFFF/FFFFFFFF"])
def test_every_position_gives_a_token_of_one_length_that_gives_it_back(ks, lsn):
    token = positions.issue(ks, "t1", lsn)
    assert len(token) == positions.TOKEN_CHARS
    assert positions.parse(ks, "t1", token) == lsn


def test_the_same_position_never_gives_the_same_token(ks):
    assert positions.issue(ks, "t1", "0/3000148") != positions.issue(ks, "t1", "0/3000148")


def _refused(ks, tenant: str, token: str) -> None:
    with pytest.raises(OMLError) as err:
        positions.parse(ks, tenant, token)
    assert err.value.code == "read.invalid_position" and err.value.status == 422


def test_a_token_is_refused_for_another_tenant_or_altered_or_of_another_length(ks):
    token = positions.issue(ks, "t1", "0/3000148")
    _refused(ks, "t2", token)
    flipped = token[:20] + ("A" if token[20] != "A" else "B") + token[21:]
    _refused(ks, "t1", flipped)
    for bad in ["", " ", token[:-1], token + "A", token * 100, "!" * positions.TOKEN_CHARS]:
        _refused(ks, "t1", bad)


def test_text_that_is_no_position_is_not_sealed(ks):
    with pytest.raises(ValueError):
        positions.issue(ks, "t1", "not/an-lsn")
