"""``oml bench locomo`` and its rows on a slice of one development conversation (real admission, indexer, recall).

The slice — the first session of the development split's first conversation and the questions whose evidence
lies in it — is written to a temporary file, never into the repository. No timing is asserted.
"""
from __future__ import annotations

from oml_tools.bench import locomo


def test_rows_and_halves(ctx, one_session):
    from oml.domain.fusion import Fusion

    path, sid, n_questions = one_session
    res = locomo.run(ctx, path, decide=[sid], reference=False,
                     only=["fts", "bm25", "hybrid", "hybrid-ts_rank", "mm", "bm25-k0.9-b0.4"], lexical="bm25",
                     fusions={"mm": Fusion("minmax", 0)}, bm25={"bm25-k0.9-b0.4": (0.9, 0.4)})
    assert res["questions"] == n_questions > 0
    assert set(res["results"]) == {"fts", "bm25", "hybrid", "hybrid-ts_rank", "mm", "bm25-k0.9-b0.4"}
    for row in res["results"].values():
        overall = row["recall"]["overall"]
        assert 0.0 <= overall[5] <= overall[10] <= overall[25] <= 1.0
        assert set(row["groups"]) == {"decide"}  # every conversation of the slice is on the decide side
    lines = locomo.render(res)
    assert any(line.startswith("hybrid-ts_rank") for line in lines)
    # The evidence turns are in the slice: the default row finds some of it.
    assert res["results"]["hybrid"]["recall"]["overall"][25] > 0.5
