"""summary.html reads as prose: no Python "None", and "1 key event", not "1 key events"."""
from oml.services.audit.evidence.summary import render


def test_absent_members_show_a_dash_and_counts_agree_in_number():
    manifest = {"tenant": "acme", "range": {"from_seq": 1, "to_seq": 3}, "exported_at": "2026-01-01T00:00:00Z",
                "checkpoint": {"tree_size": 3, "root": "r", "kid": "k"}, "previous_checkpoint": None,
                "readlog": {"window_start": None}, "counts": {"receipts": 3, "events": 3, "key_events": 1}}
    keys = [{"kid": "k", "purpose": "signing", "fingerprint": "f", "first_seq": 1, "last_seq": None, "authorised_by": "tenant.created"}]
    page = render(manifest, [], keys, [{"seq": 2, "at": None, "data": {"ok": True}}], [{"seq": 3, "at": "t", "data": None}], [])
    assert "None" not in page
    assert "1 key event." in page and "3 inclusion receipts" in page and "3 events" in page
