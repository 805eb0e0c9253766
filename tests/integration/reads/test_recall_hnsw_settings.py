"""The HNSW scan settings on a connection that has not loaded pgvector yet.

pgvector defines its ``hnsw.*`` settings when its library loads, on a
connection's first use of the ``vector`` type. A vector leg whose row estimate
comes from the per-tenant cache reaches :func:`set_hnsw` before any vector
statement has run on its connection, so reading ``hnsw.max_scan_tuples`` there
must not assume the library is loaded.
"""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from oml.domain import recall as R
from oml.services.reads.recall import ITERATIVE_SCAN, set_hnsw


def test_set_hnsw_on_a_fresh_connection(db_url):
    engine = sa.create_engine(db_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            if conn.execute(sa.text("SELECT current_setting('hnsw.max_scan_tuples', true)")).scalar() is not None:
                pytest.skip("this server loads pgvector at start (shared_preload_libraries): no fresh-connection case")
            got = set_hnsw(conn, 10)
            assert got["ef_search"] == R.EF_SEARCH_MIN and got["iterative_scan"] == ITERATIVE_SCAN
            assert isinstance(got["max_scan_tuples"], int) and got["max_scan_tuples"] > 0
            # The transaction-local settings made before the library loaded still hold after it did.
            assert conn.execute(sa.text("SELECT current_setting('hnsw.iterative_scan'),"
                                        " current_setting('hnsw.ef_search')")).one() == (ITERATIVE_SCAN, str(R.EF_SEARCH_MIN))
    finally:
        engine.dispose()
