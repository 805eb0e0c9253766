"""The forgery matrix: every table and column each workload role's grants let it write, and what refuses or names a
change to it (docs/security-model.md, "Derived state and who notices").

The matrix below is compared with the database's own privileges (``has_table_privilege`` / ``has_column_privilege``
over every table, ``has_function_privilege`` over every SECURITY DEFINER function), so a new grant that is not in it
fails here until someone says what notices a change made with it. Each entry names its category (who may do what,
which key encrypts, what is served, or derived state), the check that refuses or names the change, and the test that
shows it. Then, as each role, a change of each kind is made for real and the named check is run.

Run with ``-s`` to print the matrix.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from oml.services.entrypoints.http.app import create_app
from oml.services.reads import readlog

from support.admission import bearer, run_cli
from support.owner import owner
from support.recall import make_world

ROLES = ("oml_admission", "oml_server", "oml_lake_writer", "oml_reconciler", "oml_indexer", "oml_relay")
TENANT = "forgery-matrix"

AUTHORITY, KEYS, SERVED, DERIVED = "who may do what", "which key encrypts", "what is served", "derived state"
CRITICAL = (AUTHORITY, KEYS, SERVED)

# Checks (what refuses or names a change).
GUARD = "refused by the authority guard unless the journal carries the act (97_authority_guards.sql); a forged event: journal verify"
VERIFIED_STATE = "verified-state check (the acts consult the verified authority replay, not the row)"
JOURNAL = "journal verify / reconcile: hash chain and signature"
CHAIN = ("refused at commit unless every journal row lies on the chain, at or below the head, and the head never moves "
         "back and names its row's hash (97_chain_membership.sql)")
SUBJECT_LINK = ("subject erasure erases only claims a verified body of which declares the subject; others are skipped "
                "and counted (integrity_events, state.subject_link)")
PROJECTION = "reconcile / projections rebuild --verify: projection drift"
STATUS = "verified reads: status not backed by a genuine event (refused, integrity_events)"
BODY = "verified reads: ciphertext not the one the signed claim.submitted names (body.digest, integrity_events); reconcile: bodies"
GONE = "reads: integrity.body (body.missing / dek.missing), never claim.erased; reconcile: destroyed_without_erasure"
DEK = ("reads: dek.digest, the wrapped DEK is not the one the latest signed act names (claim.submitted's or"
       " encryption_key.rewrapped's wrapped_dek_sha256; integrity_events); oml index verify: dek.digest")
NEW_DEK = DEK + "; a DEK of another artifact does not unwrap under this one's info either"
INDEX = "oml index verify: index.missing / index.extra / index.stale; oml index rebuild repairs; recall re-admits every hit from the projections"
CURSOR = "oml index verify: cursor.ahead (and index.missing for the skipped events); the lake's own record: oml lake status / reconcile"
OUTBOX = "oml index verify: outbox.missing (a consumer behind with nothing to wake it); oml status: lag"
READLOG = "oml readlog verify / reconcile / oml index verify: readlog.edited / inserted / deleted against the sealed batch"
CHECKPOINT = "reconcile / evidence verify: a checkpoint must be signed under the chain's key"
COUNTER = "a counter of refusals: the refused state is named again by the check that found it (verify, reconcile, reads)"
IDEMPOTENCY = ("idempotency replay: the stored response's MAC under a KeyStore-derived key must verify for the tenant,"
               " principal, key and request (integrity.unverified_state, integrity_events state.idempotency)")
SNAPSHOT = ("verified-state snapshots: resumed only when the MAC under a KeyStore-derived key verifies and the journal row"
            " at its seq has its head hash; else refused (integrity_events state.snapshot) and the chain verified from event 1")
POISON = "oml status: poison records; a deleted record leaves the claim unindexed: oml index verify index.missing"
NOT_NOTICED = None


@dataclass(frozen=True)
class Entry:
    category: str
    check: str | None
    proof: str | None = None   # <file under tests/integration>::<test> that shows the check at work
    note: str = ""


SIG = "test_forged_bodies_and_fences.py::"
VS = "test_signed_state.py::"
AF = "test_authority_forgery.py::"
RC = "test_reconcile.py::"
VR = "test_verified_reads.py::"
FM = "test_forgery_matrix.py::"
DD = "test_dek_digests.py::"
CM = "test_chain_membership.py::"
SB = "test_subject_binding.py::"
WF = "test_window_forgery.py::test_a_forged_window_moves_only_the_admitted_claims_it_names"

# (role, table, privilege) -> Entry; a privilege is DELETE or TRUNCATE (whole table), INSERT or UPDATE (the columns
# listed in COLUMNS, else every column the role may write).
MATRIX: dict[tuple[str, str, str], Entry] = {
    # ------------------------------------------------------------------ oml_admission
    ("oml_admission", "artifacts", "INSERT"): Entry(SERVED, BODY, SIG + "test_a_body_the_owner_sealed_anew_is_never_served"),
    ("oml_admission", "artifacts", "UPDATE"): Entry(SERVED, BODY + "; " + GONE, AF + "test_a_body_resealed_to_the_tenant_key_is_not_served"),
    ("oml_admission", "chain_heads", "INSERT"): Entry(DERIVED, CHAIN + "; " + JOURNAL, CM + "test_the_head_never_moves_back_nor_off_the_chain"),
    ("oml_admission", "chain_heads", "UPDATE"): Entry(DERIVED, CHAIN + "; " + JOURNAL, CM + "test_the_head_never_moves_back_nor_off_the_chain"),
    ("oml_admission", "checkpoints", "INSERT"): Entry(DERIVED, CHECKPOINT, RC + "test_a_checkpoint_signed_by_an_unregistered_key_is_unknown_key"),
    ("oml_admission", "claim_edges", "INSERT"): Entry(SERVED, PROJECTION, RC + "test_a_projection_row_changed_directly_is_projection_drift",
                                                      "lineage only; bodies are judged per version"),
    ("oml_admission", "claim_subjects", "INSERT"): Entry(SERVED, SUBJECT_LINK, SB + "test_a_forged_subject_link_does_not_erase_an_unrelated_claim",
                                                         "a link decides which claims a subject erasure destroys"),
    ("oml_admission", "claim_subjects", "DELETE"): Entry(DERIVED, NOT_NOTICED, None,
                                                         "a deleted subject HMAC lets a subject erasure miss a claim: HMACs are "
                                                         "not journalled (personal data); the claims an erasure finds are checked "
                                                         "against their signed bodies, a claim it no longer finds is not"),
    ("oml_admission", "claim_versions", "INSERT"): Entry(SERVED, GUARD + "; " + STATUS, AF + "test_forged_versions_inserted_as_a_set_are_refused_by_name"),
    ("oml_admission", "claim_versions", "UPDATE"): Entry(SERVED, GUARD + "; " + STATUS, VR + "test_a_workload_cannot_write_a_status_the_journal_does_not_give"),
    ("oml_admission", "claims", "INSERT"): Entry(SERVED, PROJECTION, RC + "test_a_projection_row_changed_directly_is_projection_drift",
                                                 "a claim row serves nothing without a guarded version"),
    ("oml_admission", "claims", "UPDATE"): Entry(AUTHORITY, VERIFIED_STATE, VS + "test_a_forged_hold_release_does_not_let_an_operator_erase_a_held_claim",
                                                 "legal_hold / erased_seq: guarded today"),
    ("oml_admission", "erasure_rewrites", "INSERT"): Entry(DERIVED, NOT_NOTICED, None,
                                                           "bookkeeping of a physical rewrite after a shred; the shred itself is "
                                                           "checked (GONE); a rewrite marked done without running leaves dead tuples"),
    ("oml_admission", "erasure_rewrites", "UPDATE"): Entry(DERIVED, NOT_NOTICED, None, "as INSERT"),
    ("oml_admission", "idempotency_keys", "INSERT"): Entry(SERVED, IDEMPOTENCY, "test_idempotency_forgery.py::test_a_forged_response_is_never_replayed",
                                                           "a stored write acknowledgement (ids) is replayed only under the server's MAC"),
    ("oml_admission", "idempotency_keys", "DELETE"): Entry(DERIVED, NOT_NOTICED, None, "a retry becomes a second write, journalled"),
    ("oml_admission", "identities", "INSERT"): Entry(AUTHORITY, VERIFIED_STATE, AF + "test_an_unregistered_actor_is_refused_to_workloads_and_reported_for_the_owner"),
    ("oml_admission", "identities", "UPDATE"): Entry(AUTHORITY, VERIFIED_STATE, AF + "test_an_unregistered_actor_is_refused_to_workloads_and_reported_for_the_owner"),
    ("oml_admission", "index_threads", "DELETE"): Entry(DERIVED, "oml index rebuild recomputes context windows", None,
                                                        "context windows change index text (ranking), never access"),
    ("oml_admission", "journal_events", "INSERT"): Entry(AUTHORITY, CHAIN + "; " + JOURNAL + "; " + VERIFIED_STATE,
                                                         CM + "test_an_orphan_reparent_does_not_widen_a_readers_scope",
                                                         "an orphan above the head is refused at commit; a row on the chain "
                                                         "under a key the chain never registered: the verified state"),
    ("oml_admission", "memories_fts", "DELETE"): Entry(DERIVED, INDEX, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
    ("oml_admission", "memories_fts", "UPDATE"): Entry(DERIVED, INDEX, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
    ("oml_admission", "memory_embeddings", "DELETE"): Entry(DERIVED, INDEX, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
    ("oml_admission", "memory_embeddings", "UPDATE"): Entry(DERIVED, INDEX, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
    ("oml_admission", "merkle_state", "INSERT"): Entry(DERIVED, CHECKPOINT, RC + "test_a_checkpoint_beyond_the_postgres_head_is_a_cut_tail_even_without_the_lake",
                                                       "the frontier feeds the next signed checkpoint, which reconcile recomputes"),
    ("oml_admission", "merkle_state", "UPDATE"): Entry(DERIVED, CHECKPOINT, RC + "test_a_checkpoint_beyond_the_postgres_head_is_a_cut_tail_even_without_the_lake"),
    ("oml_admission", "outbox", "INSERT"): Entry(DERIVED, "a wake-up only: consumers read the journal from their cursor", None),
    ("oml_admission", "principal_directory", "INSERT"): Entry(AUTHORITY, VERIFIED_STATE, AF + "test_a_principal_deleted_after_use",
                                                              "key id → tenant: authentication then needs a guarded principal row"),
    ("oml_admission", "principals", "INSERT"): Entry(AUTHORITY, GUARD + "; " + VERIFIED_STATE, AF + "test_an_unregistered_actor_is_refused_to_workloads_and_reported_for_the_owner"),
    ("oml_admission", "principals", "UPDATE"): Entry(AUTHORITY, GUARD + "; " + VERIFIED_STATE, AF + "test_a_key_behind_a_mis_signed_principal_event_is_refused"),
    ("oml_admission", "read_events", "DELETE"): Entry(DERIVED, READLOG, "test_readlog.py::test_tampering_is_named_by_verify"),
    ("oml_admission", "read_events", "UPDATE"): Entry(DERIVED, READLOG, "test_readlog.py::test_tampering_is_named_by_verify"),
    ("oml_admission", "readlog_batches", "INSERT"): Entry(DERIVED, READLOG, "test_readlog.py::test_tampering_is_named_by_verify",
                                                          "a batch is believed only through its journalled anchor"),
    ("oml_admission", "retention_policies", "INSERT"): Entry(AUTHORITY, GUARD + "; " + VERIFIED_STATE, AF + "test_a_tenant_policy_changed_around_the_journal_is_refused"),
    ("oml_admission", "retention_policies", "UPDATE"): Entry(AUTHORITY, GUARD + "; " + VERIFIED_STATE, AF + "test_a_tenant_policy_changed_around_the_journal_is_refused"),
    ("oml_admission", "verified_state_snapshots", "INSERT"): Entry(AUTHORITY, SNAPSHOT,
                                                                   "test_state_snapshots.py::test_a_snapshot_forged_as_the_workload_is_refused_and_recorded",
                                                                   "a snapshot stands for the verified authority up to its seq"),
    ("oml_admission", "verified_state_snapshots", "DELETE"): Entry(DERIVED, NOT_NOTICED, None,
                                                                   "the next cold start verifies the chain from event 1: time, never trust"),
    ("oml_admission", "sim_memories_fts", "DELETE"): Entry(DERIVED, "oml index rebuild; recall re-admits every hit from the projections", None,
                                                           "simulation index rows: not compared by oml index verify"),
    ("oml_admission", "sim_memories_fts", "UPDATE"): Entry(DERIVED, "oml index rebuild; recall re-admits every hit from the projections", None,
                                                           "path only"),
    ("oml_admission", "sim_memory_embeddings", "DELETE"): Entry(DERIVED, "oml index rebuild; recall re-admits every hit from the projections", None),
    ("oml_admission", "sim_memory_embeddings", "UPDATE"): Entry(DERIVED, "oml index rebuild; recall re-admits every hit from the projections", None),
    ("oml_admission", "sim_tip_intervals", "INSERT"): Entry(SERVED, PROJECTION + "; " + STATUS, RC + "test_a_projection_row_changed_directly_is_projection_drift"),
    ("oml_admission", "sim_tip_intervals", "UPDATE"): Entry(SERVED, PROJECTION + "; " + STATUS, RC + "test_a_projection_row_changed_directly_is_projection_drift"),
    ("oml_admission", "simulations", "INSERT"): Entry(AUTHORITY, VERIFIED_STATE, VS + "test_a_simulation_reopened_in_its_row_takes_no_writes", "audience and open/closed: the verified-state check"),
    ("oml_admission", "simulations", "UPDATE"): Entry(AUTHORITY, VERIFIED_STATE, VS + "test_a_simulation_reopened_in_its_row_takes_no_writes", "closed_seq = NULL reopens a closed simulation"),
    ("oml_admission", "tenant_keys", "INSERT"): Entry(KEYS, GUARD + "; " + VERIFIED_STATE, VS + "test_a_forged_encryption_key_never_wraps_a_dek"),
    ("oml_admission", "tenant_keys", "UPDATE"): Entry(KEYS, GUARD + "; " + VERIFIED_STATE, VS + "test_a_forged_encryption_key_never_wraps_a_dek"),
    ("oml_admission", "tenant_policies", "INSERT"): Entry(AUTHORITY, GUARD + "; " + VERIFIED_STATE, VS + "test_a_forged_allow_policy_does_not_admit_personal_data"),
    ("oml_admission", "tenant_policies", "UPDATE"): Entry(AUTHORITY, GUARD + "; " + VERIFIED_STATE, AF + "test_a_tenant_policy_changed_around_the_journal_is_refused"),
    ("oml_admission", "tenants", "INSERT"): Entry(AUTHORITY, JOURNAL, None, "a tenant row without its signed tenant.created has no key history: "
                                                  "every read of it is refused (journal.key)"),
    ("oml_admission", "tip_intervals", "INSERT"): Entry(SERVED, PROJECTION + "; " + STATUS, RC + "test_a_projection_row_changed_directly_is_projection_drift"),
    ("oml_admission", "tip_intervals", "UPDATE"): Entry(SERVED, PROJECTION + "; " + STATUS, RC + "test_a_projection_row_changed_directly_is_projection_drift"),
    ("oml_admission", "version_status_log", "INSERT"): Entry(SERVED, STATUS, VR + "test_a_status_seq_pointing_at_another_genuine_event_is_refused",
                                                             "append-only; a read needs a genuine event at the logged seq"),
    ("oml_admission", "workareas", "INSERT"): Entry(AUTHORITY, GUARD + "; " + VERIFIED_STATE, AF + "test_a_workarea_policy_or_tree_changed_around_the_journal_is_refused"),
    ("oml_admission", "workareas", "UPDATE"): Entry(AUTHORITY, GUARD + "; " + VERIFIED_STATE, VS + "test_a_forged_reparent_does_not_widen_a_keys_scope"),
    ("oml_admission", "wrapped_deks", "INSERT"): Entry(KEYS, NEW_DEK, FM + "test_each_role_s_changes_are_refused_or_named"),
    ("oml_admission", "wrapped_deks", "DELETE"): Entry(SERVED, GONE, RC + "test_a_body_destroyed_without_an_erasure_is_reported_and_never_served_as_erased"),
    ("oml_admission", "wrapped_deks", "UPDATE"): Entry(KEYS, DEK, DD + "test_a_wrapped_dek_overwritten_outside_a_journalled_act_is_named",
                                                       "the rewrap act's own write, in the transaction that journals its digests"),
    # ------------------------------------------------------------------ oml_server
    ("oml_server", "integrity_events", "INSERT"): Entry(DERIVED, COUNTER, None),
    ("oml_server", "integrity_events", "UPDATE"): Entry(DERIVED, COUNTER, "test_workload_limits.py::test_the_server_cannot_delete_or_lower_integrity_events",
                                                        "the upsert's refusals and last_at only; a count only grows (trigger), no DELETE"),
    ("oml_server", "read_events", "INSERT"): Entry(DERIVED, READLOG, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
    ("oml_server", "wrapped_deks", "UPDATE"): Entry(KEYS, DEK, SIG + "test_a_wrapped_dek_overwritten_by_the_server_role_is_named"),
    # ------------------------------------------------------------------ oml_indexer
    ("oml_indexer", "consumer_cursors", "INSERT"): Entry(DERIVED, CURSOR, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
    ("oml_indexer", "consumer_cursors", "UPDATE"): Entry(DERIVED, CURSOR, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
    ("oml_indexer", "index_threads", "INSERT"): Entry(DERIVED, "oml index rebuild recomputes context windows", WF,
                                                      "ranking text, and the window ids window propagation reads: a forged "
                                                      "window reorders only candidates the read admitted"),
    ("oml_indexer", "index_threads", "UPDATE"): Entry(DERIVED, "oml index rebuild recomputes context windows", WF, "as INSERT"),
    ("oml_indexer", "index_threads", "DELETE"): Entry(DERIVED, "oml index rebuild recomputes context windows", None, "ranking text only"),
    ("oml_indexer", "memories_fts", "INSERT"): Entry(DERIVED, INDEX, FM + "test_each_role_s_changes_are_refused_or_named"),
    ("oml_indexer", "memories_fts", "UPDATE"): Entry(DERIVED, INDEX, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index",
                                                    "tip columns and path only (column grant): repaired by rebuild"),
    ("oml_indexer", "memories_fts", "DELETE"): Entry(DERIVED, INDEX, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
    ("oml_indexer", "memory_embeddings", "INSERT"): Entry(DERIVED, INDEX, FM + "test_each_role_s_changes_are_refused_or_named"),
    ("oml_indexer", "memory_embeddings", "UPDATE"): Entry(DERIVED, INDEX, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
    ("oml_indexer", "memory_embeddings", "DELETE"): Entry(DERIVED, INDEX, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
    ("oml_indexer", "poison_messages", "INSERT"): Entry(DERIVED, POISON, None),
    ("oml_indexer", "poison_messages", "DELETE"): Entry(DERIVED, POISON, None),
    ("oml_indexer", "sim_memories_fts", "INSERT"): Entry(DERIVED, "oml index rebuild; recall re-admits every hit from the projections", None,
                                                         "simulation index rows: not compared by oml index verify"),
    ("oml_indexer", "sim_memories_fts", "UPDATE"): Entry(DERIVED, "oml index rebuild; recall re-admits every hit from the projections", None),
    ("oml_indexer", "sim_memories_fts", "DELETE"): Entry(DERIVED, "oml index rebuild; recall re-admits every hit from the projections", None),
    ("oml_indexer", "sim_memory_embeddings", "INSERT"): Entry(DERIVED, "oml index rebuild; recall re-admits every hit from the projections", None),
    ("oml_indexer", "sim_memory_embeddings", "UPDATE"): Entry(DERIVED, "oml index rebuild; recall re-admits every hit from the projections", None),
    ("oml_indexer", "sim_memory_embeddings", "DELETE"): Entry(DERIVED, "oml index rebuild; recall re-admits every hit from the projections", None),
    # ------------------------------------------------------------------ oml_lake_writer
    ("oml_lake_writer", "consumer_cursors", "INSERT"): Entry(DERIVED, CURSOR, FM + "test_each_role_s_changes_are_refused_or_named"),
    ("oml_lake_writer", "consumer_cursors", "UPDATE"): Entry(DERIVED, CURSOR, FM + "test_each_role_s_changes_are_refused_or_named"),
    ("oml_lake_writer", "poison_messages", "INSERT"): Entry(DERIVED, POISON, None),
    # ------------------------------------------------------------------ oml_relay
    ("oml_relay", "outbox", "UPDATE"): Entry(DERIVED, OUTBOX, FM + "test_each_role_s_changes_are_refused_or_named", "dispatched_at set: never delivered"),
    ("oml_relay", "outbox", "DELETE"): Entry(DERIVED, OUTBOX, SIG + "test_derived_state_changes_are_named_and_rebuild_repairs_the_index"),
}

# Narrower column sets where a role may write only some columns: (role, table, privilege) -> columns.
COLUMNS: dict[tuple[str, str, str], frozenset[str]] = {
    ("oml_admission", "artifacts", "UPDATE"): frozenset({"ciphertext", "purged_seq"}),
    ("oml_admission", "claim_versions", "UPDATE"): frozenset({"decided_seq", "reviewer_identity", "reviewer_principal", "self_signed",
                                                              "status", "status_seq"}),
    ("oml_admission", "claims", "UPDATE"): frozenset({"erased_seq", "legal_hold"}),
    ("oml_admission", "identities", "UPDATE"): frozenset({"created_seq", "display_name", "kind"}),
    ("oml_admission", "memories_fts", "UPDATE"): frozenset({"path"}),
    ("oml_admission", "memory_embeddings", "UPDATE"): frozenset({"path"}),
    ("oml_admission", "principals", "UPDATE"): frozenset({"revoked_seq"}),
    ("oml_admission", "read_events", "UPDATE"): frozenset({"batch_no"}),
    ("oml_admission", "sim_memories_fts", "UPDATE"): frozenset({"path"}),
    ("oml_admission", "sim_memory_embeddings", "UPDATE"): frozenset({"path"}),
    ("oml_admission", "sim_tip_intervals", "UPDATE"): frozenset({"to_at", "to_seq"}),
    ("oml_admission", "simulations", "UPDATE"): frozenset({"closed_seq"}),
    ("oml_admission", "tenant_keys", "UPDATE"): frozenset({"retired_seq"}),
    ("oml_admission", "tip_intervals", "UPDATE"): frozenset({"to_at", "to_seq"}),
    ("oml_admission", "workareas", "UPDATE"): frozenset({"development", "parent_id", "path", "pii_policy"}),
    ("oml_server", "wrapped_deks", "UPDATE"): frozenset({"key_version", "wrapped"}),
    ("oml_admission", "wrapped_deks", "UPDATE"): frozenset({"key_version", "wrapped"}),
    # Column grants keep a workload from LOCK TABLE on a shared table (99_lock_narrowing.sql).
    ("oml_admission", "chain_heads", "UPDATE"): frozenset({"seq", "hash"}),
    ("oml_admission", "merkle_state", "UPDATE"): frozenset({"tree_size", "frontier"}),
    ("oml_admission", "retention_policies", "UPDATE"): frozenset({"readlog_days", "set_seq"}),
    ("oml_admission", "tenant_policies", "UPDATE"): frozenset({"phone_regions", "set_seq"}),
    ("oml_admission", "erasure_rewrites", "UPDATE"): frozenset({"requested_seq", "requested_xid", "requested_at", "done_seq",
                                                                "done_at", "stats_cleared"}),
    ("oml_lake_writer", "consumer_cursors", "UPDATE"): frozenset({"seq", "updated_at"}),
    ("oml_indexer", "consumer_cursors", "UPDATE"): frozenset({"seq", "updated_at"}),
    ("oml_indexer", "index_threads", "UPDATE"): frozenset({"version_id", "workarea_id", "thread_sha256", "position", "window_claims"}),
    ("oml_indexer", "memories_fts", "UPDATE"): frozenset({"tip_to_seq", "tip_to_at", "path"}),
    ("oml_indexer", "memory_embeddings", "UPDATE"): frozenset({"tip_to_seq", "tip_to_at", "path"}),
    ("oml_indexer", "sim_memories_fts", "UPDATE"): frozenset({"tip_to_seq", "tip_to_at", "path"}),
    ("oml_indexer", "sim_memory_embeddings", "UPDATE"): frozenset({"tip_to_seq", "tip_to_at", "path"}),
    ("oml_relay", "outbox", "UPDATE"): frozenset({"dispatched_at"}),
    ("oml_server", "integrity_events", "UPDATE"): frozenset({"refusals", "last_at"}),
}

# SECURITY DEFINER functions a workload may execute, and why none writes what the matrix above does not cover.
FUNCTIONS: dict[tuple[str, str], str] = {
    ("oml_admission", "oml_create_tenant_partitions"): "creates the bound tenant's index and BM25 partitions (DDL, no rows)",
    ("oml_admission", "oml_erasure_horizon"): "reads the oldest snapshot (no write)",
    ("oml_admission", "oml_erasure_rewrite"): "rewrites a relation of the bound tenant in place (no logical change)",
    ("oml_admission", "oml_restore_pending"): "reads the restore fence",
    ("oml_admission", "oml_sim_create_partitions"): "creates a simulation's index partitions (DDL)",
    ("oml_admission", "oml_sim_drop_partitions"): "drops a simulation's index partitions: derived rows, oml index rebuild",
    ("oml_indexer", "oml_bm25_drift"): "read only: counts of the bound tenant's BM25 tables against a recount",
    ("oml_indexer", "oml_bm25_rebuild"): "recomputes the bound tenant's BM25 tables from memories_fts, which the indexer"
                                         " writes anyway: oml index verify (index.bm25_drift)",
    ("oml_indexer", "oml_lock_window_claims"): "row locks only",
    ("oml_server", "oml_bm25_search"): "read only",
    ("oml_server", "oml_bm25_topk"): "read only",
    ("oml_server", "oml_fts_search"): "read only",
    ("oml_server", "oml_fts_search_plan"): "read only",
    ("oml_server", "oml_restore_pending"): "reads the restore fence",
    ("oml_server", "oml_sim_fts_search"): "read only",
    ("oml_server", "oml_sim_fts_search_plan"): "read only",
}

_GRANTS = sa.text(
    "WITH roles(r) AS (SELECT unnest(CAST(:roles AS text[]))),"
    " rels AS (SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    "          WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition)"
    " SELECT r AS role, relname AS tbl, p AS priv, NULL AS col FROM roles, rels, unnest(ARRAY['DELETE', 'TRUNCATE']) p"
    "  WHERE has_table_privilege(r, rels.oid, p)"
    " UNION ALL"
    " SELECT r, relname, p, a.attname FROM roles, rels"
    "   JOIN pg_attribute a ON a.attrelid = rels.oid AND a.attnum > 0 AND NOT a.attisdropped, unnest(ARRAY['INSERT', 'UPDATE']) p"
    "  WHERE has_column_privilege(r, rels.oid, a.attnum, p)")
_TABLE_UPDATE = sa.text(
    "SELECT r AS role, c.relname FROM unnest(CAST(:roles AS text[])) r, pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND has_table_privilege(r, c.oid, 'UPDATE')")
_FUNCTIONS = sa.text(
    "SELECT r AS role, p.proname FROM unnest(CAST(:roles AS text[])) r, pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = 'public' AND p.prosecdef AND has_function_privilege(r, p.oid, 'EXECUTE')")


def _granted(ctx) -> dict[tuple[str, str, str], set[str]]:
    out: dict[tuple[str, str, str], set[str]] = {}
    with owner(ctx) as c:
        for r in c.execute(_GRANTS, {"roles": list(ROLES)}):
            cols = out.setdefault((r.role, r.tbl, r.priv), set())
            if r.col is not None:
                cols.add(r.col)
    return out


def test_every_write_grant_is_in_the_matrix(ctx):
    granted = _granted(ctx)
    assert set(granted) - set(MATRIX) == set(), "a workload may write here and the matrix does not say what notices it"
    assert set(MATRIX) - set(granted) == set(), "the matrix lists a write no workload is granted any more"
    for key, cols in COLUMNS.items():
        assert granted[key] == cols, (key, sorted(granted[key]))
    with owner(ctx) as c:
        funcs = {(r.role, r.proname) for r in c.execute(_FUNCTIONS, {"roles": list(ROLES)})}
    assert funcs == set(FUNCTIONS), sorted(funcs ^ set(FUNCTIONS))
    # The restore fence is the owner's alone (one row refuses every tenant), and the reconciler writes nothing.
    assert not [k for k in granted if k[1] == "restore_state"]
    assert not [k for k in granted if k[0] == "oml_reconciler"]
    # No table-level UPDATE is left (a column grant everywhere): only DELETE still lets a workload LOCK TABLE.
    with owner(ctx) as c:
        table_update = c.execute(_TABLE_UPDATE, {"roles": list(ROLES)}).all()
    assert table_update == [], table_update


def test_no_change_to_authority_keys_or_served_bodies_goes_unnoticed(ctx):
    rows = sorted(MATRIX.items())
    print(f"\n{'role':<16} {'table':<22} {'priv':<7} {'category':<19} check")
    for (role, table, priv), e in rows:
        print(f"{role:<16} {table:<22} {priv:<7} {e.category:<19} {e.check or 'NOT NOTICED: ' + e.note}")
    unnoticed = [(k, e.note) for k, e in rows if e.check is None]
    critical = [k for k, e in rows if e.check is None and e.category in CRITICAL]
    print(f"\n{len(rows)} (role, table, privilege) writes; {len(unnoticed)} derived writes not noticed; "
          f"{len(critical)} accepted-and-undetected changes to who may do what, which key encrypts or what is served")
    assert critical == []
    for k, note in unnoticed:
        assert note, f"{k}: say why a change here is left unnoticed"


def test_every_proof_names_a_test_that_exists():
    here = Path(__file__).parent  # the proofs live anywhere under tests/integration
    defined: dict[str, set[str]] = {}
    for e in MATRIX.values():
        if e.proof is None:
            continue
        file, name = e.proof.split("::")
        if file not in defined:
            tree = ast.parse(next(here.parent.rglob(file)).read_text())
            defined[file] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in defined[file], e.proof


def test_authority_rows_are_acted_on_only_when_verified():
    """Every authority write the verified-state check covers names a test that forges it and sees the act refused."""
    unproven = sorted(k for k, e in MATRIX.items() if e.check is not None and VERIFIED_STATE in e.check and e.proof is None)
    assert unproven == [], f"{len(unproven)} authority writes name the verified-state check without a test: {unproven}"


# ---------------------------------------------------------------------------------------------- for real

@pytest.fixture(scope="module")
def w(ctx):
    w = make_world(ctx, TENANT)
    w.reader_key = w.keys[w.key("reader").principal_id]
    w.a = w.remember("main", "Backups of the billing database are restored monthly in a drill.")
    w.b = w.remember("main", "On-call hand-over happens on Mondays at ten.")
    w.index()
    return w


def _sqlstate(ctx, role: str, sql: str, **params) -> str | None:
    try:
        with ctx.db.tenant(role, TENANT) as c:
            c.execute(sa.text(sql), {"t": TENANT, **params})
    except sa.exc.DBAPIError as exc:
        return exc.orig.sqlstate
    return None


def test_each_role_s_changes_are_refused_or_named(ctx, w):
    """As each workload role: a change of each kind its grants allow, then the check the matrix names."""
    client = TestClient(create_app(ctx), raise_server_exceptions=False)
    with owner(ctx, TENANT) as c:
        a_art = str(c.execute(sa.text("SELECT artifact_id FROM claim_versions WHERE tenant_id = :t AND version_id = :v"),
                              {"t": TENANT, "v": w.a["version_id"]}).scalar())
    # Refused outright (grant or guard), each as the role the review used.
    assert _sqlstate(ctx, "oml_admission", "INSERT INTO restore_state (singleton, pending, reason) VALUES (true, true, 'operator')") == "42501"
    assert _sqlstate(ctx, "oml_admission", "UPDATE claim_versions SET status = 'demoted' WHERE tenant_id = :t AND version_id = :v",
                     v=w.a["version_id"]) == "23000"
    assert _sqlstate(ctx, "oml_admission", "UPDATE workareas SET development = true WHERE tenant_id = :t") == "23000"
    assert _sqlstate(ctx, "oml_admission", "UPDATE claims SET legal_hold = true WHERE tenant_id = :t") == "23000"
    assert _sqlstate(ctx, "oml_admission", "UPDATE tenant_keys SET retired_seq = 1 WHERE tenant_id = :t AND purpose = 'encryption'") == "23000"
    for role in ("oml_server", "oml_indexer", "oml_lake_writer", "oml_relay", "oml_reconciler"):
        assert _sqlstate(ctx, role, "UPDATE claim_versions SET status = 'promoted' WHERE tenant_id = :t") == "42501"
        assert _sqlstate(ctx, role, "DELETE FROM wrapped_deks WHERE tenant_id = :t") == "42501"
    # Accepted, then named. oml_admission: a second wrapped DEK for a live artifact is refused by its key; a DEK
    # sealed anew for a new body opens no signed body (test_forged_bodies_and_fences); here: a DEK of another artifact.
    with ctx.db.tenant("oml_admission", TENANT) as c:
        b_art = str(c.execute(sa.text("SELECT artifact_id FROM claim_versions WHERE tenant_id = :t AND version_id = :v"),
                              {"t": TENANT, "v": w.b["version_id"]}).scalar())
    with ctx.db.tenant("oml_server", TENANT) as c:
        a_dek = c.execute(sa.text("SELECT key_version, wrapped FROM wrapped_deks WHERE tenant_id = :t AND artifact_id = :a"),
                          {"t": TENANT, "a": a_art}).one()
    with ctx.db.tenant("oml_admission", TENANT) as c:
        c.execute(sa.text("DELETE FROM wrapped_deks WHERE tenant_id = :t AND artifact_id = :a"), {"t": TENANT, "a": b_art})
        c.execute(sa.text("INSERT INTO wrapped_deks (tenant_id, artifact_id, key_version, wrapped) VALUES (:t, :a, :k, :w)"),
                  {"t": TENANT, "a": b_art, "k": a_dek.key_version, "w": bytes(a_dek.wrapped)})
    r = client.get(f"/v1/claims/{w.b['claim_id']}", headers=bearer(w.reader_key))
    assert r.status_code == 500 and r.json()["code"] == "integrity.body", r.text
    # oml_indexer: a forged index row for a version that is no tip; oml_lake_writer: its cursor past the head;
    # oml_relay: undispatched wake-ups marked dispatched.
    with ctx.db.tenant("oml_indexer", TENANT) as c:
        c.execute(sa.text(
            "INSERT INTO memories_fts (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance, self_signed,"
            " tip_from_seq, tip_from_at, tsv) SELECT tenant_id, gen_random_uuid(), claim_id, workarea_id, path, kind, provenance,"
            " self_signed, tip_from_seq, tip_from_at, tsv FROM memories_fts WHERE tenant_id = :t LIMIT 1"), {"t": TENANT})
        c.execute(sa.text(
            "INSERT INTO memory_embeddings (tenant_id, version_id, claim_id, workarea_id, path, kind, provenance, self_signed,"
            " tip_from_seq, tip_from_at, embedding) SELECT tenant_id, gen_random_uuid(), claim_id, workarea_id, path, kind,"
            " provenance, self_signed, tip_from_seq, tip_from_at, embedding FROM memory_embeddings WHERE tenant_id = :t LIMIT 1"),
            {"t": TENANT})
    readlog.seal(ctx, TENANT)  # journals an anchor: a wake-up the relay then marks dispatched without delivering
    with ctx.db.tenant("oml_lake_writer", TENANT) as c:
        c.execute(sa.text("INSERT INTO consumer_cursors (tenant_id, consumer, seq) VALUES (:t, 'lake-writer', 100000)"
                          " ON CONFLICT (tenant_id, consumer) DO UPDATE SET seq = 100000"), {"t": TENANT})
    with ctx.db.system("oml_relay") as c:
        c.execute(sa.text("UPDATE outbox SET dispatched_at = now() WHERE tenant_id = :t"), {"t": TENANT})
    res = run_cli(ctx, ["index", "verify", "--tenant", TENANT, "--json"])
    assert res.exit_code == 1, res.output
    got = json.loads(res.output)
    kinds = {(f["kind"], f["table"]) for f in got["findings"]}
    assert ("dek.digest", "wrapped_deks") in kinds
    assert ("index.extra", "memories_fts") in kinds and ("index.extra", "memory_embeddings") in kinds
    assert ("cursor.ahead", "consumer_cursors") in kinds
    assert ("outbox.missing", "outbox") in kinds, got  # the indexer is behind the anchor with nothing to wake it
    # The index kinds are repaired by a rebuild; what remains is named until its cause is put right.
    assert run_cli(ctx, ["index", "rebuild", "--tenant", TENANT]).exit_code == 0
    after = {f["kind"] for f in json.loads(run_cli(ctx, ["index", "verify", "--tenant", TENANT, "--json"]).output)["findings"]}
    assert not {k for k in after if k.startswith("index.")} and "dek.digest" in after
