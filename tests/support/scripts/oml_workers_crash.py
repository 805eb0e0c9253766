"""Run one consumer in a child process and SIGKILL it at a chosen point (used by test_worker_failures.py).

Usage: python oml_workers_crash.py lake|index TENANT BATCH KILL_AT
``lake``: killed right after the KILL_AT-th Delta commit, before the Postgres lag hint.
``index``: killed after the KILL_AT-th batch wrote its rows, before that batch commits.
``stall``: the lake-writer stops itself (SIGSTOP) after planning its KILL_AT-th batch, holding the
tenant's lake lock, and exits 0 only if its commit was refused when resumed (test_lake_locks.py).
"""
import os
import signal
import sys

from oml.services.runtime.context import open_context
from oml.services.runtime.settings import Settings
from oml.workers.index import indexer
from oml.workers.lake import writer as lake_writer


def main() -> None:
    mode, tenant, batch, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ctx = open_context(Settings(), migrate=False)
    calls = {"n": 0}

    def maybe_die(*_args) -> None:
        calls["n"] += 1
        if calls["n"] >= kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    if mode == "lake":
        lake_writer.after_commit_hook = maybe_die
        lake_writer.catch_up(ctx, tenant, batch_rows=batch)
    elif mode == "stall":
        def stall(*_args) -> None:
            calls["n"] += 1
            if calls["n"] == kill_at:
                os.kill(os.getpid(), signal.SIGSTOP)

        lake_writer.before_commit_hook = stall
        try:
            lake_writer.catch_up(ctx, tenant, batch_rows=batch)
        except Exception as exc:  # its session was ended while it was stopped
            print(type(exc).__name__, flush=True)
            raise SystemExit(0) from None
    elif mode == "index":
        indexer.after_write_hook = maybe_die
        indexer.catch_up(ctx, tenant, batch_events=batch)
    else:
        raise SystemExit(f"unknown mode {mode}")
    raise SystemExit(3)  # reaching here means the kill point was never hit


if __name__ == "__main__":
    main()
