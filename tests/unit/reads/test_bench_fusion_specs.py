"""The locomo-legs fusion specs (tools/oml_tools/bench/locomo_legs.py): ``…@K~SHARE`` adds window propagation over
the threads' windows, as the product propagates; a bad spec is refused before a run ingests anything."""
from __future__ import annotations

import pytest

from oml.domain import fusion as F
from oml.domain.recall import fuse_rrf
from oml_tools.bench.locomo_legs import check_fusions, fuse, parse_fusion, thread_windows, window_share


def test_a_spec_carries_its_share_after_a_tilde():
    assert parse_fusion("bm25:1,minilm:0.5@10~0.25") == ([("bm25", 1.0), ("minilm", 0.5)], 10)
    assert window_share("bm25:1,minilm:0.5@10~0.25") == 0.25
    assert window_share("bm25:1,minilm:0.5@10") == 0.0


@pytest.mark.parametrize("spec", ["bm25:1@10~abc", "bm25:1@10~2", "bm25:1@10~-0.1", "bm25:1@10~nan", "bm25:x@10"])
def test_a_bad_spec_is_refused_before_the_run(spec):
    with pytest.raises(ValueError, match=spec.split("~")[0].replace("+", r"\+")):
        check_fusions(["bm25:1,minilm:0.5@10", spec])


def test_threads_give_each_turn_the_turns_before_it_as_its_window():
    got = thread_windows({"c1": ["D1:1", "D1:2", "D2:1"]}, 2)
    assert got == {"c1#D1:1": [], "c1#D1:2": ["c1#D1:1"], "c1#D2:1": ["c1#D1:1", "c1#D1:2"]}


def test_the_fusion_with_a_share_is_the_products_propagation():
    lists = {"bm25": ["c#b", "c#c", "c#a"], "minilm": ["c#a", "c#c"]}
    windows = thread_windows({"c": ["a", "b", "c"]}, 2)
    fused = fuse_rrf(lists, k=10, weights={"bm25": 1.0, "minilm": 0.5}, priority=["bm25", "minilm"])
    want = F.propagate(fused, {x.key: windows[x.key] for x in fused}, 0.5, 2)
    assert fuse(lists, "bm25:1,minilm:0.5@10~0.5", windows, 2) == [x.key for x in want]
    assert fuse(lists, "bm25:1,minilm:0.5@10") == [x.key for x in fused]
    with pytest.raises(ValueError, match="turn order"):
        fuse(lists, "bm25:1,minilm:0.5@10~0.5")
