"""``oml bench index``: claims/s indexed by the oml-indexer vs. raw ``model.encode`` + a raw binary COPY of the vectors.

Setup (not timed): a tenant ``bench-index-<hex>`` in the configured database
with ``--claims`` claims submitted and promoted (LoCoMo turns when the shared
data set is present), its indexer principal enrolled, the model loaded and
warmed with one call.

Timed:

- **indexer**: ``indexer.catch_up`` for the tenant — reads the journal and
  tip projections as ``oml_indexer``, fetches plaintext through the indexing
  feed (HPKE unwrap + AES-GCM open per body, one read-log row per call),
  encodes the statements with the model in batches, writes one
  ``memories_fts`` row (``to_tsvector``) and one ``memory_embeddings`` row
  per claim, and advances its cursor, in transactions of 500 journal events.
- **raw**: ``model.encode`` of the same statements with the same batch size,
  then one binary ``COPY`` of the vectors into a temporary ``vector(n)``
  table (no tsvector, no decryption, no journal reads).

Prints claims/s for both, raw ÷ indexer, and the configured model's
(``OML_EMBEDDING_MODEL``: minilm, mpnet or a directory) encode time per
indexed claim — the index-time cost an operator pays for a model
(docs/operations.md, "Choosing the embedding model"). ``--quick`` is CI-sized. The
tenant is kept (the journal is append-only).
"""
from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
import typer

from oml.services.entrypoints.cli.common import JSON
from oml_tools.bench import bench_tenant, machine, machine_line, path_table, per_second, quick_option, run_and_emit, submit_all


def run(ctx, *, claims: int = 1000, batch: int = 100) -> dict[str, Any]:
    """Run both measurements; returns counts, seconds, claims/s and the ratio raw ÷ indexer."""
    import numpy as np
    from pgvector.psycopg import register_vector

    from oml.services.runtime.auth import authenticate
    from oml.workers.index import indexer
    from oml_tools.bench.admission import bodies

    bt = bench_tenant(ctx, "bench-index")
    tenant, adm = bt.tenant, ctx.admission
    r = ctx.tenancy.create_identity(bt.admin, "person", "bench-reviewer")["identity_id"]
    reviewer = authenticate(ctx.db, ctx.tenancy.create_principal(bt.admin, r, "reviewer", [bt.root])["api_key"])
    items = bodies(claims)
    for item in submit_all(ctx, bt, items, batch):
        adm.review(reviewer, item["version_id"], "promote", "accurate")
    indexer.indexer_principal(ctx, tenant)
    emb = indexer.embedder_for(ctx)
    emb.encode(["warm-up"])

    model = {"minilm": "minilm (all-MiniLM-L6-v2)", "mpnet": "mpnet (all-mpnet-base-v2)"}.get(emb.name, emb.name)
    res: dict[str, Any] = {"tenant": tenant, "claims": claims, "model": model, "dimension": emb.dimension,
                           "encode_batch": emb.batch_size}
    t0 = time.perf_counter()
    events = indexer.catch_up(ctx, tenant)
    res["indexer"] = {"claims": claims, "events": events, "seconds": time.perf_counter() - t0}
    with ctx.db.tenant(indexer.ROLE, tenant) as c:
        res["indexer"]["rows"] = c.execute(sa.text("SELECT count(*) FROM memory_embeddings WHERE tenant_id = :t"),
                                           {"t": tenant}).scalar()

    texts = [b["statement"] for b in items]
    t0 = time.perf_counter()
    vectors = emb.encode(texts)
    t_encode = time.perf_counter() - t0
    raw = ctx.db.engine(None).raw_connection()
    try:
        conn = raw.driver_connection
        register_vector(conn)
        with conn.cursor() as cur:
            cur.execute(f"CREATE TEMP TABLE bench_vectors (id int NOT NULL, embedding vector({int(emb.dimension)}) NOT NULL)")
            t0 = time.perf_counter()
            with cur.copy("COPY bench_vectors (id, embedding) FROM STDIN WITH (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "vector"])
                for i, v in enumerate(vectors):
                    copy.write_row((i, np.asarray(v, dtype=np.float32)))
            conn.commit()
            t_copy = time.perf_counter() - t0
            cur.execute("DROP TABLE bench_vectors")
            conn.commit()
    finally:
        raw.close()
    res["raw"] = {"claims": claims, "encode_seconds": round(t_encode, 3), "copy_seconds": round(t_copy, 3),
                  "seconds": t_encode + t_copy}
    res["encode_ms_per_claim"] = round(t_encode * 1000 / claims, 2)
    per_second(res, ("indexer", "raw"), "claims")
    res["ratio"] = round(res["raw"]["claims_per_s"] / res["indexer"]["claims_per_s"], 2)
    import torch

    res["machine"] = machine(ctx, torch_threads=torch.get_num_threads())
    return res


def render(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    raw = res["raw"]
    out = [f"oml bench index — tenant {res['tenant']}, {res['claims']} promoted claims, model {res['model']}"
           f" ({res['dimension']} dimensions), encode batch {res['encode_batch']}",
           machine_line(m, f"PostgreSQL {m['postgres']}", cpus=f" (torch threads {m['torch_threads']})")]
    out += path_table(res, 40, (("indexer", "indexer catch_up (feed+FTS+vectors)"), ("raw", "raw encode + binary COPY")),
                      ("claims",), "claims")
    out[-1] += f"   (encode {raw['encode_seconds']:.3f} s, COPY {raw['copy_seconds']:.3f} s)"
    return out + [f"raw ÷ indexer: {res['ratio']}×",
                  f"encode: {res['encode_ms_per_claim']:.2f} ms per indexed claim ({res['model']},"
                  f" batches of {res['encode_batch']}, {m['torch_threads']} torch threads)"]


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("index")
    def index(quick: bool = quick_option("50 claims"),
              claims: int = typer.Option(1000, "--claims", min=1, help="claims promoted before the measurement"),
              as_json: bool = JSON) -> None:
        """Claims/s indexed (feed, tsvector, embeddings), against raw model.encode + binary COPY of the vectors."""
        if quick:
            claims = 50
        run_and_emit(run, render, as_json, claims=claims)
