"""The bounded BM25 top-k (``oml_bm25_topk``, 63_bm25_postings.sql) against the exhaustive function it replaces on
the default read, and the maintained statistics against a recount (docs/adr/0020-bm25-bounded-top-k.md).

Real PostgreSQL. Rows are written straight into ``memories_fts`` as the schema owner (the statement triggers keep
the statistics whoever writes, the indexer or the benchmarks' bulk loader) inside one transaction per example,
rolled back at its end, so the examples do not see each other. The oracle is ``oml_bm25_search`` (61_bm25.sql),
which counts N, avgdl and df over the rows the read admits on every call.
"""
from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oml.domain import recall as R
from oml.services.reads import bm25
from oml.services.reads.recall import Recaller, RecallRequest
from oml.workers.index import indexer

from support.erasure import make_ekit
from support.owner import owner

WORDS = ["crane", "harbour", "red", "boat", "storm", "coast", "container", "dusk", "tide", "gull"]
PATHS = ["main", "main.a", "main.b", "main.a.x"]
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class _Rollback(Exception):
    pass


@pytest.fixture(scope="module")
def tenant(ctx):
    return make_ekit(ctx, "bm25-bounded").tenant


@contextmanager
def _tx(ctx, tenant: str) -> Iterator[sa.Connection]:
    """One owner transaction, rolled back however the body ends."""
    try:
        with owner(ctx, tenant) as conn:
            yield conn
            raise _Rollback
    except _Rollback:
        pass


_WA = {p: uuid.uuid5(uuid.NAMESPACE_URL, p) for p in PATHS}


def _insert(conn, tenant: str, docs) -> list[tuple[str, int]]:
    """Rows (text, path, self_signed, valid_to) as current tips; returns (version id, tip_from_seq)."""
    out = []
    for i, (text, path, self_signed, valid_to) in enumerate(docs):
        v = uuid.uuid4()
        conn.execute(sa.text(
            "INSERT INTO memories_fts (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance, self_signed,"
            " valid_to, tip_from_seq, tip_from_at, tsv) VALUES (:t, :v, :c, :w, :p, 'fact', 'human', :s, :vt, :seq, :at,"
            " to_tsvector('english', :x))"),
            {"t": tenant, "v": v, "c": uuid.uuid4(), "w": _WA[path], "p": path, "s": self_signed, "vt": valid_to,
             "seq": 1000 + i, "at": NOW, "x": text})
        out.append((str(v), 1000 + i))
    return out


def _lexemes(conn, text: str) -> list[str]:
    return sorted(conn.execute(sa.text("SELECT u.lexeme FROM unnest(to_tsvector('english', :x)) u"), {"x": text}).scalars())


def _oracle(conn, terms, scopes, valid_at, exclude, lim):
    return [(str(r.version_id), r.score) for r in conn.execute(sa.text(
        "SELECT version_id, score FROM oml_bm25_search(CAST(:q AS tsquery), CAST(:terms AS text[]),"
        " CAST(:s AS text[]), NULL, NULL, NULL, :va, CAST(:ex AS uuid[]), :lim)"),
        {"q": R.tsquery_text(terms, "|"), "terms": terms, "s": scopes, "va": valid_at, "ex": exclude, "lim": lim}).all()]


def _bounded(conn, terms, scopes, valid_at, exclude, lim, depth, fetched):
    got = conn.execute(sa.text(
        "SELECT version_id, score, exact, bound FROM oml_bm25_topk(CAST(:q AS tsquery), CAST(:terms AS text[]),"
        " CAST(:s AS text[]), :va, CAST(:ex AS uuid[]), :lim, :d, :f)"),
        {"q": R.tsquery_text(terms, "|"), "terms": terms, "s": scopes, "va": valid_at, "ex": exclude, "lim": lim, "d": depth,
         "f": fetched}).all()
    return [(str(r.version_id), r.score) for r in got[:-1]], got[-1].exact, got[-1].bound


SEEN = {True: 0, False: 0}

docs_st = st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join),
                             st.sampled_from(PATHS), st.booleans(),
                             st.sampled_from([None, None, None, NOW - dt.timedelta(days=1)])),
                   min_size=5, max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=docs_st, query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
       scopes=st.sampled_from([["main"], ["main.a"], ["main.b", "main.a.x"]]),
       lim=st.integers(1, 6), depth=st.sampled_from([1, 2, 4, 1024]), fetched_extra=st.integers(0, 5),
       n_excluded=st.integers(0, 2))
def test_bounded_top_k_is_the_exhaustive_one_or_says_how_far_off(ctx, tenant, docs, query, scopes, lim, depth,
                                                                  fetched_extra, n_excluded):
    """Not flagged: the same ids, order and scores as the exhaustive search. Flagged: every score returned is the
    exhaustive score of that row, and every admitted row it left out scores no higher than the bound (or than its
    last hit)."""
    with _tx(ctx, tenant) as conn:
        _assert_exhaustive_or_bounded(conn, tenant, docs, _lexemes(conn, " ".join(query)), scopes, lim, depth,
                                      lim + fetched_extra, n_excluded)


def _assert_exhaustive_or_bounded(conn, tenant, docs, terms, scopes, lim, depth, fetched, n_excluded) -> None:
    """``docs`` inserted, the first ``n_excluded`` excluded: the bounded answer is the exhaustive one (ids, order,
    scores) when not flagged; flagged, its scores are still exact and no row left out scores above the bound (or its
    last hit)."""
    ids = _insert(conn, tenant, docs)
    exclude = [v for v, _ in ids[:n_excluded]] or None
    want = _oracle(conn, terms, scopes, NOW, exclude, lim)
    got, exact, bound = _bounded(conn, terms, scopes, NOW, exclude, lim, depth, fetched)
    everything = dict(_oracle(conn, terms, scopes, NOW, exclude, 1000))
    for v, s in got:
        assert s == pytest.approx(everything[v], rel=1e-12)
    SEEN[exact] += 1
    if exact:
        assert [v for v, _ in got] == [v for v, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-12)
    else:
        floor = got[-1][1] if len(got) == lim else 0.0
        for v, s in everything.items():
            if v not in dict(got):
                assert s <= max(bound, floor) * (1 + 1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(st.tuples(st.lists(st.sampled_from(WORDS[:5]), min_size=1, max_size=6).map(" ".join),
                               st.sampled_from(PATHS), st.booleans(),
                               st.sampled_from([None, None, None, NOW - dt.timedelta(days=1)])),
                     min_size=20, max_size=120),
       query=st.lists(st.sampled_from(WORDS[:5]), min_size=1, max_size=5),
       scopes=st.sampled_from([["main"], ["main.a"], ["main.a", "main.b"]]),
       lim=st.integers(1, 30), depth=st.sampled_from([1, 3, 8, 40, 1024]), fetched_extra=st.sampled_from([0, 1, 10, 60, 500]),
       n_excluded=st.integers(0, 6), order=st.randoms(use_true_random=False))
def test_bounded_top_k_over_larger_limits_and_any_term_order(ctx, tenant, docs, query, scopes, lim, depth,
                                                              fetched_extra, n_excluded, order):
    """As above over fewer words and more rows (long lists, many equal scores), limits up to 30 (twice the limit below
    and above ``fetched``, lists cut and whole) and the query's lexemes in any order (the partial scores are summed in
    the lists' order, the exact ones in lexeme order)."""
    with _tx(ctx, tenant) as conn:
        terms = sorted(set(_lexemes(conn, " ".join(query))))
        order.shuffle(terms)
        _assert_exhaustive_or_bounded(conn, tenant, docs, terms, scopes, lim, depth, lim + fetched_extra, n_excluded)


def test_both_outcomes_were_exercised():
    # runs after the property test (file order): it must have met exact and flagged answers
    assert SEEN[True] > 0 and SEEN[False] > 0, SEEN


# oml_bm25_topk_sql()'s placeholders and their types, as oml_bm25_topk binds them (63_bm25_postings.sql).
_TYPES = ["tsquery", "text[]", "timestamptz", "text[]", "text[]", "timestamptz", "uuid[]", "int", "text", "text[]", "int",
          "int"]


def _statement(conn, tenant, terms, scopes, valid_at, exclude, lim, depth, fetched):
    """The rows of oml_bm25_topk_sql() run as a statement of its own, each placeholder a typed parameter."""
    text = conn.execute(sa.text("SELECT oml_bm25_topk_sql()")).scalar()
    for i in range(12, 0, -1):
        text = text.replace(f"${i}", f"CAST(%(p{i})s AS {_TYPES[i - 1]})")
    values = [R.tsquery_text(terms, "|"), scopes, None, None, None, valid_at, exclude, lim, tenant, terms, depth, fetched]
    return [tuple(r) for r in conn.exec_driver_sql(text, {f"p{i + 1}": v for i, v in enumerate(values)}).all()]


def test_bounded_function_answers_what_its_statement_answers(ctx, tenant):
    """oml_bm25_topk runs oml_bm25_topk_sql() as a static statement (a cached plan, generic after PostgreSQL's first
    custom plans): call by call, the same rows in the same order, scores to the last bit, as the statement run on its
    own with the same parameters -- over enough calls in one session for the plan cache to switch to a generic
    plan."""
    docs = [(" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(1 + i % 6)), PATHS[i % len(PATHS)], i % 5 == 0,
             NOW - dt.timedelta(days=1) if i % 9 == 0 else None) for i in range(80)]
    with _tx(ctx, tenant) as conn:
        ids = _insert(conn, tenant, docs)
        calls = 0
        for n, query in enumerate(["crane harbour", "red boat storm", "tide", "gull dusk coast container", "storm red"]):
            terms = _lexemes(conn, query)
            for scopes, valid_at, exclude, lim, depth, fetched in [
                    (["main"], NOW, None, 5, 2048, 512), (["main.a"], NOW, [ids[n][0]], 3, 4, 4),
                    (["main.b", "main.a.x"], None, None, 6, 1, 8), (["main"], NOW, [ids[0][0], ids[5][0]], 4, 16, 16)]:
                args = (terms, scopes, valid_at, exclude, lim, depth, fetched)
                got = [tuple(r) for r in conn.execute(sa.text(
                    "SELECT version_id, claim_id, score, tip_from_seq, exact, bound FROM oml_bm25_topk("
                    "CAST(:q AS tsquery), CAST(:terms AS text[]), CAST(:s AS text[]), :va, CAST(:ex AS uuid[]), :lim, :d,"
                    " :f)"), {"q": R.tsquery_text(terms, "|"), "terms": terms, "s": scopes, "va": valid_at, "ex": exclude,
                             "lim": lim, "d": depth, "f": fetched}).all()]
                assert got == _statement(conn, tenant, *args), (query, scopes)
                calls += 1
        assert calls > 5


def test_equal_candidates_are_fetched_newest_first(ctx, tenant):
    """Rows whose partial scores and bounds are equal take the fetch slots in the hits' own order (newer first), not in
    whatever order a plan's aggregate emits them: the same read fetches the same rows under any plan."""
    with _tx(ctx, tenant) as conn:
        ids = _insert(conn, tenant, [("crane harbour", "main.a", False, None)] * 20)
        terms = _lexemes(conn, "crane harbour")
        for mode in ("force_custom_plan", "force_generic_plan"):
            conn.execute(sa.text(f"SET LOCAL plan_cache_mode = {mode}"))
            for _ in range(3):
                got, exact, _bound = _bounded(conn, terms, ["main"], NOW, None, 3, 1024, 3)
                assert [v for v, _ in got] == [v for v, _ in ids[-1:-4:-1]], mode
                assert not exact  # the 17 equal rows left unfetched score as high as the last hit


def test_a_read_of_whole_lists_fetches_twice_its_limit(ctx, tenant):
    """When no list is cut, each partial score is the row's score: the search fetches twice its limit, not ``fetched``.
    Rows left unfetched that score as high as the last hit are still reported (flagged, the bound at that score);
    the hits are the exhaustive search's, equal scores newest first."""
    with _tx(ctx, tenant) as conn:
        ids = _insert(conn, tenant, [("crane harbour", "main.a", False, None)] * 20 + [("crane tide gull", "main.a", False, None)])
        terms = _lexemes(conn, "crane harbour")
        got, exact, bound = _bounded(conn, terms, ["main"], NOW, None, 3, 1024, 512)
        assert [v for v, _ in got] == [v for v, _ in _oracle(conn, terms, ["main"], NOW, None, 3)]
        assert [v for v, _ in got] == [v for v, _ in ids[-2:-5:-1]]
        assert not exact and bound == pytest.approx(got[-1][1], rel=1e-12)  # 14 equal rows were not fetched
        got, exact, bound = _bounded(conn, terms, ["main"], NOW, None, 12, 1024, 512)
        assert exact and bound == 0  # room for 24: all 21 rows seen were scored


def test_a_partial_score_summed_in_another_order_is_not_proof(ctx, tenant):
    """A partial score sums the terms of a row in the order its postings were aggregated, the exact score in lexeme
    order: the two can differ in the last bit. Rows of equal exact score (the same term frequencies over words of the
    same df, permuted), whose partial sums fall one bit apart, must not let a row left unfetched that ties the last hit
    (and comes first among equals) pass for one below it: the answer is the exhaustive one, or flagged."""
    with _tx(ctx, tenant) as conn:
        rows = [(" ".join(w for w, n in zip(["crane", "harbour", "tide"], tfs) for _ in range(n)), "main.a", False, None)
                for tfs in [(2, 1, 4), (1, 2, 4), (1, 2, 4), (2, 4, 1), (2, 4, 1)]]
        _insert(conn, tenant, rows)
        terms = _lexemes(conn, "crane harbour tide")
        for order in (terms, terms[::-1], [terms[1], terms[0], terms[2]], [terms[2], terms[0], terms[1]]):
            want = _oracle(conn, order, ["main"], NOW, None, 2)
            got, exact, _bound = _bounded(conn, order, ["main"], NOW, None, 2, 1024, 512)
            if exact:
                assert [v for v, _ in got] == [v for v, _ in want], order


def _long_lists(n: int):
    # many rows sharing the same two words with varied lengths: lists longer than 16 truncate at depth 16
    return [(" ".join(["crane"] * (1 + i % 3) + ["harbour"] * (i % 2) + ["tide"] * (i % 5)), "main.a", False, None)
            for i in range(n)]


def test_long_lists_truncate_and_are_flagged_or_proved(ctx, tenant):
    with _tx(ctx, tenant) as conn:
        _insert(conn, tenant, _long_lists(120))
        terms = _lexemes(conn, "crane harbour")
        got, exact, bound = _bounded(conn, terms, ["main"], NOW, None, 5, 16, 16)
        want = _oracle(conn, terms, ["main"], NOW, None, 5)
        everything = dict(_oracle(conn, terms, ["main"], NOW, None, 200))
        assert bound > 0  # lists of 120 were read 16 deep
        for v, s in got:
            assert s == pytest.approx(everything[v], rel=1e-12)
        if exact:
            assert [v for v, _ in got] == [v for v, _ in want]
        # the full depth never truncates a list of 120: twice the limit is fetched, and the rows left unfetched
        # score below the last hit
        got2, exact2, bound2 = _bounded(conn, terms, ["main"], NOW, None, 5, 1024, 256)
        assert exact2 and 0 < bound2 < got2[-1][1]
        assert [v for v, _ in got2] == [v for v, _ in want]


def _recount(conn, tenant: str):
    served = ("FROM memories_fts m WHERE m.tenant_id = :t AND m.tip_to_seq IS NULL AND m.provenance <> 'simulation'")
    q = lambda sql: sorted(tuple(r) for r in conn.execute(sa.text(sql), {"t": tenant}).all())  # noqa: E731
    return (
        q(f"SELECT workarea_id, path, self_signed, count(*), sum(tsv_len) {served} GROUP BY 1, 2, 3"),
        q(f"SELECT u.lexeme, m.workarea_id, m.self_signed, count(*) {served.replace('FROM memories_fts m', 'FROM memories_fts m CROSS JOIN LATERAL unnest(m.tsv) u')} GROUP BY 1, 2, 3"),
        q(f"SELECT u.lexeme, m.workarea_id, m.self_signed, oml_bm25_impact(cardinality(u.positions), m.tsv_len), m.version_id,"
          f" m.tip_from_seq, cardinality(u.positions), m.tsv_len {served.replace('FROM memories_fts m', 'FROM memories_fts m CROSS JOIN LATERAL unnest(m.tsv) u')}"),
    )


def _kept(conn, tenant: str):
    q = lambda sql: sorted(tuple(r) for r in conn.execute(sa.text(sql), {"t": tenant}).all())  # noqa: E731
    return (
        q("SELECT workarea_id, path, self_signed, n, sumdl FROM bm25_groups WHERE tenant_id = :t"),
        q("SELECT lexeme, workarea_id, self_signed, df FROM bm25_df WHERE tenant_id = :t"),
        q("SELECT lexeme, workarea_id, self_signed, impact, version_id, tip_from_seq, tf, dl FROM bm25_postings"
          " WHERE tenant_id = :t"),
    )


ops_st = st.lists(st.tuples(st.sampled_from(["supersede", "demote", "move", "delete", "retext", "noop_upsert"]),
                            st.integers(0, 1000)), max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=docs_st, ops=ops_st)
def test_maintained_statistics_equal_a_recount(ctx, tenant, docs, ops):
    """After inserts, supersessions (tip_to_seq set), demotions (rows deleted), path moves, re-indexed text and the
    indexer's no-op upserts, the three tables equal a recount from memories_fts, and no count is kept at 0."""
    with _tx(ctx, tenant) as conn:
        ids = _insert(conn, tenant, docs)
        for op, pick in ops:
            v, seq = ids[pick % len(ids)]
            key = {"t": tenant, "v": v, "s": seq}
            where = " WHERE tenant_id = :t AND version_id = :v AND tip_from_seq = :s"
            if op == "supersede":
                conn.execute(sa.text("UPDATE memories_fts SET tip_to_seq = 5000, tip_to_at = :at" + where), key | {"at": NOW})
            elif op == "demote" or op == "delete":
                conn.execute(sa.text("DELETE FROM memories_fts" + where), key)
            elif op == "move":
                conn.execute(sa.text("UPDATE memories_fts SET path = 'main.z' || substr(path, 5)"
                                     " WHERE tenant_id = :t AND starts_with(path, 'main.')"), {"t": tenant})
            elif op == "retext":
                conn.execute(sa.text("UPDATE memories_fts SET tsv = to_tsvector('english', 'gull gull tide')" + where), key)
            else:
                conn.execute(sa.text("UPDATE memories_fts SET path = path" + where), key)
        assert _kept(conn, tenant) == _recount(conn, tenant)
        assert conn.execute(sa.text("SELECT count(*) FROM bm25_df WHERE tenant_id = :t AND df <= 0"), {"t": tenant}).scalar() == 0
        assert conn.execute(sa.text("SELECT count(*) FROM bm25_groups WHERE tenant_id = :t AND n <= 0"), {"t": tenant}).scalar() == 0


def test_rebuild_equals_the_triggers(ctx, tenant):
    with _tx(ctx, tenant) as conn:
        _insert(conn, tenant, _long_lists(30))
        before = _kept(conn, tenant)
        conn.execute(sa.text("SELECT oml_bm25_rebuild()"))
        assert _kept(conn, tenant) == before == _recount(conn, tenant)


def test_default_read_uses_the_bounded_search_and_others_the_exhaustive_one(ctx):
    k = make_ekit(ctx, "bm25-bounded-read")
    for d in ("the red crane in the harbour", "a storm over the coast", "crane crane crane"):
        k.claim(d)
    indexer.catch_up(ctx, k.tenant)
    rec = Recaller(ctx, lexical="bm25")
    out = rec.recall(k.reader, RecallRequest(query="red crane", retriever="fts", k=5))
    fts = out["diagnostics"]["legs"]["fts"]
    assert fts["search"] == "bounded" and fts["approximate"] is False and fts["bound"] == 0
    assert out["diagnostics"]["approximate"] is False
    assert len(out["hits"]) == 2
    by_kind = rec.recall(k.reader, RecallRequest(query="red crane", retriever="fts", k=5, kinds=["fact"]))
    assert by_kind["diagnostics"]["legs"]["fts"]["search"] == "exhaustive"
    other = Recaller(ctx, lexical="bm25", bm25=(1.5, bm25.B)).recall(k.reader, RecallRequest(query="red crane", retriever="fts", k=5))
    assert other["diagnostics"]["legs"]["fts"]["search"] == "exhaustive"


def test_bounded_function_refuses_without_a_tenant(ctx, tenant):
    with ctx.db.system("oml_server") as conn, pytest.raises(Exception, match="no tenant bound"):
        conn.execute(sa.text("SELECT * FROM oml_bm25_topk(CAST('crane' AS tsquery), ARRAY['crane'],"
                             " ARRAY['main'], NULL, NULL, 10, 1024, 256)")).all()


@pytest.mark.parametrize("role", ["oml_server", "oml_indexer", "oml_admission", "oml_reconciler"])
def test_no_workload_reads_or_writes_the_bm25_tables_directly(ctx, tenant, role):
    """Only the SECURITY DEFINER search reads them (as oml_search) and only the owner's triggers write them."""
    with ctx.db.engine(None).connect() as c:
        for table in ("bm25_groups", "bm25_df", "bm25_postings"):
            for priv in ("SELECT", "INSERT", "UPDATE", "DELETE"):
                assert not c.execute(sa.text("SELECT has_table_privilege(:r, :t, :p)"),
                                     {"r": role, "t": table, "p": priv}).scalar(), (role, table, priv)
