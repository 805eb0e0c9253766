"""A consumer's catch-up that waits past its lock limit is retried without dramatiq's traceback; any other failure
still surfaces as ConsumerFailed carrying no driver text."""
from __future__ import annotations

import logging

import dramatiq
import pytest
import sqlalchemy as sa

from oml.workers.runtime.actors import ConsumerFailed, _actor_fn


def _locked_catch_up(ctx):
    """A catch-up whose one statement waits 50 ms for a lock the test holds: a real lock_timeout (SQLSTATE 55P03)."""
    def catch_up(_ctx, _tenant: str) -> int:
        with ctx.db.system(None) as conn:
            conn.execute(sa.text("SET LOCAL lock_timeout = '50ms'"))
            conn.execute(sa.text("SELECT count(*) FROM consumer_cursors"))
        return 0
    return catch_up


def test_a_lock_timeout_is_retried_in_one_warning_line(ctx, caplog):
    wake = _actor_fn(ctx, "indexer", _locked_catch_up(ctx))
    with ctx.db.system(None) as holder:
        holder.execute(sa.text("LOCK TABLE consumer_cursors IN ACCESS EXCLUSIVE MODE"))
        with caplog.at_level(logging.WARNING, logger="oml.workers.runtime.actors"), pytest.raises(dramatiq.Retry) as got:
            wake("acme", 1)
    assert "lock_timeout" in str(got.value) and got.value.__cause__ is None
    lines = [r for r in caplog.records if r.name == "oml.workers.runtime.actors"]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert lines[0].getMessage() == "indexer: tenant acme: the database did not answer in time (lock_timeout); retrying"
    assert "consumer_cursors" not in lines[0].getMessage()  # no SQL text reaches the log


def test_another_failure_is_consumer_failed_with_the_type_only(ctx):
    def catch_up(_ctx, _tenant: str) -> int:
        with ctx.db.system(None) as conn:
            conn.execute(sa.text("SELECT no_such_column FROM consumer_cursors"))
        return 0

    with pytest.raises(ConsumerFailed) as got:
        _actor_fn(ctx, "indexer", catch_up)("acme", 1)
    assert str(got.value) == "indexer failed for tenant acme: ProgrammingError" and got.value.__cause__ is None
