"""Maps the top-level code folders onto the ``oml`` namespace (docs/architecture.md, Layout).

``domain/`` installs as ``oml.domain``, ``services/`` as ``oml.services``,
``workers/`` as ``oml.workers`` and ``client/`` as ``oml.client``; every
sub-package found under them follows its parent.

Every build records the git commit it was made from in
``oml/services/runtime/_build_info.py`` (``oml --version`` prints it): the
sdist carries the file, so a wheel built from the sdist keeps the commit of
the clone the sdist came from. ``OML_GIT_COMMIT`` names the commit where the
build has no ``.git`` (a Docker build context). An editable install writes
nothing, and ``oml --version`` says it runs from a clone.
"""
import os
import subprocess
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOTS = {"domain": "oml.domain", "services": "oml.services", "workers": "oml.workers", "client": "oml.client"}
HERE = Path(__file__).resolve().parent
BUILD_INFO = Path("services", "runtime", "_build_info.py")

packages, package_dir = [], {}
for folder, name in ROOTS.items():
    packages.append(name)
    package_dir[name] = folder
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(HERE), *args], capture_output=True, text=True, check=True).stdout.strip()


def _commit() -> str | None:
    """The commit of this source tree (``-dirty`` when tracked files differ from it), or None outside a clone."""
    if os.environ.get("OML_GIT_COMMIT"):
        return os.environ["OML_GIT_COMMIT"]
    try:
        if Path(_git("rev-parse", "--show-toplevel")).resolve() != HERE:
            return None  # an unpacked sdist inside some other repository
        return _git("rev-parse", "HEAD") + ("-dirty" if _git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _write_build_info(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('"""Written by setup.py at build time; never edited or committed."""\n'
                    f"COMMIT = {_commit()!r}\n")


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        # The sdist's copy (its source tree holds one) is already built; a build from a clone writes its own.
        if not self.editable_mode and not (HERE / BUILD_INFO).exists():
            _write_build_info(Path(self.build_lib, "oml", *BUILD_INFO.parts))


class Sdist(sdist):
    def make_release_tree(self, base_dir, files) -> None:
        super().make_release_tree(base_dir, files)
        _write_build_info(Path(base_dir, BUILD_INFO))


setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"": ["*.sql", "*.html", "*.ini", "*.mako", "*.json"]},
    include_package_data=True,
    cmdclass={"build_py": BuildPy, "sdist": Sdist},
)
