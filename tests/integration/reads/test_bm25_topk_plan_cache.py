"""``oml_bm25_topk`` (63_bm25_postings.sql) keeps its statement's plan for the session: one pooled connection serves
tenant after tenant and read after read, and under a generic plan each call still answers for its own binding and
arguments only, as the statement run on its own does.

Real PostgreSQL. Two tenants share their vocabulary; their rows are committed once for the module, and every call goes
through one ``oml_server`` connection, tenant bound per transaction as the server binds it.
"""
from __future__ import annotations

import datetime as dt
import uuid

import pytest
import sqlalchemy as sa

from oml.domain import recall as R

from support.erasure import make_ekit
from support.owner import owner

WORDS = ["crane", "harbour", "red", "boat", "storm", "coast", "container", "dusk", "tide", "gull"]
PATHS = ["main", "main.a", "main.b", "main.a.x"]
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
_WA = {p: uuid.uuid5(uuid.NAMESPACE_URL, p) for p in PATHS}
# oml_bm25_topk_sql()'s placeholders and their types, as oml_bm25_topk binds them.
_TYPES = ["tsquery", "text[]", "timestamptz", "text[]", "text[]", "timestamptz", "uuid[]", "int", "text", "text[]", "int",
          "int"]
_CALL = sa.text("SELECT version_id, claim_id, score, tip_from_seq, exact, bound FROM oml_bm25_topk(CAST(:q AS tsquery),"
                " CAST(:terms AS text[]), CAST(:s AS text[]), :va, CAST(:ex AS uuid[]), :lim, :d, :f)")
_BIND = sa.text("SELECT set_config('oml.tenant_id', :t, true)")


@pytest.fixture(scope="module")
def tenants(ctx):
    """Two tenants, the same words over the same paths in a different mix; {tenant: [(version id, text)]}."""
    out = {}
    for n, name in enumerate(("plan-cache-a", "plan-cache-b")):
        t = make_ekit(ctx, name).tenant
        rows = []
        with owner(ctx, t) as c:
            for i in range(60):
                text = " ".join(WORDS[(i * (3 + 4 * n) + j) % len(WORDS)] for j in range(1 + (i + n) % 5))
                v = uuid.uuid4()
                c.execute(sa.text(
                    "INSERT INTO memories_fts (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance,"
                    " self_signed, valid_to, tip_from_seq, tip_from_at, tsv) VALUES (:t, :v, :c, :w, :p, 'fact',"
                    " 'human', :s, :vt, :seq, :at, to_tsvector('english', :x))"),
                    {"t": t, "v": v, "c": uuid.uuid4(), "w": _WA[PATHS[i % 4]], "p": PATHS[i % 4], "s": i % 7 == 0,
                     "vt": NOW - dt.timedelta(days=1) if i % 6 == 0 else None, "seq": 1000 + i, "at": NOW, "x": text})
                rows.append((str(v), text))
        out[t] = rows
    return out


def _args(conn, tenant_rows, k: int):
    """The k-th call's arguments: query, scope, valid time, exclusions, limit, depth and fetch size all vary."""
    query = [" ".join(WORDS[(k + j) % len(WORDS)] for j in range(1 + k % 3)), "crane", "tide gull"][k % 3]
    terms = sorted(conn.execute(sa.text("SELECT u.lexeme FROM unnest(to_tsvector('english', :x)) u"),
                                {"x": query}).scalars())
    scopes = [["main"], ["main.a"], ["main.b", "main.a.x"], ["main.a.x"]][k % 4]
    valid_at = [NOW, None][k % 2]
    exclude = [None, [tenant_rows[k % 60][0]], [tenant_rows[0][0], tenant_rows[(5 * k) % 60][0]]][k % 3]
    lim, depth, fetched = [(5, 2048, 512), (3, 4, 4), (6, 1, 8), (4, 16, 16)][k % 4]
    return {"q": R.tsquery_text(terms, "|"), "terms": terms, "s": scopes, "va": valid_at, "ex": exclude, "lim": lim,
            "d": depth, "f": fetched}


def _statement(conn, tenant: str, a) -> list[tuple]:
    """oml_bm25_topk_sql() run on its own (EXECUTE, as the owner), each placeholder a typed parameter."""
    text = conn.execute(sa.text("SELECT oml_bm25_topk_sql()")).scalar()
    for i in range(12, 0, -1):
        text = text.replace(f"${i}", f"CAST(%(p{i})s AS {_TYPES[i - 1]})")
    values = [a["q"], a["s"], None, None, None, a["va"], a["ex"], a["lim"], tenant, a["terms"], a["d"], a["f"]]
    return [tuple(r) for r in conn.exec_driver_sql(text, {f"p{i + 1}": v for i, v in enumerate(values)}).all()]


def _own(tenant_rows) -> set[str]:
    return {v for v, _ in tenant_rows}


@pytest.mark.parametrize("mode", ["force_generic_plan", "auto", "force_custom_plan"])
def test_one_session_alternating_tenants_answers_each_for_its_own(ctx, tenants, mode):
    """Tenants alternate on one connection, more than five calls each; every call returns only its tenant's rows, and
    the rows the statement run on its own returns for that tenant and those arguments. The function keeps one generic
    plan whatever the session's own ``plan_cache_mode`` (it sets its own)."""
    (ta, ra), (tb, rb) = tenants.items()
    want = {}
    with owner(ctx) as c:
        for k in range(16):
            for t, rows in ((ta, ra), (tb, rb)):
                want[t, k] = _statement(c, t, _args(c, rows, k))
    assert any(want[ta, k] and want[tb, k] and want[ta, k][:-1] for k in range(16))
    with ctx.db.engine("oml_server").connect() as conn:
        pid = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
        conn.execute(sa.text(f"SET plan_cache_mode = {mode}"))
        conn.commit()
        hits = {ta: 0, tb: 0}
        for k in range(16):
            for t, rows in ((ta, ra), (tb, rb)):
                with conn.begin():
                    assert conn.execute(sa.text("SELECT pg_backend_pid()")).scalar() == pid
                    conn.execute(_BIND, {"t": t})
                    got = [tuple(r) for r in conn.execute(_CALL, _args(conn, rows, k)).all()]
                assert got == want[t, k], (t, k, mode)
                ids = {str(r[0]) for r in got[:-1]}
                assert ids <= _own(rows), (t, k, mode)
                hits[t] += len(ids)
        assert all(hits.values()), hits
        # the binding gone, the cached plan refuses as the first call does
        with pytest.raises(sa.exc.DBAPIError, match="no tenant bound"), conn.begin():
            conn.execute(_CALL, _args(conn, ra, 0)).all()


_SIG = "oml_bm25_topk(tsquery, text[], text[], timestamptz, uuid[], int, int, int)"
# What a workload would run to change what the cached statement does: the function itself, the texts it was made from,
# an overload in the schema on its search_path that a call in the statement could resolve to, its owner's role.
_TAMPER = [
    f"ALTER FUNCTION {_SIG} RESET search_path",
    f"ALTER FUNCTION {_SIG} SECURITY INVOKER",
    f"ALTER FUNCTION {_SIG} RESET plan_cache_mode",
    f"ALTER FUNCTION {_SIG} RESET enable_seqscan",
    "CREATE OR REPLACE FUNCTION oml_bm25_topk_sql() RETURNS text LANGUAGE sql RETURN 'SELECT 1'",
    "CREATE OR REPLACE FUNCTION oml_fts_scope_sql() RETURNS text LANGUAGE sql RETURN 'SELECT 1'",
    "CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE sql RETURN 'x'",
    "CREATE FUNCTION public.starts_with(text, unknown) RETURNS boolean LANGUAGE sql RETURN true",
    "CREATE TABLE public.x (tenant_id text)",
    "SET ROLE oml_search",
]


@pytest.mark.parametrize("role", ["oml_server", "oml_indexer", "oml_admission", "oml_reconciler", "oml_lake_writer",
                                  "oml_relay"])
def test_no_workload_changes_what_the_function_runs(ctx, tenants, role):
    """Only the server may call it; no workload may alter or replace it or the texts it was made from, put an object in
    schema public, or act as its owner."""
    for sql in _TAMPER:
        with pytest.raises(sa.exc.ProgrammingError, match="permission denied|must be owner"), ctx.db.system(role) as c:
            c.execute(sa.text(sql))
    t, rows = next(iter(tenants.items()))
    call = ctx.db.tenant(role, t)
    if role == "oml_server":
        with call as c:
            assert c.execute(_CALL, _args(c, rows, 0)).all()
    else:
        with pytest.raises(sa.exc.ProgrammingError, match="permission denied"), call as c:
            c.execute(_CALL, _args(c, rows, 0)).all()


def test_the_generic_plan_made_on_a_one_page_partition_looks_candidates_up_by_key(ctx):
    """The session's generic plan is made once, from each partition's statistics at that time; a tenant analyzed while
    its partition held a page keeps that plan as it grows (until the partition is analyzed again). Under the function's
    own settings, its candidates are still looked up by key: a sequential scan there reads the whole partition once per
    candidate (512 per read) once the tenant has grown."""
    t = make_ekit(ctx, "plan-cache-tiny").tenant
    with owner(ctx, t) as c:
        for i in range(5):
            c.execute(sa.text(
                "INSERT INTO memories_fts (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance,"
                " self_signed, tip_from_seq, tip_from_at, tsv) VALUES (:t, :v, :c, :w, 'main.a', 'fact', 'human', false,"
                " :seq, :at, to_tsvector('english', 'crane harbour tide'))"),
                {"t": t, "v": uuid.uuid4(), "c": uuid.uuid4(), "w": _WA["main.a"], "seq": 1000 + i, "at": NOW})
    with owner(ctx) as c:
        c.execute(sa.text("ANALYZE memories_fts, bm25_postings, bm25_df, bm25_groups"))
    with owner(ctx) as c:
        text = c.execute(sa.text("SELECT oml_bm25_topk_sql()")).scalar()
        config = c.execute(sa.text("SELECT proconfig FROM pg_proc WHERE proname = 'oml_bm25_topk'")).scalar()
        c.execute(sa.text("SET LOCAL ROLE oml_search"))
        for setting in config:
            name, _, value = setting.partition("=")
            c.execute(sa.text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
        raw = c.connection.driver_connection
        raw.pgconn.exec_(f"PREPARE tiny ({', '.join(_TYPES)}) AS {text}".encode())
        plan = "\n".join(r[0] for r in raw.execute(
            "EXPLAIN (COSTS OFF) EXECUTE tiny ('crane | harbour | tide', ARRAY['main'], NULL, NULL, NULL, NULL, NULL, 10,"
            f" '{t}', ARRAY['crane', 'harbour', 'tide'], 2048, 512)").fetchall())
        raw.execute("DEALLOCATE tiny")
    cand = plan[plan.index("CTE cand"):plan.index("CTE toks")]
    assert "Seq Scan" not in cand, cand
