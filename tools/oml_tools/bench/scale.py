"""``oml bench scale``: how admission, recall, index build, reconcile and export grow on one machine.

Two populations, because the cheap one cannot serve every measurement:

* **Bulk-loaded** (tools/oml_tools/bench/population.py, as ``oml bench recall``
  loads it): one tenant ``bench-scale-<hex>`` with 20 workareas grown to each
  of ``--sizes`` in turn. It has projections, encrypted bodies and both
  index tables but only ``claim.promoted`` events — no submissions — so it
  carries the read-side measurements: **recall** p50/p95 (fts, vector,
  hybrid; ``Recaller.recall`` end to end as ``oml_server``, verified reads
  as configured; each question asked twice, the second pass timed), **index build** (drop + ``CREATE INDEX … USING
  hnsw`` on the tenant's ``memory_embeddings`` partition, the whole
  partition, ``maintenance_work_mem`` sized to hold the graph, the server's
  parallel workers; whether the graph still spilled is printed), and **admission** into a tenant
  of that size (``--admit`` claims through ``Admission.submit`` in group
  commits of 100: classification, envelope, signature, chain, projections,
  outbox). Before admission is timed the tenant's verified state is brought
  over the events the load appended (**first verify**: seconds and events
  verified, on its own), so admission is the steady state; then the state is
  forgotten and brought back as a restarted process would (**restart**: from
  a verified-state snapshot when one is trusted, docs/operator-guide.md).
* **Journalled** (real admission only): one tenant ``bench-scale-j-<hex>``
  grown to each of ``--journalled`` by submitting claims (so a real,
  verifiable history), then at each size: a checkpoint and the real
  lake-writer's copy into a temporary local lake (not timed),
  **reconcile** end to end (``reconciler.reconcile`` with the projection
  replay; must come out clean) and **evidence export** from seq 1 to the head
  (``evidence.export.export``: checkpoint, proofs, archive, its journal
  event). These sizes are smaller because admission runs at a few hundred
  claims/s here.

Then the same at a fixed total spread over 1, 10 and 100 tenants
(``--tenants``): ``--bulk-total`` bulk-loaded claims (index build summed
over the tenants; recall questions asked round-robin across the tenants),
``--admit`` claims admitted round-robin in group commits of 10, and
``--journal-total`` admitted claims whose tenants are reconciled and
exported one after another (seconds summed).

For every metric the log-log slope (least squares of log metric over log
size or tenant count) is printed: 0 means flat, 1 linear. Texts and vectors
are those of ``oml bench recall`` (LoCoMo turns with word swaps, MiniLM
vectors plus noise), built on the first 1,000 turns only so that embedding
them up front stays short. Every tenant is kept (the journal is
append-only); the lake directory is deleted. ``--quick`` is CI-sized.
"""
from __future__ import annotations

import dataclasses
import math
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import typer

from oml.services.entrypoints.cli.common import JSON
from oml_tools.bench import BenchTenant, bench_tenant, emit, rate, submit_all
from oml_tools.bench.recall import _pct as pct
from oml_tools.bench.replica import RETRIEVERS, timed_ms

N_AREAS = 20


def slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of ``log y`` over ``log x`` (points with a non-positive value skipped); ``None`` below 2 points."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else None


@dataclasses.dataclass
class Scaled:
    """A bench tenant with the principals and workareas a bulk load needs."""

    bt: BenchTenant
    keys: dict[str, Any]           # role -> Principal: writer, reviewer, reader
    areas: list[tuple[str, str]]   # (node id, path)
    narrow: list[tuple[int, Any]] = dataclasses.field(default_factory=list)  # (claims in the workarea, its reader)


def scaled_tenant(ctx, prefix: str, areas: int) -> Scaled:
    """:func:`bench_tenant` plus a reviewer, a reader and ``areas`` child workareas of the root (0: the root only)."""
    from oml.services.runtime.auth import authenticate

    bt = bench_tenant(ctx, prefix)
    keys = {"writer": bt.writer}
    for role in ("reviewer", "reader"):
        ident = ctx.tenancy.create_identity(bt.admin, "service", f"bench-{role}")["identity_id"]
        keys[role] = authenticate(ctx.db, ctx.tenancy.create_principal(bt.admin, ident, role, [bt.root])["api_key"])
    made = [(ctx.tenancy.create_workarea(bt.admin, f"area-{i}", bt.root)["node_id"], f"main.area-{i}") for i in range(areas)]
    return Scaled(bt, keys, made or [(bt.root, "main")])


class Corpus:
    """Rows and questions as ``oml bench recall`` makes them; ``base_texts`` caps the texts embedded up front."""

    def __init__(self, ctx, queries: int, base_texts: int | None = None) -> None:
        from oml.workers.index.embedding import get_embedder
        from oml_tools.bench.recall import Population, corpus

        texts, questions, self.real = corpus()
        texts = texts[:base_texts] if base_texts else texts
        emb = get_embedder(ctx.settings)
        if self.real:
            base = emb.encode(texts)
        else:
            from oml_tools.bench.population import unit_vectors

            base = unit_vectors(len(texts), emb.dimension, seed=5, clusters=50)
        self.pop = Population(texts, base)
        self.questions = [questions[i % len(questions)] for i in range(queries)]
        self.bodies_from = 0

    def bodies(self, n: int) -> list[dict[str, Any]]:
        """``n`` claim bodies for admission, never the same slice twice in a run (idempotent bodies would dedupe)."""
        from oml_tools.bench.admission import bodies

        out = [{**b, "statement": f"{b['statement']} [{self.bodies_from + i}]"} for i, b in enumerate(bodies(n))]
        self.bodies_from += n
        return out


def add_narrow(ctx, t: Scaled, corpus: Corpus, sizes: Sequence[int]) -> int:
    """For each size, a workarea ``narrow-<size>`` under the root holding that many bulk-loaded claims and a reader
    whose only root it is (``t.narrow``); returns the claims loaded. The general workareas hold the rest of the
    tenant, so these readers' vector leg filters a large partition down to a few rows (docs/recall.md)."""
    from oml.services.runtime.auth import authenticate
    from oml_tools.bench.recall import _drop_hnsw, _load

    bt = t.bt
    _drop_hnsw(ctx, bt.tenant)
    for n in sizes:
        node = ctx.tenancy.create_workarea(bt.admin, f"narrow-{n}", bt.root)["node_id"]
        ident = ctx.tenancy.create_identity(bt.admin, "service", f"bench-narrow-{n}")["identity_id"]
        reader = authenticate(ctx.db, ctx.tenancy.create_principal(bt.admin, ident, "reader", [node])["api_key"])
        _load(ctx, bt.tenant, t.keys, [(node, f"main.narrow-{n}")], corpus.pop.rows(n))
        t.narrow.append((n, reader))
    return sum(sizes)


def load(ctx, t: Scaled, corpus: Corpus, n: int) -> float:
    """Bulk-load ``n`` more claims into ``t`` (HNSW dropped first); seconds."""
    from oml_tools.bench.recall import _drop_hnsw, _load

    t0 = time.perf_counter()
    _drop_hnsw(ctx, t.bt.tenant)
    _load(ctx, t.bt.tenant, t.keys, t.areas, corpus.pop.rows(n))
    return time.perf_counter() - t0


def index(ctx, tenant: str) -> Any:
    """HNSW build of the tenant's partition (:class:`~oml_tools.bench.recall.HnswBuild`, timed), then the vacuum and
    analyse recall needs (not timed)."""
    from oml_tools.bench.recall import build_hnsw, maintain

    build = build_hnsw(ctx, tenant)
    maintain(ctx, tenant)
    return build


def recall_latency(ctx, readers: Sequence[Any], questions: Sequence[str], k: int = 10) -> dict[str, dict[str, Any]]:
    """p50/p95 ms per retriever, and how its vector leg searched (``{"exact": n, "hnsw": m, …}`` over the timed
    pass, from ``diagnostics.legs.vector.search``); question ``i`` is asked by ``readers[i % len(readers)]``.

    Each retriever's questions are asked twice and the second pass is timed: the steady state, with
    connections, plans and the verified-reads cache warm (``oml bench recall`` measures the cold cache).
    """
    from oml.services.reads.recall import Recaller, RecallRequest

    rec = Recaller(ctx)
    out: dict[str, dict[str, Any]] = {}
    for r in RETRIEVERS:
        searches: dict[str, int] = {}

        def ask(i: int, q: str) -> None:
            got = rec.recall(readers[i % len(readers)], RecallRequest(query=q, retriever=r, k=k))
            search = got["diagnostics"].get("legs", {}).get("vector", {}).get("search")
            if search:
                searches[search] = searches.get(search, 0) + 1

        passes = []
        for _ in range(2):
            searches.clear()
            passes.append([timed_ms(lambda i=i, q=q: ask(i, q)) for i, q in enumerate(questions)])
        out[r] = {"p50": pct(passes[1], 50), "p95": pct(passes[1], 95), "vector_search": dict(searches)}
    return out


def first_verification(ctx, tenants: Sequence[BenchTenant], *, cold: bool = False) -> dict[str, float]:
    """Bring each tenant's verified state (services/journal/verified_state.py) to its head, as the first act on it in
    this process would: ``{"s": seconds, "events": events verified}`` over ``tenants``. The bulk loader writes journal
    rows this process never verified, so the first act after a load verifies them. ``cold``: forget the states first,
    as a restarted process would start (a snapshot, when one is trusted, leaves only the events after it).
    Raises ``integrity.unverified_state`` when a chain does not verify."""
    from oml.services.journal import verified_state

    vs = verified_state.of(ctx.db)
    before = vs.verified_events
    t0 = time.perf_counter()
    for bt in tenants:
        if cold:
            vs.forget(bt.tenant)
        with ctx.db.tenant("oml_admission", bt.tenant) as c:
            vs.current(c, bt.tenant)
    return {"s": time.perf_counter() - t0, "events": float(vs.verified_events - before)}


def admit(ctx, tenants: Sequence[BenchTenant], corpus: Corpus, n: int, batch: int) -> dict[str, Any]:
    """``per_s``: claims/s for ``n`` claims submitted in group commits of ``batch``, round-robin over ``tenants``, with
    each tenant's verified state brought to its head first; ``first``: that first verification
    (:func:`first_verification`), reported on its own so that ``per_s`` is the steady state."""
    first = first_verification(ctx, tenants)
    items = corpus.bodies(n)
    chunks = [items[i:i + batch] for i in range(0, n, batch)]
    t0 = time.perf_counter()
    for i, chunk in enumerate(chunks):
        submit_all(ctx, tenants[i % len(tenants)], chunk, batch)
    return {"per_s": rate(n, time.perf_counter() - t0), "first": first}


class Audit:
    """Reconcile and export journalled tenants against one temporary local lake; :meth:`close` deletes it."""

    def __init__(self, ctx) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="oml-bench-scale-"))
        self.ctx = ctx
        self.warm = False
        self.lctx = dataclasses.replace(ctx, settings=ctx.settings.model_copy(
            update={"lake_uri": str(self.tmp / "lake"), "lake_storage_options": {}}))

    def measure(self, bt: BenchTenant) -> dict[str, float]:
        """Checkpoint and lake copy (not timed), then seconds for reconcile end to end and an export of 1..head."""
        from oml.services.audit.evidence.export import export
        from oml.services.journal.checkpoints import issue_checkpoint
        from oml.workers.lake import writer as lake_writer
        from oml.workers.reconcile import reconciler

        issue_checkpoint(self.ctx, bt.tenant)
        lake_writer.catch_up(self.lctx, bt.tenant)
        if not self.warm:  # the first run pays imports and the first lake open: not billed to the first size
            reconciler.reconcile(self.lctx, bt.tenant, trusted_fingerprint=bt.fingerprint, check_projections=False)
            self.warm = True
        t0 = time.perf_counter()
        result = reconciler.reconcile(self.lctx, bt.tenant, trusted_fingerprint=bt.fingerprint)
        reconcile_s = time.perf_counter() - t0
        if not result.ok:
            raise RuntimeError(f"the benchmark tenant did not reconcile cleanly: {result.counts}")
        t0 = time.perf_counter()
        archive = export(self.ctx, bt.tenant, 1, None)
        return {"events": result.postgres_rows, "reconcile_s": reconcile_s, "export_s": time.perf_counter() - t0,
                "archive_bytes": len(archive.data)}

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def size_curve(ctx, corpus: Corpus, sizes: Sequence[int], admit_n: int, say: Callable[[str], None],
               narrow: Sequence[int] = ()) -> list[dict[str, Any]]:
    """One bulk-loaded tenant grown to each size: load, index build, recall, admission into it. ``narrow``: the
    :func:`add_narrow` workareas, loaded first (they count in the tenant's size), each read by its own reader at
    every size (``row["narrow"]``: workarea claims -> :func:`recall_latency`)."""
    t = scaled_tenant(ctx, "bench-scale", N_AREAS)
    rows, have = [], add_narrow(ctx, t, corpus, narrow)
    for size in sorted(sizes):
        load_s = load(ctx, t, corpus, max(0, size - have))
        have = max(size, have)
        build = index(ctx, t.bt.tenant)
        index_s = build.seconds
        say(f"{t.bt.tenant}: {have} claims (load {load_s:.0f}s, HNSW {index_s:.0f}s with {build.memory}); measuring")
        rec = recall_latency(ctx, [t.keys["reader"]], corpus.questions)
        scoped = {n: recall_latency(ctx, [reader], corpus.questions) for n, reader in t.narrow}
        a = admit(ctx, [t.bt], corpus, admit_n, 100)
        restart = first_verification(ctx, [t.bt], cold=True)  # a restarted process: from the snapshot, if one is trusted
        rows.append({"claims": have, "load_s": load_s, "index_s": index_s, "build": dataclasses.asdict(build),
                     "recall": rec, "narrow": scoped,
                     "admission_per_s": a["per_s"], "first_verify": a["first"], "restart_verify": restart})
    return rows


def journal_curve(ctx, corpus: Corpus, sizes: Sequence[int], audit: Audit, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """One tenant grown by admission to each size; reconcile and export of its whole journal at each."""
    bt = bench_tenant(ctx, "bench-scale-j")
    rows, have = [], 0
    for size in sorted(sizes):
        per_s = admit(ctx, [bt], corpus, size - have, 100)["per_s"]
        have = size
        say(f"{bt.tenant}: {size} admitted claims; reconciling and exporting")
        rows.append({"claims": size, "admission_per_s": per_s, **audit.measure(bt)})
    return rows


def tenant_curve(ctx, corpus: Corpus, counts: Sequence[int], bulk_total: int, journal_total: int, admit_n: int,
                 audit: Audit, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """The same totals spread over each number of tenants."""
    rows = []
    for n in counts:
        t0 = time.perf_counter()
        bulk = [scaled_tenant(ctx, "bench-scale-n", 0) for _ in range(n)]
        journalled = [bench_tenant(ctx, "bench-scale-nj") for _ in range(n)]
        setup_s = time.perf_counter() - t0
        index_s = 0.0
        for t in bulk:
            load(ctx, t, corpus, bulk_total // n)
            index_s += index(ctx, t.bt.tenant).seconds
        say(f"{n} tenants: {bulk_total // n} bulk-loaded claims each (HNSW {index_s:.0f}s in all); measuring")
        rec = recall_latency(ctx, [t.keys["reader"] for t in bulk], corpus.questions)
        a = admit(ctx, [t.bt for t in bulk], corpus, admit_n, 10)
        per_s = a["per_s"]
        admit(ctx, journalled, corpus, journal_total, max(1, min(100, journal_total // n)))
        audited = [audit.measure(bt) for bt in journalled]
        rows.append({"tenants": n, "setup_s": setup_s, "bulk_per_tenant": bulk_total // n, "index_s": index_s, "recall": rec,
                     "admission_per_s": per_s, "first_verify": a["first"], "journal_per_tenant": journal_total // n,
                     "reconcile_s": sum(a["reconcile_s"] for a in audited), "export_s": sum(a["export_s"] for a in audited)})
    return rows


def slopes(rows: list[dict[str, Any]], x: str, metrics: dict[str, Callable[[dict[str, Any]], float]]) -> dict[str, float | None]:
    return {name: slope([r[x] for r in rows], [f(r) for r in rows]) for name, f in metrics.items()}


def _recall_metrics(narrow: int | None = None) -> dict[str, Callable[[dict[str, Any]], float]]:
    """Recall p50/p95 per retriever of a row: the whole-tenant reader's, or the ``narrow``-claim workarea's."""
    def pick(row: dict[str, Any]) -> dict[str, Any]:
        return row["recall"] if narrow is None else row["narrow"][narrow]

    return {f"recall {r} {p}": (lambda row, r=r, p=p: pick(row)[r][p]) for r in RETRIEVERS for p in ("p50", "p95")}


def run(ctx, *, sizes: Sequence[int] = (3_000, 10_000, 30_000, 100_000), journalled: Sequence[int] = (500, 1_500, 5_000),
        tenants: Sequence[int] = (1, 10, 100), bulk_total: int = 20_000, journal_total: int = 1_000, admit_n: int = 500,
        queries: int = 50, base_texts: int | None = 1_000, narrow: Sequence[int] = (), progress=None) -> dict[str, Any]:
    """Run the three curves; returns their rows, the slopes and the machine."""
    say = progress or (lambda _m: None)
    started = time.perf_counter()
    corpus = Corpus(ctx, queries, base_texts)
    say(f"corpus ready ({len(corpus.pop.texts)} base texts)")
    audit = Audit(ctx)
    try:
        by_size = size_curve(ctx, corpus, sizes, admit_n, say, narrow)
        by_journal = journal_curve(ctx, corpus, journalled, audit, say)
        by_tenants = tenant_curve(ctx, corpus, tenants, bulk_total, journal_total, admit_n, audit, say)
    finally:
        audit.close()
    res: dict[str, Any] = {
        "corpus": "LoCoMo turns + word swaps, MiniLM vectors + noise" if corpus.real else "synthetic",
        "queries": queries, "admit": admit_n, "bulk_total": bulk_total, "journal_total": journal_total,
        "by_size": by_size, "by_journal": by_journal, "by_tenants": by_tenants,
        "slopes": {
            "by_size": slopes(by_size, "claims", {"admission claims/s": lambda r: r["admission_per_s"],
                                                  "index build s": lambda r: r["index_s"], **_recall_metrics()}),
            "by_size_narrow": {n: slopes(by_size, "claims", _recall_metrics(n)) for n in narrow},
            "by_journal": slopes(by_journal, "claims", {"reconcile s": lambda r: r["reconcile_s"],
                                                        "export s": lambda r: r["export_s"]}),
            "by_tenants": slopes(by_tenants, "tenants", {"admission claims/s": lambda r: r["admission_per_s"],
                                                         "index build s": lambda r: r["index_s"],
                                                         "reconcile s": lambda r: r["reconcile_s"],
                                                         "export s": lambda r: r["export_s"], **_recall_metrics()}),
        },
        "wall_s": 0.0,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
    }
    with ctx.db.engine(None).connect() as c:
        res["machine"]["postgres"] = c.execute(sa.text("SHOW server_version")).scalar()
        res["machine"]["pgvector"] = c.execute(sa.text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
    res["wall_s"] = time.perf_counter() - started
    return res


def _fmt_slopes(s: dict[str, float | None]) -> str:
    return "; ".join(f"{k} {v:+.2f}" if v is not None else f"{k} n/a" for k, v in s.items())


def render(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    rec_head = "".join(f" {r + ' p50':>11} {'p95':>7}" for r in RETRIEVERS)
    out = [f"oml bench scale — corpus: {res['corpus']}; {res['queries']} questions per retriever, k = 10, scope = whole tenant;"
           f" wall {res['wall_s']:.0f} s",
           f"machine: {m['cpus']} CPUs, {m['platform']}, Python {m['python']}, PostgreSQL {m.get('postgres')}, pgvector {m.get('pgvector')}",
           "",
           f"1. tenant size, bulk-loaded (no submissions: recall, HNSW build, and {res['admit']} claims admitted into it, batches of 100)",
           "   first verify: the verified state brought over what the load appended, before admission is timed;"
           " restart: the same state forgotten and brought to the head again, as a restarted process (from a snapshot"
           " when one is trusted); seconds / events verified",
           f"{'claims':>8} {'load s':>7} {'HNSW s':>7} {'first verify':>16} {'restart':>14} {'admit/s':>8}{rec_head}   (recall ms)"]
    for r in res["by_size"]:
        cells = "".join(f" {r['recall'][x]['p50']:11.1f} {r['recall'][x]['p95']:7.1f}" for x in RETRIEVERS)
        fv, rv = r["first_verify"], r["restart_verify"]
        out.append(f"{r['claims']:>8} {r['load_s']:7.1f} {r['index_s']:7.1f} {fv['s']:7.2f} /{fv['events']:>7.0f}"
                   f" {rv['s']:6.2f} /{rv['events']:>6.0f} {r['admission_per_s']:8.1f}{cells}")
    out.append(f"  log-log slope over size: {_fmt_slopes(res['slopes']['by_size'])}")
    out.append("  HNSW build (maintenance_work_mem, parallel workers): " + "; ".join(
        f"{r['claims']}: {b['memory']}, {b['workers']}, "
        + ("fitted" if b["spilled_after"] is None else f"spilled after {b['spilled_after']} tuples")
        for r in res["by_size"] for b in [r["build"]]))
    for n, s in res["slopes"].get("by_size_narrow", {}).items():
        out += ["", f"1b. the same tenant read by a reader whose one root is a workarea of {n} claims"
                    " (vector search: how the vector leg searched, over the hybrid reads)",
                f"{'claims':>8} {'vector search':>24}{rec_head}   (recall ms)"]
        for r in res["by_size"]:
            got = r["narrow"][n]
            cells = "".join(f" {got[x]['p50']:11.1f} {got[x]['p95']:7.1f}" for x in RETRIEVERS)
            paths = ", ".join(f"{k} {v}" for k, v in sorted(got["hybrid"]["vector_search"].items())) or "-"
            out.append(f"{r['claims']:>8} {paths:>24}{cells}")
        out.append(f"  log-log slope over size: {_fmt_slopes(s)}")
    out += ["", "2. tenant size, real admission only (a verifiable journal): reconcile end to end and evidence export of 1..head",
            f"{'claims':>8} {'events':>7} {'admit/s':>8} {'reconcile s':>12} {'export s':>9} {'archive KiB':>12}"]
    for r in res["by_journal"]:
        out.append(f"{r['claims']:>8} {r['events']:>7} {r['admission_per_s']:8.1f} {r['reconcile_s']:12.2f} {r['export_s']:9.2f}"
                   f" {r['archive_bytes'] / 1024:12.0f}")
    out.append(f"  log-log slope over size: {_fmt_slopes(res['slopes']['by_journal'])}")
    out += ["", f"3. tenant count at a fixed total: {res['bulk_total']} bulk-loaded claims (HNSW summed, recall round-robin),"
                f" {res['admit']} admitted in batches of 10 round-robin, {res['journal_total']} admitted claims reconciled"
                " and exported tenant by tenant (seconds summed)",
            f"{'tenants':>8} {'setup s':>8} {'HNSW s':>7} {'first verify':>16} {'admit/s':>8} {'reconcile s':>12} {'export s':>9}{rec_head}"]
    for r in res["by_tenants"]:
        cells = "".join(f" {r['recall'][x]['p50']:11.1f} {r['recall'][x]['p95']:7.1f}" for x in RETRIEVERS)
        fv = r["first_verify"]
        out.append(f"{r['tenants']:>8} {r['setup_s']:8.1f} {r['index_s']:7.1f} {fv['s']:7.2f} /{fv['events']:>7.0f}"
                   f" {r['admission_per_s']:8.1f}"
                   f" {r['reconcile_s']:12.2f} {r['export_s']:9.2f}{cells}")
    out.append(f"  log-log slope over tenant count: {_fmt_slopes(res['slopes']['by_tenants'])}")
    out.append("  (setup s: creating the 2 × N tenants with their keys, principals and index partitions; not in any slope)")
    return out


def _ints(text: str, option: str, *, distinct: bool = False) -> list[int]:
    """``text``'s comma-separated positive integers; :class:`typer.BadParameter` naming ``option`` otherwise (before
    any tenant is created or loaded). ``distinct``: each at most once (a narrow size names its workarea)."""
    try:
        out = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of integers", param_hint=option) from None
    if any(n < 1 for n in out):
        raise typer.BadParameter("every size must be at least 1", param_hint=option)
    if distinct and len(set(out)) != len(out):
        raise typer.BadParameter("each size at most once", param_hint=option)
    return out


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("scale")
    def scale(quick: bool = typer.Option(False, "--quick", help="CI-sized: sizes 1000,3000; journalled 100,300; tenants 1,10"),
              sizes: str = typer.Option("3000,10000,30000,100000", "--sizes", help="bulk-loaded tenant sizes, grown in turn"),
              journalled: str = typer.Option("500,1500,5000", "--journalled", help="admitted tenant sizes for reconcile/export"),
              tenants: str = typer.Option("1,10,100", "--tenants", help="tenant counts at the fixed totals"),
              bulk_total: int = typer.Option(20_000, "--bulk-total", min=1),
              journal_total: int = typer.Option(1_000, "--journal-total", min=1),
              admit_n: int = typer.Option(500, "--admit", min=1, help="claims admitted per admission measurement"),
              queries: int = typer.Option(50, "--queries", min=5),
              narrow: str = typer.Option("", "--narrow", help="sizes of small workarea scopes read inside the"
                                         " bulk-loaded tenant, e.g. 1000,20000 (loaded first; none by default)"),
              as_json: bool = JSON) -> None:
        """Growth curve on one machine: admission, recall p50/p95, HNSW build, reconcile and export vs. size and tenant count."""
        from oml.services.entrypoints.cli.common import context, err

        kw = dict(sizes=_ints(sizes, "--sizes"), journalled=_ints(journalled, "--journalled"),
                  tenants=_ints(tenants, "--tenants"), bulk_total=bulk_total, journal_total=journal_total,
                  admit_n=admit_n, queries=queries, narrow=_ints(narrow, "--narrow", distinct=True))
        if quick:
            kw.update(sizes=[1000, 3000], journalled=[100, 300], tenants=[1, 10], bulk_total=2000, journal_total=200,
                      admit_n=100, queries=20, base_texts=300, narrow=kw["narrow"] or [200])
        with context(new_home=True) as ctx:
            res = run(ctx, **kw, progress=lambda m: err.print(m))
        emit(res, render, as_json)
