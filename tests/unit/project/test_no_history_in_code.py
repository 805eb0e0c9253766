"""Code says why, not when: no issue numbers, decision ids, review passes or files outside the repository.

A comment or docstring states its reason, or points at a document the repository holds (``docs/*.md``,
``docs/adr/*.md``). Issue numbers, decision ids ("T15", "decisions K8"), "hostile review", "pass 8" and files a
clone does not contain (the old DESIGN.md, FIELD-NOTES, seeds/) mean nothing to a reader of the repository.

Issue numbers, review passes and outside files are refused anywhere in a file; decision ids only in prose
(Python comments and docstrings, SQL ``--`` and shell/YAML ``#`` comments), since ``T0`` or ``K1`` are also names
in code.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from support.paths import REPO as ROOT

FOLDERS = ("domain", "services", "workers", "client", "tools", "tests", "deploy")
FILES = ("setup.py", "pyproject.toml", "Makefile")
SUFFIXES = {".py", ".sql", ".sh", ".yaml", ".yml", ".toml", ".json", ".mako"}
NAMES = {"Dockerfile", "Makefile"}
#: The checks themselves: their patterns name what they refuse (this file; test_docs_links.py does the same for docs).
CHECKERS = {"tests/unit/project/test_no_history_in_code.py", "tests/unit/project/test_docs_links.py"}

#: Refused anywhere in a file: (pattern, what it is).
ANYWHERE = [
    (re.compile(r"\b[Ii]ssues? #?\d+"), "an issue number"),
    (re.compile(r"(?i)\bhostile[- ]review"), "a review pass"),
    (re.compile(r"(?i)\bpass \d+\b"), "a review pass"),
    (re.compile(r"(?i)\b(third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|closing) pass\b"), "a review pass"),
    (re.compile(r"(?i)\bwave \d+\b"), "a work wave"),
    (re.compile(r"DESIGN\.md"), "a file outside the repository (cite docs/design.md)"),
    (re.compile(r"FIELD[-_ ]NOTES"), "a file outside the repository"),
    (re.compile(r"\bseeds/"), "a file outside the repository"),
    (re.compile(r"decisions\.md"), "the old decision log (cite docs/adr/*.md)"),
]

#: Refused in prose only: comments and docstrings.
IN_PROSE = [
    (re.compile(r"\b[TKX]\d{1,2}\b(?![:.]\d)"), "a decision id (cite docs/adr/*.md)"),
    (re.compile(r"\bdecisions?,? [A-Z]\d{1,2}\b"), "a decision id (cite docs/adr/*.md)"),
]

#: Names that look like decision ids and are not: path → the tokens allowed there, and why.
NOT_IDS = {
    "tests/integration/workers/test_relay.py": {"T1", "T2", "T3"},   # the concurrent transactions of the test's story
    "tests/integration/reads/test_readlog.py": {"T1"},             # likewise
    "services/reads/bm25.py": {"K1"},                        # BM25's k1 parameter, a constant of that module
    "tools/oml_tools/bench/locomo.py": {"K1"},               # the same parameter in --bm25 NAME=K1,B
}


def _files() -> list[Path]:
    out = [ROOT / f for f in FILES if (ROOT / f).is_file()]
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and (path.suffix in SUFFIXES or path.name in NAMES):
                out.append(path)
    return [p for p in out if p.relative_to(ROOT).as_posix() not in CHECKERS]


def _python_prose(text: str) -> list[tuple[int, str]]:
    """(line number, text) of every comment and docstring line of a Python source."""
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
           if tok.type == tokenize.COMMENT]
    lines = text.splitlines()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out += [(n, lines[n - 1]) for n in range(first.lineno, first.end_lineno + 1)]
    return out


def _other_prose(path: Path, text: str) -> list[tuple[int, str]]:
    """(line number, comment) of an SQL, shell, YAML, TOML or Makefile source."""
    marker = "--" if path.suffix == ".sql" else "#"
    return [(n, line.split(marker, 1)[1]) for n, line in enumerate(text.splitlines(), 1) if marker in line]


def findings() -> list[str]:
    """``path:line: what: the line`` for every reference to history or to a file outside the repository."""
    out = []
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        for n, line in enumerate(text.splitlines(), 1):
            out += [f"{rel}:{n}: {what}: {line.strip()}" for pattern, what in ANYWHERE if pattern.search(line)]
        prose = _python_prose(text) if path.suffix == ".py" else [] if path.suffix == ".json" else _other_prose(path, text)
        allowed = NOT_IDS.get(rel, set())
        for n, line in prose:
            for pattern, what in IN_PROSE:
                if any(m.group(0) not in allowed for m in pattern.finditer(line)):
                    out.append(f"{rel}:{n}: {what}: {line.strip()}")
    return sorted(set(out))


def test_code_speaks_of_the_product_not_its_history():
    found = findings()
    assert not found, f"{len(found)} reference(s) to history or outside files:\n" + "\n".join(found)


def test_the_scan_finds_each_kind():
    """The patterns catch what they are for, and leave names in code alone."""
    src = ('"""Admission (issue 14; DESIGN.md, Formats)."""\n'
           "T0 = 1  # T15 (b): a hostile review found it\n"
           "x = 'D1:3'\n")
    assert sorted(n for n, _ in _python_prose(src)) == [1, 2]
    hits = [what for _, line in _python_prose(src) for pattern, what in IN_PROSE if pattern.search(line)]
    assert hits == ["a decision id (cite docs/adr/*.md)"]
    lines = src.splitlines()
    assert {what for line in lines for pattern, what in ANYWHERE if pattern.search(line)} == {
        "an issue number", "a review pass", "a file outside the repository (cite docs/design.md)"}
    assert not any(p.search("all-MiniLM-L6-v2, the LoCoMo locator X4:2, PKCS#11") for p, _ in IN_PROSE)
