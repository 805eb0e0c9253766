"""The wheel holds every module and data file of the source tree, and nothing of the development tools.

A folder without ``__init__.py``, or a data file whose suffix setup.py's
``package_data`` does not name, builds a wheel that imports fine until the
one command that needs the missing file. This compares the wheel's file list
with the source folders it is built from. The wheel is ``$OML_WHEEL``
(``make test`` builds it once, from the sdist) or, when unset, one built here.
"""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support.paths import REPO

ROOTS = {"domain": "oml/domain", "services": "oml/services", "workers": "oml/workers", "client": "oml/client"}
# Every suffix a file under the roots may have; a new one must be added here and to setup.py's package_data.
SHIPPED_SUFFIXES = {".py", ".sql", ".json", ".mako", ".ini", ".html"}
GENERATED = {"oml/services/runtime/_build_info.py"}  # written at build time (setup.py): `oml --version`'s commit


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    given = os.environ.get("OML_WHEEL")
    if given:
        return Path(given)
    # The sdist first, then the wheel from the unpacked sdist (as `make test` does): a build in the clone would
    # reuse build/lib, whose leftovers could stand in for a file the source no longer ships.
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
                   check=True, capture_output=True)
    return next(out.glob("oml-*.whl"))


def source_files() -> dict[str, Path]:
    """Wheel path → source file, for every file under the code roots (caches and build leftovers aside)."""
    files = {}
    for folder, target in ROOTS.items():
        for p in (REPO / folder).rglob("*"):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in {".pyc", ".pyo"}:
                files[f"{target}/{p.relative_to(REPO / folder).as_posix()}"] = p
    return files


def wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if not n.split("/")[0].endswith(".dist-info")}


def test_every_source_file_has_a_shipped_suffix():
    odd = sorted(str(p.relative_to(REPO)) for p in source_files().values() if p.suffix not in SHIPPED_SUFFIXES)
    assert not odd, f"files setup.py's package_data does not ship (add the suffix there and here, or move them): {odd}"


def test_wheel_holds_exactly_the_source_tree(wheel):
    shipped = wheel_files(wheel)
    missing = sorted(set(source_files()) - shipped)
    assert not missing, f"in the source tree, not in the wheel (a folder without __init__.py?): {missing}"
    extra = sorted(shipped - set(source_files()) - GENERATED)
    assert not extra, f"in the wheel, not in the source tree: {extra}"
    assert GENERATED <= shipped, "the build did not record its commit (setup.py's build_py)"


def test_the_files_found_lazily_are_there(wheel):
    # Named, so a reader sees what the comparison above protects: migrations' env and template, the schema SQL,
    # the erasure inventory, evidence export and verify (imported only when their command runs).
    shipped = wheel_files(wheel)
    for name in ("oml/services/storage/migrations/env.py", "oml/services/storage/migrations/script.py.mako",
                 "oml/services/storage/sql/10_core.sql", "oml/domain/erasure_inventory.json",
                 "oml/services/audit/evidence/export.py", "oml/services/audit/evidence/verify.py"):
        assert name in shipped, name


def test_no_development_tools_in_the_wheel(wheel):
    shipped = wheel_files(wheel)
    tools = sorted(n for n in shipped if n.startswith("oml_tools/") or {"bench", "demo", "tests"} & set(n.split("/")))
    assert not tools, f"benchmarks, the demo or tests in the production wheel: {tools}"
    assert {n.split("/")[0] for n in shipped} == {"oml"}
    with zipfile.ZipFile(wheel) as z:
        eps = next(z.read(n).decode() for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))
    assert "oml.cli" not in eps, "the wheel registers CLI plugins (oml bench / oml demo belong to oml-tools)"
