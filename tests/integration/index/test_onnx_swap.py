"""The cached ONNX export is checked against its sidecar and ONNX Runtime loads the checked bytes
(workers/index/onnx_embedding.py): a valid graph with other weights, swapped in after the check, is never what runs."""
from __future__ import annotations

import numpy as np

from oml.workers.index import embedding
from oml.workers.index import onnx_embedding as ox


def test_an_export_swapped_after_its_check_is_not_what_loads(tmp_path, monkeypatch):
    import onnx
    from onnx import numpy_helper

    cache, path = tmp_path / "cache", embedding.model_path(None)
    first = ox.OnnxEmbedder(path, cache, threads=1)
    good = first.encode(["the lighthouse keeper logs every ship"])[0]
    graph = onnx.load(str(first.onnx_path))
    big = max(graph.graph.initializer, key=lambda t: int(np.prod(t.dims)) if t.data_type == onnx.TensorProto.FLOAT else 0)
    big.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(big) * -0.5, big.name))
    evil = graph.SerializeToString()
    real, swapped = ox.ensure_exported, []

    def check_then_swap(model_dir, cache_dir):
        got = real(model_dir, cache_dir)
        if not swapped:  # another writer of the cache, between the check and the load
            got[0].write_bytes(evil)
            swapped.append(True)
        return got

    monkeypatch.setattr(ox, "ensure_exported", check_then_swap)
    second = ox.OnnxEmbedder(path, cache, threads=1)
    assert swapped
    assert np.allclose(second.encode(["the lighthouse keeper logs every ship"])[0], good, atol=1e-5)
    assert second.exported  # the swapped file was exported again, not loaded
