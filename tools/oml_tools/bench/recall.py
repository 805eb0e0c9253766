"""``oml bench recall``: recall latency at 10k and 100k claims in one tenant, next to raw SQL top-k.

Population (bench-only, see tools/oml_tools/bench/population.py): a tenant
``bench-recall-<hex>`` with 20 workareas, grown to each size in turn, plus
``--others`` tenants of ``--other-size`` claims each, all loaded with COPY
into the projections, encrypted bodies (real per-artifact DEKs, HPKE-wrapped)
and both index tables, with a signed ``claim.submitted`` and ``claim.promoted``
per claim (what verified reads check) but no admission, so never a real tenant. Texts
are LoCoMo dialogue turns (``<shared>/data/locomo``) with a few random words
of the corpus swapped in to make every row distinct; each row's vector is
its base turn's all-MiniLM-L6-v2 embedding plus small noise, renormalised.
Without the data set, synthetic sentences and clustered random vectors are
used (said in the output). After each load the tenant partition's HNSW
index is rebuilt (drop + create, ``maintenance_work_mem`` sized to hold the
graph: :func:`build_memory`) — pgvector's bulk-load practice — and the tables
are vacuumed and analysed.

Measured per size, over the same ``--queries`` questions (LoCoMo questions,
cycled), scope = the whole tenant, k = 10:

* **recall** — ``Recaller.recall`` end to end as ``oml_server``: query
  embedding (vector, hybrid), predicate and projections, the SQL legs,
  decrypt of every served body, the read-log insert;
* **raw SQL** top-k on the same indexes as the owner (no RLS, no
  predicate, no decrypt, no log): FTS ``ts_rank`` over the OR of the
  question's lexemes through the GIN index; vector ``ORDER BY embedding <=>
  q LIMIT 10`` on the HNSW index (pgvector defaults) with the query vector
  precomputed; hybrid both legs (LIMIT 50 each) fused by RRF in one statement;
* the query embedding alone (one question, as recall embeds it).

Prints p50/p95 per path and the ratios recall ÷ raw; then verified reads
(docs/security-model.md), paired per question in the same run: recall
without them, with them from an empty per-process cache (cold) and with the
cache warm (the ``recall`` figures); the ratios on ÷ off, the median of the
per-question differences, and the signature checks the cold runs did.
``--replica`` (or ``--replica-url``) adds, at each size, the same questions
served by a hot standby interleaved with the primary
(tools/oml_tools/bench/replica.py). ``--quick`` is CI-sized.
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import random
import re
import secrets
import statistics
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
import typer

from oml.services.entrypoints.cli.common import JSON
from oml_tools import shared_dir

SHARED = shared_dir()
LOCOMO = SHARED / "data" / "locomo" / "locomo-dev.json"
N_AREAS = 20


def _pct(xs: Sequence[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))] if s else float("nan")


def corpus() -> tuple[list[str], list[str], bool]:
    """(base texts, questions, from LoCoMo?)."""
    if LOCOMO.exists():
        data = json.loads(LOCOMO.read_text())
        texts, questions = [], []
        for conv in data:
            c = conv["conversation"]
            for k in c:
                if re.fullmatch(r"session_\d+", k):
                    texts += [f"{t['speaker']}: {t['text']}" for t in c[k]]
            questions += [q["question"] for q in conv["qa"]]
        return texts, questions, True
    words = ("build cache deploy index query latency model review search cluster backup schedule team release "
             "test storage rotation monitor alert budget vendor contract meeting roadmap").split()
    rng = random.Random(3)
    texts = [" ".join(rng.choices(words, k=10)) for _ in range(2000)]
    questions = [" ".join(rng.choices(words, k=6)) + "?" for _ in range(300)]
    return texts, questions, False


class Population:
    """Generates rows around base texts/vectors, deterministically."""

    def __init__(self, texts: list[str], vectors, seed: int = 11) -> None:
        import numpy as np

        self.texts, self.vectors = texts, vectors
        self.vocab = sorted({w for t in texts for w in re.findall(r"[A-Za-z]{4,}", t)}) or ["word"]
        self.rng = np.random.default_rng(seed)
        self.pyrng = random.Random(seed)

    def rows(self, n: int):
        import numpy as np

        idx = self.rng.integers(0, len(self.texts), n)
        noise = self.rng.standard_normal((n, self.vectors.shape[1])).astype(np.float32) * (0.15 / np.sqrt(self.vectors.shape[1]))
        vec = self.vectors[idx] + noise
        vec /= np.linalg.norm(vec, axis=1, keepdims=True)
        out = []
        for i in range(n):
            words = self.texts[idx[i]].split()
            for _ in range(2):
                words[self.pyrng.randrange(len(words))] = self.pyrng.choice(self.vocab)
            out.append((" ".join(words), vec[i]))
        return out


def _principals(ctx, tenant: str):
    from oml.services.runtime.auth import authenticate

    t = ctx.tenancy.create_tenant(tenant)
    admin = authenticate(ctx.db, t.admin_key)
    keys = {}
    for role in ("writer", "reviewer", "reader"):
        ident = ctx.tenancy.create_identity(admin, "service", f"bench-{role}")["identity_id"]
        keys[role] = authenticate(ctx.db, ctx.tenancy.create_principal(admin, ident, role, [t.root_workarea])["api_key"])
    areas = [(ctx.tenancy.create_workarea(admin, f"area-{i}", t.root_workarea)["node_id"], f"main.area-{i}") for i in range(N_AREAS)]
    return keys, areas


def _load(ctx, tenant: str, keys, areas, rows) -> None:
    from oml_tools.bench.population import Item, bulk_load

    items = [Item(areas[i % len(areas)][0], areas[i % len(areas)][1], text, vec) for i, (text, vec) in enumerate(rows)]
    for i in range(0, len(items), 20_000):
        bulk_load(ctx, tenant, items[i:i + 20_000], author=(keys["writer"].principal_id, keys["writer"].identity_id),
                  reviewer=(keys["reviewer"].principal_id, keys["reviewer"].identity_id), maintenance=False)


def _partition(conn, tenant: str) -> int:
    return int(conn.execute(sa.text("SELECT tenant_no FROM tenants WHERE tenant_id = :t"), {"t": tenant}).scalar())


def _drop_hnsw(ctx, tenant: str) -> None:
    """Bulk loads go faster without the HNSW index; :func:`_rebuild_indexes` re-creates it."""
    with ctx.db.engine(None).connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(sa.text(f"DROP INDEX IF EXISTS memory_embeddings_p{_partition(c, tenant)}_hnsw"))


#: What one row of the tenant's partition takes in pgvector's in-memory HNSW graph, bytes: the 384-float vector plus
#: its neighbour lists at m = 16, rounded up from the spill point pgvector reported at 512MB (docs/benchmarks.md,
#: "The HNSW build").
GRAPH_BYTES_PER_ROW = 2_600


def build_memory(rows: int) -> str:
    """A ``maintenance_work_mem`` that holds the whole graph of ``rows`` rows (:data:`GRAPH_BYTES_PER_ROW`), at least
    512MB: pgvector builds in memory until the graph outgrows it, then switches to a much slower on-disk phase."""
    return f"{max(512, -(-rows * GRAPH_BYTES_PER_ROW // 2**20))}MB"


@dataclasses.dataclass
class HnswBuild:
    """One HNSW build: ``seconds``, the ``memory`` and parallel ``workers`` it ran with, and ``spilled_after`` — the
    tuples pgvector had placed when the graph no longer fitted (its NOTICE), ``None`` when it fitted."""

    seconds: float
    memory: str
    workers: int
    spilled_after: int | None = None


def build_hnsw(ctx, tenant: str, memory: str | None = None, workers: int | None = None) -> HnswBuild:
    """Drop and re-create the tenant partition's HNSW index (as oml_create_tenant_partitions defines it).

    ``memory``: ``maintenance_work_mem`` (default :func:`build_memory` of the partition's rows); ``workers``:
    ``max_parallel_maintenance_workers`` (default the server's)."""
    spilled: list[int] = []

    def notice(diag: Any) -> None:
        m = re.search(r"no longer fits into maintenance_work_mem after (\d+) tuples", diag.message_primary or "")
        if m:
            spilled.append(int(m.group(1)))

    with ctx.db.engine(None).connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        n = _partition(c, tenant)
        if memory is None:
            memory = build_memory(int(c.execute(sa.text(f"SELECT count(*) FROM memory_embeddings_p{n}")).scalar()))
        c.execute(sa.text("SELECT set_config('maintenance_work_mem', :m, false)"), {"m": memory})
        if workers is not None:
            c.execute(sa.text("SELECT set_config('max_parallel_maintenance_workers', :w, false)"), {"w": str(workers)})
        used = int(c.execute(sa.text("SHOW max_parallel_maintenance_workers")).scalar())
        raw = c.connection.driver_connection
        raw.add_notice_handler(notice)
        try:
            t0 = time.perf_counter()
            c.execute(sa.text(f"DROP INDEX IF EXISTS memory_embeddings_p{n}_hnsw"))
            c.execute(sa.text(f"CREATE INDEX memory_embeddings_p{n}_hnsw ON memory_embeddings_p{n}"
                              " USING hnsw (embedding vector_cosine_ops)"))
            seconds = time.perf_counter() - t0
        finally:
            raw.remove_notice_handler(notice)
            c.execute(sa.text("RESET maintenance_work_mem; RESET max_parallel_maintenance_workers"))
    return HnswBuild(seconds, memory, used, spilled[0] if spilled else None)


def maintain(ctx, tenant: str) -> None:
    """Analyse the projections and vacuum the tenant's index partitions (merges GIN's pending list; sets the
    visibility map the BM25 postings' index-only scans read)."""
    with ctx.db.engine(None).connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        n = _partition(c, tenant)
        for table in ("claims", "claim_versions", "tip_intervals", "artifacts", "wrapped_deks"):
            c.execute(sa.text(f"ANALYZE {table}"))
        c.execute(sa.text(f"VACUUM ANALYZE memories_fts_p{n}"))
        c.execute(sa.text(f"VACUUM ANALYZE memory_embeddings_p{n}"))
        c.execute(sa.text(f"VACUUM ANALYZE bm25_postings_p{n}"))
        c.execute(sa.text(f"VACUUM ANALYZE bm25_df_p{n}"))
        c.execute(sa.text("ANALYZE bm25_groups"))


def _rebuild_indexes(ctx, tenant: str) -> float:
    """:func:`build_hnsw`, then :func:`maintain`; seconds for both."""
    t0 = time.perf_counter()
    build_hnsw(ctx, tenant)
    maintain(ctx, tenant)
    return time.perf_counter() - t0


RAW_FTS = sa.text(
    "SELECT version_id FROM memories_fts WHERE tenant_id = :t AND tip_to_seq IS NULL AND tsv @@ CAST(:q AS tsquery)"
    " ORDER BY ts_rank(tsv, CAST(:q AS tsquery)) DESC LIMIT :k")
RAW_VEC = sa.text(
    "SELECT version_id FROM memory_embeddings WHERE tenant_id = :t AND tip_to_seq IS NULL"
    " ORDER BY embedding <=> CAST(:v AS vector) LIMIT :k")
RAW_HYBRID = sa.text(
    "WITH f AS (SELECT version_id, row_number() OVER (ORDER BY r DESC, version_id) AS rk FROM ("
    "  SELECT version_id, ts_rank(tsv, CAST(:q AS tsquery)) AS r FROM memories_fts WHERE tenant_id = :t"
    "   AND tip_to_seq IS NULL AND tsv @@ CAST(:q AS tsquery) ORDER BY r DESC LIMIT 50) x),"
    " v AS (SELECT version_id, row_number() OVER (ORDER BY d, version_id) AS rk FROM ("
    "  SELECT version_id, embedding <=> CAST(:v AS vector) AS d FROM memory_embeddings WHERE tenant_id = :t"
    "   AND tip_to_seq IS NULL ORDER BY embedding <=> CAST(:v AS vector) LIMIT 50) y)"
    " SELECT COALESCE(f.version_id, v.version_id) AS version_id,"
    "  COALESCE(1.0 / (60 + f.rk), 0) + COALESCE(1.0 / (60 + v.rk), 0) AS s"
    " FROM f FULL OUTER JOIN v ON f.version_id = v.version_id ORDER BY s DESC, 1 LIMIT :k")


def measure(ctx, tenant: str, reader, questions: list[str], qvecs, qtsq: list[str | None], k: int = 10) -> dict[str, Any]:
    from oml.services.reads import verified_reads
    from oml.services.reads.recall import Recaller, RecallRequest, _vector_literal

    rec = Recaller(ctx)
    out: dict[str, Any] = {}

    def summary(runs: list[tuple[float, int]]) -> dict[str, float]:
        lat = [ms for ms, _ in runs]
        return {"p50": _pct(lat, 50), "p95": _pct(lat, 95), "mean_hits": statistics.fmean(n for _, n in runs)}

    def one(r: str, q: str) -> tuple[float, int]:
        t0 = time.perf_counter()
        res = rec.recall(reader, RecallRequest(query=q, retriever=r, k=k))
        return (time.perf_counter() - t0) * 1000, len(res["hits"])

    for r in ("fts", "vector", "hybrid"):
        rec.recall(reader, RecallRequest(query=questions[0], retriever=r, k=k))  # warm
        # Verified reads, paired per question in the same run: off; on from an empty cache (every hit's
        # event signature-checked: the first read); on again with the cache warm (the steady state).
        # Which of off and cold comes first alternates, so neither always meets PostgreSQL's cache cold.
        off: list[tuple[float, int]] = []
        cold: list[tuple[float, int]] = []
        on: list[tuple[float, int]] = []
        checks = 0
        try:
            for i, q in enumerate(questions):
                if i % 2 == 0:
                    verified_reads.set_enabled(False)
                    off.append(one(r, q))
                verified_reads.set_enabled(True)
                verified_reads.clear_cache(keys=False)  # a tenant's key history is built once per process
                c0 = verified_reads.signature_checks()
                cold.append(one(r, q))
                checks += verified_reads.signature_checks() - c0
                on.append(one(r, q))
                if i % 2 == 1:
                    verified_reads.set_enabled(False)
                    off.append(one(r, q))
        finally:
            verified_reads.set_enabled(None)
        out[f"recall_{r}"] = summary(on)
        out[f"recall_{r}_unverified"], out[f"recall_{r}_cold"] = summary(off), summary(cold)
        out[f"verify_{r}"] = {"p50": out[f"recall_{r}"]["p50"] / out[f"recall_{r}_unverified"]["p50"],
                              "p95": out[f"recall_{r}"]["p95"] / out[f"recall_{r}_unverified"]["p95"],
                              "cold_p50": out[f"recall_{r}_cold"]["p50"] / out[f"recall_{r}_unverified"]["p50"],
                              "cold_p95": out[f"recall_{r}_cold"]["p95"] / out[f"recall_{r}_unverified"]["p95"],
                              # per question, verified minus unverified (ms): the pairing cancels drift between questions
                              "delta_p50": statistics.median(a[0] - b[0] for a, b in zip(on, off)),
                              "cold_delta_p50": statistics.median(a[0] - b[0] for a, b in zip(cold, off)),
                              "signature_checks": checks}
    eng = ctx.db.engine(None)
    with eng.connect() as c:
        for name, stmt in (("fts", RAW_FTS), ("vector", RAW_VEC), ("hybrid", RAW_HYBRID)):
            lat, hits = [], []
            for _q, v, tq in zip(questions, qvecs, qtsq):
                params = {"t": tenant, "k": k, "v": _vector_literal(v), "q": tq or "''"}
                t0 = time.perf_counter()
                got = c.execute(stmt, params).all() if (tq or name == "vector") else []
                lat.append((time.perf_counter() - t0) * 1000)
                hits.append(len(got))
            out[f"raw_{name}"] = {"p50": _pct(lat, 50), "p95": _pct(lat, 95), "mean_hits": statistics.fmean(hits)}
        c.rollback()
    for r in ("fts", "vector", "hybrid"):
        out[f"ratio_{r}"] = {"p50": out[f"recall_{r}"]["p50"] / out[f"raw_{r}"]["p50"],
                             "p95": out[f"recall_{r}"]["p95"] / out[f"raw_{r}"]["p95"]}
    return out


def run(ctx, *, sizes: Sequence[int] = (10_000, 100_000), others: int = 2, other_size: int = 20_000,
        queries: int = 200, progress=None, after_size=None) -> dict[str, Any]:
    """``after_size(tenant, reader, questions) -> dict``, if given, runs after each size's measurement and its
    result joins that size's (``--replica``: tools/oml_tools/bench/replica.py)."""
    from oml.domain.recall import FTS_CONFIG, tsquery_text
    from oml.workers.index.embedding import get_embedder

    say = progress or (lambda _m: None)
    texts, questions, real = corpus()
    emb = get_embedder(ctx.settings)
    t0 = time.perf_counter()
    base = emb.encode(texts) if real else None
    if base is None:
        from oml_tools.bench.population import unit_vectors

        base = unit_vectors(len(texts), emb.dimension, seed=5, clusters=50)
    say(f"embedded {len(texts)} base texts in {time.perf_counter() - t0:.1f}s")
    pop = Population(texts, base)
    qs = [questions[i % len(questions)] for i in range(queries)]
    qvecs = [emb.encode([q])[0] for q in qs]
    from oml.services.reads.recall import default_embed

    query_embed = default_embed(ctx)  # exactly what recall runs per query
    lat = []
    for q in qs[:50]:
        t1 = time.perf_counter()
        query_embed(q)
        lat.append((time.perf_counter() - t1) * 1000)
    with ctx.db.engine(None).connect() as c:
        qtsq = [tsquery_text(c.execute(sa.text("SELECT tsvector_to_array(to_tsvector(CAST(:c AS regconfig), :q))"),
                                       {"c": FTS_CONFIG, "q": q}).scalar() or [], "|") for q in qs]
    run_id = secrets.token_hex(3)
    res: dict[str, Any] = {"corpus": "LoCoMo turns + word swaps, MiniLM vectors + noise" if real else "synthetic",
                           "queries": len(qs), "k": 10, "embedding_ms": {"p50": _pct(lat, 50), "p95": _pct(lat, 95)},
                           "others": [], "sizes": {}}
    for j in range(others):
        tenant = f"bench-recall-{run_id}-o{j}"
        keys, areas = _principals(ctx, tenant)
        t0 = time.perf_counter()
        _drop_hnsw(ctx, tenant)
        _load(ctx, tenant, keys, areas, pop.rows(other_size))
        _rebuild_indexes(ctx, tenant)
        res["others"].append({"tenant": tenant, "claims": other_size, "load_s": time.perf_counter() - t0})
        say(f"other tenant {tenant}: {other_size} claims")
    tenant = f"bench-recall-{run_id}"
    keys, areas = _principals(ctx, tenant)
    have = 0
    for size in sorted(sizes):
        t0 = time.perf_counter()
        _drop_hnsw(ctx, tenant)
        _load(ctx, tenant, keys, areas, pop.rows(size - have))
        load_s = time.perf_counter() - t0
        index_s = _rebuild_indexes(ctx, tenant)
        have = size
        say(f"{tenant}: {size} claims (load {load_s:.0f}s, index {index_s:.0f}s); measuring")
        m = measure(ctx, tenant, keys["reader"], qs, qvecs, qtsq)
        res["sizes"][str(size)] = {"load_s": load_s, "index_s": index_s, **m}
        if after_size is not None:
            res["sizes"][str(size)].update(after_size(tenant, keys["reader"], qs))
    res["tenant"] = tenant
    res["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    with ctx.db.engine(None).connect() as c:
        res["machine"]["postgres"] = c.execute(sa.text("SHOW server_version")).scalar()
        res["machine"]["pgvector"] = c.execute(sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
    return res


def render(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    lines = [f"oml bench recall — tenant {res['tenant']} with {len(res['others'])} other tenants of "
             f"{res['others'][0]['claims'] if res['others'] else 0} claims; corpus: {res['corpus']}",
             f"machine: {m['cpus']} CPUs, {m['platform']}, Python {m['python']}, PostgreSQL {m.get('postgres')}, pgvector {m.get('pgvector')}",
             f"{res['queries']} questions per path, k = {res['k']}, scope = whole tenant; query embedding alone p50 "
             f"{res['embedding_ms']['p50']:.1f} ms / p95 {res['embedding_ms']['p95']:.1f} ms",
             f"{'claims':>8}  {'path':<16} {'p50 ms':>8} {'p95 ms':>8} {'hits':>5}   recall÷raw p50 / p95"]
    for size, v in res["sizes"].items():
        for r in ("fts", "vector", "hybrid"):
            a, b, ratio = v[f"recall_{r}"], v[f"raw_{r}"], v[f"ratio_{r}"]
            lines.append(f"{int(size):>8}  {'recall ' + r:<16} {a['p50']:8.2f} {a['p95']:8.2f} {a['mean_hits']:5.1f}   "
                         f"{ratio['p50']:.1f}× / {ratio['p95']:.1f}×")
            lines.append(f"{'':>8}  {'raw SQL ' + r:<16} {b['p50']:8.2f} {b['p95']:8.2f} {b['mean_hits']:5.1f}")
    lines.append("verified reads (OML_VERIFY_READS), paired per question in the same run: off; on from an empty cache "
                 "(cold: every hit's event signature-checked); on with the cache warm (the 'recall' rows above)")
    lines.append(f"{'claims':>8}  {'path':<16} {'off p50':>8} {'off p95':>8} {'cold p50':>8} {'cold p95':>8} {'on p50':>8} {'on p95':>8}"
                 f"   on÷off p50 / p95   cold÷off p50 / p95   median paired Δ on / cold (ms)   signature checks")
    for size, v in res["sizes"].items():
        for r in ("fts", "vector", "hybrid"):
            if f"verify_{r}" not in v:
                continue
            off, cold, on, x = v[f"recall_{r}_unverified"], v[f"recall_{r}_cold"], v[f"recall_{r}"], v[f"verify_{r}"]
            lines.append(f"{int(size):>8}  {'recall ' + r:<16} {off['p50']:8.2f} {off['p95']:8.2f} {cold['p50']:8.2f} {cold['p95']:8.2f}"
                         f" {on['p50']:8.2f} {on['p95']:8.2f}   {x['p50']:.2f}× / {x['p95']:.2f}×"
                         f"        {x['cold_p50']:.2f}× / {x['cold_p95']:.2f}×        {x['delta_p50']:+.2f} / {x['cold_delta_p50']:+.2f}"
                         f"                    {x['signature_checks']}")
    from oml_tools.bench import replica

    return lines + replica.render(res)


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("recall")
    def recall(quick: bool = typer.Option(False, "--quick", help="CI-sized: 2k and 5k claims, one other tenant of 2k, 30 questions"),
               sizes: str = typer.Option("10000,100000", "--sizes", help="comma-separated tenant sizes, measured in turn"),
               others: int = typer.Option(2, "--others", min=0, help="other tenants present"),
               other_size: int = typer.Option(20_000, "--other-size", min=1),
               queries: int = typer.Option(200, "--queries", min=5),
               with_replica: bool = typer.Option(False, "--replica", help="also recall from a hot standby, interleaved"
                                                 " with the primary (built here on the embedded database)"),
               replica_url: str = typer.Option(None, "--replica-url", help="owner-shaped URL of an existing standby of"
                                               " the configured database (implies --replica)"),
               as_json: bool = JSON) -> None:
        """p50/p95 of fts, vector and hybrid recall at each size, and raw SQL top-k on the same indexes."""
        from oml.services.entrypoints.cli.common import context, err

        sz = [int(s) for s in sizes.split(",") if s.strip()]
        if quick:
            sz, others, other_size, queries = [2000, 5000], 1, 2000, 30
        from oml_tools.bench.replica import ReplicaProbe

        with context(new_home=True) as ctx:
            probe = ReplicaProbe(ctx, replica_url) if (with_replica or replica_url) else None
            try:
                res = run(ctx, sizes=sz, others=others, other_size=other_size, queries=queries, progress=lambda m: err.print(m),
                          after_size=probe)
            finally:
                if probe is not None:
                    probe.close()
        if as_json:
            typer.echo(json.dumps(res, indent=2))
        else:
            for line in render(res):
                typer.echo(line)
