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


def test_lexical_legs_outside_the_product(ctx, one_session):
    """``--lexical``: the index texts rebuilt in process are the stored ones, the ``english`` leg is the product's
    ``bm25`` leg, the other configurations are legs and fusions, and nothing they create outlives the run."""
    import sqlalchemy as sa

    path, sid, n_questions = one_session
    specs = {"en": "english", "s": "simple", "ss": "simple+stop", "en0": "english-nostop"}
    fusions = locomo_legs.default_fusions([], [], specs)
    res = locomo_legs.run(ctx, path, decide=[sid], lexical=specs, fusions=fusions)
    assert set(specs) <= set(res["results"]) and set(res["fusions"]) == set(fusions)
    c = res["checks"]["index_texts"]
    assert c["rows"] == c["equal"] > 0
    same = res["checks"]["en = bm25"]
    assert same["top50_equal"] == same["questions"] == n_questions
    assert res["results"]["en"]["recall"] == res["results"]["bm25"]["recall"]
    assert res["fusions"]["en:1,minilm:0.5@10"]["recall"] == res["results"]["hybrid"]["recall"]
    with ctx.db.engine(None).connect() as conn:  # the bench's configurations were rolled back
        assert conn.execute(sa.text("SELECT count(*) FROM pg_ts_config WHERE cfgname LIKE 'oml_bench%'")).scalar() == 0
    lines = locomo_legs.render(res)
    assert any(line.startswith("check: index texts") for line in lines)
    assert any(line.startswith("bm25:1,ss:0.5,minilm:0.5@10") for line in lines)
