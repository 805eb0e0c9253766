"""Which model may write or query an index (workers/index/embedding.py ``mismatch``): the recorded model's weights
digest when both sides have one, else its name; two models of one dimension are never mixed silently."""
from __future__ import annotations

from oml.workers.index.embedding import IndexModel, mismatch

MINILM_SHA = "a" * 64


def test_a_model_without_a_digest_is_told_apart_from_the_recorded_one_by_name():
    # The index holds the vectors of a directory model whose files give no digest (no model.safetensors).
    recorded = IndexModel(384, "/models/my-bge-small", None, "ready")
    assert mismatch(recorded, "minilm", 384, MINILM_SHA) is not None
    assert mismatch(recorded, "/models/other", 384, None) is not None
    assert mismatch(recorded, "/models/my-bge-small", 384, None) is None


def test_a_process_model_without_a_digest_may_not_use_an_index_recorded_with_one():
    recorded = IndexModel(384, "minilm", MINILM_SHA, "ready")
    assert mismatch(recorded, "/models/my-bge-small", 384, None) is not None
    assert mismatch(recorded, "minilm", 384, MINILM_SHA) is None
    # A copy of the same weights elsewhere is the same model (the identity is the weights').
    assert mismatch(recorded, "/models/minilm-copy", 384, MINILM_SHA) is None


def test_an_index_never_switched_compares_the_dimension_alone():
    recorded = IndexModel(384)
    assert mismatch(recorded, "/models/my-bge-small", 384, None) is None
    assert mismatch(recorded, "mpnet", 768, "b" * 64) is not None
