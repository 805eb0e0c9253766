"""Fusion (domain/fusion.py): deterministic, weight-aware, and the default is OML's weighted RRF."""
from __future__ import annotations

import itertools
import math

import pytest

from oml.domain import fusion as F
from oml.domain.recall import fuse_rrf

ORDER = {"fts": ["a", "b", "c", "d"], "vector": ["c", "e", "a", "f"]}
SCORES = {"fts": {"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1}, "vector": {"c": 0.8, "e": 0.7, "a": 0.6, "f": 0.2}}


@pytest.mark.parametrize("fusion", [F.Fusion(), F.Fusion("rrf", 60, (1.0, 0.5)), F.Fusion("minmax", 0),
                                    F.Fusion("minmax", 0, (1.0, 2.0))])
def test_fusion_is_deterministic_whatever_the_input_order(fusion):
    want = [(x.key, x.score) for x in F.fuse(fusion, ORDER, SCORES)]
    for legs in itertools.permutations(ORDER):
        order = {leg: list(ORDER[leg]) for leg in legs}
        scores = {leg: dict(reversed(list(SCORES[leg].items()))) for leg in reversed(legs)}
        assert [(x.key, x.score) for x in F.fuse(fusion, order, scores)] == want
    assert sorted(k for k, _ in want) == ["a", "b", "c", "d", "e", "f"]


def test_default_is_oml_rrf_with_the_vector_leg_at_half_weight():
    want = fuse_rrf(ORDER, weights={"fts": 1.0, "vector": 0.5}, priority=("fts", "vector"))
    assert [x.key for x in F.fuse(F.DEFAULT, ORDER, SCORES)] == [x.key for x in want]
    assert F.DEFAULT.describe() == {"method": "rrf", "k": 10, "weights": {"fts": 1.0, "vector": 0.5}}
    # equal weights remain expressible, and read as before
    assert F.Fusion().describe() == {"method": "rrf", "k": 10}


def test_minmax_normalises_each_leg_and_weights_move_the_order():
    got = {x.key: x.score for x in F.fuse(F.Fusion("minmax", 0), ORDER, SCORES)}
    # a: fts 1.0 + vector (0.6-0.2)/(0.8-0.2); c: fts 0.5 + vector 1.0
    assert got["a"] == pytest.approx(1.0 + 0.4 / 0.6) and got["c"] == pytest.approx(0.5 + 1.0)
    assert got["d"] == 0.0 and got["f"] == 0.0
    heavy_vector = [x.key for x in F.fuse(F.Fusion("minmax", 0, (0.1, 1.0)), ORDER, SCORES)]
    assert heavy_vector[0] == "c"


def test_equal_fused_scores_are_broken_by_the_legs_orders_not_the_key():
    # z and y tie on score (each first in one leg); fts has priority, so its first comes first.
    order = {"fts": ["z"], "vector": ["y"]}
    scores = {"fts": {"z": 1.0}, "vector": {"y": 1.0}}
    for fusion in (F.Fusion(), F.Fusion("minmax", 0)):
        assert [x.key for x in F.fuse(fusion, order, scores)] == ["z", "y"]


def test_specs_and_refusals():
    assert F.parse_spec("w=rrf:10:1,0.5") == ("w", F.Fusion("rrf", 10, (1.0, 0.5)))
    assert F.parse_spec("m=minmax:0") == ("m", F.Fusion("minmax", 0))
    for bad in ("nope", "x=rrf", "x=other:1"):
        with pytest.raises(ValueError):
            F.parse_spec(bad)
    with pytest.raises(ValueError):
        F.Fusion("rrf", 0)
    with pytest.raises(ValueError):
        F.Fusion("rrf", 10, (1.0, -1.0))


def test_the_expanded_lexical_leg_is_weighted_and_ranks_after_the_others_in_ties():
    # The RM3 leg (services/reads/prf.py) counts at its weight; a refused weight is said.
    order = {"fts": ["a", "b"], "vector": ["b", "a"], "prf": ["b", "c"]}
    got = F.fuse(F.Fusion(weights=(1.0, 1.0), prf=0.5), order, {})
    assert [x.key for x in got] == ["b", "a", "c"]
    assert got[0].score == pytest.approx(1 / 12 + 1 / 11 + 0.5 / 11)
    assert F.ALL_LEGS[-1] == "prf"
    with pytest.raises(ValueError, match="expanded lexical leg"):
        F.Fusion(prf=-1.0)


# Window propagation (domain/fusion.py ``propagate``): a share of a candidate's score goes to the turns its window holds.
RANKED = [F.Ranked("t2", 0.30, {"fts": 1}), F.Ranked("t9", 0.25, {"fts": 2}), F.Ranked("t1", 0.20, {"fts": 3}),
          F.Ranked("t5", 0.20, {"fts": 4})]


def test_propagation_gives_a_turn_a_share_of_what_its_followers_scored():
    # t2's window holds t1 (and t0, not a candidate): t1 gains 0.5 · 0.30 and overtakes t9; t5 holds nothing.
    got = F.propagate(RANKED, {"t2": ["t1", "t0"], "t9": []}, 0.5)
    assert [(x.key, round(x.score, 6)) for x in got] == [("t1", 0.35), ("t2", 0.30), ("t9", 0.25), ("t5", 0.20)]
    assert got[0].ranks == {"fts": 3}  # the legs' ranks are kept


def test_propagation_sums_every_follower_and_ignores_itself_repeats_and_strangers():
    got = F.propagate(RANKED, {"t2": ["t5", "t5", "t2"], "t9": ["t5"], "zz": ["t5"], "t1": ["nope"]}, 0.25)
    assert dict((x.key, round(x.score, 6)) for x in got)["t5"] == round(0.20 + 0.25 * (0.30 + 0.25), 6)
    assert dict((x.key, x.score) for x in got)["t2"] == 0.30


def test_propagation_keeps_the_fused_order_on_ties_and_does_nothing_at_share_zero():
    assert [x.key for x in F.propagate(RANKED, {}, 0.5)] == ["t2", "t9", "t1", "t5"]
    assert F.propagate(RANKED, {"t2": ["t1"]}, 0.0) == RANKED
    # equal gains (0.35 each) keep t1 before t5, as the fusion placed them
    assert [x.key for x in F.propagate(RANKED, {"t2": ["t5", "t1"]}, 0.5)] == ["t1", "t5", "t2", "t9"]


def test_only_the_best_followers_count_up_to_the_window_depth():
    # t1 is held by t2, t9 and t5: with two counting, the best two (0.30, 0.25); t5's 0.20 does not add up
    window = {"t2": ["t1"], "t9": ["t1"], "t5": ["t1"]}
    got = {x.key: x.score for x in F.propagate(RANKED, window, 0.5, most=2)}
    assert got["t1"] == 0.20 + 0.5 * (0.30 + 0.25)
    assert {x.key: x.score for x in F.propagate(RANKED, window, 0.5)}["t1"] == 0.20 + 0.5 * (0.30 + 0.25 + 0.20)
    assert F.propagate(RANKED, window, 0.5, most=0) == sorted(RANKED, key=lambda x: -x.score)
    with pytest.raises(ValueError, match="followers"):
        F.propagate(RANKED, window, 0.5, most=-1)


def test_propagation_does_not_depend_on_the_order_the_windows_come_in():
    # The windows arrive in the order of their version ids (services/reads/windows.py), which differ between two
    # ingestions of one corpus. Three followers of d, at RRF scores 1/11, 1/12 and 1/17: added in the order given,
    # (a + b) + c and (a + c) + b differ in the last bit, and z, the fused order's first, tied with one of them.
    a, b, c, s_d = 1 / 11, 1 / 12, 1 / 17, 0.01
    assert (a + b) + c != (a + c) + b
    ranked = [F.Ranked("z", math.fsum((s_d, a, b, c))), F.Ranked("e1", a), F.Ranked("e2", b), F.Ranked("e3", c),
              F.Ranked("d", s_d)]
    one = F.propagate(ranked, {"e1": ["d"], "e2": ["d"], "e3": ["d"]}, 1.0)
    other = F.propagate(ranked, {"e3": ["d"], "e1": ["d"], "e2": ["d"]}, 1.0)
    assert [(x.key, x.score) for x in one] == [(x.key, x.score) for x in other]


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan"), float("inf")])
def test_a_window_share_outside_zero_to_one_is_refused(share):
    with pytest.raises(ValueError, match="window share"):
        F.propagate(RANKED, {}, share)
    with pytest.raises(ValueError, match="window share"):
        F.Fusion(window_share=share)


def test_the_window_share_is_described_only_when_set():
    assert "window_share" not in F.DEFAULT.describe() or F.DEFAULT.window_share
    assert F.Fusion(window_share=0.25).describe()["window_share"] == 0.25
    assert "window_share" not in F.Fusion().describe()


def test_windows_held_keeps_admitted_candidates_only():
    from oml.services.reads import windows

    rows = [("v2", ["c1", "c0"]), ("v3", ["c2", "c1"]), ("vx", ["c1"]), ("v1", None)]
    claim_of = {"v1": "c1", "v2": "c2", "v3": "c3"}
    # c0 is no candidate, vx not admitted: neither moves anything; a version never holds itself
    assert windows.held(rows, claim_of) == {"v2": ["v1"], "v3": ["v2", "v1"]}
    assert windows.held(rows, {"v2": "c2"}) == {}


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-1", "1.5", "abc", "", " ", "0,5"])
def test_a_bad_window_share_setting_stops_at_start(monkeypatch, value):
    from pydantic import ValidationError

    from oml.services.runtime.settings import Settings

    monkeypatch.setenv("OML_RECALL_WINDOW_SHARE", value)
    with pytest.raises(ValidationError, match="recall_window_share"):
        Settings()


def test_the_window_share_setting_reads_a_share(monkeypatch):
    from oml.services.runtime.settings import Settings

    assert Settings().recall_window_share == 0.0
    monkeypatch.setenv("OML_RECALL_WINDOW_SHARE", "0.25")
    assert Settings().recall_window_share == 0.25
