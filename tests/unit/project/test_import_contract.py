"""The layer rules of docs/architecture.md, read from the source with ``ast`` (no import runs).

* ``domain/`` imports nothing of OML but itself; ``client/`` nothing of the server.
* Workers never import entrypoints; nothing outside entrypoints (and the tools) imports them.
* Services and workers share code only through domain and the shared infrastructure (``services/storage/``,
  ``services/runtime/``). The crossings that remain are listed in :data:`CROSSINGS`, each with its reason; a new
  one fails this test until it is either removed or written down there.
"""
from __future__ import annotations

import ast
from pathlib import Path

from support.paths import REPO as ROOT

TOPS = ("domain", "services", "workers", "client")
SHARED = ("oml.domain", "oml.services.storage", "oml.services.runtime")

#: (importing package, imported package) → why the crossing stands.
CROSSINGS = {
    ("oml.services.reads", "oml.workers.index"): "recall embeds the query with the indexer's model (one model, one vector space)",
    ("oml.services.erasure", "oml.workers.index"): "erasure deletes the context-window rows the indexer derived",
    ("oml.services.erasure", "oml.workers.lake"): "erasure and restore account for the lake's copies (table layout, purge state)",
    ("oml.workers.index", "oml.services.journal"): "the indexer journals index.* events through the act runner",
    ("oml.workers.index", "oml.services.reads"): "in one process the indexer reads the server's indexing feed directly",
    ("oml.workers.reconcile", "oml.services.journal"): "the reconciler recomputes checkpoints and projections with their own code",
    ("oml.workers.reconcile", "oml.services.keys"): "the reconciler reads trust anchors (outside the database)",
    ("oml.workers.reconcile", "oml.services.reads"): "the reconciler verifies read-log batches with the read log's own digests",
    ("oml.workers.reconcile", "oml.services.audit"): "the reconciler writes its report with the audit report writer",
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["oml", *parts])


def _imports() -> list[tuple[str, str, str]]:
    """(importing module, imported module, file:line) for every absolute import of ``oml`` under the code folders."""
    out = []
    for top in TOPS:
        for path in sorted((ROOT / top).rglob("*.py")):
            mod = _module(path)
            for node in ast.walk(ast.parse(path.read_text())):
                where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.Import):
                    out += [(mod, a.name, where) for a in node.names if a.name.startswith("oml")]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    name = node.module if node.level == 0 else _resolve(mod, path, node)
                    if name.startswith("oml"):
                        out += [(mod, f"{name}.{a.name}", where) for a in node.names]
    return out


def _resolve(mod: str, path: Path, node: ast.ImportFrom) -> str:
    package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _package(name: str) -> str:
    """``oml.services.reads.recall`` → ``oml.services.reads``: the capability a module belongs to."""
    return ".".join(name.split(".")[:3])


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


IMPORTS = _imports()


def test_the_scan_sees_the_tree():
    assert len(IMPORTS) > 500 and {m for m, _, _ in IMPORTS} >= {"oml.services.claims.admission", "oml.workers.index.indexer"}


def test_domain_imports_nothing_of_oml_but_itself():
    bad = [w for m, t, w in IMPORTS if m.startswith("oml.domain") and not _within(t, ("oml.domain",))]
    assert not bad, bad


def test_client_imports_nothing_of_the_server():
    bad = [w for m, t, w in IMPORTS if m.startswith("oml.client") and not _within(t, ("oml.client",))]
    assert not bad, bad


def test_only_entrypoints_import_entrypoints():
    bad = [w for m, t, w in IMPORTS if _within(t, ("oml.services.entrypoints",)) and not _within(m, ("oml.services.entrypoints",))]
    assert not bad, bad


def test_services_and_workers_share_code_only_through_domain_and_the_shared_infrastructure():
    found, bad = set(), []
    for m, t, w in IMPORTS:
        if _within(m, ("oml.services.entrypoints",)) or _within(m, SHARED) or _within(t, SHARED):
            continue  # entrypoints wire everything; the shared layers are shared
        crossing = (m.startswith("oml.services") and t.startswith("oml.workers")) or \
                   (m.startswith("oml.workers") and t.startswith("oml.services"))
        if not crossing:
            continue
        pair = (_package(m), _package(t))
        found.add(pair)
        if pair not in CROSSINGS:
            bad.append(f"{w}: {m} imports {t}")
    assert not bad, "\n".join(bad)
    assert not set(CROSSINGS) - found, f"crossings listed but gone (remove them): {sorted(set(CROSSINGS) - found)}"


def test_shared_infrastructure_imports_no_capability():
    """storage and runtime sit under every capability: they import only domain and each other (the process
    wiring in runtime/context.py names the capabilities it builds lazily, inside functions, and is the exception)."""
    bad = [w for m, t, w in IMPORTS
           if _within(m, ("oml.services.storage",)) and not _within(t, ("oml.domain", "oml.services.storage", "oml.services.runtime"))]
    assert not bad, bad


def test_no_class_in_services_or_workers_has_more_than_25_methods():
    """One job per class: a class that grows past this is holding several (docs/architecture.md)."""
    big = []
    for top in ("services", "workers"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    n = sum(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) for b in node.body)
                    if n > 25:
                        big.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} has {n} methods")
    assert not big, big
