"""``oml bench pii-fp``: the phone and e-mail rules on ordinary text (docs/personal-data.md, "False positives on
ordinary text"). No database; pins the after-figures the doc reports."""
from __future__ import annotations

from oml_tools.bench import pii_fp
from oml_tools.demo import corpus

from support.paths import SHARED


def test_no_phone_or_email_finding_on_ordinary_text_and_every_written_out_form_found():
    data = SHARED / corpus.LOCOMO_FILE
    res = pii_fp.run(data if data.is_file() else None, sentences=400, examples=3)
    for name in ("locomo", "digits") if data.is_file() else ("digits",):
        r = res["corpora"][name]
        assert (r["phone"], r["email"]) == (0, 0), (name, r["examples"])
    assert res["corpora"]["digits"]["with_digit"] == 400
    assert res["obfuscated"] == {"forms": 12, "caught": 12, "missed": []}
    assert any(line.startswith("written-out e-mail forms found: 12 of 12") for line in pii_fp.render(res))
