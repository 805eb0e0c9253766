"""The erasure inventory as declared (docs/design.md §Erasure): exactly its copy classes, each fully described."""
import datetime as dt

import pytest

from oml.domain import erasure_inventory as inv

DESIGN_CLASSES = [
    "wrapped_deks", "pg_ciphertext", "lake_ciphertext", "search_index_rows", "simulation_index_rows",
    "freed_pages_and_statistics", "subject_hmacs", "read_log", "journal", "idempotency_records",
    "outbox_and_messages", "evidence_exports", "logs", "wal_and_backups",
]
# Added with the index-time context window (docs/recall.md), next to the search index
# rows it serves.
INDEX_CONTEXT_CLASSES = ["context_threads"]


def test_exactly_the_design_copy_classes_in_order():
    expected = DESIGN_CLASSES[:4] + INDEX_CONTEXT_CLASSES + DESIGN_CLASSES[4:]
    assert [c.key for c in inv.INVENTORY] == expected


def test_every_class_says_what_it_holds_what_erasure_does_and_when_it_is_complete():
    for c in inv.INVENTORY:
        assert c.title and c.holds and c.action and c.complete_when, c.key
        assert isinstance(c.completion, inv.Completion)


def test_each_table_maps_to_one_class():
    assert inv.PG_TABLE_CLASS["wrapped_deks"] == "wrapped_deks"
    assert inv.PG_TABLE_CLASS["artifacts"] == "pg_ciphertext"
    assert inv.PG_TABLE_CLASS["memories_fts"] == inv.PG_TABLE_CLASS["memory_embeddings"] == "search_index_rows"
    assert inv.PG_TABLE_CLASS["claim_subjects"] == "subject_hmacs"
    assert inv.DELTA_TABLE_CLASS == {"bodies": "lake_ciphertext", "journal": "journal", "checkpoints": "journal"}


def test_unmapped_names_new_tables():
    assert inv.unmapped(["artifacts", "brand_new"], ["bodies", "shiny"]) == (["brand_new"], ["shiny"])
    assert inv.unmapped(inv.PG_TABLE_CLASS, inv.DELTA_TABLE_CLASS) == ([], [])


def test_a_table_in_two_classes_is_refused(monkeypatch):
    dup = inv.INVENTORY + (inv.CopyClass("x", "x", "x", "x", inv.Completion.NO_CONTENT, "x", pg_tables=("artifacts",)),)
    monkeypatch.setattr(inv, "INVENTORY", dup)
    with pytest.raises(ValueError):
        inv._index("pg_tables")


def test_complete_at_per_kind():
    e = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    kw = {"backup_retention_days": 35, "idempotency_retention_hours": 24}
    c = inv.CLASSES
    assert inv.complete_at(c["wrapped_deks"], e, **kw) == e
    assert inv.complete_at(c["journal"], e, **kw) == e
    assert inv.complete_at(c["idempotency_records"], e, **kw) == e + dt.timedelta(hours=24)
    assert inv.complete_at(c["wal_and_backups"], e, **kw) == e + dt.timedelta(days=35)
    assert inv.complete_at(c["lake_ciphertext"], e, **kw) is None
    later = e + dt.timedelta(hours=3)
    assert inv.complete_at(c["lake_ciphertext"], e, done_at=later, **kw) == later
    assert inv.complete_at(c["freed_pages_and_statistics"], e, done_at=later, **kw) == later


def test_inventory_module_is_pure():
    import ast
    import pathlib

    tree = ast.parse(pathlib.Path(inv.__file__).read_text())
    names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and (m.startswith("oml.services") or m.startswith("oml.workers") or m in ("sqlalchemy", "os")) for m in names)


def test_the_erasure_report_has_one_section_per_class():
    """services/erasure/report.py gathers each class's evidence in a section of its own, in the inventory's order."""
    from oml.services.erasure import report

    assert list(report.SECTIONS) == [c.key for c in inv.INVENTORY]
