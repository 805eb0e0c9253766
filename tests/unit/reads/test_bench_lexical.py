"""The in-process BM25 of ``oml bench locomo-legs --lexical`` (tools/oml_tools/bench/lexical.py): its formula is
61_bm25.sql's, its ties newer first, and its option parsing refuses unknown configurations."""
from __future__ import annotations

import math

import pytest

from oml_tools.bench import lexical as lx


def _docs() -> lx.Docs:
    tf = [{"cat": 2, "dog": 1}, {"cat": 1}, {"bird": 3}, {"cat": 1}]
    df: dict[str, int] = {}
    for row in tf:
        for t in row:
            df[t] = df.get(t, 0) + 1
    return lx.Docs([f"s#D1:{i}" for i in range(4)], [10, 11, 12, 13], tf, [sum(r.values()) for r in tf], df)


def test_score_is_the_sql_formula_and_ties_are_newer_first():
    d = _docs()
    top = lx.bm25_top(d, ["cat", "dog", "none"], 10, 1.2, 0.75)
    # rows 1 and 3 score the same (one "cat", dl 1): the newer tip (seq 13) first; row 2 has no query lexeme
    assert top == ["s#D1:0", "s#D1:3", "s#D1:1"]
    n, avgdl = 4.0, 8 / 4  # dl 3, 1, 3, 1
    idf = lambda df: math.log(1 + (n - df + 0.5) / (df + 0.5))  # noqa: E731
    norm = lambda dl: 1.2 * (0.25 + 0.75 * dl / avgdl)  # noqa: E731
    want = {"s#D1:0": idf(3) * 2 * 2.2 / (2 + norm(3)) + idf(1) * 2.2 / (1 + norm(3)),
            "s#D1:1": idf(3) * 2.2 / (1 + norm(1))}
    got = dict(lx.bm25_ranked(d, ["dog", "cat"], 1.2, 0.75))
    assert got["s#D1:0"] == pytest.approx(want["s#D1:0"]) and got["s#D1:1"] == pytest.approx(want["s#D1:1"])
    assert lx.bm25_top(d, [], 10, 1.2, 0.75) == [] and lx.bm25_top(d, ["cat"], 1, 1.2, 0.75) == ["s#D1:3"]  # short rows win on tf alone


def test_parse_refuses_an_unknown_configuration():
    assert lx.parse(["a=simple", "b=english-nostop"]) == {"a": "simple", "b": "english-nostop"}
    with pytest.raises(ValueError):
        lx.parse(["a=german"])
    with pytest.raises(ValueError):
        lx.parse(["=simple"])


def test_saved_legs_are_fused_offline():
    """``oml bench locomo-legs-fuse``: fusions of a ``--save`` file's leg lists, scored as the run scores them."""
    from oml_tools.bench import locomo_legs

    lists = {"a": [f"s#D1:{i}" for i in range(1, 7)], "b": ["s#D1:9"]}
    saved = {"conversations": ["s"], "groups": {"decide": ["s"], "confirm": []}, "fusions": {"old": {}},
             "results": {}, "per_question": [{"sample": "s", "category": 4, "question": "q", "evidence": ["s#D1:9"],
                                              "lists": lists}]}
    res = locomo_legs.rescore(saved, ["a:1,b:0.1@10", "a:1,b:1@10", "b"])
    assert set(res["fusions"]) == {"a:1,b:0.1@10", "a:1,b:1@10", "b"} and "per_question" not in res
    # at weight 0.1 b's one row (0.1/11) falls below a's sixth (1/16): seventh; at weight 1 it ties a's first
    assert res["fusions"]["a:1,b:0.1@10"]["recall"]["overall"][5] == 0.0
    assert res["fusions"]["a:1,b:0.1@10"]["recall"]["overall"][10] == 1.0
    assert res["fusions"]["a:1,b:1@10"]["recall"]["overall"][5] == 1.0
    assert res["fusions"]["b"]["groups"]["decide"][5] == 1.0
    with pytest.raises(KeyError):
        locomo_legs.rescore(saved, ["a:1,c:1@10"])


def test_spec_grammar():
    from oml.domain.context_window import OWN_WEIGHT

    assert lx.spec_of("english") == lx.Spec("english", OWN_WEIGHT, None)
    assert lx.spec_of("english*3/1") == lx.Spec("english", 3, 1) and lx.spec_of("simple/0") == lx.Spec("simple", OWN_WEIGHT, 0)
    for bad in ("english*0", "english*10", "english/9", "german*2", "english*2*3", ""):
        with pytest.raises(ValueError):
            lx.spec_of(bad)
    assert lx.parse(["a=english*1"]) == {"a": "english*1"}


def test_model_text_grammar():
    """``--model-text``: R defaults to the embedding text's once, not the full-text weight; a NAME that is no
    ``--model``, a malformed text and ``+A`` are refused."""
    from oml_tools.bench import locomo_legs

    models = {"m": ("dir", "f.onnx")}
    assert locomo_legs.model_texts_of(["m=/3"], models) == {"m": (1, 3)}
    assert locomo_legs.model_texts_of(["m=*2/3", "m=*2"], models) == {"m": (2, None)}
    assert locomo_legs.model_texts_of(["m"], models) == {"m": (1, None)}
    for bad in (["x=*2"], ["=*2"], ["m=*2/3+1"], ["m=/3+1"], ["m=english*2"], ["m=*0"], ["m=2"]):
        with pytest.raises(ValueError):
            locomo_legs.model_texts_of(bad, models)
