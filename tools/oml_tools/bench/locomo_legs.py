"""``oml bench locomo-legs --data PATH``: LoCoMo evidence recall of each ranking leg and of fusions of them.

A measurement harness for ranking choices, beside ``oml bench locomo``
(``tools/oml_tools/bench/locomo.py``, whose ingestion, questions and scoring
it reuses):

1. the conversations are ingested, promoted and indexed as there (one
   tenant, one workarea per conversation, the context window);
2. every question is recalled through the product by a reader key, once per
   **leg**: ``bm25`` (the lexical leg, retriever ``fts``, k = 50, the pool a
   hybrid read fuses), ``minilm`` (the vector leg, k = 50), each ``--bm25``
   variant; and once per **product row** (``hybrid``: the default read,
   k = 25; each ``--prf NAME=SPEC``: hybrid with pseudo-relevance feedback,
   services/reads/prf.py), timed end to end;
   each ``--lexical NAME=SPEC`` is a **lexical leg outside the product**:
   the product's BM25 over another text-search configuration's lexemes of
   the same index texts (``tools/oml_tools/bench/lexical.py``; ``english``
   must reproduce the ``bm25`` leg, and the index texts the stored
   tsvectors: both printed as checks), k = 50, not timed;
3. each ``--model NAME=MODEL_DIR:ONNX_FILE`` is a **second dense model
   outside the product**: its ONNX export (any file whose graph takes
   ``input_ids, attention_mask``) runs on ONNX Runtime with the model
   directory's tokenizer, mean pooling and normalisation
   (``workers/index/onnx_embedding.py``); it embeds every turn's index text
   (the turn with its context window, as the indexer builds it) in batches
   of 32 on 2 threads, timed per claim, and each question alone on one thread,
   interleaved with the product's MiniLM query model, timed per query; its
   leg is an exact cosine top-50 within the question's conversation;
4. **fusions** of those leg lists are computed in process with
   :func:`oml.domain.recall.fuse_rrf`, the product's own fusion: spec
   ``LEG:W,LEG:W,…@K``. The spec ``bm25:1,minilm:0.5@10`` is the default read
   and must reproduce the ``hybrid`` row (printed as a check). ``…@K~SHARE``
   adds window propagation (:func:`oml.domain.fusion.propagate`) over each
   conversation's thread with the run's context window, the windows the
   indexer records.

Evidence recall@5/10/25 per row on the decide and the confirm half and
overall, and per category. Latency is printed for the product rows only; a
fusion row with a second model would cost its query encoding (printed) and
one more vector statement on top of the ``hybrid`` row.
"""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from oml.domain.context_window import OWN_WEIGHT
from oml.services.entrypoints.cli.common import JSON
from oml.workers.index.onnx_embedding import file_sha256
from oml_tools.bench import emit
from oml_tools.bench.locomo import (
    CATEGORIES,
    CUTOFFS,
    DECIDE,
    Scores,
    _pct,
    conversations_named,
    ingest,
    load,
    questions_of,
    recall_dia,
    turns_of,
)

POOL = 50


def parse_fusion(spec: str) -> tuple[list[tuple[str, float]], int]:
    """``LEG:W,LEG:W,…@K[~SHARE]`` → ([(leg, weight)…], k); raises ``ValueError``. ``~SHARE``: :func:`window_share`."""
    legs_part, _, k = spec.partition("~")[0].partition("@")
    legs = []
    for part in legs_part.split(","):
        name, _, w = part.partition(":")
        legs.append((name.strip(), float(w) if w else 1.0))
    return legs, int(k or 10)


def window_share(spec: str) -> float:
    """A fusion spec's window propagation share (``…~SHARE``, ``domain.fusion.propagate``), 0 without one; raises
    ``ValueError`` for a share that is not a number from 0 to 1."""
    _, _, share = spec.partition("~")
    if not share:
        return 0.0
    try:
        value = float(share)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:
        raise ValueError(f"{spec}: the window share after ~ is a number from 0 to 1")
    return value


def check_fusions(specs: Sequence[str]) -> None:
    """Parse every fusion spec before a run spends minutes ingesting; raises ``ValueError`` naming a bad one."""
    for spec in specs:
        try:
            parse_fusion(spec)
        except ValueError:
            raise ValueError(f"{spec}: a fusion is LEG:W,LEG:W,…@K[~SHARE]") from None
        window_share(spec)


def thread_windows(threads: Mapping[str, Sequence[str]], before: int) -> dict[str, list[str]]:
    """``sample#dia`` → the keys of the ``before`` turns before it in its conversation: the claims its index text's
    window holds, as ``index_threads.window_claims`` records them (one thread per conversation). ``threads`` maps a
    conversation to its dia ids in thread order."""
    out: dict[str, list[str]] = {}
    for sid, dias in threads.items():
        keys = [f"{sid}#{d}" for d in dias]
        for i, key in enumerate(keys):
            out[key] = keys[max(0, i - before):i]
    return out


def fuse(lists: Mapping[str, Sequence[str]], spec: str, windows: Mapping[str, Sequence[str]] | None = None,
         depth: int | None = None) -> list[str]:
    """The keys of ``lists`` fused by ``spec`` with the product's functions (``fuse_rrf``, then ``propagate`` over
    ``windows`` when the spec has a share, ``depth`` followers at most, as the product counts with its window);
    raises ``ValueError`` for a share without ``windows``."""
    from oml.domain.fusion import propagate
    from oml.domain.recall import fuse_rrf

    legs, k = parse_fusion(spec)
    share = window_share(spec)
    if len(legs) == 1 and not share:
        return list(lists[legs[0][0]])
    if share and windows is None:
        raise ValueError(f"{spec}: a window share needs the conversations' turn order")
    order = {name: lists[name] for name, _ in legs}
    fused = fuse_rrf(order, k=k, weights=dict(legs), priority=[n for n, _ in legs])
    if share:
        fused = propagate(fused, {x.key: windows.get(x.key, ()) for x in fused}, share, depth)
    return [x.key for x in fused]


def model_texts_of(values: Iterable[str], models: Mapping[str, Any]) -> dict[str, tuple[int, int | None]]:
    """``--model-text NAME=[*R][/W]`` options → {name: (R, W)}; R defaults to 1 (the embedding text's own statement
    once), W to None (the run's window). Raises ``ValueError`` for a NAME that is no ``--model``, a malformed text,
    or ``+A`` (turns after: a lexical option only)."""
    from oml_tools.bench.lexical import spec_of

    out = {}
    for v in values:
        name, _, text = v.partition("=")
        if name not in models:
            raise ValueError(f"{v!r}: NAME must be a --model's name ({', '.join(models) or 'none given'})")
        sp = spec_of("english" + (text if text.startswith("*") else "*1" + text))
        if sp.after:
            raise ValueError(f"{v!r}: a model's index text is *R/W (no +A)")
        out[name] = (sp.own, sp.window)
    return out


def window_texts(convs: Sequence[dict], before: int, own: int = 1, after: int = 0) -> dict[str, list[tuple[str, str]]]:
    """Per conversation, ``(dia id, index text)`` in thread order: the turn's statement, counted ``own`` times,
    after the ``before`` previous statements (and the ``after`` next ones), newline-separated
    (``domain.context_window.lexical_text``; with ``own`` 1 the embedding text, ``window_text``, as the indexer
    builds them)."""
    from oml.domain.context_window import lexical_text

    out: dict[str, list[tuple[str, str]]] = {}
    for conv in convs:
        turns = turns_of(conv)
        stmts = [t["statement"] for t in turns]
        out[conv["sample_id"]] = [(t["dia_id"], lexical_text(stmts[i], [*stmts[max(0, i - before):i], *stmts[i + 1:i + 1 + after]], own))
                                  for i, t in enumerate(turns)]
    return out


def onnx_model(model_dir: str, onnx_file: str, cache_root: Path, threads: int):
    """An :class:`~oml.workers.index.onnx_embedding.OnnxEmbedder` over an export made elsewhere: ``onnx_file`` is
    placed in a cache directory with a sidecar naming the model directory's digest, so nothing is exported."""
    from oml.workers.index.onnx_embedding import ONNX_NAME, SIDECAR_NAME, OnnxEmbedder, source_digest

    src = Path(onnx_file).resolve()
    cache = cache_root / f"{Path(model_dir).name}-{src.stem}"
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / ONNX_NAME
    if not target.exists():
        os.symlink(src, target)
    sidecar = cache / SIDECAR_NAME
    if not sidecar.exists():
        sidecar.write_text(json.dumps({"source_sha256": source_digest(model_dir), "onnx_sha256": file_sha256(src),
                                       "source": str(Path(model_dir).resolve()), "external": str(src)}))
    return OnnxEmbedder(model_dir, cache, threads=threads)


def _top(qvec, mat, ids: Sequence[str], sid: str, n: int) -> list[str]:
    import numpy as np

    sims = mat @ qvec
    idx = np.argsort(-sims, kind="stable")[:n]
    return [f"{sid}#{ids[i]}" for i in idx]


def run(ctx, data: Path, *, conversations: str | None = None, decide: Sequence[str] = DECIDE,
        models: Mapping[str, tuple[str, str]] | None = None, bm25: Mapping[str, tuple[float, float]] | None = None,
        prf: Mapping[str, str] | None = None, fusions: Sequence[str] = (), cache_root: Path | None = None,
        context_before: int | None = None, lexical: Mapping[str, str] | None = None,
        model_texts: Mapping[str, tuple[int, int | None]] | None = None, progress=None) -> dict[str, Any]:
    """Ingest once; collect each leg's and product row's answers; embed with the second models; score every
    leg, product row and fusion (module docstring)."""
    import platform

    import numpy as np

    from oml.services.reads.recall import Recaller
    from oml.workers.index.embedding import model_path
    from oml.workers.index.onnx_embedding import OnnxEmbedder, cache_dir_for

    say = progress or (lambda _m: None)
    convs = load(data, conversations)
    before = ctx.settings.index_context_before if context_before is None else context_before
    corpus = ingest(ctx, convs, context_before=before, progress=say)
    questions, skipped = questions_of(convs)
    present = {c["sample_id"] for c in convs}
    groups = {"decide": set(decide) & present, "confirm": present - set(decide)}
    kmax = max(CUTOFFS)

    lists: list[dict[str, list[str]]] = [{} for _ in questions]
    results: dict[str, Any] = {}
    lat: dict[str, list[float]] = {}

    def product(name: str, rec: Any, retriever: str, k: int, keep: bool) -> None:
        sc = Scores(CUTOFFS)
        ms: list[float] = []
        for i, q in enumerate(questions):
            t1 = time.perf_counter()
            dia, _sizes, _deg = recall_dia(corpus, rec, retriever, q, k)
            ms.append((time.perf_counter() - t1) * 1000)
            sc.add(q, dia, ms[-1])
            if keep:
                lists[i][name] = [d for d in dia if d]
        results[name] = sc.summary(groups)
        lat[name] = ms
        say(f"{name}: recall@10 {results[name]['recall']['overall'][10]:.3f}")

    base = Recaller(ctx, lexical="bm25")
    recall_dia(corpus, base, "hybrid", questions[0], kmax)  # warm the model, pools and plans
    product("bm25", base, "fts", POOL, True)
    product("minilm", base, "vector", POOL, True)
    product("hybrid", Recaller(ctx), "hybrid", kmax, False)
    for name, spec in (prf or {}).items():
        product(name, Recaller(ctx, prf=spec), "hybrid", kmax, False)
    for name, params in (bm25 or {}).items():
        product(name, Recaller(ctx, lexical="bm25", bm25=params), "fts", POOL, True)

    checks: dict[str, Any] = {}
    if lexical:
        from oml_tools.bench import lexical as lx

        got, checks["index_texts"] = lx.legs(ctx, corpus, convs, before, questions, lexical, POOL)
        for name, per_q in got.items():
            sc = Scores(CUTOFFS)
            for i, q in enumerate(questions):
                lists[i][name] = per_q[i]
                sc.add(q, per_q[i], 0.0)
            results[name] = sc.summary(groups)
            say(f"{name} ({lexical[name]}): recall@10 {results[name]['recall']['overall'][10]:.3f}")
        for name, spec in lexical.items():
            if spec == "english":  # the product's leg, rebuilt: how many questions get the same top 10 / top 50
                checks[f"{name} = bm25"] = {
                    "top10_equal": sum(li[name][:10] == li["bm25"][:10] for li in lists),
                    "top50_equal": sum(li[name] == li["bm25"] for li in lists), "questions": len(lists)}

    encode: dict[str, Any] = {}
    if models:
        cache_root = cache_root or Path(ctx.settings.home) / "bench-models"
        mini_path = model_path(ctx.settings)
        mini = OnnxEmbedder(mini_path, cache_dir_for(ctx.settings.model_cache or Path(ctx.settings.home) / "models",
                                                     mini_path), threads=1)
        query_models = {"minilm": mini}
        mats: dict[str, dict[str, Any]] = {}
        for name, (mdir, onnx_file) in models.items():
            own, win = (model_texts or {}).get(name, (1, None))
            texts = window_texts(convs, before if win is None else win, own)
            flat = [t for sid in texts for _, t in texts[sid]]
            batch = onnx_model(mdir, onnx_file, cache_root, threads=2)
            key = hashlib.sha256((file_sha256(Path(onnx_file)) + "\0" + "\0".join(flat)).encode()).hexdigest()[:16]
            saved = cache_root / f"docs-{key}.npy"
            t0 = time.perf_counter()
            if saved.exists():
                allv = np.load(saved)
                doc_ms = json.loads(saved.with_suffix(".json").read_text())["ms_per_claim"]
            else:
                allv = batch.encode(flat)
                doc_ms = (time.perf_counter() - t0) * 1000 / len(flat)
                np.save(saved, allv)
                saved.with_suffix(".json").write_text(json.dumps({"ms_per_claim": doc_ms}))
            say(f"{name}: {len(flat)} index texts embedded, {doc_ms:.1f} ms per claim (batches of 32, 2 threads)")
            mats[name], at = {}, 0
            for sid, rows in texts.items():
                mats[name][sid] = (allv[at:at + len(rows)], [d for d, _ in rows])
                at += len(rows)
            encode[name] = {"ms_per_claim": doc_ms, "dimension": int(allv.shape[1])}
            del batch
            query_models[name] = onnx_model(mdir, onnx_file, cache_root, threads=1)
        qms: dict[str, list[float]] = {n: [] for n in query_models}
        names = list(query_models)
        for i, q in enumerate(questions):
            for j in range(len(names)):  # interleaved, the order rotating per question
                name = names[(i + j) % len(names)]
                t1 = time.perf_counter()
                vec = query_models[name].encode([q["question"]])[0]
                qms[name].append((time.perf_counter() - t1) * 1000)
                if name in mats:
                    mat, ids = mats[name][q["sample"]]
                    lists[i][name] = _top(vec, mat, ids, q["sample"], POOL)
        for name, xs in qms.items():
            encode.setdefault(name, {}).update({"query_ms_p50": _pct(xs, 50), "query_ms_p95": _pct(xs, 95),
                                                "query_ms_mean": statistics.fmean(xs)})
        for name in mats:
            sc = Scores(CUTOFFS)
            for i, q in enumerate(questions):
                sc.add(q, lists[i][name], 0.0)
            results[name] = sc.summary(groups)

    threads = {c["sample_id"]: [t["dia_id"] for t in turns_of(c)] for c in convs}
    windows = thread_windows(threads, before)
    fused: dict[str, Any] = {}
    for spec in fusions:
        legs, _k = parse_fusion(spec)
        if any(name not in lists[0] for name, _ in legs):
            continue
        sc = Scores(CUTOFFS)
        for i, q in enumerate(questions):
            sc.add(q, fuse(lists[i], spec, windows, before)[:kmax], 0.0)
        fused[spec] = sc.summary(groups)
    return {"conversations": [c["sample_id"] for c in convs], "turns": corpus.turns, "questions": len(questions),
            "skipped_no_evidence": skipped, "groups": {g: sorted(m) for g, m in groups.items()},
            "timings": corpus.timings, "context_before": before, "threads": threads,
            "results": results, "fusions": fused, "encode": encode, "lexical": dict(lexical or {}), "checks": checks,
            "latency_ms": {n: {"p50": _pct(v, 50), "p95": _pct(v, 95)} for n, v in lat.items()},
            # per question: its sample, category, evidence and each leg's list (for --save; not rendered)
            "per_question": [{"sample": q["sample"], "category": q["category"], "question": q["question"],
                              "evidence": sorted(q["evidence"]), "lists": lists[i]} for i, q in enumerate(questions)],
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                        "load_average": list(os.getloadavg())}}


def rescore(saved: Mapping[str, Any], fusions: Sequence[str]) -> dict[str, Any]:
    """A ``--save`` file's result with its fusions replaced by ``fusions``, scored from its per-question leg lists
    (no ingestion; ``oml bench locomo-legs-fuse``). Legs and product rows keep their saved scores; raises
    ``KeyError`` naming a leg the file does not hold."""
    per_q = saved["per_question"]
    questions = [{"sample": q["sample"], "category": q["category"], "evidence": set(q["evidence"])} for q in per_q]
    groups = {g: set(m) for g, m in saved["groups"].items()}
    windows = thread_windows(saved["threads"], saved["context_before"]) if "threads" in saved else None
    fused: dict[str, Any] = {}
    for spec in fusions:
        legs, _k = parse_fusion(spec)
        missing = [name for name, _ in legs if name not in per_q[0]["lists"]]
        if missing:
            raise KeyError(f"{spec}: no leg {', '.join(missing)} in the saved result")
        sc = Scores(CUTOFFS)
        for q, row in zip(questions, per_q):
            sc.add(q, fuse(row["lists"], spec, windows, saved.get("context_before"))[:max(CUTOFFS)], 0.0)
        fused[spec] = sc.summary(groups)
    return {**{k: v for k, v in saved.items() if k != "per_question"}, "fusions": fused}


def render(res: dict[str, Any]) -> list[str]:
    res = json.loads(json.dumps(res))
    lines = [f"oml bench locomo-legs — {conversations_named(res['conversations'])}, "
             f"{res['turns']} turns, {res['questions']} questions with evidence ({res['skipped_no_evidence']} skipped: none)",
             f"machine: {res['machine']['cpus']} CPUs, {res['machine']['platform']}, Python {res['machine']['python']}, "
             f"load average at the end {res['machine']['load_average']}",
             f"ingest+promote {res['timings']['ingest_and_promote_s']:.1f}s, index {res['timings']['index_s']:.1f}s, "
             f"context window: {res['context_before']} turn(s) before",
             "row                                  decide @5/@10/@25     confirm @5/@10/@25    all @10  open-dom @10  p50/p95 ms"]

    def line(name: str, v: dict) -> str:
        d, c = v["groups"]["decide"], v["groups"]["confirm"]
        lat = res["latency_ms"].get(name)
        tail = f"  {lat['p50']:5.1f}/{lat['p95']:5.1f}" if lat else ""
        return (f"{name:<36} {d['5']:.3f}/{d['10']:.3f}/{d['25']:.3f}   {c['5']:.3f}/{c['10']:.3f}/{c['25']:.3f}   "
                f"{v['recall']['overall']['10']:.3f}    {v['recall'].get('open-domain', {}).get('10', float('nan')):.3f}{tail}")

    for name, v in res["results"].items():
        lines.append(line(name, v))
    if res.get("lexical"):
        lines.append("lexical legs outside the product (BM25 of 61_bm25.sql over to_tsvector(<config>, index text)): "
                     + ", ".join(f"{n} = {s}" for n, s in res["lexical"].items()))
    for name, c in res.get("checks", {}).items():
        if name == "index_texts":
            lines.append(f"check: index texts rebuilt in process give the stored tsvector for {c['equal']} of {c['rows']} rows")
        else:
            lines.append(f"check: {name}: same top 10 for {c['top10_equal']} and same top 50 for {c['top50_equal']} "
                         f"of {c['questions']} questions")
    lines.append("fusions (in process, domain.recall.fuse_rrf over the legs above; LEG:WEIGHT,…@K)")
    for name, v in res["fusions"].items():
        lines.append(line(name, v))
    if res["encode"]:
        lines.append("encoding: per query one thread, interleaved (ms p50/p95/mean); per indexed claim batches of 32 on 2 threads")
        for name, e in res["encode"].items():
            claim = f"  per claim {e['ms_per_claim']:.1f} ms (dim {e['dimension']})" if "ms_per_claim" in e else ""
            lines.append(f"  {name:<14} query {e['query_ms_p50']:.1f}/{e['query_ms_p95']:.1f}/{e['query_ms_mean']:.1f}{claim}")
    cats = [c for c in CATEGORIES.values() if c in next(iter(res["results"].values()))["recall"]]
    lines.append("per category recall@10: " + ", ".join(
        f"{c} n={next(iter(res['results'].values()))['questions_per_category'][c]}" for c in cats))
    for name, v in list(res["results"].items()) + list(res["fusions"].items()):
        lines.append(f"  {name:<36} " + " ".join(f"{v['recall'][c]['10']:.3f}" for c in cats))
    return lines


def default_fusions(models: Sequence[str], bm25_rows: Sequence[str], lexical: Mapping[str, str] | None = None) -> list[str]:
    """The fusion grid: the default read (a check), RRF k × the vector leg's weight, each second model alone
    fused with BM25 and with BM25 + MiniLM, each BM25 variant at the default fusion, and each lexical leg outside
    the product in the default read's place of ``bm25``, beside it at weight 0.5 and 1, and sharing its weight."""
    from oml_tools.bench.lexical import spec_of

    out = ["bm25:1,minilm:0.5@10"]
    out += [f"bm25:1,minilm:{w}@{k}" for k in (5, 10, 20, 60) for w in (0.3, 0.5, 0.7, 1.0) if (k, w) != (10, 0.5)]
    for m in models:
        out += [f"bm25:1,{m}:{w}@10" for w in (0.5, 0.7, 1.0)]
        out += [f"bm25:1,minilm:{a},{m}:{b}@{k}" for a, b, k in
                ((0.5, 0.5, 10), (0.3, 0.7, 10), (0.25, 0.5, 10), (0.5, 1.0, 10), (0.3, 0.3, 10), (0.5, 0.5, 20))]
    out += [f"{b}:1,minilm:0.5@10" for b in bm25_rows]
    for name, spec in (lexical or {}).items():
        out.append(f"{name}:1,minilm:0.5@10")
        if spec_of(spec).config != "english":  # an english leg is the product's, or it in another text: in its place
            out += [f"bm25:1,{name}:0.5,minilm:0.5@10", f"bm25:1,{name}:1,minilm:0.5@10",
                    f"bm25:0.5,{name}:0.5,minilm:0.5@10"]
    return out


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("locomo-legs-fuse")
    def locomo_legs_fuse(saved: Path = typer.Option(..., "--saved", exists=True, dir_okay=False,
                                                    help="a locomo-legs --save file"),
                         fusion: list[str] = typer.Option(..., "--fusion", help="fusion LEG:W,LEG:W@K[~SHARE]"),
                         as_json: bool = JSON) -> None:
        """Fusions of a saved locomo-legs run's leg lists, scored offline (no ingestion)."""
        try:
            check_fusions(fusion)
            res = rescore(json.loads(saved.read_text()), fusion)
        except (KeyError, ValueError) as exc:
            raise typer.BadParameter(str(exc.args[0]), param_hint="--fusion") from None
        emit(res, render, as_json)

    @bench_app.command("locomo-legs")
    def locomo_legs(data: Path = typer.Option(..., "--data", exists=True, dir_okay=False, help="LoCoMo JSON"),
                    conversations: str = typer.Option("", "--conversations", help="sample ids, or N for the first N"),
                    decide: str = typer.Option(",".join(DECIDE), "--decide", help="conversations choices are made on"),
                    model: list[str] = typer.Option([], "--model", help="second dense model NAME=MODEL_DIR:ONNX_FILE"),
                    model_text: list[str] = typer.Option([], "--model-text", help="a --model's index text NAME=*R/W:"
                                                         " own statement R times (default 1, as the product embeds it)"
                                                         " after W turns before it (default: the run's window)"),
                    bm25: list[str] = typer.Option([], "--bm25", help="BM25 leg variant NAME=K1,B"),
                    lexical: list[str] = typer.Option([], "--lexical", help="lexical leg outside the product NAME=SPEC,"
                                                      " SPEC CONFIG, CONFIG*R, CONFIG/W or CONFIG*R/W+A: CONFIG one of english, simple, simple+stop, english-nostop;"
                                                      f" own statement counted R times (default {OWN_WEIGHT}, the product's"
                                                      " OWN_WEIGHT); W turns before it (default: the run's window), A after"),
                    prf: list[str] = typer.Option([], "--prf", help="hybrid row with pseudo-relevance feedback NAME=DOCS,TERMS[,WEIGHT[,MODE]]"),
                    fusion: list[str] = typer.Option([], "--fusion", help="extra fusion LEG:W,LEG:W@K[~SHARE]"),
                    save: Path = typer.Option(None, "--save", help="also write the JSON result here"),
                    context_window: int = typer.Option(None, "--context-window", min=0, max=8,
                                                       help="turns before each turn indexed with it (default: the setting)"),
                    as_json: bool = JSON) -> None:
        """Evidence recall of each leg, product row and in-process fusion on LoCoMo (one ingestion)."""
        from oml.services.entrypoints.cli.common import context, err

        models = {}
        for m in model:
            name, _, rest = m.partition("=")
            mdir, _, onnx_file = rest.rpartition(":")
            models[name] = (mdir, onnx_file)
        params = {n: (float(v.split(",")[0]), float(v.split(",")[1])) for n, _, v in (x.partition("=") for x in bm25)}
        prfs = dict(x.partition("=")[::2] for x in prf)
        from oml_tools.bench.lexical import parse as parse_lexical

        try:
            lexicals = parse_lexical(lexical)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--lexical") from None
        try:
            texts = model_texts_of(model_text, models)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--model-text") from None
        try:
            check_fusions(fusion)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--fusion") from None
        fusions = default_fusions(list(models), list(params), lexicals) + list(fusion)
        with context(new_home=True) as ctx:
            res = run(ctx, data, conversations=conversations or None, decide=[x.strip() for x in decide.split(",") if x.strip()],
                      models=models, bm25=params, prf=prfs, fusions=fusions, context_before=context_window, lexical=lexicals,
                      model_texts=texts, progress=lambda m: err.print(m))
        if save:
            save.write_text(json.dumps(res, indent=1))
        res.pop("per_question")
        emit(res, render, as_json)
