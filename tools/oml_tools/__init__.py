"""OML's development tools: benchmarks (``oml bench``) and the demo (``oml demo``). Not part of the oml wheel:
a clone installs them (``pip install -e tools``) and they register their commands into ``oml`` by the
``oml.cli`` entry point group."""
import os
from pathlib import Path

#: The clone these tools run from (tools/oml_tools/__init__.py → the repository root).
REPO = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    """``OML_SHARED_DIR``, else ``<repo>/../shared``: the data folder beside a clone (the same rule as tests/support/paths.py)."""
    return Path(os.environ.get("OML_SHARED_DIR") or REPO.parent / "shared")
