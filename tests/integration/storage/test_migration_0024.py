"""Migration 0024 on a database from before it: the bounded BM25 search runs its statement as static SQL, keeping
its owner, the server's grant and the maintained statistics."""
from __future__ import annotations

import re

import psycopg
import pytest
import sqlalchemy as sa

from support.admission import owner
from support.bm25_function import KEPT, SRC, assert_kept, generator, indexed_tenant, upgrade_to
from support.paths import REPO

# The function as 0023 left it, as far as this migration is concerned: the statement run through EXECUTE.
_DYNAMIC = sa.text("""
CREATE OR REPLACE FUNCTION oml_bm25_topk(q tsquery, terms text[], scopes text[], valid_at timestamptz, exclude uuid[],
                                         lim int, depth int, fetched int)
  RETURNS TABLE (version_id uuid, claim_id uuid, score double precision, tip_from_seq bigint, exact boolean,
                 bound double precision)
  LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $f$
DECLARE
  t text := oml_bound_tenant();
BEGIN
  PERFORM oml_search_limit(lim);
  RETURN QUERY EXECUTE oml_bm25_topk_sql()
    USING q, scopes, NULL::timestamptz, NULL::text[], NULL::text[], valid_at, exclude, lim, t, terms, depth, fetched;
END $f$""")


def test_upgrade_from_0023_makes_the_bounded_search_static(ctx):
    k, before = indexed_tenant(ctx, "migration-0024")
    with owner(ctx, k.tenant) as c:
        c.execute(_DYNAMIC)
        assert "EXECUTE oml_bm25_topk_sql()" in c.execute(SRC).scalar()
        c.execute(sa.text("UPDATE alembic_version SET version_num = '0023'"))
    upgrade_to(ctx, "0024")
    with owner(ctx, k.tenant) as c:
        src = c.execute(SRC).scalar()
        assert "EXECUTE" not in src and "RETURN QUERY WITH g AS MATERIALIZED" in src and "$" not in src
        assert "oml_bm25_search(q, terms, scopes" in src  # the fallback of 0022 stays
        assert c.execute(KEPT, {"t": k.tenant}).one() == before
        assert_kept(c)


def _statement_is(c, text: str) -> None:
    c.exec_driver_sql("CREATE OR REPLACE FUNCTION oml_bm25_topk_sql() RETURNS text LANGUAGE sql IMMUTABLE RETURN '"
                      + text.replace("'", "''") + "'")


def _run(c, sql: str) -> None:
    """``sql`` as it stands (no parameters: its % are its own), in ``c``'s transaction."""
    c.connection.driver_connection.execute(sql)


# Each as the statement's text, keyed by what the refusal names: a $ the generator must not take for a placeholder, or
# must not leave behind.
_FOREIGN = {
    "$13": "SELECT $13::uuid",
    "$20": "SELECT $20::uuid",
    "x$1": "SELECT 1 AS x$1",
    "$1$": "SELECT $1$a$1$",
    "$q$": "SELECT $q$a$q$",
    "$": "SELECT $",
    "'$5'": "SELECT '$5' -- a comment's apostrophe",
    '"a$1"': 'SELECT 1 AS "a$1"',
}


@pytest.mark.parametrize("name", list(_FOREIGN))
def test_the_generator_refuses_a_dollar_that_is_not_a_placeholder(ctx, name):
    """A $ in the statement that is not one of $1..$12 standing alone stops the migration with where it stands."""
    with owner(ctx) as c:
        _statement_is(c, _FOREIGN[name])
        with pytest.raises(psycopg.errors.RaiseException) as err:
            _run(c, generator())
        message = err.value.diag.message_primary
        assert "not one of the placeholders $1 to $12 standing alone" in message and name in message, message
        c.rollback()


def test_the_generator_replaces_every_placeholder_standing_alone(ctx):
    """$10..$12 are not read as $1 followed by a digit; each placeholder is its variable, the three fixed ones NULL."""
    stmt = ("SELECT NULL::uuid, NULL::uuid, NULL::float8, NULL::bigint, $3 IS NULL AND $4 IS NULL AND $5 IS NULL,"
            " (($8 + $11 + $12) * 1000 + cardinality($10) * 100 + cardinality($2) * 10 + cardinality($7)"
            " + CASE WHEN $6 IS NULL THEN 0 ELSE 0.5 END + CASE WHEN $1 IS NULL THEN 0 ELSE 0.25 END"
            " + CASE WHEN $9 = oml_current_tenant() THEN 0.125 ELSE 0 END)::float8")
    with owner(ctx, "migration-0024-no-rows") as c:
        _statement_is(c, stmt)
        _run(c, generator())
        assert "$" not in c.execute(SRC).scalar()
        row = c.execute(sa.text(
            "SELECT exact, bound FROM oml_bm25_topk(CAST('crane' AS tsquery), ARRAY['crane', 'red', 'tide'],"
            " ARRAY['main', 'main.a'], now(), ARRAY[gen_random_uuid()], 2, 30, 400)")).all()[-1]
        c.rollback()
    assert row.exact is True and row.bound == (2 + 30 + 400) * 1000 + 300 + 20 + 1 + 0.5 + 0.25 + 0.125


def test_every_later_revision_that_changes_the_statement_remakes_the_function():
    """From 0024 on, oml_bm25_topk holds the text of oml_fts_scope_sql() (60_search.sql) as it stood when
    63_bm25_postings.sql last ran: a revision re-applying 60_search.sql must re-apply 63_bm25_postings.sql after it,
    or an upgraded database's bounded search keeps admitting rows by the old text while the exhaustive one reads the new
    (a fresh database runs every file in order and would not show it)."""
    versions = REPO / "services" / "storage" / "migrations" / "versions"
    for path in sorted(versions.glob("0*.py")):
        if path.name < "0024":
            continue
        files = re.findall(r'"(\d\d_[a-z0-9_]+\.sql)"', path.read_text())
        if "60_search.sql" in files:
            assert "63_bm25_postings.sql" in files[files.index("60_search.sql"):], path.name
