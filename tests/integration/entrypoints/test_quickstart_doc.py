"""docs/quickstart-service.md's key set-up, run as written against a live server: a reader key for recall, and
keys.json created 0600 and never overwritten."""
from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from oml.client import Conflict, OMLClient
from oml.services.entrypoints.http.app import create_app

from support.workers import serving

DOC = Path(__file__).resolve().parents[3] / "docs" / "quickstart-service.md"


def _block(marker: str) -> str:
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S) if marker in b]
    return block


def test_setup_keys_makes_a_reader_key_and_a_private_keys_file(ctx, tmp_path, monkeypatch, capsys):
    t = ctx.tenancy.create_tenant("qs-doc")
    (tmp_path / "acme.json").write_text(json.dumps({"admin_key": t.admin_key, "root_workarea": t.root_workarea}))
    monkeypatch.chdir(tmp_path)
    with serving(create_app(ctx)) as url:
        monkeypatch.setenv("OML_URL", url)
        code = _block("helpdesk-agent")
        exec(compile(code, "setup_keys.py", "exec"), {"__name__": "__main__"})
        assert re.fullmatch(r"workarea main\.ops writer [0-9a-f]{16} reviewer [0-9a-f]{16} reader [0-9a-f]{16}\n",
                            capsys.readouterr().out)
        keys_file = tmp_path / "keys.json"
        assert stat.S_IMODE(os.stat(keys_file).st_mode) == 0o600
        keys = json.loads(keys_file.read_text())
        with OMLClient(url, keys["reader"]) as agent:  # step 5 recalls with it
            out = agent.recall("what shipped to production", workarea_id=keys["workarea"], retriever="fts")
            assert out.hits == [] and out.steering == []
        with pytest.raises(Conflict) as second:  # as the page says: a second run stops before making any key
            exec(compile(code, "setup_keys.py", "exec"), {"__name__": "__main__"})
        assert second.value.code == "workarea.exists" and json.loads(keys_file.read_text()) == keys
    # The file itself is never overwritten either: the page's open() refuses an existing one.
    (opener,) = [line for line in code.splitlines() if "os.O_EXCL" in line]
    with pytest.raises(FileExistsError):
        exec(opener.strip() + "\n    pass\n", {"os": os})
    assert json.loads(keys_file.read_text()) == keys
