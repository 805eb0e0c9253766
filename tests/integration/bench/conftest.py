"""Fixtures of the benchmark tests."""
from __future__ import annotations

import json

import pytest

from support.paths import SHARED

DEV = SHARED / "data" / "locomo" / "locomo-dev.json"


@pytest.fixture(scope="module")
def one_session(tmp_path_factory):
    """The first session of the development split's first conversation, with the questions answered inside it:
    ``(path of the slice, sample id, number of questions)``. Skips when the split is absent."""
    if not DEV.is_file():
        pytest.skip(f"{DEV} is absent (LoCoMo development split, ../shared/data)")
    conv = json.loads(DEV.read_text())[0]
    c = conv["conversation"]
    keep = {k: c[k] for k in ("speaker_a", "speaker_b", "session_1_date_time", "session_1")}
    qa = [q for q in conv["qa"] if q.get("evidence") and all(str(e).startswith("D1:") for e in q["evidence"])]
    path = tmp_path_factory.mktemp("locomo") / "slice.json"
    path.write_text(json.dumps([{"sample_id": conv["sample_id"], "conversation": keep, "qa": qa}]))
    return path, conv["sample_id"], len(qa)
