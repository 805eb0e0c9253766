"""Test-only writer process for the SIGKILL test (tests/integration/claims/test_admission_concurrency.py).

Submits one batch of ``KILL_BATCH`` claims with the API key in
``KILL_API_KEY``. With ``KILL_PAUSE=1`` it stops inside the admission
transaction after every journal row of the batch was inserted and before the
commit, writes the number of rows it inserted to ``KILL_MARKER`` and sleeps,
so the test can SIGKILL it at exactly that point. Not collected by pytest.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from oml.services.claims.admission import Admission, Submission
from oml.services.journal.acts import ActRunner
from oml.services.keys.keystore import LocalKeyStore
from oml.services.runtime.auth import authenticate
from oml.services.storage.db import Database


def main() -> int:
    db = Database(os.environ["OML_DATABASE_URL"], None, 2)
    ks = LocalKeyStore(Path(os.environ["OML_KEY_DIR"]), bytes.fromhex(os.environ["OML_MASTER_KEY"]))
    adm = Admission(db, ks)
    marker = Path(os.environ["KILL_MARKER"])
    tenant = os.environ["KILL_TENANT"]
    if os.environ.get("KILL_PAUSE") == "1":
        original = ActRunner.remember

        def pause(self, p, key, digest, response, conn):
            original(self, p, key, digest, response, conn)
            inserted = conn.execute(sa.text("SELECT count(*) FROM journal_events WHERE tenant_id = :t AND xmin = pg_current_xact_id()::xid"),
                                    {"t": tenant}).scalar()
            marker.write_text(str(inserted))
            time.sleep(120)  # the test kills us here, before the commit

        ActRunner.remember = pause
    p = authenticate(db, os.environ["KILL_API_KEY"])
    n = int(os.environ["KILL_BATCH"])
    items = [Submission(os.environ["KILL_WORKAREA"], {"statement": f"batch item {i}"}) for i in range(n)]
    out = adm.submit(p, items, idempotency_key="kill-batch")
    marker.write_text(f"committed {len(out['items'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
