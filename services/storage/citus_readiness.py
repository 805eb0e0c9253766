"""Is the schema ready to distribute by ``tenant_id``? A catalog walk, without Citus (docs/operations.md).

Citus distributes a table by one column and requires that every primary key
and unique constraint of a distributed table include it, and that a foreign
key between distributed tables include it on both sides (Citus docs,
"Distributed tables": table constraints). OML's plan is ``tenant_id`` as that
column (docs/operations.md, "Past one machine"). :func:`findings` checks,
on a migrated database, everything that can be checked from the catalog:

- every table with a ``tenant_id`` column ("tenant table") has ``tenant_id``
  in its primary key and in every unique constraint and unique index;
- every foreign key from a tenant table to a tenant table includes
  ``tenant_id`` on both sides, at the same position;
- every table without ``tenant_id`` is listed in :data:`REFERENCE_TABLES`
  with the reason it may stay a Citus reference table (or local table);
- the per-tenant index tables (:data:`PER_TENANT_PARTITIONED`) are
  LIST-partitioned by ``tenant_id``, so their partitions map onto
  distribution by the same column;
- every SQL or PL/pgSQL function of the schema that names a tenant table
  takes the tenant from the bound GUC (``oml_current_tenant()`` /
  ``current_setting('oml.tenant_id' …)``), as its first argument (so it can
  become a distributed function colocated on that argument), or, for a
  trigger, from the row being written.

Returns human-readable findings (table or function, rule); an empty list
means ready as far as the catalog shows. What the catalog cannot show is
listed in docs/operations.md.
"""
from __future__ import annotations

import re

import sqlalchemy as sa

#: Tables that stay out of distribution (Citus reference or coordinator-local tables), and why.
#: Each is written at most once per tenant or per API key, never per request.
REFERENCE_TABLES: dict[str, str] = {
    "tenants": "the tenant list itself (a reference table, written once per tenant)",
    "principal_directory": "key id → tenant routing before a tenant is bound; written once per API key (reference table)",
    "restore_state": "one row for the whole installation (a restore fence); local to the coordinator",
    "alembic_version": "migration bookkeeping; local to the coordinator",
}

#: Functions that name a tenant table but run no query on one themselves, and why.
QUERY_TEXT_FUNCTIONS: dict[str, str] = {
    "oml_fts_scope_sql": "returns the text of the rows a lexical read admits; its callers bind the tenant from the GUC as $9",
    "oml_fts_candidates_sql": "returns the lexical candidates' SQL text; its callers bind the tenant from the GUC as $9",
    "oml_fts_search_sql": "returns the search's SQL text; its callers bind the tenant from the GUC as $9",
    "oml_sim_fts_search_sql": "returns the simulation search's SQL text; its callers bind the tenant from the GUC",
    "oml_bm25_topk_sql": "returns the bounded BM25 search's SQL text, which oml_bm25_topk runs with its tenant from the"
                         " GUC as $9",
    "oml_bm25_maintain_sql": "returns the text of the BM25 triggers' statements, which take the tenant from the rows written",
}

#: Tables that must be LIST-partitioned by tenant (one HNSW / GIN graph per tenant): on Citus the
#: per-tenant partitions follow the distribution column.
PER_TENANT_PARTITIONED = ("memories_fts", "memory_embeddings", "bm25_postings", "bm25_df")

# A statement-level trigger reads its rows from a transition table and joins tenant tables on their tenant_id.
_JOINS_ON_TENANT = re.compile(r"\b\w+\.tenant_id\s*=\s*\w+\.tenant_id\b")
# ... or selects the tenant_id of the rows in its transition table (the BM25 triggers, 63_bm25_postings.sql).
_FROM_TRANSITION = re.compile(r"\bSELECT\s+tenant_id\b[^;]*?\bFROM\s+oml_(?:new|old)\b", re.S)
_TENANT_GUC = re.compile(r"oml_current_tenant\(\)|oml_bound_tenant\(\)|current_setting\(\s*'oml\.tenant_id'")


def _all_tables(conn: sa.Connection, *, with_tenant_id: bool = False) -> set[str]:
    """Public tables (a partitioned table once, by its parent); only those with a ``tenant_id`` column if asked."""
    column = (" JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped"
              if with_tenant_id else "")
    return set(conn.execute(sa.text(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace" + column +
        " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition")).scalars())


def _tenant_tables(conn: sa.Connection) -> set[str]:
    """Tables carrying ``tenant_id`` that are to be distributed (reference tables excluded)."""
    return _all_tables(conn, with_tenant_id=True) - set(REFERENCE_TABLES)


def _column_names(attnums: str, rel: str) -> str:
    """SQL: the names of relation ``rel``'s columns numbered by the array ``attnums``, in the array's order."""
    return (f"ARRAY(SELECT a.attname FROM unnest({attnums}) WITH ORDINALITY k(n, o)"
            f" JOIN pg_attribute a ON a.attrelid = {rel} AND a.attnum = k.n ORDER BY k.o)")


def _key_findings(conn: sa.Connection, tenant_tables: set[str]) -> list[str]:
    out = []
    rows = conn.execute(sa.text(
        "SELECT t.relname AS tbl, i.relname AS idx, x.indisprimary AS pk, " + _column_names("x.indkey", "t.oid") + " AS cols"
        "  FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid"
        "  JOIN pg_namespace n ON n.oid = t.relnamespace"
        " WHERE n.nspname = 'public' AND (x.indisunique OR x.indisprimary) AND NOT t.relispartition")).all()
    has_pk = {r.tbl for r in rows if r.pk}
    for r in rows:
        if r.tbl in tenant_tables and "tenant_id" not in (r.cols or []):
            what = "primary key" if r.pk else "unique constraint/index"
            out.append(f"{r.tbl}: {what} {r.idx} does not include tenant_id")
    for t in sorted(tenant_tables - has_pk):
        out.append(f"{t}: no primary key (a distributed table needs one that includes tenant_id)")
    return out


def _fk_findings(conn: sa.Connection, tenant_tables: set[str]) -> list[str]:
    out = []
    rows = conn.execute(sa.text(
        "SELECT c.conname, s.relname AS src, d.relname AS dst, " + _column_names("c.conkey", "c.conrelid") + " AS src_cols, "
        + _column_names("c.confkey", "c.confrelid") + " AS dst_cols"
        "  FROM pg_constraint c JOIN pg_class s ON s.oid = c.conrelid JOIN pg_class d ON d.oid = c.confrelid"
        "  JOIN pg_namespace n ON n.oid = s.relnamespace"
        " WHERE c.contype = 'f' AND n.nspname = 'public' AND NOT s.relispartition AND c.conparentid = 0")).all()
    for r in rows:
        if r.src in tenant_tables and r.dst in tenant_tables:
            src, dst = list(r.src_cols), list(r.dst_cols)
            if "tenant_id" not in src or "tenant_id" not in dst or src.index("tenant_id") != dst.index("tenant_id"):
                out.append(f"{r.src}: foreign key {r.conname} to {r.dst} does not pair tenant_id with tenant_id")
    return out


def _partition_findings(conn: sa.Connection) -> list[str]:
    rows = dict(conn.execute(sa.text(
        "SELECT c.relname, " + _column_names("p.partattrs", "c.oid") +
        "  FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid"
        "  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'")).all())
    return [f"{t}: not partitioned by tenant_id (one index graph per tenant is the design)"
            for t in PER_TENANT_PARTITIONED if list(rows.get(t) or []) != ["tenant_id"]]


def _function_findings(conn: sa.Connection, tenant_tables: set[str]) -> list[str]:
    out = []
    rows = conn.execute(sa.text(
        "SELECT p.proname, p.prosrc, p.proargnames, p.prorettype = 'trigger'::regtype AS is_trigger"
        "  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang"
        " WHERE n.nspname = 'public' AND l.lanname IN ('sql', 'plpgsql')"
        "   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')")).all()
    names = sorted(tenant_tables, key=len, reverse=True)
    for r in rows:
        src = r.prosrc or ""
        touched = [t for t in names if re.search(rf"\b{re.escape(t)}\b", src)]
        if not touched or r.proname in QUERY_TEXT_FUNCTIONS:
            continue
        first = (r.proargnames or [""])[0] or ""
        if _TENANT_GUC.search(src) or first in ("t", "tenant", "p_tenant", "tenant_id"):
            continue
        if r.is_trigger and (re.search(r"\b(NEW|OLD)\.tenant_id\b", src) or _JOINS_ON_TENANT.search(src)
                             or _FROM_TRANSITION.search(src)):
            continue  # a trigger acts on the tenant of the rows being written (its own row, or its transition table's)
        out.append(f"function {r.proname}: touches {touched[0]} but takes the tenant neither from the GUC nor as its first argument")
    return out


def findings(conn: sa.Connection) -> list[str]:
    """Every way the schema visible through ``conn`` (an owner connection) departs from the rules above."""
    tenant_tables = _tenant_tables(conn)
    out = []
    for t in sorted(_all_tables(conn) - tenant_tables):
        if t not in REFERENCE_TABLES:
            out.append(f"{t}: no tenant_id column and not a declared reference table")
    out += _key_findings(conn, tenant_tables)
    out += _fk_findings(conn, tenant_tables)
    out += _partition_findings(conn)
    out += _function_findings(conn, tenant_tables)
    return out
