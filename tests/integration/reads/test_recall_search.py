"""Search correctness on a bulk population: plans as oml_server, filtered vector search against brute force.

The population (tools/oml_tools/bench/population.py) is loaded with COPY as the
owner — projections, encrypted bodies, FTS and vector rows — because the
properties under test are the index queries' and a few thousand rows keep
the planner honest. The query vector is injected, so brute force in numpy
is the reference.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import sqlalchemy as sa

from oml.domain import recall as R
from oml.services.reads.recall import Recaller, RecallRequest, _Filters, _vector_literal, vector_sql
from oml_tools.bench.population import Item, bulk_load, unit_vectors

from support.recall import make_world

N_AREAS = 100
PER_AREA = 50          # each workarea holds 1 % of the dense tenant
VOCAB = [f"w{i}" for i in range(3000)]


def sentences(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.3, size=(n, 9)), len(VOCAB)) - 1
    return [" ".join(VOCAB[j] for j in row) for row in ranks]


@pytest.fixture(scope="module")
def pop(ctx):
    dense = make_world(ctx, "dense")
    areas = [dense.area(f"main.s{i}") for i in range(N_AREAS)]
    n = N_AREAS * PER_AREA
    q = unit_vectors(1, seed=99)[0]
    vecs = unit_vectors(n, seed=1, clusters=40)
    # Pull a tenth of the dense tenant towards the query: the sparse tenant's rows will be far from everything it asks.
    vecs[::10] = (vecs[::10] + 1.5 * q) / np.linalg.norm(vecs[::10] + 1.5 * q, axis=1, keepdims=True)
    texts = sentences(n, 2)
    texts[123] += " zyzzyva"
    items = [Item(areas[i % N_AREAS], f"main.s{i % N_AREAS}", texts[i], vecs[i]) for i in range(n)]
    loaded = bulk_load(ctx, "dense", items, author=(dense.writer.principal_id, dense.writer.identity_id),
                       reviewer=(dense.reviewer.principal_id, dense.reviewer.identity_id))
    sparse = make_world(ctx, "sparse")
    far = -q + 0.05 * unit_vectors(5, seed=7)
    far = far / np.linalg.norm(far, axis=1, keepdims=True)
    s_items = [Item(sparse.root, "main", f"sparse row {i}", far[i]) for i in range(5)]
    s_loaded = bulk_load(ctx, "sparse", s_items, author=(sparse.writer.principal_id, sparse.writer.identity_id),
                         reviewer=(sparse.reviewer.principal_id, sparse.reviewer.identity_id))
    return {
        "dense": dense, "sparse": sparse, "q": q, "areas": areas,
        "dense_rows": [(l.version_id, items[i].workarea_id, items[i].embedding) for i, l in enumerate(loaded)],
        "sparse_rows": [(l.version_id, s_items[i].workarea_id, s_items[i].embedding) for i, l in enumerate(s_loaded)],
        "zyzzyva": loaded[123].version_id,
        "dense_reader": dense.key("reader"), "sparse_reader": sparse.key("reader"),
    }


def brute(rows, q, k, workarea=None):
    cand = [(float(1.0 - np.dot(e, q)), v) for v, w, e in rows if workarea is None or w == workarea]
    cand.sort()
    return cand[:k]


def vector_ids(ctx, principal, q, k, workarea=None, exact_scan_max=R.EXACT_SCAN_MAX):
    out = Recaller(ctx, embed=lambda _t: q, exact_scan_max=exact_scan_max).recall(
        principal, RecallRequest(query="anything", retriever="vector", k=k, workarea_id=workarea))
    return [h["version_id"] for h in out["hits"]], out["diagnostics"]


def same_ranking(got: list[str], ref: list[tuple[float, str]]) -> bool:
    """Equal as lists, tolerating swaps of neighbours whose distances differ by float rounding only."""
    if len(got) != len(ref):
        return False
    d = {v: dist for dist, v in ref}
    if set(got) != set(d):
        # Allow a different member only at a rounding-level tie on the boundary.
        return False
    return all(abs(d[a] - d[b]) < 1e-6 or d[a] <= d[b] for a, b in zip(got, got[1:]))


def test_hnsw_and_gin_are_used_as_oml_server(ctx, pop):
    f = _Filters(("main",), None, None, None, None, [])
    sql, params = vector_sql(f, exact=False)
    with ctx.db.tenant("oml_server", "dense") as c:
        plan = "\n".join(r[0] for r in c.execute(sa.text("EXPLAIN " + sql),
                                                  params | {"t": "dense", "q": _vector_literal(pop["q"]), "n": 10}))
        assert "Index Scan using memory_embeddings_p" in plan and "_hnsw" in plan, plan
        # A subtree filter: still the tenant's HNSW index, the filter applied during the (iterative) scan.
        f2 = _Filters(("main.s1", "main.s2", "main.s3", "main.s4", "main.s5", "main.s6", "main.s7", "main.s8",
                       "main.s9", "main.s10"), None, None, None, None, [])
        sql2, params2 = vector_sql(f2, exact=False)
        plan2 = "\n".join(r[0] for r in c.execute(sa.text("EXPLAIN " + sql2),
                                                   params2 | {"t": "dense", "q": _vector_literal(pop["q"]), "n": 10}))
        assert "_hnsw" in plan2, plan2
        # The exact form never touches HNSW.
        sql3, params3 = vector_sql(f, exact=True)
        plan3 = "\n".join(r[0] for r in c.execute(sa.text("EXPLAIN " + sql3),
                                                   params3 | {"t": "dense", "q": _vector_literal(pop["q"]), "n": 10}))
        assert "_hnsw" not in plan3
        # The problem: as oml_server under RLS, @@ is not leakproof and GIN is skipped.
        direct = "\n".join(r[0] for r in c.execute(sa.text(
            "EXPLAIN SELECT version_id FROM memories_fts WHERE tenant_id = 'dense' AND tsv @@ CAST(:q AS tsquery)"),
            {"q": "'zyzzyva'"}))
        assert "_tsv" not in direct and "Seq Scan" in direct, direct
        # The way round it: the SECURITY DEFINER search, same query text as recall runs.
        fts = "\n".join(r[0] for r in c.execute(sa.text(
            "SELECT * FROM oml_fts_search_plan(CAST(:q AS tsquery), CAST(:s AS text[]), NULL, NULL, NULL, NULL, NULL, 10)"),
            {"q": "'zyzzyva'", "s": ["main"]}))
        assert "Bitmap Index Scan on memories_fts_p" in fts and "_tsv" in fts, fts
        assert len(set(re.findall(r"memories_fts_p(\d+)", fts))) == 1  # one partition: the tenant's
        got = c.execute(sa.text("SELECT version_id FROM oml_fts_search(CAST(:q AS tsquery), CAST(:s AS text[]),"
                                " NULL, NULL, NULL, NULL, NULL, 10)"), {"q": "'zyzzyva'", "s": ["main"]}).scalars().all()
        assert [str(v) for v in got] == [pop["zyzzyva"]]


def test_fts_function_is_tenant_bound_and_server_only(ctx, pop):
    with ctx.db.tenant("oml_server", "sparse") as c:
        got = c.execute(sa.text("SELECT count(*) FROM oml_fts_search(CAST(:q AS tsquery), CAST(:s AS text[]),"
                                " NULL, NULL, NULL, NULL, NULL, 10)"), {"q": "'zyzzyva'", "s": ["main"]}).scalar()
        assert got == 0  # the dense tenant's row is invisible from the sparse tenant
    with ctx.db.system("oml_server") as c:
        with pytest.raises(sa.exc.DBAPIError) as e:
            c.execute(sa.text("SELECT * FROM oml_fts_search(CAST('''x''' AS tsquery), ARRAY['main'], NULL, NULL, NULL, NULL, NULL, 10)"))
        assert "no tenant bound" in str(e.value)
    for role in ("oml_admission", "oml_indexer", "oml_reconciler", "oml_lake_writer", "oml_relay"):
        with ctx.db.tenant(role, "dense") as c:
            with pytest.raises(sa.exc.ProgrammingError):
                c.execute(sa.text("SELECT * FROM oml_fts_search(CAST('''x''' AS tsquery), ARRAY['main'], NULL, NULL, NULL, NULL, NULL, 10)"))


@pytest.mark.parametrize("exact_scan_max", [R.EXACT_SCAN_MAX, 0])
def test_sparse_tenant_next_to_dense_one(ctx, pop, exact_scan_max):
    q = pop["q"]
    got, diag = vector_ids(ctx, pop["sparse_reader"], q, 10, exact_scan_max=exact_scan_max)
    ref = brute(pop["sparse_rows"], q, 10)
    assert len(got) == 5  # min(k, qualifying): every row it has, however far
    assert same_ranking(got, ref)
    assert diag["legs"]["vector"]["search"] == ("exact" if exact_scan_max else "hnsw")
    # And the dense tenant is untouched by the sparse one.
    dgot, _ = vector_ids(ctx, pop["dense_reader"], q, 10, exact_scan_max=exact_scan_max)
    assert set(dgot).isdisjoint({v for v, _, _ in pop["sparse_rows"]})
    assert len(dgot) == 10


@pytest.mark.parametrize("exact_scan_max", [R.EXACT_SCAN_MAX, 0])
@pytest.mark.parametrize("k", [10, 50, 100])
def test_one_percent_workarea_equals_brute_force(ctx, pop, exact_scan_max, k):
    q = pop["q"]
    wa = pop["areas"][7]
    got, diag = vector_ids(ctx, pop["dense_reader"], q, k, workarea=wa, exact_scan_max=exact_scan_max)
    ref = brute(pop["dense_rows"], q, k, workarea=wa)
    assert len(got) == min(k, PER_AREA)
    assert same_ranking(got, ref), (got[:5], ref[:5])
    assert diag["legs"]["vector"]["search"] in (("exact",) if exact_scan_max else ("hnsw", "hnsw+exact"))


def test_whole_tenant_exact_below_threshold_equals_brute_force(ctx, pop):
    q = pop["q"]
    got, diag = vector_ids(ctx, pop["dense_reader"], q, 25)
    assert diag["legs"]["vector"]["search"] == "exact"  # 5,000 rows ≤ EXACT_SCAN_MAX
    assert same_ranking(got, brute(pop["dense_rows"], q, 25))


def test_hnsw_whole_tenant_is_close_to_brute_force(ctx, pop):
    # Approximate by design above the threshold: always k rows, and (with ef_search ≥ 100) almost all true neighbours.
    q = pop["q"]
    got, diag = vector_ids(ctx, pop["dense_reader"], q, 25, exact_scan_max=100)
    assert diag["legs"]["vector"]["search"].startswith("hnsw")
    assert len(got) == 25
    ref = {v for _, v in brute(pop["dense_rows"], q, 25)}
    assert len(ref & set(got)) >= 23


def test_approximate_answers_are_flagged_with_their_scan(ctx, pop):
    # The HNSW path served (threshold forced to 100) says so, with the scan's parameters.
    q = pop["q"]
    _, diag = vector_ids(ctx, pop["dense_reader"], q, 10, exact_scan_max=100)
    vec = diag["legs"]["vector"]
    assert diag["approximate"] is True and vec["search"] == "hnsw"
    assert vec["exact_scan_max"] == 100 and vec["qualifying"] == ">100"
    assert vec["ef_search"] == R.EF_SEARCH_MIN and vec["iterative_scan"] == "relaxed_order"
    assert isinstance(vec["max_scan_tuples"], int) and vec["max_scan_tuples"] > 0
    # Below the threshold: exact, and said so.
    _, exact = vector_ids(ctx, pop["dense_reader"], q, 10)
    assert exact["approximate"] is False and exact["legs"]["vector"]["search"] == "exact"
    assert exact["legs"]["vector"]["exact_scan_max"] == R.EXACT_SCAN_MAX and "ef_search" not in exact["legs"]["vector"]
    # No vector leg: nothing approximate.
    fts = Recaller(ctx, embed=lambda _t: q, exact_scan_max=0).recall(
        pop["dense_reader"], RecallRequest(query="zyzzyva", retriever="fts", k=5))["diagnostics"]
    assert fts["approximate"] is False
    # `oml recall` says so under its rows too: the flag is in --json only otherwise.
    from oml.services.entrypoints.cli.recall import _approximate

    flagged = _approximate(diag)
    assert len(flagged) == 1 and flagged[0].startswith("vector: an HNSW scan") and ">100 qualifying rows" in flagged[0]
    assert _approximate(exact) == [] and _approximate(fts) == []


def test_fts_on_population_uses_scope_and_counts(ctx, pop):
    out = Recaller(ctx, embed=lambda _t: pop["q"]).recall(
        pop["dense_reader"], RecallRequest(query="zyzzyva", retriever="fts", k=5))
    assert [h["version_id"] for h in out["hits"]] == [pop["zyzzyva"]]
    scoped = Recaller(ctx, embed=lambda _t: pop["q"]).recall(
        pop["dense_reader"], RecallRequest(query="zyzzyva", retriever="fts", k=5, workarea_id=pop["areas"][5]))
    assert scoped["hits"] == []  # row 123 lives in main.s23
