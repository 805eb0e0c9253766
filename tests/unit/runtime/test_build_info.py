"""`oml --version` from a clone names the commit it runs (a build records its own at build time)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from oml.services.runtime import build_info


def test_a_clone_names_its_head_commit():
    src = Path(build_info.__file__).resolve().parents[2]
    if build_info.commit() is not None or not (src / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not an editable install from a git clone")
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    said = build_info.describe()
    assert f"at commit {head}" in said and "running from the clone" in said
