"""Lake purge on real Delta tables on disk (delete, vacuum, prove by listing storage).

The lake is written by the real lake-writer (``workers/lake/writer.catch_up``);
the purge runs keyless. A vacuum that reports success while deleting
nothing (delta-rs #3911, #4646) is simulated, and the listing catches it.
"""
from __future__ import annotations

import hashlib

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from oml.services.erasure import report as erasure_report
from oml.services.erasure.acts import Erasure
from oml.workers.lake import purge as lake_purge
from oml.workers.lake import writer as lake_writer

from support.erasure import make_ekit


@pytest.fixture(scope="module")
def kit(ctx):
    return make_ekit(ctx, "lake-purge")


def _bodies(ctx, tenant):
    dt = DeltaTable(lake_writer.table_uri(ctx.settings.lake, "bodies"))
    return dt.to_pyarrow_dataset().to_table(filter=pc.field("tenant_id") == tenant).to_pylist()


def test_purge_deletes_vacuums_and_proves_by_listing(ctx, kit):
    keep = kit.claim("this one stays")
    gone = kit.claim("this one goes")
    lake_writer.catch_up(ctx, kit.tenant)
    ids = {r["artifact_id"] for r in _bodies(ctx, kit.tenant)}
    erased = Erasure(ctx).erase_claim(kit.operator, gone["claim_id"], "data_subject_request")["erasures"][0]
    art = erased["artifacts"][0]["artifact_id"]
    assert art in ids

    before = lake_purge.verify(ctx, kit.tenant)
    assert not before["clean"] and before["dirty"][0]["rows"] == 1
    rep = erasure_report.build(ctx, kit.tenant, [gone["claim_id"]])
    assert "lake_ciphertext" in rep["pending"] and rep["complete_everywhere_at"] is None

    # Within the table's retention: the rows leave the table, the old files stay until a vacuum may remove them.
    soft = lake_purge.purge(ctx, kit.tenant)
    assert soft["rows_deleted"] == 1 and soft["status"] == "pending" and soft["pending_until"]
    assert all(not d["referenced"] for d in soft["listing"]["dirty"])
    assert art not in {r["artifact_id"] for r in _bodies(ctx, kit.tenant)}

    hard = lake_purge.purge(ctx, kit.tenant, force_now=True)
    assert hard["status"] == "clean" and hard["vacuumed"], hard
    assert hard["listing"]["clean"] and hard["listing"]["parquet_files"] >= 1
    assert hard["purged_through"] == erased["seq"] == lake_purge.purged_through(ctx, kit.tenant)
    remaining = _bodies(ctx, kit.tenant)
    assert keep["claim_id"] in {r["claim_id"] for r in remaining}
    assert all(hashlib.sha256(r["ciphertext"]).digest() == r["sha256"] for r in remaining)

    # The writer never copies a purged artifact back.
    lake_writer.catch_up(ctx, kit.tenant)
    assert lake_purge.verify(ctx, kit.tenant)["clean"]
    rep = erasure_report.build(ctx, kit.tenant, [gone["claim_id"]])
    lake = next(c for c in rep["classes"] if c["key"] == "lake_ciphertext")
    assert lake["status"] == "complete" and lake["evidence"]["listing"]["clean"]
    assert rep["pending"] == [] and rep["complete_everywhere_at"]


def test_a_vacuum_that_deletes_nothing_is_caught_by_the_listing(ctx, kit, monkeypatch):
    gone = kit.claim("vacuum bug victim")
    lake_writer.catch_up(ctx, kit.tenant)
    Erasure(ctx).erase_claim(kit.operator, gone["claim_id"], "data_subject_request")
    monkeypatch.setattr(DeltaTable, "vacuum", lambda self, *a, **kw: [])
    out = lake_purge.purge(ctx, kit.tenant, force_now=True)
    assert out["vacuumed"] == [] and out["removed_by_listing"], out
    assert out["status"] == "clean" and out["listing"]["clean"]


def test_the_erased_set_includes_the_lake_journal_copy(ctx, kit):
    gone = kit.claim("journal copy names it")
    er = Erasure(ctx).erase_claim(kit.operator, gone["claim_id"], "other")["erasures"][0]
    lake_writer.catch_up(ctx, kit.tenant)
    from_lake = lake_purge._journal_erasures(ctx, kit.tenant)
    assert {a["artifact_id"] for a in er["artifacts"]} <= set(from_lake)
    assert all(from_lake[a["artifact_id"]].seq == er["seq"] for a in er["artifacts"])


def test_the_log_check_flags_statistics_on_content_columns():
    import json

    good = json.dumps({"add": {"path": "x", "stats": json.dumps({"numRecords": 1, "minValues": {"seq": 1}, "maxValues": {"seq": 1}})}})
    bad = json.dumps({"add": {"path": "y", "stats": json.dumps({"numRecords": 1, "minValues": {"ciphertext": "AAAA"}})}})
    allowed = {"tenant_id", "seq"}
    assert lake_purge._log_violations("_delta_log/1.json", good.encode(), allowed) == 0
    assert lake_purge._log_violations("_delta_log/2.json", (good + "\n" + bad).encode(), allowed) == 1


def test_cli_lake_purge(ctx, kit):
    import json

    from support.admission import run_cli

    gone = kit.claim("purged over the cli")
    lake_writer.catch_up(ctx, kit.tenant)
    Erasure(ctx).erase_claim(kit.operator, gone["claim_id"], "data_subject_request")
    # Within the retention the rows leave the table and the old files wait: "pending" has its own exit status (4),
    # so a daily cron job does not alert for a week (docs/erasure.md, "Exit statuses of lake purge").
    r = run_cli(ctx, ["lake", "purge", "--tenant", kit.tenant, "--json"])
    assert r.exit_code == 4, r.output
    assert json.loads(r.output)["status"] == "pending"
    r = run_cli(ctx, ["lake", "purge", "--tenant", kit.tenant, "--force-now", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["status"] == "clean" and out["vacuumed"]


def test_force_purge_of_one_tenant_leaves_other_tenants_files_and_time_travel(ctx, kit):
    """``--force-now`` once vacuumed table-wide with retention 0, deleting another tenant's removed file."""
    other = make_ekit(ctx, "lake-purge-other")
    kept, removed = other.claim("the other tenant keeps this"), other.claim("the other tenant erases this")
    mine = kit.claim("force-purged by its own tenant")
    lake_writer.catch_up(ctx, other.tenant)
    lake_writer.catch_up(ctx, kit.tenant)
    uri = lake_writer.table_uri(ctx.settings.lake, "bodies")
    before = DeltaTable(uri).version()
    # The other tenant erases one claim and purges within its retention: its removed file must stay until then.
    Erasure(ctx).erase_claim(other.operator, removed["claim_id"], "data_subject_request")
    theirs = lake_purge.purge(ctx, other.tenant)
    assert theirs["status"] == "pending" and theirs["listing"]["dirty"], theirs
    their_files = sorted(d["path"] for d in theirs["listing"]["dirty"])

    Erasure(ctx).erase_claim(kit.operator, mine["claim_id"], "data_subject_request")
    out = lake_purge.purge(ctx, kit.tenant, force_now=True)
    assert out["status"] == "clean", out
    assert out["vacuumed"] and all(p.startswith(f"tenant_id={kit.tenant}/") for p in out["vacuumed"] + out["removed_by_listing"])
    assert out["other_tenants_files_left"] >= len(their_files)
    # The other tenant's removed file is still on storage, so its time travel still reads.
    assert sorted(d["path"] for d in lake_purge.verify(ctx, other.tenant)["dirty"]) == their_files
    old = DeltaTable(uri, version=before).to_pyarrow_table(filters=[("tenant_id", "=", other.tenant)]).to_pylist()
    assert {kept["claim_id"], removed["claim_id"]} <= {r["claim_id"] for r in old}


def test_purge_refuses_a_table_not_partitioned_by_tenant(ctx, tmp_path, monkeypatch):
    import pyarrow as pa
    from deltalake import write_deltalake

    from oml.workers.lake.schema import BODIES

    lake = tmp_path / "flat-lake"
    write_deltalake(str(lake / "bodies"), pa.Table.from_pylist([], schema=BODIES))  # no partition column
    monkeypatch.setattr(ctx.settings, "lake_uri", str(lake))
    with pytest.raises(lake_purge.PurgeScopeError, match="partitioned by tenant_id"):
        lake_purge.purge(ctx, "lake-purge")
