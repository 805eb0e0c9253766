"""``oml bench recall-phases --baseline`` on a slice of one development conversation (real admission, indexer,
recall): the read as built and the baseline that reads no candidate while it waits for its query vector answer every
question alike, each with its phase table. No timing is asserted."""
from __future__ import annotations

from oml_tools.bench import peers


def test_the_baseline_is_interleaved_and_answers_alike(ctx, one_session):
    path, _, n_questions = one_session
    res = peers.run_oml(ctx, path, baseline=True)
    assert res["questions"] == n_questions > 0
    assert res["same_answers"] == n_questions
    assert "lexical_rows" not in res["baseline"]["phases"]["middle_10pct"]
    lines = peers.render_oml(res)
    assert any(line.startswith("OML ÷ baseline: p50 ") for line in lines)
    assert sum(line.strip().startswith("latency") for line in lines) == 2  # both phase tables
