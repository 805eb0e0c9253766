"""``oml bench hnsw-build`` at a tiny size: pgvector's spill NOTICE is read, and the sized memory holds the graph."""
from __future__ import annotations

import pytest
import sqlalchemy as sa
import typer

from oml_tools.bench import hnsw_build


def test_a_small_memory_spills_and_the_sized_one_fits(ctx):
    res = hnsw_build.run(ctx, claims=800, tenant=None, settings=hnsw_build._settings("1MB:0,auto:0"))
    small, sized = res["builds"]
    assert res["rows"] == 800
    assert small["memory"] == "1MB" and 0 < small["spilled_after"] < 800
    assert sized["memory"] == "512MB" and sized["spilled_after"] is None and sized["workers"] == 0
    assert any("spilled after" in line for line in hnsw_build.render(res))


@pytest.mark.parametrize("spec, says", [("garbage", "garbage"), ("16kB:0", "16kB"), ("512MB:x", "integer"),
                                        ("auto:-3", "at least 0"), ("auto:99999", "99999")])
def test_a_bad_setting_is_refused_before_anything_is_loaded(ctx, spec, says):
    def tenants():
        with ctx.db.engine(None).connect() as c:
            return c.execute(sa.text("SELECT count(*) FROM tenants")).scalar()

    before = tenants()
    with pytest.raises(typer.BadParameter, match=says):
        hnsw_build.run(ctx, claims=5, tenant=None, settings=hnsw_build._settings(spec))
    assert tenants() == before


@pytest.mark.parametrize("tenant, says", [("acme", "only a bench tenant"), ("bench-nope", "no tenant")])
def test_a_tenant_that_is_not_an_existing_bench_tenant_is_refused(ctx, tenant, says):
    with pytest.raises(typer.BadParameter, match=says):
        hnsw_build.run(ctx, claims=5, tenant=tenant, settings=hnsw_build._settings("auto:0"))
