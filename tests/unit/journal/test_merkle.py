"""Tests for oml.domain.merkle.

Two independent checks:

* transparency-dev/merkle's proof vectors (read from the shared data folder,
  never copied into this repository — licence): every ``wantErr: false`` case
  verifies and every ``wantErr: true`` case raises ProofError;
* every tree size 1..512 against a deliberately plain recursive RFC 6962
  §2.1 implementation (MTH, PATH, SUBPROOF written as in the RFC).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import time
from functools import cache
from pathlib import Path

import pytest

from oml.domain import merkle
from oml.domain.merkle import (
    EMPTY_ROOT,
    CompactRange,
    MerkleTree,
    ProofError,
    consistency_proof,
    event_leaf,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    verify_consistency,
    verify_inclusion,
)

from support.paths import REPO


def _vector_dir() -> Path:
    # CI checks out ../shared beside the clone; OML_SHARED_DIR overrides it.
    shared = os.environ.get("OML_SHARED_DIR")
    base = Path(shared) if shared else REPO.parent / "shared"
    return base / "data" / "tlog-vectors" / "testdata"


VECTORS = _vector_dir()
needs_vectors = pytest.mark.skipif(
    not VECTORS.is_dir(),
    reason=f"tlog test vectors not found at {VECTORS} (set OML_SHARED_DIR to the shared folder)",
)


def _vector_files(kind: str) -> list[Path]:
    folder = VECTORS / kind
    return sorted(folder.rglob("*.json")) if folder.is_dir() else []


def _b64(s: str | None) -> bytes:
    return base64.b64decode(s) if s else b""


def _proof(v: list[str] | None) -> list[bytes]:
    return [_b64(h) for h in (v or [])]


def _id(path: Path) -> str:
    return str(path.relative_to(VECTORS))


# --------------------------------------------------------------------------
# Vectors


@needs_vectors
@pytest.mark.parametrize("path", _vector_files("inclusion"), ids=_id)
def test_inclusion_vector(path: Path) -> None:
    v = json.loads(path.read_text())
    args = (_b64(v["leafHash"]), v["leafIdx"], v["treeSize"], _proof(v["proof"]), _b64(v["root"]))
    if v["wantErr"]:
        with pytest.raises(ProofError):
            verify_inclusion(*args)
    else:
        verify_inclusion(*args)


@needs_vectors
@pytest.mark.parametrize("path", _vector_files("consistency"), ids=_id)
def test_consistency_vector(path: Path) -> None:
    v = json.loads(path.read_text())
    args = (v["size1"], v["size2"], _proof(v["proof"]), _b64(v["root1"]), _b64(v["root2"]))
    if v["wantErr"]:
        with pytest.raises(ProofError):
            verify_consistency(*args)
    else:
        verify_consistency(*args)


@needs_vectors
def test_vectors_cover_both_outcomes() -> None:
    # Guards against a silently empty or renamed vector folder.
    for kind in ("inclusion", "consistency"):
        outcomes = [json.loads(p.read_text())["wantErr"] for p in _vector_files(kind)]
        assert outcomes.count(False) >= 5 and outcomes.count(True) >= 50, kind


# --------------------------------------------------------------------------
# Plain RFC 6962 §2.1 reference over one fixed list of leaves: the tree of
# size n is always the first n of them, so MTH(lo, hi) can be cached.

MAX = 512
LEAVES = [event_leaf(hashlib.sha256(b"event %d" % i).digest()) for i in range(MAX)]


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


@cache
def ref_mth(lo: int, hi: int) -> bytes:
    n = hi - lo
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return LEAVES[lo]  # already a leaf hash: SHA-256(0x00 || d(lo))
    k = _k(n)
    return hashlib.sha256(b"\x01" + ref_mth(lo, lo + k) + ref_mth(lo + k, hi)).digest()


def ref_path(m: int, lo: int, hi: int) -> list[bytes]:
    n = hi - lo
    if n == 1:
        return []
    k = _k(n)
    if m < k:
        return ref_path(m, lo, lo + k) + [ref_mth(lo + k, hi)]
    return ref_path(m - k, lo + k, hi) + [ref_mth(lo, lo + k)]


def ref_subproof(m: int, lo: int, hi: int, b: bool) -> list[bytes]:
    n = hi - lo
    if m == n:
        return [] if b else [ref_mth(lo, hi)]
    k = _k(n)
    if m <= k:
        return ref_subproof(m, lo, lo + k, b) + [ref_mth(lo + k, hi)]
    return ref_subproof(m - k, lo + k, hi, False) + [ref_mth(lo, lo + k)]


def ref_proof(m: int, n: int) -> list[bytes]:
    return ref_subproof(m, 0, n, True)


def _sample(n: int, rng: random.Random) -> list[int]:
    """All of 0..n-1 for small n; otherwise both ends, powers of two and a random few."""
    if n <= 32:
        return list(range(n))
    picks = {0, n - 2, n - 1, n // 2}
    p = 1
    while p < n:
        picks.update((p - 1, p))
        p *= 2
    picks.update(rng.sample(range(n), 4))
    return sorted(picks)


def test_hash_primitives() -> None:
    assert leaf_hash(b"") == hashlib.sha256(b"\x00").digest()
    assert node_hash(b"a" * 32, b"b" * 32) == hashlib.sha256(b"\x01" + b"a" * 32 + b"b" * 32).digest()
    h = bytes(range(32))
    assert event_leaf(h) == hashlib.sha256(b"\x00" + h).digest()
    with pytest.raises(ValueError):
        event_leaf(h.hex().encode())
    assert root([]) == EMPTY_ROOT == hashlib.sha256(b"").digest()


def test_roots_and_compact_range_match_reference() -> None:
    cr = CompactRange()
    assert cr.root() == EMPTY_ROOT and cr.to_bytes() == b""
    for n in range(1, MAX + 1):
        cr.append(LEAVES[n - 1])
        want = ref_mth(0, n)
        assert root(LEAVES[:n]) == want, n
        assert cr.size == n and cr.root() == want, n
        blob = cr.to_bytes()
        assert len(blob) == 32 * bin(n).count("1")
        again = CompactRange.from_bytes(n, blob)
        assert again == cr and again.root() == want
    tree = MerkleTree(LEAVES)
    for n in range(0, MAX + 1):
        assert tree.root(n) == ref_mth(0, n)
        assert tree.compact_range(n) == CompactRange.from_leaves(LEAVES[:n])


def test_compact_range_resumes_after_serialisation() -> None:
    cr = CompactRange.from_leaves(LEAVES[:300])
    resumed = CompactRange.from_bytes(cr.size, cr.to_bytes())
    resumed.extend(LEAVES[300:])
    assert resumed.root() == ref_mth(0, MAX)
    copy = resumed.copy()
    copy.append(LEAVES[0])
    assert resumed.size == MAX and copy.size == MAX + 1


def test_compact_range_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        CompactRange.from_bytes(3, b"\x00" * 32)  # popcount(3) == 2 hashes
    with pytest.raises(ValueError):
        CompactRange.from_bytes(-1, b"")
    with pytest.raises(ValueError):
        CompactRange().append(b"short")


def test_inclusion_proofs_match_reference_all_sizes() -> None:
    tree = MerkleTree(LEAVES)
    for n in range(1, MAX + 1):
        r = ref_mth(0, n)
        for i in range(n):
            want = ref_path(i, 0, n)
            assert tree.inclusion_proof(i, n) == want, (i, n)
            assert len(want) == merkle.inclusion_proof_size(i, n)
        # The module function streams leaves (O(n) per proof), so sample it.
        for i in _sample(n, random.Random(n)):
            proof = inclusion_proof(LEAVES[:n], i)
            assert proof == ref_path(i, 0, n), (i, n)
            verify_inclusion(LEAVES[i], i, n, proof, r)


def test_consistency_proofs_match_reference_all_sizes() -> None:
    tree = MerkleTree(LEAVES)
    for n in range(1, MAX + 1):
        for m in range(1, n + 1):
            want = ref_proof(m, n)
            assert tree.consistency_proof(m, n) == want, (m, n)
            assert len(want) == merkle.consistency_proof_size(m, n)
        for m in _sample(n, random.Random(-n)):
            m += 1
            proof = consistency_proof(LEAVES[:n], m)
            assert proof == ref_proof(m, n), (m, n)
            verify_consistency(m, n, proof, ref_mth(0, m), ref_mth(0, n))


def test_every_reference_proof_verifies_for_small_trees() -> None:
    for n in range(1, 80):
        r = ref_mth(0, n)
        for i in range(n):
            verify_inclusion(LEAVES[i], i, n, ref_path(i, 0, n), r)
        for m in range(1, n + 1):
            verify_consistency(m, n, ref_proof(m, n), ref_mth(0, m), r)


def _flip(h: bytes) -> bytes:
    return bytes([h[0] ^ 1]) + h[1:]


def test_mutated_proofs_are_rejected() -> None:
    for n in (2, 3, 5, 7, 8, 13, 64, 100):
        r = ref_mth(0, n)
        for i in range(n):
            p = ref_path(i, 0, n)
            for j in range(len(p)):
                with pytest.raises(ProofError, match="yields root"):
                    verify_inclusion(LEAVES[i], i, n, p[:j] + [_flip(p[j])] + p[j + 1 :], r)
            with pytest.raises(ProofError, match="needs"):
                verify_inclusion(LEAVES[i], i, n, p + [r], r)
            with pytest.raises(ProofError):
                verify_inclusion(LEAVES[i], (i + 1) % n, n, p, r)
            with pytest.raises(ProofError, match="not below"):
                verify_inclusion(LEAVES[i], n, n, p, r)
        for m in range(1, n):
            p = ref_proof(m, n)
            for j in range(len(p)):
                with pytest.raises(ProofError, match="yields (old|new) root"):
                    verify_consistency(m, n, p[:j] + [_flip(p[j])] + p[j + 1 :], ref_mth(0, m), r)
            with pytest.raises(ProofError):
                verify_consistency(m, n, p, _flip(ref_mth(0, m)), r)
            with pytest.raises(ProofError):
                verify_consistency(m, n, p, ref_mth(0, m), _flip(r))
            with pytest.raises(ProofError, match="needs"):
                verify_consistency(m, n, p[:-1], ref_mth(0, m), r)


def test_verify_rejects_malformed_arguments() -> None:
    r = ref_mth(0, 4)
    p = ref_path(1, 0, 4)
    with pytest.raises(ProofError, match="leaf hash must be 32 bytes"):
        verify_inclusion(LEAVES[1][:31], 1, 4, p, r)
    with pytest.raises(ProofError, match=r"proof hash \[0\]"):
        verify_inclusion(LEAVES[1], 1, 4, [p[0][:31]] + p[1:], r)
    with pytest.raises(ProofError, match="larger than"):
        verify_consistency(5, 4, [], r, r)
    with pytest.raises(ProofError, match="empty tree"):
        verify_consistency(0, 4, [], EMPTY_ROOT, r)
    verify_consistency(0, 0, [], EMPTY_ROOT, EMPTY_ROOT)
    with pytest.raises(ValueError):
        inclusion_proof(LEAVES[:4], 4)
    with pytest.raises(ValueError):
        consistency_proof(LEAVES[:4], 0)
    assert consistency_proof(LEAVES[:4], 4) == []


def test_large_tree_is_linear() -> None:
    # 100k leaves must not take quadratic time (one tenant's busy day).
    n = 100_000
    leaves = [hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(n)]
    start = time.perf_counter()
    r = root(leaves)
    p = inclusion_proof(leaves, 77_777)
    c = consistency_proof(leaves, 65_537)
    verify_inclusion(leaves[77_777], 77_777, n, p, r)
    verify_consistency(65_537, n, c, root(leaves[:65_537]), r)
    assert CompactRange.from_leaves(leaves).root() == r
    tree = MerkleTree(leaves)
    assert tree.root() == r and tree.inclusion_proof(77_777) == p
    assert tree.consistency_proof(65_537) == c
    assert time.perf_counter() - start < 10
