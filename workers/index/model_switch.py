"""Switching the deployment's embedding model: ``oml index rebuild --model NAME`` (docs/operations.md, "Choosing the
embedding model"; docs/adr/0022-selectable-embedding-model.md).

The index holds one model's vectors at a time. ``memory_embeddings.embedding``
and ``sim_memory_embeddings.embedding`` are ``vector(n)`` with ``n`` the
model's dimension (384 for MiniLM, 768 for mpnet), and the model is recorded
on the column itself as a JSON comment (:class:`oml.workers.index.embedding.IndexModel`):
only the schema owner can write a comment, every role can read it, and it
changes in the same transaction as the column's type.

:func:`switch` runs as the schema owner:

1. loads the new model (a missing part or a digest mismatch stops here,
   before the database is touched);
2. in one transaction (``ACCESS EXCLUSIVE`` on both tables: readers and the
   indexer wait for its few statements): deletes every embedding row (shared
   and simulation; they are derived, the journal and bodies keep the source),
   changes both columns to ``vector(n)`` (pgvector rebuilds each partition's
   HNSW index, empty), and records the model with state ``rebuilding``;
3. re-indexes each tenant (:func:`oml.workers.index.indexer.rebuild`: one
   transaction per tenant, the full-text rows rebuilt alongside);
4. records state ``ready``.

While the state is ``rebuilding``, recall's vector leg stands aside and hybrid
recall answers from the lexical leg (``vector.rebuilding`` in its
diagnostics); a process configured with another model is refused by the
indexer (``index.model_mismatch``) and recall degrades the same way
(``vector.model_mismatch``). A switch that stops part-way leaves state
``rebuilding``; running the same command again resumes (the model already
recorded, step 2 is skipped and every tenant is re-indexed).

Credentials: the schema owner's (DDL, ``COMMENT``) and, for step 3, the
indexer's role and feed, as ``oml index rebuild --tenant``.

Public API::

    switch(ctx, model, progress=None) -> Report
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sqlalchemy as sa

from oml.domain.errors import invalid
from oml.services.runtime.settings import MODEL_NAMES, MODEL_VALUE_RULE, is_model_dir
from oml.workers.index import embedding as E

if TYPE_CHECKING:  # pragma: no cover
    from oml.services.runtime.context import Context

log = logging.getLogger(__name__)

TABLES = ("memory_embeddings", "sim_memory_embeddings")
UNKNOWN_CODE = "index.model_unknown"

#: ``progress(tenant, done_seq, head_seq, tenant_index, tenants)``: called after each batch of each tenant.
Progress = Callable[[str, int, int, int, int], None]


@dataclass
class Report:
    """What :func:`switch` did: the model recorded, whether the columns changed, events replayed per tenant."""

    model: E.IndexModel
    previous: E.IndexModel
    altered: bool
    tenants: dict[str, int] = field(default_factory=dict)


def _record(conn: sa.Connection, model: E.IndexModel) -> None:
    # COMMENT takes no bind parameters: the JSON goes in as a literal quoted by psycopg, and the statement is sent
    # without parameter parsing (a directory's path may hold ":", "%", "'" or "$", which sa.text, the driver's
    # placeholders or a dollar quote would each take for syntax).
    from psycopg import sql

    raw = conn.connection.driver_connection
    for table in TABLES:
        stmt = sql.SQL("COMMENT ON COLUMN {}.embedding IS {}").format(sql.Identifier(table), sql.Literal(model.comment()))
        conn.exec_driver_sql(stmt.as_string(raw), execution_options={"no_parameters": True})


def check_model_name(model: str) -> None:
    """Raise ``index.model_unknown`` (422) unless ``model`` is ``minilm``, ``mpnet`` (any case) or an existing
    directory holding a sentence-transformers (``modules.json``) or transformers (``config.json``) model; the
    detail never repeats the value. The same rule as ``OML_EMBEDDING_MODEL`` (services/runtime/settings.py)."""
    value = (model or "").strip()
    if value.lower() in MODEL_NAMES or (value and is_model_dir(value)):
        return
    raise invalid(f"--model {MODEL_VALUE_RULE}, nothing was changed", code=UNKNOWN_CODE, field="model",
                  allowed=list(MODEL_NAMES))


def switch(ctx: Context, model: str, *, progress: Progress | None = None) -> Report:
    """Make the index hold ``model``'s vectors (``minilm``, ``mpnet`` or a directory path); returns a
    :class:`Report`. Raises ``index.model_unknown`` (422) for a value that names no model, ``model.missing`` /
    ``model.digest`` when the model cannot load: each before any change."""
    from oml.workers.index import indexer

    check_model_name(model)
    settings = ctx.settings.model_copy(update={"embedding_model": model})
    nctx = dataclasses.replace(ctx, settings=settings)
    emb = E.get_embedder(settings)
    target = E.IndexModel(emb.dimension, emb.name, emb.source_sha256, "rebuilding")
    altered = False
    with ctx.db.system(None) as conn:
        # Read under the lock: a switch that committed meanwhile is what this one starts from, and the column ends as
        # this model's vector(n) whatever another switch made it.
        conn.execute(sa.text(f"LOCK TABLE {', '.join(TABLES)} IN ACCESS EXCLUSIVE MODE"))
        previous = E.recorded_model(conn)
        if (previous.name, previous.dimension, previous.source_sha256) != (target.name, target.dimension, target.source_sha256):
            # Row triggers (erasure's refusal) do not fire on TRUNCATE; the rows are derived, rebuilt below.
            conn.execute(sa.text(f"TRUNCATE {', '.join(TABLES)}"))
            if previous.dimension != target.dimension:
                for table in TABLES:
                    conn.execute(sa.text(f"ALTER TABLE {table} ALTER COLUMN embedding TYPE vector({int(target.dimension)})"))
                altered = True
            _record(conn, target)
            log.info("index: embedding rows deleted; the index now takes %s (%d dimensions)", target.name, target.dimension)
        elif previous.state != "rebuilding":
            _record(conn, target)
    report = Report(target, previous, altered)
    names = indexer.tenants(nctx)
    for i, tenant in enumerate(names):
        def step(done: int, head: int, tenant: str = tenant, i: int = i) -> None:
            if progress is not None:
                progress(tenant, done, head, i, len(names))

        step(0, 0)
        report.tenants[tenant] = indexer.rebuild(nctx, tenant, progress=step)
    report.model = dataclasses.replace(target, state="ready")
    with ctx.db.system(None) as conn:
        _record(conn, report.model)
    return report
