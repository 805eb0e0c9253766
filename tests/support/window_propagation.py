"""What the window propagation tests share: a thread whose answer turn shares no word with the question, and a
hybrid recall at a given window share (docs/recall.md, "Window propagation")."""
from __future__ import annotations

import dataclasses

import sqlalchemy as sa

from oml.domain import fusion as F
from oml.services.reads.recall import Recaller, RecallRequest

# The turn that answers QUERY (1) shares none of its words; the two turns after it do, and carry it in their
# windows (the default window: two turns before). The last turn is given an ended valid time by the tests (ENDED):
# a candidate of the legs, never admitted.
THREAD = ["We spent the spring getting ready for a long race.",
          "I finally did it last Saturday, crossing the line in four hours.",
          "Finishing the Boston marathon felt amazing.",
          "The Boston marathon crowd cheered the whole way.",
          "The Boston marathon results list was posted, then withdrawn."]
QUERY = "what happened at the Boston marathon"
ENDED = {"valid_from": "2020-01-01T00:00:00+00:00", "valid_to": "2020-02-01T00:00:00+00:00"}


def recall(ctx, w, share: float) -> dict:
    """A hybrid recall of QUERY by ``w.reader``, k = 25, with the default fusion at window share ``share``."""
    fusion = dataclasses.replace(F.DEFAULT, window_share=share)
    return Recaller(ctx, fusion=fusion).recall(w.reader, RecallRequest(query=QUERY, retriever="hybrid", k=25))


def server_windows(ctx, tenant: str) -> dict[str, list[str]]:
    """Version id → its window's claim ids, read as ``oml_server`` bound to ``tenant`` (the grant under test)."""
    with ctx.db.tenant("oml_server", tenant) as c:
        return {str(v): [str(x) for x in cs] for v, cs in c.execute(sa.text(
            "SELECT version_id, window_claims FROM index_threads"))}
