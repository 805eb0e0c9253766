"""``oml bench hnsw-build`` at a tiny size: pgvector's spill NOTICE is read, and the sized memory holds the graph."""
from __future__ import annotations

from oml_tools.bench import hnsw_build


def test_a_small_memory_spills_and_the_sized_one_fits(ctx):
    res = hnsw_build.run(ctx, claims=800, tenant=None, settings=hnsw_build._settings("1MB:0,auto:0"))
    small, sized = res["builds"]
    assert res["rows"] == 800
    assert small["memory"] == "1MB" and 0 < small["spilled_after"] < 800
    assert sized["memory"] == "512MB" and sized["spilled_after"] is None and sized["workers"] == 0
    assert any("spilled after" in line for line in hnsw_build.render(res))
