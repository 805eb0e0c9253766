"""RFC 6962 / RFC 9162 Merkle tree hashing, proofs and proof verification.

OML keeps one append-only Merkle tree per tenant over its journal
(docs/journal-format.md, "Merkle tree and checkpoints"). Leaf ``i`` (0-based)
commits to event ``seq = i + 1`` through its chain hash: ``leaf_i = SHA-256(0x00 ‖ h_{i+1})`` (see
:func:`event_leaf`). Interior nodes are ``SHA-256(0x01 ‖ left ‖ right)`` and
the tree over ``n`` leaves splits at the largest power of two below ``n``
(RFC 9162 §2.1.1), so every hash here is 32 raw bytes.

Three ways to use it:

* module functions (:func:`root`, :func:`inclusion_proof`,
  :func:`consistency_proof`) over a full list of leaf hashes; each call
  hashes O(n) nodes and holds one level (O(n) hashes) at a time;
* :class:`MerkleTree`, which keeps every perfect subtree so that many proofs
  over one tree (an evidence export's receipt per event) cost O(log² n)
  each after an O(n) build;
* :class:`CompactRange`, the right-hand frontier (one hash per set bit of the
  size), which is all a writer needs to append leaves and compute new roots
  while storing O(log n) hashes in a database row.

Verification follows the iterative algorithms of RFC 9162 §2.1.3.2
(inclusion) and §2.1.4.2 (consistency) and raises :class:`ProofError` with a
message naming what is wrong; it never returns ``False``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "HASH_SIZE",
    "EMPTY_ROOT",
    "ProofError",
    "leaf_hash",
    "node_hash",
    "event_leaf",
    "root",
    "inclusion_proof",
    "consistency_proof",
    "verify_inclusion",
    "verify_consistency",
    "inclusion_proof_size",
    "consistency_proof_size",
    "CompactRange",
    "MerkleTree",
]

HASH_SIZE = 32
"""Size in bytes of every hash in the tree (SHA-256)."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""Root of the empty tree, ``MTH({}) = SHA-256()`` (RFC 9162 §2.1.1)."""

# A proof for a tree of size < 2**64 has at most 64 hashes; anything longer is
# garbage and must not make a verifier loop for long.
_MAX_PROOF = 64
_MAX_SIZE = 1 << 64


class ProofError(ValueError):
    """An inclusion or consistency proof does not verify, or is ill-formed.

    The message says which check failed (sizes, proof length, hash length,
    or which root was not reproduced).
    """


# --------------------------------------------------------------------------
# Hashing (RFC 9162 §2.1.1)


def leaf_hash(data: bytes) -> bytes:
    """Return ``SHA-256(0x00 ‖ data)``, the RFC 9162 §2.1.1 leaf hash (32 bytes)."""
    return hashlib.sha256(b"\x00" + bytes(data)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return ``SHA-256(0x01 ‖ left ‖ right)``, the RFC 9162 §2.1.1 interior hash."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def event_leaf(chain_hash: bytes) -> bytes:
    """Return OML's leaf hash for an event: ``leaf_hash(h_n)`` (docs/journal-format.md).

    ``chain_hash`` is the event's 32-byte chain hash ``h_n``; the result is
    leaf ``n - 1`` of the tenant's tree. Raises :class:`ValueError` if
    ``chain_hash`` is not 32 bytes, since a truncated or hex-encoded hash
    would silently yield a different, unverifiable tree.
    """
    if len(chain_hash) != HASH_SIZE:
        raise ValueError(f"chain hash must be {HASH_SIZE} raw bytes, got {len(chain_hash)}")
    return leaf_hash(chain_hash)


# --------------------------------------------------------------------------
# Tree shape helpers


def _split(n: int) -> int:
    """Largest power of two strictly below ``n`` (``n >= 2``), RFC 9162 §2.1.1's k."""
    return 1 << ((n - 1).bit_length() - 1)


def _fold(hashes: Sequence[bytes]) -> bytes:
    """Combine perfect-subtree roots, left (largest) to right, into one root."""
    acc = hashes[-1]
    for h in reversed(hashes[:-1]):
        acc = node_hash(h, acc)
    return acc


def _range_root_from_leaves(leaves: Sequence[bytes]) -> Callable[[int, int], bytes]:
    """MTH(leaves[lo:hi]), hashing level by level.

    Every range the proof algorithms ask for starts at a multiple of a power
    of two at least as large as the range, so its tree shape is that of a
    fresh tree of ``hi - lo`` leaves. Pairing neighbours and carrying an odd
    last node up unchanged builds exactly the RFC 9162 §2.1.1 tree (the
    split at the largest power of two below n), and runs as list
    comprehensions rather than a per-leaf Python loop.
    """

    def mth(lo: int, hi: int) -> bytes:
        level = list(leaves[lo:hi])
        while len(level) > 1:
            paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            if len(level) & 1:
                paired.append(level[-1])
            level = paired
        return level[0]

    return mth


def _path(mth: Callable[[int, int], bytes], index: int, size: int) -> list[bytes]:
    """RFC 9162 §2.1.3.1 PATH(index, D[0:size]), descending iteratively."""
    siblings: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        mid = lo + _split(hi - lo)
        if index < mid:
            siblings.append(mth(mid, hi))
            hi = mid
        else:
            siblings.append(mth(lo, mid))
            lo = mid
    siblings.reverse()  # the RFC lists the path bottom-up
    return siblings


def _subproof(mth: Callable[[int, int], bytes], old_size: int, size: int) -> list[bytes]:
    """RFC 9162 §2.1.4.1 PROOF(old_size, D[0:size]) = SUBPROOF(m, D[n], true), iteratively."""
    tail: list[bytes] = []
    lo, hi, m, complete = 0, size, old_size, True
    while m != hi - lo:
        mid = lo + _split(hi - lo)
        if m <= mid - lo:
            tail.append(mth(mid, hi))
            hi = mid
        else:
            tail.append(mth(lo, mid))
            m -= mid - lo
            lo = mid
            complete = False
    head = [] if complete else [mth(lo, hi)]
    return head + tail[::-1]


def _check_path_args(index: int, size: int) -> None:
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")


def _check_consistency_args(old_size: int, size: int) -> None:
    if not 0 < old_size <= size:
        raise ValueError(
            f"consistency proof needs 0 < old size <= new size, got {old_size} and {size}"
        )


# --------------------------------------------------------------------------
# Module functions over a list of leaf hashes


def root(leaves: Sequence[bytes]) -> bytes:
    """Return MTH(leaves), the RFC 9162 §2.1.1 root of the tree over ``leaves``.

    ``leaves`` are leaf *hashes* (32 bytes each, e.g. from :func:`event_leaf`),
    not raw entries. The empty tree's root is :data:`EMPTY_ROOT`. O(n).
    """
    if not leaves:
        return EMPTY_ROOT
    return _range_root_from_leaves(leaves)(0, len(leaves))


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """Return the RFC 9162 §2.1.3.1 inclusion path for leaf ``index`` (0-based).

    The proof is for the tree over all of ``leaves`` (leaf hashes), listed
    from the leaf's sibling up to the root's child, as RFC 6962 §2.1.1 and
    tlog-proof expect. Raises :class:`ValueError` unless
    ``0 <= index < len(leaves)``. O(n) hashing.
    """
    _check_path_args(index, len(leaves))
    return _path(_range_root_from_leaves(leaves), index, len(leaves))


def consistency_proof(leaves: Sequence[bytes], old_size: int) -> list[bytes]:
    """Return the RFC 9162 §2.1.4.1 consistency proof from ``old_size`` to ``len(leaves)``.

    Empty when ``old_size == len(leaves)``. Raises :class:`ValueError` unless
    ``0 < old_size <= len(leaves)``: a proof from the empty tree is
    meaningless and verifiers (including :func:`verify_consistency`) reject
    it. O(n) hashing.
    """
    _check_consistency_args(old_size, len(leaves))
    return _subproof(_range_root_from_leaves(leaves), old_size, len(leaves))


# --------------------------------------------------------------------------
# Verification (RFC 9162 §2.1.3.2, §2.1.4.2)


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode("ascii")


def inclusion_proof_size(index: int, size: int) -> int:
    """Number of hashes in the inclusion proof of leaf ``index`` in a tree of ``size``.

    That is the levels where the paths to ``index`` and ``size - 1`` differ
    plus the left siblings above the point where they join. Requires
    ``0 <= index < size``.
    """
    inner = (index ^ (size - 1)).bit_length()
    return inner + bin(index >> inner).count("1")


def consistency_proof_size(old_size: int, new_size: int) -> int:
    """Number of hashes in the consistency proof from ``old_size`` to ``new_size``.

    Requires ``0 < old_size <= new_size``; 0 when the sizes are equal.
    """
    if old_size == new_size:
        return 0
    last = old_size - 1
    inner = (last ^ (new_size - 1)).bit_length()
    border = bin(last >> inner).count("1")
    shift = (old_size & -old_size).bit_length() - 1  # trailing zero bits
    # An old tree that is itself a perfect subtree needs no seed hash.
    seed = 0 if old_size == 1 << shift else 1
    return seed + (inner - shift) + border


def _check_hashes(proof: Sequence[bytes]) -> None:
    for i, h in enumerate(proof):
        if not isinstance(h, (bytes, bytearray)) or len(h) != HASH_SIZE:
            length = len(h) if isinstance(h, (bytes, bytearray)) else type(h).__name__
            raise ProofError(f"proof hash [{i}] must be {HASH_SIZE} bytes, got {length}")


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``leaf_hash`` is leaf ``index`` of the tree of ``size`` with ``root``.

    Implements RFC 9162 §2.1.3.2. ``leaf_hash`` is the 32-byte leaf hash
    (for OML, :func:`event_leaf` of the chain hash), ``proof`` the path
    from the leaf's sibling upwards. Returns ``None`` on success; raises
    :class:`ProofError` if ``index >= size``, the leaf or a proof hash is not
    32 bytes, the proof has the wrong number of hashes for
    ``(index, size)``, or the computed root differs from ``root``.
    """
    if not (isinstance(index, int) and isinstance(size, int)) or index < 0 or size < 0:
        raise ProofError(f"index and size must be non-negative integers, got {index!r}, {size!r}")
    if size >= _MAX_SIZE:
        raise ProofError(f"tree size {size} does not fit in 64 bits")
    if index >= size:
        raise ProofError(f"leaf index {index} is not below tree size {size}")
    if len(leaf_hash) != HASH_SIZE:
        raise ProofError(f"leaf hash must be {HASH_SIZE} bytes, got {len(leaf_hash)}")
    want = inclusion_proof_size(index, size)
    if len(proof) != want:
        raise ProofError(
            f"inclusion proof for index {index} in size {size} needs {want} hashes, got {len(proof)}"
        )
    _check_hashes(proof)

    fn, sn, r = index, size - 1, bytes(leaf_hash)
    for p in proof:
        if sn == 0:  # unreachable after the length check; kept as the RFC's guard
            raise ProofError("inclusion proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                # Right border: the node has no right sibling at these levels.
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the path to the root")
    if not hmac.compare_digest(r, bytes(root)):
        raise ProofError(
            f"inclusion proof for index {index} in size {size} yields root {_b64(r)}, "
            f"expected {_b64(bytes(root))}"
        )


def verify_consistency(
    old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes
) -> None:
    """Check that the tree of ``new_size``/``new_root`` extends ``old_size``/``old_root``.

    Implements RFC 9162 §2.1.4.2 for ``0 < old_size < new_size``. Edge cases,
    matching transparency-dev/merkle's test vectors:

    * ``old_size == new_size``: the proof must be empty and the roots equal
      (for size 0 both must be :data:`EMPTY_ROOT`);
    * ``old_size == 0 < new_size``: rejected — every tree extends the empty
      tree, so such a "proof" proves nothing and signals a caller bug;
    * ``old_size > new_size``: rejected.

    Returns ``None`` on success; raises :class:`ProofError` naming the failed
    check (sizes, proof length, a proof hash not 32 bytes, or which root was
    not reproduced).
    """
    for name, v in (("old size", old_size), ("new size", new_size)):
        if not isinstance(v, int) or v < 0 or v >= _MAX_SIZE:
            raise ProofError(f"{name} must be an integer in [0, 2**64), got {v!r}")
    if old_size > new_size:
        raise ProofError(f"old size {old_size} is larger than new size {new_size}")
    if old_size == new_size:
        if proof:
            raise ProofError(f"sizes are equal ({old_size}) but the proof has {len(proof)} hashes")
        if old_size == 0 and not hmac.compare_digest(bytes(old_root), EMPTY_ROOT):
            raise ProofError("old root of the empty tree is not SHA-256 of the empty string")
        if not hmac.compare_digest(bytes(old_root), bytes(new_root)):
            raise ProofError(f"sizes are equal ({old_size}) but the roots differ")
        return
    if old_size == 0:
        raise ProofError("consistency from the empty tree is meaningless; old size must be > 0")
    want = consistency_proof_size(old_size, new_size)
    if len(proof) != want:
        raise ProofError(
            f"consistency proof from {old_size} to {new_size} needs {want} hashes, got {len(proof)}"
        )
    _check_hashes(proof)

    path = [bytes(h) for h in proof]
    if old_size & (old_size - 1) == 0:
        # The old tree is a perfect subtree of the new one: its root is the seed.
        path.insert(0, bytes(old_root))
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:  # unreachable after the length check; kept as the RFC's guard
            raise ProofError("consistency proof is longer than the path to the root")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof is shorter than the path to the root")
    if not hmac.compare_digest(fr, bytes(old_root)):
        raise ProofError(
            f"consistency proof yields old root {_b64(fr)} at size {old_size}, "
            f"expected {_b64(bytes(old_root))}"
        )
    if not hmac.compare_digest(sr, bytes(new_root)):
        raise ProofError(
            f"consistency proof yields new root {_b64(sr)} at size {new_size}, "
            f"expected {_b64(bytes(new_root))}"
        )


# --------------------------------------------------------------------------
# Incremental frontier


class CompactRange:
    """The right-hand frontier of a Merkle tree over leaves ``[0, size)``.

    Holds one 32-byte hash per set bit of ``size``: the roots of the perfect
    subtrees the tree decomposes into, largest (leftmost) first. That is
    enough to append leaves and compute the root of every later size, so a
    tenant's tree can live in a database row as ``(size, to_bytes())``.

    The serialised form is the plain concatenation of those hashes
    (``32 * popcount(size)`` bytes); the size is not included and must be
    stored beside it.
    """

    __slots__ = ("_size", "_hashes")

    def __init__(self) -> None:
        """Create the frontier of the empty tree."""
        self._size = 0
        self._hashes: list[bytes] = []

    @property
    def size(self) -> int:
        """Number of leaves appended so far."""
        return self._size

    @property
    def hashes(self) -> list[bytes]:
        """Copy of the perfect-subtree roots, largest first (``popcount(size)`` items)."""
        return list(self._hashes)

    def append(self, leaf: bytes) -> None:
        """Append one leaf hash (32 bytes, e.g. :func:`event_leaf`); O(log n).

        Raises :class:`ValueError` if ``leaf`` is not 32 bytes.
        """
        if len(leaf) != HASH_SIZE:
            raise ValueError(f"leaf hash must be {HASH_SIZE} bytes, got {len(leaf)}")
        n = self._size
        self._hashes.append(bytes(leaf))
        # Each trailing 1 bit of the old size is a perfect subtree the new
        # leaf completes into one twice its size.
        while n & 1:
            right = self._hashes.pop()
            self._hashes[-1] = node_hash(self._hashes[-1], right)
            n >>= 1
        self._size += 1

    def extend(self, leaves: Iterable[bytes]) -> None:
        """Append each leaf hash of ``leaves`` in order."""
        for leaf in leaves:
            self.append(leaf)

    def root(self) -> bytes:
        """Root of the tree over the leaves appended so far (RFC 9162 §2.1.1)."""
        if not self._hashes:
            return EMPTY_ROOT
        return _fold(self._hashes)

    def to_bytes(self) -> bytes:
        """Serialise as the concatenated hashes (store :attr:`size` separately)."""
        return b"".join(self._hashes)

    @classmethod
    def from_bytes(cls, size: int, data: bytes) -> CompactRange:
        """Rebuild from :meth:`to_bytes` output and the tree ``size`` stored with it.

        Raises :class:`ValueError` if ``len(data) != 32 * popcount(size)``.
        """
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be a non-negative integer, got {size!r}")
        want = HASH_SIZE * bin(size).count("1")
        if len(data) != want:
            raise ValueError(
                f"compact range for size {size} needs {want} bytes, got {len(data)}"
            )
        data = bytes(data)
        return cls.from_hashes(size, [data[i : i + HASH_SIZE] for i in range(0, want, HASH_SIZE)])

    @classmethod
    def from_hashes(cls, size: int, hashes: Sequence[bytes]) -> CompactRange:
        """Rebuild from ``size`` and the perfect-subtree roots, largest first.

        Raises :class:`ValueError` on a count other than ``popcount(size)`` or a
        hash that is not 32 bytes.
        """
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"size must be a non-negative integer, got {size!r}")
        if len(hashes) != bin(size).count("1"):
            raise ValueError(
                f"compact range for size {size} needs {bin(size).count('1')} hashes, got {len(hashes)}"
            )
        for i, h in enumerate(hashes):
            if len(h) != HASH_SIZE:
                raise ValueError(f"hash [{i}] must be {HASH_SIZE} bytes, got {len(h)}")
        cr = cls()
        cr._size = size
        cr._hashes = [bytes(h) for h in hashes]
        return cr

    @classmethod
    def from_leaves(cls, leaves: Iterable[bytes]) -> CompactRange:
        """Build the frontier of the tree over ``leaves`` (leaf hashes)."""
        cr = cls()
        cr.extend(leaves)
        return cr

    def copy(self) -> CompactRange:
        """Independent copy, e.g. to compute a tentative root before committing."""
        return CompactRange.from_hashes(self._size, self._hashes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CompactRange):
            return NotImplemented
        return self._size == other._size and self._hashes == other._hashes

    def __repr__(self) -> str:
        return f"CompactRange(size={self._size}, root={_b64(self.root())})"


# --------------------------------------------------------------------------
# Whole tree in memory


class MerkleTree:
    """A tree kept in memory with every perfect subtree hash, for many proofs.

    ``levels[0]`` are the leaf hashes; ``levels[k][i]`` is the root of leaves
    ``[i * 2**k, (i + 1) * 2**k)``. Roots and proofs may be asked for any
    size up to :attr:`size` (older checkpoints), each in O(log² n) after an
    O(n) build. Memory is about 2n hashes.
    """

    __slots__ = ("_levels",)

    def __init__(self, leaves: Iterable[bytes] = ()) -> None:
        """Build from leaf hashes (32 bytes each); raises :class:`ValueError` otherwise."""
        self._levels: list[list[bytes]] = [[]]
        for leaf in leaves:
            self.append(leaf)

    @property
    def size(self) -> int:
        """Number of leaves."""
        return len(self._levels[0])

    def append(self, leaf: bytes) -> None:
        """Append one leaf hash; amortised O(1) hashing."""
        if len(leaf) != HASH_SIZE:
            raise ValueError(f"leaf hash must be {HASH_SIZE} bytes, got {len(leaf)}")
        self._levels[0].append(bytes(leaf))
        k = 0
        while len(self._levels[k]) % 2 == 0:
            level = self._levels[k]
            if k + 1 == len(self._levels):
                self._levels.append([])
            self._levels[k + 1].append(node_hash(level[-2], level[-1]))
            k += 1

    def leaf(self, index: int) -> bytes:
        """Leaf hash at ``index``."""
        return self._levels[0][index]

    def _mth(self, lo: int, hi: int) -> bytes:
        # Callers only ask for ranges aligned as in _range_root_from_leaves:
        # cut the range into perfect subtrees by the bits of its length.
        parts: list[bytes] = []
        pos, n = lo, hi - lo
        for k in range(n.bit_length() - 1, -1, -1):
            if n >> k & 1:
                parts.append(self._levels[k][pos >> k])
                pos += 1 << k
        return _fold(parts)

    def _size_arg(self, size: int | None) -> int:
        if size is None:
            return self.size
        if not 0 <= size <= self.size:
            raise ValueError(f"size {size} is outside [0, {self.size}]")
        return size

    def root(self, size: int | None = None) -> bytes:
        """Root of the tree over the first ``size`` leaves (default: all)."""
        size = self._size_arg(size)
        return EMPTY_ROOT if size == 0 else self._mth(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.3.1 path for leaf ``index`` in the tree of ``size`` (default: all).

        Raises :class:`ValueError` unless ``0 <= index < size <= self.size``.
        """
        size = self._size_arg(size)
        _check_path_args(index, size)
        return _path(self._mth, index, size)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.4.1 proof from ``old_size`` to ``new_size`` (default: all).

        Raises :class:`ValueError` unless ``0 < old_size <= new_size <= self.size``.
        """
        new_size = self._size_arg(new_size)
        _check_consistency_args(old_size, new_size)
        return _subproof(self._mth, old_size, new_size)

    def compact_range(self, size: int | None = None) -> CompactRange:
        """Frontier of the tree over the first ``size`` leaves (default: all)."""
        size = self._size_arg(size)
        hashes, pos = [], 0
        for k in range(size.bit_length() - 1, -1, -1):
            if size >> k & 1:
                hashes.append(self._levels[k][pos >> k])
                pos += 1 << k
        return CompactRange.from_hashes(size, hashes)
