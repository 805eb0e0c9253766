"""docs/architecture.md's capability table names exactly the folders the code has."""
import re

from support.paths import REPO as ROOT


def _table_folders() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return {m.rstrip("/") for line in rows for m in re.findall(r"`((?:services|workers|domain|client|tools)/[\w/]*)`", line)}


def _code_packages() -> set[str]:
    found = set()
    for top in ("services", "workers"):
        for init in (ROOT / top).glob("*/__init__.py"):
            found.add(init.parent.relative_to(ROOT).as_posix())
    return found


def test_every_capability_folder_is_in_the_table():
    missing = _code_packages() - _table_folders()
    assert not missing, f"docs/architecture.md does not list {sorted(missing)}"


def test_every_folder_in_the_table_exists():
    gone = {f for f in _table_folders() if not (ROOT / f).exists()}
    assert not gone, f"docs/architecture.md lists folders the tree does not have: {sorted(gone)}"
