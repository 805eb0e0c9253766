"""``oml bench locomo --data PATH``: evidence recall of OML's recall on LoCoMo conversations.

What it does, end to end through the product:

1. a tenant ``bench-locomo-<hex>`` in the configured database; one workarea
   per conversation (label = its ``sample_id``), personal-data policy
   ``allow`` (the dialogues name people);
2. **ingest through admission**: one claim per dialog turn, body
   ``{"statement": "({session date}) {speaker}: {text}[ [image: {caption}]]",
   "source": {"uri": "locomo:<sample>#<dia_id>", "title": …, "locator": dia_id},
   "context": {"thread": "locomo:<sample>", "position": <turn index>}}``,
   ``valid_from`` its session's time (UTC assumed), submitted by a writer key
   in group commits, each **reviewed and promoted** by a reviewer key of
   another identity;
3. **indexed** by the oml-indexer (``workers/index/indexer.py``: tsvector + the
   all-MiniLM-L6-v2 embedding, through the server's indexing feed);
4. every question with evidence **recalled** by a reader key scoped to its
   conversation's workarea (k = the largest cutoff), asked at the
   conversation's last session's time (``valid_at``: the reference of a
   relative time such as "last week"), timing each call end to
   end (embedding, SQL, decrypt, read log), once per row: ``fts`` (the
   ts_rank leg), ``bm25`` (the BM25 leg), ``vector``, ``hybrid`` (what a
   recall gets by default: the settings' lexical leg fused by
   ``domain.fusion.DEFAULT``), ``hybrid-time`` and ``hybrid-time-vector`` (the
   default with the time leg as a boost or as the window's vector rows only,
   docs/recall.md "Time leg"), ``hybrid-window`` (the default with window
   propagation at ``domain.fusion.WINDOW_SHARE``, docs/recall.md "Window
   propagation"), ``hybrid-ts_rank`` and ``hybrid-bm25`` (either
   leg with equal-weight RRF, k = 10) and ``hybrid-rrf60`` (ts_rank, the
   classic RRF constant 60);
5. evidence recall@k = |evidence ∩ top-k dia_ids| / |evidence|, averaged
   over questions per category and overall; p50/p95 latency; characters of
   body JSON returned per query at each cutoff.

Evidence ids are normalised (``"D8:6; D9:17"`` → two ids, ``"D:11:26"`` →
``D11:26``, ``"D30:05"`` → ``D30:5``; anything else dropped); questions left
with no evidence are skipped and counted. ``--conversations`` names the
conversations run (ids, or N for the first N) so others stay held out;
``--decide`` splits them into the half choices are made on and the half that
confirms them, and every row reports both halves. ``--context-window`` sets
how many previous turns are indexed with each turn (docs/recall.md);
``--fusion`` adds hybrid rows fused another way (``domain/fusion.py``) over the
``--lexical`` leg; ``--bm25 NAME=K1,B`` adds BM25 rows with other parameters.
A ``bm25s (ref.)`` row ranks the same statements with the ``bm25s`` library
outside OML (a reference, not a product path; its latency is in-process
scoring only).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import platform
import re
import secrets
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from oml.services.entrypoints.cli.common import JSON
from oml.services.runtime import heap
from oml_tools.bench import emit

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
RETRIEVERS = ("fts", "vector", "hybrid")
# Comparison row: hybrid fused with the classic RRF constant 60 instead of OML's 10 (domain/recall.py).
CLASSIC = "hybrid-rrf60"
CUTOFFS = (5, 10, 25)
# Choices are made on these conversations and confirmed on the rest of the development split.
DECIDE = ("conv-26", "conv-30", "conv-41")
# LoCoMo paper (Maharana et al., ACL 2024), Table 3: DRAGON over dialog turns, all ten conversations.
DRAGON_TURNS = {5: 0.567, 10: 0.662, 25: 0.767}

_ID = re.compile(r"^D:?(\d+):0*(\d+)$")


def normalise_ids(values: Sequence[Any]) -> list[str]:
    """``D<session>:<turn>`` ids from LoCoMo evidence strings, malformed ones repaired or dropped; order kept, no repeats."""
    out: list[str] = []
    for v in values or []:
        for part in re.split(r"[;,\s]+", str(v).strip()):
            m = _ID.match(part)
            if m:
                did = f"D{int(m.group(1))}:{int(m.group(2))}"
                if did not in out:
                    out.append(did)
    return out


def load(path: Path, conversations: str | int | None = None) -> list[dict]:
    """The conversations of ``path`` that ``conversations`` selects: None or "" all, an integer N the first N,
    else a comma-separated list of ``sample_id`` values (file order kept). Raises ``ValueError`` for an unknown id."""
    data = json.loads(Path(path).read_text())
    spec = "" if conversations is None else str(conversations).strip()
    if not spec or spec == "0":
        return data
    if spec.isdigit():
        return data[:int(spec)]
    wanted = [x.strip() for x in spec.split(",") if x.strip()]
    unknown = sorted(set(wanted) - {c["sample_id"] for c in data})
    if unknown:
        raise ValueError(f"unknown conversation ids: {', '.join(unknown)}")
    return [c for c in data if c["sample_id"] in wanted]


def turns_of(conv: dict) -> list[dict]:
    """The conversation's turns in order, each with its normalised dia_id and the statement OML stores."""
    c = conv["conversation"]
    out = []
    sessions = sorted((int(k.split("_")[1]), k) for k in c if re.fullmatch(r"session_\d+", k))
    for n, key in sessions:
        date = c.get(f"{key}_date_time", "")
        for t in c[key]:
            ids = normalise_ids([t.get("dia_id", "")])
            if not ids:
                continue
            text = f"({date}) {t['speaker']}: {t['text']}"
            if t.get("blip_caption"):
                text += f" [image: {t['blip_caption']}]"
            out.append({"dia_id": ids[0], "session": n, "statement": text, "said_at": session_time(date)})
    return out


def session_time(value: str) -> str | None:
    """A LoCoMo session date (``"1:56 pm on 8 May, 2023"``) as ISO 8601 UTC, or None when it does not parse.
    The dataset gives no zone; UTC is assumed, the same for every turn."""
    try:
        return dt.datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC).isoformat()
    except ValueError:
        return None


def body_of(sid: str, turn: dict, position: int) -> dict:
    """The claim body of one turn: statement, source, and its place in the conversation's thread
    (``context``, docs/recall.md "Context at indexing time"; indexed with its window, never served)."""
    return {"statement": turn["statement"],
            "source": {"uri": f"locomo:{sid}#{turn['dia_id']}", "title": f"LoCoMo {sid} session {turn['session']}",
                       "locator": turn["dia_id"]},
            "context": {"thread": f"locomo:{sid}", "position": position}}


def conversations_named(ids: list[str]) -> str:
    """``"N conversation(s) (id, …)"`` for a bench's first line."""
    return f"{len(ids)} conversation{'s' * (len(ids) != 1)} ({', '.join(ids)})"


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))]


@dataclass
class Corpus:
    """What :func:`ingest` built: the tenant, the reader key, one workarea per conversation and the
    claim → ``<sample>#<dia_id>`` map; ``texts`` holds each conversation's statements by dia id."""

    tenant: str
    reader: Any
    workarea_of: dict[str, str]
    claim_to_dia: dict[str, str]
    texts: dict[str, dict[str, str]]
    turns: int
    timings: dict[str, float]
    #: Per conversation, the instant its questions are asked: its last session's time (the valid-time instant
    #: of the read, and the reference of relative time expressions; docs/recall.md "Time leg").
    asked_at: dict[str, str | None] = dataclasses.field(default_factory=dict)


def ingest(ctx, convs: Sequence[dict], *, batch: int = 100, context_before: int | None = None, progress=None) -> Corpus:
    """Admit, promote and index every turn of ``convs`` in a new tenant ``bench-locomo-<hex>`` (module docstring)."""
    from oml.services.claims.admission import Submission
    from oml.services.runtime.auth import authenticate
    from oml.workers.index.indexer import catch_up

    say = progress or (lambda _m: None)
    tenant = f"bench-locomo-{secrets.token_hex(3)}"
    adm = ctx.admission
    t = ctx.tenancy.create_tenant(tenant)
    admin = authenticate(ctx.db, t.admin_key)
    ctx.tenancy.set_workarea_policy(admin, t.root_workarea, pii_policy="allow")
    key = {}
    for role in ("writer", "reviewer", "reader"):
        ident = ctx.tenancy.create_identity(admin, "service", f"locomo-{role}")["identity_id"]
        key[role] = authenticate(ctx.db, ctx.tenancy.create_principal(admin, ident, role, [t.root_workarea])["api_key"])

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    claim_to_dia: dict[str, str] = {}
    workarea_of: dict[str, str] = {}
    texts: dict[str, dict[str, str]] = {}
    asked_at: dict[str, str | None] = {}
    n_turns = 0
    for conv in convs:
        sid = conv["sample_id"]
        label = re.sub(r"[^a-z0-9-]", "-", sid.lower())[:63]
        wa = ctx.tenancy.create_workarea(admin, label, t.root_workarea, pii_policy="allow")["node_id"]
        workarea_of[sid] = wa
        turns = turns_of(conv)
        texts[sid] = {x["dia_id"]: x["statement"] for x in turns}
        asked_at[sid] = max((x["said_at"] for x in turns if x["said_at"]), default=None)
        for i in range(0, len(turns), batch):
            chunk = turns[i:i + batch]
            # valid_from: when the turn was said (its session's time), what the time leg matches a query's time on.
            subs = [Submission(wa, body_of(sid, x, i + j), provenance="reported", valid_from=x["said_at"])
                    for j, x in enumerate(chunk)]
            items = adm.submit(key["writer"], subs)["items"]
            for it, x in zip(items, chunk):
                claim_to_dia[it["claim_id"]] = f"{sid}#{x['dia_id']}"
            for it in items:
                adm.review(key["reviewer"], it["version_id"], "promote", "accurate")
        n_turns += len(turns)
        say(f"{sid}: {len(turns)} turns admitted and promoted")
    timings["ingest_and_promote_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    catch_up(ctx, tenant, context_before=context_before)
    timings["index_s"] = time.perf_counter() - t0
    say(f"indexed {n_turns} turns in {timings['index_s']:.1f}s")
    return Corpus(tenant, key["reader"], workarea_of, claim_to_dia, texts, n_turns, timings, asked_at)


def questions_of(convs: Sequence[dict]) -> tuple[list[dict], int]:
    """Questions with evidence (``sample``, ``question``, ``category``, ``evidence`` as ``<sample>#<dia_id>``) and
    the number skipped for having none."""
    out, skipped = [], 0
    for conv in convs:
        for qa in conv["qa"]:
            ev = normalise_ids(qa.get("evidence", []))
            if not ev:
                skipped += 1
                continue
            out.append({"sample": conv["sample_id"], "question": qa["question"], "category": int(qa.get("category", 0)),
                        "evidence": {f"{conv['sample_id']}#{e}" for e in ev}})
    return out, skipped


class Scores:
    """Per-question evidence recall at each cutoff, latency and served characters for one retriever row."""

    def __init__(self, cutoffs: Sequence[int]) -> None:
        self.cutoffs = tuple(cutoffs)
        self.lat: list[float] = []
        self.chars: dict[int, list[int]] = {k: [] for k in self.cutoffs}
        self.per_q: list[tuple[dict, dict[int, float]]] = []
        self.degraded = 0

    def add(self, q: dict, ranked: Sequence[str | None], ms: float, sizes: Sequence[int] = ()) -> None:
        self.lat.append(ms)
        self.per_q.append((q, {k: len(q["evidence"] & set(ranked[:k])) / len(q["evidence"]) for k in self.cutoffs}))
        for k in self.cutoffs:
            self.chars[k].append(sum(sizes[:k]))

    def summary(self, groups: Mapping[str, set[str]] | None = None) -> dict[str, Any]:
        ks = self.cutoffs
        mean = lambda rows: {k: statistics.fmean([r[k] for r in rows]) if rows else float("nan") for k in ks}  # noqa: E731
        cats: dict[int, list[dict[int, float]]] = {}
        for q, r in self.per_q:
            cats.setdefault(q["category"], []).append(r)
        return {
            "recall": {"overall": mean([r for _, r in self.per_q]),
                       **{CATEGORIES.get(c, str(c)): mean(v) for c, v in sorted(cats.items())}},
            "groups": {g: mean([r for q, r in self.per_q if q["sample"] in members]) for g, members in (groups or {}).items()},
            "questions_per_category": {CATEGORIES.get(c, str(c)): len(v) for c, v in sorted(cats.items())},
            "latency_ms": {"p50": _pct(self.lat, 50), "p95": _pct(self.lat, 95), "mean": statistics.fmean(self.lat)},
            "chars_per_query": {k: statistics.fmean(v) if v else 0.0 for k, v in self.chars.items()},
            "degraded_queries": self.degraded,
        }


def oml_rows(ctx, fusions: Mapping[str, Any] | None = None, *, lexical: str = "ts_rank",
             bm25: Mapping[str, tuple[float, float]] | None = None) -> dict[str, tuple[Any, str]]:
    """Retriever rows: name -> (Recaller, retriever). ``fusions`` adds hybrid rows fused another way
    (name -> :class:`oml.domain.fusion.Fusion`) over the ``lexical`` leg; the classic RRF constant 60 (over
    ts_rank) is always one of them. ``bm25`` adds BM25-only rows with other (k1, b) (name -> pair)."""
    import dataclasses

    from oml.domain.fusion import DEFAULT, WINDOW_SHARE, Fusion
    from oml.domain.recall import RRF_K, RRF_K_CLASSIC
    from oml.services.reads.recall import Recaller

    equal = Fusion("rrf", k=RRF_K)
    ts_rank = Recaller(ctx, lexical="ts_rank", fusion=equal)
    rows: dict[str, tuple[Any, str]] = {
        "fts": (ts_rank, "fts"), "bm25": (Recaller(ctx, lexical="bm25"), "fts"), "vector": (ts_rank, "vector"),
        # what a recall gets by default (the settings' lexical leg, domain.fusion.DEFAULT)
        "hybrid": (Recaller(ctx), "hybrid"),
        # the default with the time leg (docs/recall.md, "Time leg"), and the leg as the window's vector rows only
        "hybrid-time": (Recaller(ctx, time_leg=True), "hybrid"),
        "hybrid-time-vector": (Recaller(ctx, time_leg=True, time_mode="vector"), "hybrid"),
        # the default with window propagation at the measured share (docs/recall.md, "Window propagation")
        "hybrid-window": (Recaller(ctx, fusion=dataclasses.replace(DEFAULT, window_share=WINDOW_SHARE)), "hybrid"),
        # the default before BM25 and the weighted fusion (docs/adr/0007-recall-ranking.md), and BM25 with equal weights
        "hybrid-ts_rank": (ts_rank, "hybrid"),
        "hybrid-bm25": (Recaller(ctx, lexical="bm25", fusion=equal), "hybrid"),
        CLASSIC: (Recaller(ctx, fusion=Fusion("rrf", k=RRF_K_CLASSIC), lexical="ts_rank"), "hybrid")}
    for name, fusion in (fusions or {}).items():
        rows[name] = (Recaller(ctx, fusion=fusion, lexical=lexical), "hybrid")
    for name, params in (bm25 or {}).items():
        rows[name] = (Recaller(ctx, lexical="bm25", bm25=params), "fts")
    return rows


def recall_dia(corpus: Corpus, rec: Any, retriever: str, q: dict, k: int, *, phases: Any = None
               ) -> tuple[list[str | None], list[int], bool]:
    """One OML recall for ``q`` as the reader key: ranked ``<sample>#<dia_id>``, served body sizes, degraded.
    ``phases``: a :class:`oml.services.runtime.phases.Phases` the recall fills."""
    from oml.services.reads.recall import RecallRequest

    out = rec.recall(corpus.reader, RecallRequest(query=q["question"], workarea_id=corpus.workarea_of[q["sample"]],
                                                  retriever=retriever, k=k, valid_at=corpus.asked_at.get(q["sample"])),
                     **({} if phases is None else {"phases": phases}))
    hits = out["hits"]
    return ([corpus.claim_to_dia.get(h["claim_id"]) for h in hits],
            [len(json.dumps(h["body"], ensure_ascii=False)) for h in hits], bool(out["diagnostics"]["degraded"]))


class BM25Reference:
    """``bm25s`` (Lucene BM25, k1 1.5, b 0.75, English stop words, no stemmer) over each conversation's stored
    statements: a reference row computed outside OML, never a product path."""

    def __init__(self, texts: Mapping[str, Mapping[str, str]]) -> None:
        import bm25s

        self._bm25s = bm25s
        self.index: dict[str, tuple[Any, list[str]]] = {}
        for sid, by_dia in texts.items():
            ids = list(by_dia)
            model = bm25s.BM25()
            model.index(bm25s.tokenize([by_dia[d] for d in ids], stopwords="en", show_progress=False), show_progress=False)
            self.index[sid] = (model, ids)

    def search(self, q: dict, k: int) -> list[str]:
        model, ids = self.index[q["sample"]]
        tokens = self._bm25s.tokenize([q["question"]], stopwords="en", show_progress=False)
        if not tokens.vocab:
            return []
        docs, scores = model.retrieve(tokens, k=min(k, len(ids)), show_progress=False)
        return [f"{q['sample']}#{ids[int(d)]}" for d, s in zip(docs[0], scores[0]) if s > 0]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def run(ctx, data: Path, *, conversations: str | int | None = None, retrievers: Sequence[str] = RETRIEVERS,
        cutoffs: Sequence[int] = CUTOFFS, batch: int = 100, context_before: int | None = None,
        decide: Sequence[str] = DECIDE, fusions: Mapping[str, Any] | None = None, reference: bool = True,
        only: Sequence[str] = (), lexical: str = "ts_rank", bm25: Mapping[str, tuple[float, float]] | None = None,
        progress=None) -> dict[str, Any]:
    """Ingest, promote, index and evaluate; returns the measurements (see the module docstring).

    ``decide`` names the conversations choices are made on; the others form the ``confirm`` group, and both
    groups' overall recall is reported per row (decide on one half, confirm on the other)."""
    import os

    say = progress or (lambda _m: None)
    convs = load(data, conversations)
    corpus = ingest(ctx, convs, batch=batch, context_before=context_before, progress=say)
    questions, skipped = questions_of(convs)
    present = {c["sample_id"] for c in convs}
    groups = {"decide": set(decide) & present, "confirm": present - set(decide)}
    groups = {g: m for g, m in groups.items() if m}
    kmax = max(cutoffs)
    rows = {n: v for n, v in oml_rows(ctx, fusions, lexical=lexical, bm25=bm25).items() if v[1] in retrievers}
    rows = {n: v for n, v in rows.items() if not only or n in only}
    # Warm the model, the pools and the plans before timing.
    first = next(iter(rows.values()))[0]
    recall_dia(corpus, first, "hybrid", questions[0], kmax)
    heap.freeze()  # as oml serve does after its warm-up (services/runtime/heap.py)
    results: dict[str, Any] = {}
    for name, (rec, retriever) in rows.items():
        sc = Scores(cutoffs)
        for q in questions:
            t1 = time.perf_counter()
            dia, sizes, degraded = recall_dia(corpus, rec, retriever, q, kmax)
            sc.add(q, dia, (time.perf_counter() - t1) * 1000, sizes)
            sc.degraded += degraded
        results[name] = sc.summary(groups)
        say(f"{name}: recall@{tuple(cutoffs)} = {[round(results[name]['recall']['overall'][k], 3) for k in cutoffs]}")
    if reference and _has("bm25s"):
        ref = BM25Reference(corpus.texts)
        sc = Scores(cutoffs)
        for q in questions:
            t1 = time.perf_counter()
            got = ref.search(q, kmax)
            sc.add(q, got, (time.perf_counter() - t1) * 1000)
        results["bm25s (ref.)"] = sc.summary(groups)
    return {
        "tenant": corpus.tenant, "data": str(data), "conversations": [c["sample_id"] for c in convs], "turns": corpus.turns,
        "questions": len(questions), "skipped_no_evidence": skipped, "k": kmax, "cutoffs": list(cutoffs),
        "context_before": ctx.settings.index_context_before if context_before is None else context_before,
        "groups": {g: sorted(m) for g, m in groups.items()},
        "timings": corpus.timings, "results": results, "dragon_turns_all_ten": DRAGON_TURNS,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
    }


def render(res: dict[str, Any]) -> list[str]:
    res = json.loads(json.dumps(res))  # cutoffs as string keys, the same whether fresh or read back from --json
    ks = [str(k) for k in res["cutoffs"]]
    lines = [f"oml bench locomo — {conversations_named(res['conversations'])}, "
             f"{res['turns']} turns, {res['questions']} questions with evidence ({res['skipped_no_evidence']} skipped: none)",
             f"machine: {res['machine']['cpus']} CPUs, {res['machine']['platform']}, Python {res['machine']['python']}",
             f"ingest+promote {res['timings']['ingest_and_promote_s']:.1f}s, index {res['timings']['index_s']:.1f}s, "
             f"context window: {res.get('context_before', 0)} turn(s) before",
             "evidence recall (overall)",
             "retriever      " + "".join(f"  @{k:<5}" for k in ks) + "  p50 ms  p95 ms  chars/query @" + "/@".join(map(str, ks))]
    for r, v in res["results"].items():
        rec = v["recall"]["overall"]
        lines.append(f"{r:<15}" + "".join(f"  {rec[k]:.3f}" for k in ks) +
                     f"  {v['latency_ms']['p50']:6.1f}  {v['latency_ms']['p95']:6.1f}  " +
                     "/".join(f"{v['chars_per_query'][k]:.0f}" for k in ks))
    d = res["dragon_turns_all_ten"]
    lines.append("DRAGON (paper, turns, 10 conv.) " + "".join(f"  @{k} {d[k]:.3f}" for k in ks if k in d))
    for g, members in res.get("groups", {}).items():
        lines.append(f"{g} half ({', '.join(members)}): recall@" + "/@".join(ks))
        for r, v in res["results"].items():
            lines.append(f"  {r:<15} " + "/".join(f"{v['groups'][g][k]:.3f}" for k in ks))
    lines.append("per category (recall@" + "/@".join(map(str, ks)) + ")")
    cats = [c for c in next(iter(res["results"].values()))["recall"] if c != "overall"]
    for c in cats:
        n = next(iter(res["results"].values()))["questions_per_category"][c]
        cells = []
        for r, v in res["results"].items():
            cells.append(f"{r} " + "/".join(f"{v['recall'][c][k]:.3f}" for k in ks))
        lines.append(f"  {c:<12} n={n:<4} " + "   ".join(cells))
    return lines


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("locomo")
    def locomo(data: Path = typer.Option(..., "--data", exists=True, dir_okay=False, help="LoCoMo JSON (e.g. ../shared/data/locomo/locomo-dev.json)"),
               conversations: str = typer.Option("", "--conversations",
                                                 help="comma-separated sample ids (e.g. conv-26,conv-30), or N for the first N; default all"),
               decide: str = typer.Option(",".join(DECIDE), "--decide", help="conversations choices are made on; the rest confirm"),
               context_window: int = typer.Option(None, "--context-window", min=0, max=8,
                                                  help="turns before each turn indexed with it (default: the index_context_before setting)"),
               fusion: list[str] = typer.Option([], "--fusion", help="extra hybrid row NAME=METHOD:K[:W_FTS,W_VECTOR] (method rrf or minmax)"),
               lexical: str = typer.Option("ts_rank", "--lexical", help="lexical leg of the --fusion rows: ts_rank or bm25"),
               bm25: list[str] = typer.Option([], "--bm25", help="extra BM25 row NAME=K1,B"),
               rows: str = typer.Option("", "--rows", help="comma-separated rows to run (default all)"),
               as_json: bool = JSON) -> None:
        """Evidence recall@5/10/25 and latency of fts, vector and hybrid recall on LoCoMo, through admission, review and the indexer."""
        from oml.domain.fusion import parse_spec
        from oml.services.entrypoints.cli.common import context, err

        fusions = dict(parse_spec(f) for f in fusion)
        if lexical not in ("ts_rank", "bm25"):
            raise typer.BadParameter("ts_rank or bm25", param_hint="--lexical")
        try:
            params = {n: (float(v.split(",")[0]), float(v.split(",")[1])) for n, _, v in (x.partition("=") for x in bm25)}
        except (ValueError, IndexError):
            raise typer.BadParameter("NAME=K1,B", param_hint="--bm25") from None
        with context(new_home=True) as ctx:
            res = run(ctx, data, conversations=conversations or None, context_before=context_window,
                      decide=[x.strip() for x in decide.split(",") if x.strip()], fusions=fusions,
                      only=[x.strip() for x in rows.split(",") if x.strip()], lexical=lexical, bm25=params,
                      progress=lambda m: err.print(m))
        emit(res, render, as_json)

    from oml_tools.bench import peers

    peers.register(bench_app)
