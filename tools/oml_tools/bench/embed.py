"""``oml bench embed``: the query embedding on torch vs ONNX Runtime, per query and in batches.

No database. Setup (not timed): the torch model loaded; LoCoMo questions and
turns read from ``--data`` (default ``../shared/data/locomo/locomo-dev.json``).

Timed:

- **export**: ``torch.onnx.export`` of the transformer into a fresh temporary
  directory (what the first ONNX query of a new home pays once), then the
  session's load.
- **per query**: each of ``--questions`` questions embedded alone by torch on
  one thread (``torch_query_vector``, today's recall path) and by ONNX
  Runtime with 1 and with 2 intra-op threads, interleaved per question in a
  rotating order so load on the host falls on every backend alike; p50, p95
  and mean in ms. No LRU (every call is a miss).
- **batch**: ``--turns`` turns encoded in batches of 32 by torch (its default
  thread count) and by ONNX with 2 threads (the indexer's shape).

Also prints the smallest cosine between the torch and ONNX vectors of the
same text and the load average before and after (a shared host: compare
ratios of one run).
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from oml.services.entrypoints.cli.common import JSON
from oml_tools.bench import emit, machine, machine_line


def _pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p * (len(s) - 1))))]


def _texts(data: Path) -> tuple[list[str], list[str]]:
    convs = json.loads(Path(data).read_text())
    questions = [qa["question"] for c in convs for qa in c["qa"] if qa.get("question")]
    turns = [t["text"] for c in convs for k, v in c["conversation"].items() if isinstance(v, list)
             for t in v if isinstance(t, dict) and t.get("text")]
    return questions, turns


def run(data: Path, *, questions: int = 200, turns: int = 1000, rounds: int = 1) -> dict[str, Any]:
    """Measure export, per-query latency (torch 1 thread, onnx 1 and 2 threads) and batch encode; returns the numbers."""
    import numpy as np
    import onnxruntime
    import torch

    from oml.workers.index.embedding import Embedder, model_path, torch_query_vector
    from oml.workers.index.onnx_embedding import OnnxEmbedder

    qs, ts = _texts(data)
    qs, ts = qs[:questions], ts[:turns]
    load_before = os.getloadavg()
    path = model_path(None)
    emb = Embedder(path)
    res: dict[str, Any] = {"questions": len(qs), "turns": len(ts), "rounds": rounds,
                           "machine": machine(torch=torch.__version__, onnxruntime=onnxruntime.__version__)}
    with tempfile.TemporaryDirectory(prefix="oml-bench-embed-") as tmp:
        t0 = time.perf_counter()
        one = OnnxEmbedder(path, tmp, threads=1)
        res["export_s"] = round(time.perf_counter() - t0, 2)
        two = OnnxEmbedder(path, tmp, threads=2)  # reuses the export
        assert one.exported and not two.exported
        paths = {"torch_1_thread": lambda q: torch_query_vector(emb, q),
                 "onnx_1_thread": lambda q: one.encode([q])[0],
                 "onnx_2_threads": lambda q: two.encode([q])[0]}
        for f in paths.values():  # warm: first-call allocations
            for _ in range(3):
                f("warm-up")
        names = list(paths)
        ms: dict[str, list[float]] = {n: [] for n in names}
        vecs: dict[str, list[Any]] = {n: [] for n in names}
        for r in range(rounds):
            for i, q in enumerate(qs):
                k = (i + r) % len(names)
                for n in names[k:] + names[:k]:
                    t0 = time.perf_counter()
                    v = paths[n](q)
                    ms[n].append((time.perf_counter() - t0) * 1000)
                    if r == 0:
                        vecs[n].append(v)
        res["per_query"] = {n: {"p50_ms": round(statistics.median(x), 2), "p95_ms": round(_pct(x, 0.95), 2),
                                "mean_ms": round(statistics.fmean(x), 2)} for n, x in ms.items()}
        base = np.stack(vecs["torch_1_thread"])
        res["min_cosine_per_query"] = round(float(min((base * np.stack(vecs[n])).sum(1).min()
                                                      for n in names[1:])), 7)
        t0 = time.perf_counter()
        bt = emb.encode(ts)
        t_torch = time.perf_counter() - t0
        t0 = time.perf_counter()
        bo = two.encode(ts)
        t_onnx = time.perf_counter() - t0
        res["batch"] = {"batch_size": emb.batch_size, "torch_threads": torch.get_num_threads(), "onnx_threads": 2,
                        "torch_s": round(t_torch, 3), "onnx_s": round(t_onnx, 3),
                        "torch_per_s": round(len(ts) / t_torch, 1), "onnx_per_s": round(len(ts) / t_onnx, 1),
                        "min_cosine": round(float((bt * bo).sum(1).min()), 7)}
    res["load_average"] = {"before": [round(x, 2) for x in load_before],
                           "after": [round(x, 2) for x in os.getloadavg()]}
    return res


def render(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    out = [machine_line(m, f"torch {m['torch']}, onnxruntime {m['onnxruntime']}"),
           f"load average before {res['load_average']['before']}, after {res['load_average']['after']}",
           f"ONNX export + session load (once per model and home): {res['export_s']} s",
           f"per query ({res['questions']} LoCoMo questions x {res['rounds']}, interleaved):",
           f"{'path':<16}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}"]
    for n, r in res["per_query"].items():
        out.append(f"{n:<16}{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}{r['mean_ms']:>9.2f}")
    t = res["per_query"]["torch_1_thread"]
    o = res["per_query"]["onnx_1_thread"]
    out.append(f"onnx 1 thread / torch: p50 {o['p50_ms'] / t['p50_ms']:.2f}x, p95 {o['p95_ms'] / t['p95_ms']:.2f}x; "
               f"min cosine onnx vs torch {res['min_cosine_per_query']}")
    b = res["batch"]
    out.append(f"batch encode of {res['turns']} turns (batches of {b['batch_size']}): torch ({b['torch_threads']} threads) "
               f"{b['torch_s']} s = {b['torch_per_s']}/s; onnx ({b['onnx_threads']} threads) {b['onnx_s']} s = "
               f"{b['onnx_per_s']}/s; min cosine {b['min_cosine']}")
    return out


def register(bench_app: typer.Typer) -> None:
    @bench_app.command("embed")
    def embed(data: Path = typer.Option(None, "--data", dir_okay=False,
                                        help="LoCoMo JSON (default ../shared/data/locomo/locomo-dev.json)"),
              questions: int = typer.Option(200, "--questions", min=1),
              turns: int = typer.Option(1000, "--turns", min=1, help="turns for the batch encode"),
              rounds: int = typer.Option(1, "--rounds", min=1, help="passes over the questions"),
              as_json: bool = JSON) -> None:
        """Query embedding: torch (1 thread) vs ONNX Runtime (1 and 2 threads) per LoCoMo question, export time, batch encode."""
        from oml.services.entrypoints.cli.common import fail
        from oml_tools.demo.corpus import default_data_path

        path = data or default_data_path()
        if path is None or not Path(path).is_file():
            fail("no LoCoMo file: pass --data (e.g. ../shared/data/locomo/locomo-dev.json)")
        emit(run(path, questions=questions, turns=turns, rounds=rounds), render, as_json)
