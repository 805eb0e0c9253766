"""``oml bench locomo --data PATH``: evidence recall of OML's recall on LoCoMo conversations (issue 4).

What it does, end to end through the product:

1. a tenant ``bench-locomo-<hex>`` in the configured database; one workarea
   per conversation (label = its ``sample_id``), personal-data policy
   ``allow`` (the dialogues name people);
2. **ingest through admission**: one claim per dialog turn, body
   ``{"statement": "({session date}) {speaker}: {text}[ [image: {caption}]]",
   "source": {"uri": "locomo:<sample>#<dia_id>", "title": …, "locator": dia_id}}``,
   submitted by a writer key in group commits, each **reviewed and promoted**
   by a reviewer key of another identity;
3. **indexed** by the oml-indexer (``workers/indexer.py``: tsvector + the
   all-MiniLM-L6-v2 embedding, through the server's indexing feed);
4. every question with evidence **recalled** by a reader key scoped to its
   conversation's workarea with ``fts``, ``vector`` and ``hybrid`` (k = the
   largest cutoff), timing each call end to end (embedding, SQL, decrypt,
   read log) — and ``hybrid`` once more fused with the classic RRF constant
   60 (row ``hybrid-rrf60``) for comparison with OML's 10;
5. evidence recall@k = |evidence ∩ top-k dia_ids| / |evidence|, averaged
   over questions per category and overall; p50/p95 latency; characters of
   body JSON returned per query at each cutoff.

Evidence ids are normalised (``"D8:6; D9:17"`` → two ids, ``"D:11:26"`` →
``D11:26``, ``"D30:05"`` → ``D30:5``; anything else dropped); questions left
with no evidence are skipped and counted. ``--conversations N`` limits the
run to the first N conversations (reported).
"""
from __future__ import annotations

import json
import platform
import re
import secrets
import statistics
import time
from pathlib import Path
from typing import Any, Sequence

import typer

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
RETRIEVERS = ("fts", "vector", "hybrid")
# Comparison row: hybrid fused with the classic RRF constant 60 instead of OML's 10 (domain/recall.py).
CLASSIC = "hybrid-rrf60"
CUTOFFS = (5, 10, 25)
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


def load(path: Path, conversations: int | None = None) -> list[dict]:
    data = json.loads(Path(path).read_text())
    return data[:conversations] if conversations else data


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
            out.append({"dia_id": ids[0], "session": n, "statement": text})
    return out


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))]


def run(ctx, data: Path, *, conversations: int | None = None, retrievers: Sequence[str] = RETRIEVERS,
        cutoffs: Sequence[int] = CUTOFFS, batch: int = 100, progress=None) -> dict[str, Any]:
    """Ingest, promote, index and evaluate; returns the measurements (see the module docstring)."""
    from oml.services.admission.service import Submission
    from oml.services.auth import authenticate
    from oml.services.server.recall import Recaller, RecallRequest
    from oml.workers.indexer import catch_up

    say = progress or (lambda _m: None)
    convs = load(data, conversations)
    tenant = f"bench-locomo-{secrets.token_hex(3)}"
    adm = ctx.admission
    t = adm.create_tenant(tenant)
    admin = authenticate(ctx.db, t.admin_key)
    adm.set_workarea_policy(admin, t.root_workarea, pii_policy="allow")
    key = {}
    for role in ("writer", "reviewer", "reader"):
        ident = adm.create_identity(admin, "service", f"locomo-{role}")["identity_id"]
        key[role] = authenticate(ctx.db, adm.create_principal(admin, ident, role, [t.root_workarea])["api_key"])

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    claim_to_dia: dict[str, str] = {}
    workarea_of: dict[str, str] = {}
    n_turns = 0
    for conv in convs:
        sid = conv["sample_id"]
        label = re.sub(r"[^a-z0-9-]", "-", sid.lower())[:63]
        wa = adm.create_workarea(admin, label, t.root_workarea, pii_policy="allow")["node_id"]
        workarea_of[sid] = wa
        turns = turns_of(conv)
        for i in range(0, len(turns), batch):
            chunk = turns[i:i + batch]
            subs = [Submission(wa, {"statement": x["statement"],
                                    "source": {"uri": f"locomo:{sid}#{x['dia_id']}", "title": f"LoCoMo {sid} session {x['session']}",
                                               "locator": x["dia_id"]}}, provenance="reported") for x in chunk]
            items = adm.submit(key["writer"], subs)["items"]
            for it, x in zip(items, chunk):
                claim_to_dia[it["claim_id"]] = f"{sid}#{x['dia_id']}"
            for it in items:
                adm.review(key["reviewer"], it["version_id"], "promote", "accurate")
        n_turns += len(turns)
        say(f"{sid}: {len(turns)} turns admitted and promoted")
    timings["ingest_and_promote_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    catch_up(ctx, tenant)
    timings["index_s"] = time.perf_counter() - t0
    say(f"indexed {n_turns} turns in {timings['index_s']:.1f}s")

    questions = []
    skipped = 0
    for conv in convs:
        for qa in conv["qa"]:
            ev = normalise_ids(qa.get("evidence", []))
            if not ev:
                skipped += 1
                continue
            questions.append({"sample": conv["sample_id"], "question": qa["question"], "category": int(qa.get("category", 0)),
                              "evidence": {f"{conv['sample_id']}#{e}" for e in ev}})
    from oml.domain.recall import RRF_K_CLASSIC

    rec = Recaller(ctx)
    classic = Recaller(ctx, rrf_k=RRF_K_CLASSIC)
    kmax = max(cutoffs)
    # Warm the model, the pools and the plans before timing.
    rec.recall(key["reader"], RecallRequest(query="warm up", workarea_id=next(iter(workarea_of.values())), k=kmax))
    results: dict[str, Any] = {}
    for r in list(retrievers) + ([CLASSIC] if "hybrid" in retrievers else []):
        lat, chars = [], {k: [] for k in cutoffs}
        per_cat: dict[int, dict[int, list[float]]] = {}
        degraded = 0
        for q in questions:
            t1 = time.perf_counter()
            out = (classic if r == CLASSIC else rec).recall(
                key["reader"], RecallRequest(query=q["question"], workarea_id=workarea_of[q["sample"]],
                                             retriever="hybrid" if r == CLASSIC else r, k=kmax))
            lat.append((time.perf_counter() - t1) * 1000)
            if out["diagnostics"]["degraded"]:
                degraded += 1
            hits = out["hits"]
            dia = [claim_to_dia.get(h["claim_id"]) for h in hits]
            sizes = [len(json.dumps(h["body"], ensure_ascii=False)) for h in hits]
            for k in cutoffs:
                found = len(q["evidence"] & set(dia[:k]))
                per_cat.setdefault(q["category"], {}).setdefault(k, []).append(found / len(q["evidence"]))
                chars[k].append(sum(sizes[:k]))
        overall = {k: statistics.fmean([v for c in per_cat.values() for v in c[k]]) for k in cutoffs}
        results[r] = {
            "recall": {"overall": overall,
                       **{CATEGORIES.get(c, str(c)): {k: statistics.fmean(v[k]) for k in cutoffs} for c, v in sorted(per_cat.items())}},
            "questions_per_category": {CATEGORIES.get(c, str(c)): len(v[cutoffs[0]]) for c, v in sorted(per_cat.items())},
            "latency_ms": {"p50": _pct(lat, 50), "p95": _pct(lat, 95), "mean": statistics.fmean(lat)},
            "chars_per_query": {k: statistics.fmean(v) for k, v in chars.items()},
            "degraded_queries": degraded,
        }
        say(f"{r}: recall@{cutoffs} = {[round(overall[k], 3) for k in cutoffs]}, p50 {results[r]['latency_ms']['p50']:.1f} ms")
    import os

    return {
        "tenant": tenant, "data": str(data), "conversations": [c["sample_id"] for c in convs], "turns": n_turns,
        "questions": len(questions), "skipped_no_evidence": skipped, "k": kmax, "cutoffs": list(cutoffs),
        "timings": timings, "results": results, "dragon_turns_all_ten": DRAGON_TURNS,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
    }


def render(res: dict[str, Any]) -> list[str]:
    res = json.loads(json.dumps(res))  # cutoffs as string keys, the same whether fresh or read back from --json
    ks = [str(k) for k in res["cutoffs"]]
    lines = [f"oml bench locomo — {len(res['conversations'])} conversations ({', '.join(res['conversations'])}), "
             f"{res['turns']} turns, {res['questions']} questions with evidence ({res['skipped_no_evidence']} skipped: none)",
             f"machine: {res['machine']['cpus']} CPUs, {res['machine']['platform']}, Python {res['machine']['python']}",
             f"ingest+promote {res['timings']['ingest_and_promote_s']:.1f}s, index {res['timings']['index_s']:.1f}s",
             "evidence recall (overall)",
             "retriever   " + "".join(f"  @{k:<5}" for k in ks) + "  p50 ms  p95 ms  chars/query @" + "/@".join(map(str, ks))]
    for r, v in res["results"].items():
        rec = v["recall"]["overall"]
        lines.append(f"{r:<12}" + "".join(f"  {rec[k]:.3f}" for k in ks) +
                     f"  {v['latency_ms']['p50']:6.1f}  {v['latency_ms']['p95']:6.1f}  " +
                     "/".join(f"{v['chars_per_query'][k]:.0f}" for k in ks))
    d = res["dragon_turns_all_ten"]
    lines.append("DRAGON (paper, turns, 10 conv.) " + "".join(f"  @{k} {d[k]:.3f}" for k in ks if k in d))
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
               conversations: int = typer.Option(0, "--conversations", min=0, help="only the first N conversations (0: all)"),
               as_json: bool = typer.Option(False, "--json")) -> None:
        """Evidence recall@5/10/25 of fts, vector and hybrid recall on LoCoMo, through admission, review and the indexer."""
        from oml.services.cli.common import context, err

        with context() as ctx:
            res = run(ctx, data, conversations=conversations or None, progress=lambda m: err.print(m))
        if as_json:
            typer.echo(json.dumps(res, indent=2))
        else:
            for line in render(res):
                typer.echo(line)
