"""Delta table layout of the lake (docs/design.md §Outbox and workers; docs/lake.md).

Three tables under the lake URI, each partitioned by ``tenant_id``, written
only by the lake-writer and read by the reconciler, erasure and any Delta
engine. Columns are copied verbatim from PostgreSQL: canonical event bytes,
hashes, signatures, C2SP notes and body ciphertext — never plaintext.
Data-skipping statistics are restricted to the non-content columns listed in
``STATS_COLUMNS`` so no ciphertext, note or event byte is copied into
``_delta_log`` min/max values.
"""
from __future__ import annotations

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")

JOURNAL = pa.schema([
    pa.field("tenant_id", pa.string(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("event_id", pa.string(), nullable=False),
    pa.field("type", pa.string(), nullable=False),
    pa.field("kid", pa.string(), nullable=False),
    pa.field("at", TS, nullable=False),
    pa.field("canonical", pa.binary(), nullable=False),
    pa.field("hash", pa.binary(), nullable=False),
    pa.field("prev_hash", pa.binary(), nullable=False),
    pa.field("signature", pa.binary(), nullable=False),
])

CHECKPOINTS = pa.schema([
    pa.field("tenant_id", pa.string(), nullable=False),
    pa.field("tree_size", pa.int64(), nullable=False),
    pa.field("root", pa.binary(), nullable=False),
    pa.field("note", pa.binary(), nullable=False),
    pa.field("kid", pa.string(), nullable=False),
    pa.field("issued_at", TS, nullable=False),
])

BODIES = pa.schema([
    pa.field("tenant_id", pa.string(), nullable=False),
    pa.field("artifact_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("claim_id", pa.string(), nullable=True),
    pa.field("version_id", pa.string(), nullable=True),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("sha256", pa.binary(), nullable=False),
    pa.field("ciphertext", pa.binary(), nullable=False),
])

TABLES = {"journal": JOURNAL, "checkpoints": CHECKPOINTS, "bodies": BODIES}

# Only these columns get min/max statistics in _delta_log.
STATS_COLUMNS = {
    "journal": "tenant_id,seq",
    "checkpoints": "tenant_id,tree_size",
    "bodies": "tenant_id,seq",
}

PARTITION_BY = ["tenant_id"]


def app_id(tenant: str) -> str:
    """Delta application-transaction id recording the last seq written for a tenant."""
    return f"oml-lake-writer:{tenant}"
