"""The evidence archive container: one canonical POSIX ustar tar (docs/evidence-format.md).

Canonical form, so that *every* byte of an archive is accounted for:

* members in this order: ``manifest.json``, ``manifest.sig``, then every
  other file in ascending byte order of its name;
* each member a regular file: mode ``0644``, uid/gid ``0``, empty
  uname/gname, mtime ``0``, ustar format (no pax or GNU extension headers),
  no directory entries;
* the end-of-archive marker and padding exactly as Python's ``tarfile``
  writes them (two zero blocks, then zeros to a multiple of 10240 bytes).

:func:`read` parses an archive and checks it is byte-for-byte the canonical
encoding of what it contains, so a changed byte anywhere — content, header,
padding or trailer — is either a content change (caught by the manifest's
digests) or a departure from canonical form (caught here, with its offset).
Standard library only: the offline verifier imports this.
"""
from __future__ import annotations

import io
import re
import tarfile
from dataclasses import dataclass

FIRST = ("manifest.json", "manifest.sig")
_SAFE = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")


class ArchiveError(ValueError):
    """The archive is not a canonical OML evidence tar; the message names the member or offset."""


def order(names: list[str]) -> list[str]:
    rest = sorted((n for n in names if n not in FIRST), key=lambda n: n.encode())
    return [n for n in FIRST if n in names] + rest


def pack(files: dict[str, bytes]) -> bytes:
    """The canonical tar of ``files`` (name → bytes). Raises :class:`ArchiveError` for an unsafe name."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name in order(list(files)):
            if not _SAFE.match(name) or ".." in name.split("/") or len(name) > 100:
                raise ArchiveError(f"unsafe member name {name!r}")
            data = files[name]
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname = len(data), 0, 0o644, 0, 0, "", ""
            ti.type = tarfile.REGTYPE
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


@dataclass(frozen=True)
class Member:
    name: str
    data: bytes
    header_offset: int
    data_offset: int


def read(data: bytes) -> list[Member]:
    """Parse ``data`` and check it is canonical; returns the members in archive order.

    Raises :class:`ArchiveError` naming the first problem: not a tar, a
    member that is not a regular file, an unsafe or duplicate name, members
    out of canonical order, or bytes that differ from the canonical encoding
    (with the offset and the member it falls in).
    """
    members: list[Member] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
            for ti in tf:
                if not ti.isreg():
                    raise ArchiveError(f"member {ti.name!r} is not a regular file")
                if not _SAFE.match(ti.name) or ".." in ti.name.split("/"):
                    raise ArchiveError(f"member name {ti.name!r} is not a safe relative path")
                if any(m.name == ti.name for m in members):
                    raise ArchiveError(f"member {ti.name!r} appears twice")
                f = tf.extractfile(ti)
                body = f.read() if f is not None else b""
                members.append(Member(ti.name, body, ti.offset, ti.offset_data))
    except tarfile.TarError as exc:
        raise ArchiveError(f"not a readable tar archive ({exc})") from None
    except (EOFError, OSError, ValueError) as exc:
        if isinstance(exc, ArchiveError):
            raise
        raise ArchiveError(f"not a readable tar archive ({type(exc).__name__})") from None
    if not members:
        raise ArchiveError("the archive has no members")
    names = [m.name for m in members]
    if names != order(names):
        raise ArchiveError("members are not in canonical order (manifest.json, manifest.sig, then by name)")
    canon = pack({m.name: m.data for m in members})
    if canon != data:
        n = min(len(canon), len(data))
        off = next((i for i in range(n) if canon[i] != data[i]), n)
        raise ArchiveError(f"bytes differ from the canonical tar encoding at offset {off} ({_where(members, off)})")
    return members


def _where(members: list[Member], off: int) -> str:
    for m in members:
        end = m.data_offset + len(m.data)
        if m.header_offset <= off < m.data_offset:
            return f"header of member {m.name!r}"
        if m.data_offset <= off < end:
            return f"content of member {m.name!r}"
        padded = m.data_offset + -(-len(m.data) // 512) * 512
        if end <= off < padded:
            return f"padding after member {m.name!r}"
    return "after the last readable member: a damaged header, the end-of-archive marker or trailing bytes"
