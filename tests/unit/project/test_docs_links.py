"""The docs stand on their own: every relative link resolves, and none points outside the repository.

Checks README.md, deploy/README.md, docs/*.md and docs/adr/*.md: a Markdown link ``[text](target)`` whose target
is not a URL must name an existing file or folder, and an ``#anchor`` on a Markdown file must name one of its
headings (GitHub's slug rule). No doc may cite the design notes, field notes or seed pages that live beside the
repository rather than in it: docs/design.md states the design.
"""
import re
from pathlib import Path

import pytest

from support.paths import REPO as ROOT

DOCS = sorted([ROOT / "README.md", ROOT / "deploy" / "README.md", *(ROOT / "docs").glob("*.md"),
               *(ROOT / "docs" / "adr").glob("*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
OUTSIDE = re.compile(r"DESIGN\.md|FIELD-NOTES|seeds/")


def _prose(path: Path) -> str:
    """The file without its fenced code blocks (commands and outputs are not links)."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", _prose(path), re.M)}


def _id(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_every_relative_link_resolves(doc: Path):
    broken = []
    for target in LINK.findall(_prose(doc)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):       # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{_id(doc)} links to what the repository does not have: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=_id)
def test_no_doc_points_outside_the_repository(doc: Path):
    found = sorted({m.group(0) for m in OUTSIDE.finditer(doc.read_text(encoding="utf-8"))})
    assert not found, f"{_id(doc)} cites files outside the repository: {found}; cite docs/design.md instead"


def test_the_docs_are_found():
    assert ROOT / "docs" / "design.md" in DOCS and len(DOCS) > 20
