"""Migration 0004 (recall tie keys, valid-time index) on a database from before it: the FTS search functions had
another result type, which ``CREATE OR REPLACE`` cannot change; 0004 re-creates them, re-grants them to the
server only, and adds the partial index the valid-time count reads."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from oml.services.reads.recall import Recaller, RecallRequest
from oml.services.storage.migrate import alembic_config

from support.recall import make_world, owner

_ARGS = "tsquery, text[], timestamptz, text[], text[], timestamptz, uuid[], int"
BEFORE = f"""
DROP FUNCTION oml_fts_search({_ARGS});
DROP FUNCTION oml_sim_fts_search(uuid[], {_ARGS});
CREATE FUNCTION oml_fts_search(q tsquery, scopes text[], as_of timestamptz, kinds text[], provenances text[],
                               valid_at timestamptz, exclude uuid[], lim int)
  RETURNS TABLE (version_id uuid, claim_id uuid, rank real) LANGUAGE sql AS $$ SELECT NULL::uuid, NULL::uuid, 0::real $$;
CREATE FUNCTION oml_sim_fts_search(sims uuid[], q tsquery, scopes text[], as_of timestamptz, kinds text[],
                                   provenances text[], valid_at timestamptz, exclude uuid[], lim int)
  RETURNS TABLE (simulation_id uuid, version_id uuid, claim_id uuid, rank real)
  LANGUAGE sql AS $$ SELECT NULL::uuid, NULL::uuid, NULL::uuid, 0::real $$;
DROP INDEX memories_fts_valid_time;
UPDATE alembic_version SET version_num = '0003';
"""


def test_upgrade_from_0003_recreates_the_search_functions(ctx):
    w = make_world(ctx, "migration-0004")
    w.remember("main", "The archive tier keeps cold snapshots for a decade.")
    w.index()
    with owner(ctx) as c:
        c.execute(sa.text(BEFORE))
    # To 0004 itself: later revisions are other changes' business (and already applied by the template).
    command.upgrade(alembic_config(ctx.db.owner_url.render_as_string(hide_password=False)), "0004")
    with owner(ctx) as c:
        cols = set(c.execute(sa.text(
            "SELECT unnest(proargnames) FROM pg_proc WHERE proname IN ('oml_fts_search', 'oml_sim_fts_search')")).scalars())
        assert {"rank_cd", "tip_from_seq"} <= cols
        owners = set(c.execute(sa.text("SELECT pg_get_userbyid(proowner) FROM pg_proc"
                                       " WHERE proname IN ('oml_fts_search', 'oml_sim_fts_search')")).scalars())
        assert owners == {"oml_search"}
        assert c.execute(sa.text("SELECT to_regclass('memories_fts_valid_time')")).scalar() is not None
        assert c.execute(sa.text("SELECT has_function_privilege('oml_server', :f, 'EXECUTE'),"
                                 " has_function_privilege('oml_indexer', :f, 'EXECUTE')"),
                         {"f": f"oml_fts_search({_ARGS})"}).one() == (True, False)
    out = Recaller(ctx).recall(w.key("reader"), RecallRequest(query="archive snapshots", retriever="fts"))
    assert [h["body"]["statement"] for h in out["hits"]] == ["The archive tier keeps cold snapshots for a decade."]
