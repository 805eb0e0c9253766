"""all-mpnet-base-v2 from its installed split-zip parts (``make mpnet``): extracted and checked against the pinned
digests, exported to ONNX without token type ids, and giving sentence-transformers' vectors. Skipped where the
parts are not installed (CI does not install them; tests/unit/index/test_packaged_model.py covers the loader on a
fake model)."""
from __future__ import annotations

import importlib.metadata as md

import numpy as np
import pytest

from oml.services.runtime.settings import Settings
from oml.workers.index import embedding
from oml.workers.index import onnx_embedding as ox
from oml.workers.index import packaged_model as pm

SPEC = pm.MODELS["mpnet"]


def _installed() -> bool:
    try:
        return all(md.distribution(p.distribution) for p in SPEC.parts)
    except md.PackageNotFoundError:
        return False


pytestmark = pytest.mark.skipif(not _installed(), reason="the all-mpnet-base-v2 parts are not installed (make mpnet)")

SENTENCES = ["What did Caroline research?", "Café naïve résumé 東京 😀", "", "word " * 400,
             "Melanie painted a lake at sunrise last summer", "  leading,   inner  and trailing whitespace  "]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def path(models):
    pm.forget_checks()
    return embedding.model_path(Settings(embedding_model="mpnet", model_cache=models))


def test_the_parts_extract_to_the_pinned_files_only(path, models):
    d = models / "packaged" / "all-mpnet-base-v2"
    assert path == str(d.resolve())
    assert sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) == sorted(SPEC.files)
    for rel, digest in SPEC.files.items():
        assert pm.sha256_file(d / rel) == digest
    assert embedding.name_of(path) == "mpnet"


def test_onnx_export_takes_no_token_type_ids_and_matches_sentence_transformers(path, models):
    onnx = ox.OnnxEmbedder(path, models / "all-mpnet-base-v2", threads=2)
    assert {i.name for i in onnx.session.get_inputs()} == {"input_ids", "attention_mask"}
    assert onnx.tokenizer.padding["pad_token"] == "<pad>" and onnx.tokenizer.padding["pad_id"] == 1
    assert onnx.dimension == 768
    torch_model = embedding.get_embedder_for(path)
    assert torch_model.dimension == 768 and torch_model.name == "mpnet"
    want = torch_model.encode(SENTENCES)
    got = onnx.encode(SENTENCES)  # one padded batch: the pad token and mask matter here
    cos = (want * got).sum(axis=1)
    assert cos.min() >= 0.9999, cos
    one = np.stack([onnx.encode([s])[0] for s in SENTENCES])
    assert ((one * want).sum(axis=1)).min() >= 0.9999
