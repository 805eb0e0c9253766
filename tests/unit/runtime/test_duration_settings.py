"""Every duration setting is a finite number in its range: a standby wait of ``nan`` or ``inf`` would hold every
read that sends an ``OML-Read-After`` token for as long as the standby's replay stays stopped."""
import pytest
from pydantic import ValidationError

from oml.services.runtime.settings import Settings

DURATIONS = ["OML_REPLICA_WAIT_S", "OML_LAKE_LOCK_TIMEOUT_S", "OML_LAKE_LEASE_S", "OML_VERIFIED_STATE_SNAPSHOT_INTERVAL_S",
             "OML_RECALL_EMBED_WAIT_S"]


@pytest.mark.parametrize("name", DURATIONS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-1"])
def test_a_duration_that_is_not_a_finite_number_in_range_stops_at_start(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=name.removeprefix("OML_").lower()):
        Settings()


def test_the_standby_wait_is_bounded(monkeypatch):
    monkeypatch.setenv("OML_REPLICA_WAIT_S", "61")
    with pytest.raises(ValidationError, match="replica_wait_s"):
        Settings()
    monkeypatch.setenv("OML_REPLICA_WAIT_S", "0")
    assert Settings().replica_wait_s == 0


@pytest.mark.parametrize("value", ["0", "61", "abc", ""])
def test_a_bad_embed_wait_setting_stops_at_start(monkeypatch, value):
    monkeypatch.setenv("OML_RECALL_EMBED_WAIT_S", value)
    with pytest.raises(ValidationError, match="recall_embed_wait_s"):
        Settings()


def test_the_embed_wait_setting_reads_seconds(monkeypatch):
    assert Settings().recall_embed_wait_s == 2.0
    monkeypatch.setenv("OML_RECALL_EMBED_WAIT_S", "0.25")
    assert Settings().recall_embed_wait_s == 0.25
