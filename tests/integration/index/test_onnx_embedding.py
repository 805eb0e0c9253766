"""The ONNX query embedding (workers/index/onnx_embedding.py): the real bundled model, exported with the
installed torch, against sentence-transformers on real LoCoMo text; the export cache; the query LRU."""
from __future__ import annotations

import hashlib
import json
import threading

import numpy as np
import pytest

from oml.services.runtime.settings import Settings
from oml.workers.index import embedding
from oml.workers.index import onnx_embedding as ox

from support.paths import SHARED

LOCOMO = SHARED / "data" / "locomo" / "locomo-dev.json"
needs_locomo = pytest.mark.skipif(not LOCOMO.is_file(), reason="no LoCoMo data in SHARED")
EDGE = ["", "  leading,   inner  and trailing whitespace  ", "word " * 400, "Café naïve résumé 東京 😀",
        "What did Caroline research?", "\tTabs\nand newlines\n"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models") / "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def onnx(cache):
    return ox.OnnxEmbedder(embedding.model_path(None), cache, threads=1)


@pytest.fixture(scope="module")
def torch_model():
    return embedding.get_embedder_for(embedding.model_path(None))


@pytest.fixture(scope="module")
def locomo():
    convs = json.loads(LOCOMO.read_text())
    turns = [t["text"] for c in convs for v in c["conversation"].values() if isinstance(v, list)
             for t in v if isinstance(t, dict) and t.get("text")]
    questions = [qa["question"] for c in convs for qa in c["qa"]]
    return turns[:300], questions[:100]


@needs_locomo
def test_onnx_vectors_equal_sentence_transformers_for_every_sentence(onnx, torch_model, locomo):
    turns, questions = locomo
    texts = turns + questions + EDGE
    ref = torch_model.encode(texts)
    single = np.stack([onnx.encode([t])[0] for t in texts])  # the query path: one sentence, no padding
    batch = onnx.encode(texts)                                # padded batches of 32, sorted by length
    assert single.shape == batch.shape == ref.shape == (len(texts), 384) and single.dtype == np.float32
    for got in (single, batch):
        cos = (ref * got).sum(axis=1)
        assert cos.min() >= 0.99999, (int(cos.argmin()), float(cos.min()))
        assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


@needs_locomo
def test_top10_neighbours_of_queries_are_identical(onnx, torch_model, locomo):
    """Bodies are indexed by torch; a query embedded by ONNX ranks them exactly as the torch query does."""
    turns, questions = locomo
    corpus = torch_model.encode(turns)
    for q in questions[:8]:
        by_torch = np.argsort(-(corpus @ embedding.torch_query_vector(torch_model, q)), kind="stable")[:10]
        by_onnx = np.argsort(-(corpus @ onnx.encode([q])[0]), kind="stable")[:10]
        assert by_torch.tolist() == by_onnx.tolist(), q


def test_truncation_and_padding_follow_sentence_transformers(onnx, torch_model):
    assert onnx.max_seq_length == torch_model.model.max_seq_length == 256
    enc = onnx.tokenizer.encode_batch(["word " * 400, "short"])
    assert [len(e.ids) for e in enc] == [256, 256] and sum(enc[1].attention_mask) == 3
    assert len(onnx.tokenizer.encode_batch(["short"])[0].ids) == 3  # one query: no padding at all


def test_export_is_cached_and_redone_when_the_sidecar_digest_differs(onnx, cache):
    model = embedding.model_path(None)
    side = cache / ox.SIDECAR_NAME
    meta = json.loads(side.read_text())
    assert meta["source_sha256"] == ox.source_digest(model) and meta["opset"] == ox.OPSET
    before = (cache / ox.ONNX_NAME).stat().st_mtime_ns
    assert ox.ensure_exported(model, cache) == (cache / ox.ONNX_NAME, False)
    assert (cache / ox.ONNX_NAME).stat().st_mtime_ns == before

    side.write_text(json.dumps({**meta, "source_sha256": "0" * 64}))
    path, exported = ox.ensure_exported(model, cache)
    assert exported and json.loads(side.read_text())["source_sha256"] == meta["source_sha256"]
    assert (cache / ox.ONNX_NAME).stat().st_mtime_ns != before
    assert sorted(p.name for p in cache.iterdir()) == [ox.ONNX_NAME, ox.SIDECAR_NAME]  # no temporary left behind

    again = ox.OnnxEmbedder(model, cache)
    assert not again.exported and np.allclose(again.encode(["same vector"]), onnx.encode(["same vector"]))


def test_a_changed_or_truncated_model_file_is_exported_again_not_loaded(onnx, cache):
    # The sidecar names the exported file's own SHA-256: a file edited after it was written (another process, a
    # shared cache, a disk error) is never loaded as the query model.
    model = embedding.model_path(None)
    target = cache / ox.ONNX_NAME
    good = target.read_bytes()
    for bad in (good[: len(good) // 2], good[:-64] + bytes(64)):
        target.write_bytes(bad)
        path, exported = ox.ensure_exported(model, cache)
        assert exported and path.read_bytes() != bad
        assert json.loads((cache / ox.SIDECAR_NAME).read_text())["onnx_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_failed_export_leaves_no_file(tmp_path, monkeypatch):
    def half(model_dir, target):
        target.write_bytes(b"partial")
        raise RuntimeError("export failed")

    monkeypatch.setattr(ox, "export", half)
    with pytest.raises(RuntimeError):
        ox.ensure_exported(embedding.model_path(None), tmp_path / "m")
    assert list((tmp_path / "m").iterdir()) == []


def test_source_digest_covers_config_and_weights(tmp_path):
    for name in ox.DIGESTED:
        (tmp_path / name).write_bytes(b"x")
    d = ox.source_digest(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"y")
    assert ox.source_digest(tmp_path) != d
    (tmp_path / "config.json").unlink()
    with pytest.raises(ox.UnsupportedModel):
        ox.source_digest(tmp_path)


def test_normalise_query():
    assert embedding.normalise_query("  a\u00a0 b\n\tc  ") == "a b c"
    assert embedding.normalise_query("Cafe\u0301") == "Caf\u00e9"  # NFC


def _settings(tmp_path, **kw) -> Settings:
    return Settings(home=tmp_path / "home", **kw)


def test_query_embedder_onnx_lru_and_same_vector_as_the_text_given(tmp_path, cache, onnx, torch_model):
    q = embedding.QueryEmbedder(embedding.model_path(None), cache, backend="auto", cache_size=2)
    v = q("  What did  Caroline research? ")
    assert q.backend == "onnx" and isinstance(v, tuple) and len(v) == 384
    assert float(np.dot(v, torch_model.encode(["What did Caroline research?"])[0])) >= 0.99999
    assert q("What did Caroline research?") is v and (q.hits, q.misses) == (1, 1)
    # The normalised text embeds to the vector of the text as given (the BERT normaliser ignores the difference).
    assert np.allclose(onnx.encode(["  What did\tCaroline  research? "])[0], v, atol=1e-6)
    q("b"), q("c")
    assert list(q._lru) == ["b", "c"]  # size 2: the oldest went
    off = embedding.QueryEmbedder(embedding.model_path(None), cache, cache_size=0)
    off("b"), off("b")
    assert off.hits == 0 and not off._lru


def test_query_embedder_torch_backend_and_fallback(tmp_path, cache, monkeypatch, torch_model):
    t = embedding.QueryEmbedder(embedding.model_path(None), cache, backend="torch")
    assert t.warm() == "torch"
    ref = embedding.torch_query_vector(torch_model, "hello there")
    assert np.allclose(t("hello there"), ref)

    def broken(*a, **k):
        raise ox.UnsupportedModel("no")

    monkeypatch.setattr(ox, "OnnxEmbedder", broken)
    fell = embedding.QueryEmbedder(embedding.model_path(None), cache, backend="auto")
    assert fell.warm() == "torch"
    strict = embedding.QueryEmbedder(embedding.model_path(None), cache, backend="onnx")
    with pytest.raises(ox.UnsupportedModel):
        strict.warm()
    with pytest.raises(ValueError):
        embedding.QueryEmbedder(embedding.model_path(None), cache, backend="cuda")


def test_query_embedder_settings_and_sharing(tmp_path, monkeypatch):
    monkeypatch.setenv("OML_QUERY_EMBEDDING", "torch")
    monkeypatch.setenv("OML_QUERY_VECTOR_CACHE", "7")
    monkeypatch.setenv("OML_MODEL_CACHE", str(tmp_path / "shared-models"))
    s = _settings(tmp_path)
    q = embedding.query_embedder(s)
    assert (q.requested, q.cache_size, q.threads) == ("torch", 7, 1)
    assert q.cache_dir == (tmp_path / "shared-models" / "all-MiniLM-L6-v2").resolve()
    assert embedding.query_embedder(_settings(tmp_path)) is q  # one per process and configuration
    monkeypatch.delenv("OML_MODEL_CACHE")
    other = embedding.query_embedder(_settings(tmp_path))
    assert other is not q and other.cache_dir == (tmp_path / "home" / "models" / "all-MiniLM-L6-v2").resolve()


def test_concurrent_queries_share_one_session(cache, onnx):
    q = embedding.QueryEmbedder(embedding.model_path(None), cache, cache_size=0)
    texts = [f"question number {i}" for i in range(16)]
    out: dict[str, tuple] = {}

    def work(t):
        out[t] = q(t)

    threads = [threading.Thread(target=work, args=(t,)) for t in texts]
    [th.start() for th in threads]
    [th.join() for th in threads]
    for t in texts:
        assert np.allclose(out[t], onnx.encode([t])[0], atol=1e-6)


@needs_locomo
def test_bench_embed_runs_and_renders():
    from oml_tools.bench import embed as bench

    res = bench.run(LOCOMO, questions=4, turns=6)
    assert set(res["per_query"]) == {"torch_1_thread", "onnx_1_thread", "onnx_2_threads"}
    assert res["min_cosine_per_query"] >= 0.99999 and res["batch"]["min_cosine"] >= 0.99999
    lines = bench.render(res)
    assert lines[0].startswith("machine: ") and any(line.startswith("onnx 1 thread / torch: p50 ") for line in lines)


def test_a_cached_file_that_matches_its_sidecar_but_does_not_load_is_exported_again(onnx, cache):
    # A new user's case: garbage written into model.onnx with its digest in the sidecar (not a genuine export).
    model = embedding.model_path(None)
    target, side = cache / ox.ONNX_NAME, cache / ox.SIDECAR_NAME
    target.write_bytes(b"\x00not an onnx model" * 300)
    meta = json.loads(side.read_text())
    side.write_text(json.dumps({**meta, "onnx_sha256": hashlib.sha256(target.read_bytes()).hexdigest()}))
    again = ox.OnnxEmbedder(model, cache)
    assert again.exported and np.allclose(again.encode(["same vector"]), onnx.encode(["same vector"]))
