"""``oml bench locomo-legs`` on a slice of one development conversation (real admission, indexer, recall).

The slice is the first session of the development split's first conversation and the questions whose evidence
lies in it, written to a temporary file, never into the repository. The "second model" is the product's own
MiniLM export, so its leg must equal the product's vector leg. No timing is asserted.
"""
from __future__ import annotations

import pytest

from oml_tools.bench import locomo_legs


def test_legs_product_rows_a_second_model_and_fusions(ctx, one_session, tmp_path):
    from oml.workers.index.embedding import model_path
    from oml.workers.index.onnx_embedding import cache_dir_for, ensure_exported

    path, sid, n_questions = one_session
    mini = model_path(ctx.settings)
    onnx_file, _ = ensure_exported(mini, cache_dir_for(tmp_path / "models", mini))
    fusions = ["bm25:1,minilm:0.5@10", "bm25:1,again:0.5@10", "bm25:1,minilm:0.5,again:0.5@20"]
    res = locomo_legs.run(ctx, path, decide=[sid], models={"again": (mini, str(onnx_file))},
                          bm25={"b": (0.9, 0.4)}, prf={"prf": "5,5"}, fusions=fusions, cache_root=tmp_path / "bench")
    assert res["questions"] == n_questions > 0
    assert set(res["results"]) == {"bm25", "minilm", "hybrid", "prf", "b", "again"}
    assert set(res["fusions"]) == set(fusions)
    # The default read's fusion, computed in process, is the product's hybrid row.
    assert res["fusions"]["bm25:1,minilm:0.5@10"]["recall"] == res["results"]["hybrid"]["recall"]
    # The same model outside the product finds the same turns (the product's leg is an exact scan here too).
    assert res["results"]["again"]["recall"]["overall"] == pytest.approx(res["results"]["minilm"]["recall"]["overall"])
    assert res["encode"]["again"]["ms_per_claim"] > 0 and res["encode"]["minilm"]["query_ms_p50"] > 0
    assert any(line.startswith("bm25:1,again:0.5@10") for line in locomo_legs.render(res))
