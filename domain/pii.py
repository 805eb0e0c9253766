"""Personal-data classifier for claim bodies (pure: no I/O, no logging).

Admission runs this over every body before anything is committed; the
workarea's personal-data policy (``deny`` | ``declare`` | ``allow``, see
docs/design.md §Workareas) then decides with :func:`decide`.

What it finds is *patterns* with checksums or strong shapes: e-mail
addresses, phone numbers, payment cards, IBANs, national identity numbers,
IP addresses and credentials/secrets. It does **not** find names, postal
addresses or free-text descriptions of people. Only subjects that a writer
*declares* (``data_subjects``) are recorded and therefore erasable by
subject; anything the classifier cannot see is erasable only by claim.

Invariant: no value produced here (``Finding``, ``BodyFinding``,
``PersonalDataRefused`` and every ``ValueError`` raised) contains any text
from the scanned input -- only kind codes, JSON-pointer paths whose member
names are themselves redacted when they trip the classifier, and offsets.

Offsets are Python ``str`` indices (Unicode code points), half-open
``[start, end)``, into the text *as submitted*. Detection runs on a
normalised view of it (see :func:`_view`: NFKC, format characters and
combining marks dropped, space and dash variants folded, every decimal digit
as ASCII), so a zero-width space, a soft hyphen, a fullwidth ``＠`` or thin
spaces inside a value do not hide it; an offset map takes each finding back
to the original characters. docs/personal-data.md lists what is caught and
what is not.
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import phonenumbers
from stdnum import iban as _iban
from stdnum import luhn as _luhn
from stdnum.br import cpf as _br_cpf
from stdnum.de import idnr as _de_idnr
from stdnum.es import dni as _es_dni
from stdnum.es import nie as _es_nie
from stdnum.fr import nir as _fr_nir
from stdnum.gb import nhs as _gb_nhs
from stdnum.in_ import aadhaar as _in_aadhaar
from stdnum.it import codicefiscale as _it_cf
from stdnum.jp import in_ as _jp_in
from stdnum.nl import bsn as _nl_bsn
from stdnum.se import personnummer as _se_pnr
from stdnum.us import ssn as _us_ssn

__all__ = [
    "KINDS",
    "SUBJECT_KINDS",
    "POLICIES",
    "PERSONAL_KINDS",
    "DEFAULT_PHONE_REGION",
    "DEFAULT_PHONE_REGIONS",
    "MAX_PHONE_REGIONS",
    "DATA_SUBJECTS_KEY",
    "ERROR_CODE",
    "CREDENTIAL_CODE",
    "Kind",
    "Finding",
    "BodyFinding",
    "ContentRefused",
    "PersonalDataRefused",
    "CredentialRefused",
    "phone_regions",
    "classify",
    "classify_body",
    "normalise_subject",
    "decide",
]

Kind = Literal[
    "email", "phone", "payment_card", "national_id", "iban", "ip_address", "credential"
]

#: Closed set of finding kinds.
KINDS: Final[frozenset[str]] = frozenset(
    {"email", "phone", "payment_card", "national_id", "iban", "ip_address", "credential"}
)

#: Kinds that are personal data, governed by the workarea's policy. A
#: ``credential`` is not personal data: it is refused under every policy
#: (:data:`CREDENTIAL_CODE`, docs/adr/0006-personal-data-classifier.md).
PERSONAL_KINDS: Final[frozenset[str]] = KINDS - {"credential"}

#: Kinds a declared data subject may have (see :func:`normalise_subject`).
SUBJECT_KINDS: Final[frozenset[str]] = frozenset(
    {"email", "phone", "name", "customer_id", "other"}
)

POLICIES: Final[frozenset[str]] = frozenset({"deny", "declare", "allow"})

#: Region in which :func:`normalise_subject` reads a declared phone subject
#: written without ``+``. Fixed (not the tenant's detection regions) on
#: purpose: the subject HMAC written at admission must equal the one computed
#: at erasure, whatever the tenant's policy is by then; declare subjects in
#: E.164 to be independent of it.
DEFAULT_PHONE_REGION: Final[str] = "US"

#: ISO 3166-1 alpha-2 regions whose national formats :func:`classify` reads
#: when the tenant has set none (``tenant.policy_set``, docs/personal-data.md).
#: ``+``-prefixed numbers are found whatever the regions.
DEFAULT_PHONE_REGIONS: Final[tuple[str, ...]] = ("US", "GB", "DE", "FR", "IN", "JP", "BR")

#: Most regions a tenant may list: each one is a parser pass over every digit run.
MAX_PHONE_REGIONS: Final[int] = 32

#: Top-level body member holding declared subjects; never scanned.
DATA_SUBJECTS_KEY: Final[str] = "data_subjects"

#: Problem-details code for a personal-data refusal (docs/design.md §Interfaces).
ERROR_CODE: Final[str] = "admission.personal_data"

#: Problem-details code for a body carrying a credential or secret.
CREDENTIAL_CODE: Final[str] = "admission.credential"

# When spans overlap, the most specific detector wins; ties go to the longer
# span. Checksummed structured ids outrank shapes that merely parse (a card
# number can also look like a phone number to a lenient parser).
_PRIORITY: Final[dict[str, int]] = {
    "credential": 7,
    "iban": 6,
    "payment_card": 5,
    "national_id": 4,
    "email": 3,
    "ip_address": 2,
    "phone": 1,
}

_MAX_DEPTH: Final[int] = 256


@dataclass(frozen=True, slots=True)
class Finding:
    """One personal-data match in a scanned string.

    ``kind`` is one of :data:`KINDS`; ``start``/``end`` are half-open code
    point offsets into the scanned string. The matched text is deliberately
    not stored.

    Raises ``ValueError`` on an unknown kind or an empty/negative span.
    """

    kind: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError("unknown finding kind")
        if not (0 <= self.start < self.end):
            raise ValueError("finding span must satisfy 0 <= start < end")


@dataclass(frozen=True, slots=True)
class BodyFinding:
    """A :class:`Finding` located inside a JSON body.

    ``path`` is an RFC 6901 JSON pointer to the string (``/statement``,
    ``/source/title``, ``/tags/2``). A member name that itself trips the
    classifier is never echoed: its segment is replaced by ``~r<n>`` (``n``
    = the member's 0-based position in its object), which cannot collide
    with a real name because real ``~`` is always escaped as ``~0``.
    ``in_key`` is true when the offsets refer to the member *name* at
    ``path`` rather than to its value.
    """

    path: str
    kind: str
    start: int
    end: int
    in_key: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError("unknown finding kind")
        if not (0 <= self.start < self.end):
            raise ValueError("finding span must satisfy 0 <= start < end")


AnyFinding = Finding | BodyFinding

RefusalReason = Literal["findings", "undeclared", "subjects_under_deny", "credentials"]


class ContentRefused(Exception):
    """Base of the classifier's refusals; ``code`` is the problem-details code.

    Attributes: ``code``, ``policy`` (the workarea's personal-data policy),
    ``reason``, ``findings`` (tuple of :class:`Finding`/:class:`BodyFinding`;
    kinds, paths and offsets only). ``str()`` and ``repr()`` never contain
    scanned text.
    """

    code: str = ERROR_CODE

    #: Findings listed in ``str()``; the rest are counted (all stay in
    #: ``findings``), so a body with thousands of hits gives a bounded message.
    MAX_LISTED: Final[int] = 20

    def __init__(
        self,
        findings: Iterable[AnyFinding],
        *,
        policy: str = "deny",
        reason: RefusalReason = "findings",
    ) -> None:
        self.findings: tuple[AnyFinding, ...] = tuple(findings)
        self.policy = policy
        self.reason = reason
        super().__init__(self._message())

    def _head(self) -> str:
        return f"personal data refused under policy {self.policy!r} ({self.reason})"

    def _message(self) -> str:
        parts = []
        for f in self.findings[: self.MAX_LISTED]:
            part = f"{f.kind} at {getattr(f, 'path', '')}[{f.start}:{f.end}]"
            if getattr(f, "in_key", False):
                part += " in member name"
            parts.append(part)
        if len(self.findings) > self.MAX_LISTED:
            parts.append(f"and {len(self.findings) - self.MAX_LISTED} more")
        head = self._head()
        return head + (": " + "; ".join(parts) if parts else "")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._message()!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # The default would rebuild from args (the message) and lose the
        # structured fields when the exception crosses a process boundary.
        return (_rebuild_refusal, (type(self), self.findings, self.policy, self.reason))


class PersonalDataRefused(ContentRefused):
    """The workarea's personal-data policy refuses this body (``admission.personal_data``).

    ``reason``: ``"findings"`` under ``deny``; ``"undeclared"`` under
    ``declare`` without subjects; ``"subjects_under_deny"`` when subjects
    are declared in a ``deny`` workarea. ``findings`` hold personal-data
    kinds only (:data:`PERSONAL_KINDS`).
    """

    code = ERROR_CODE


class CredentialRefused(ContentRefused):
    """The body carries a credential or secret (``admission.credential``), refused under every policy.

    ``reason`` is ``"credentials"``; ``findings`` hold ``credential`` findings only.
    """

    code = CREDENTIAL_CODE

    def _head(self) -> str:
        return "credentials refused under every personal-data policy"


def _rebuild_refusal(cls: type[ContentRefused], findings: tuple[AnyFinding, ...], policy: str,
                     reason: RefusalReason) -> ContentRefused:
    return cls(findings, policy=policy, reason=reason)


def phone_regions(regions: Iterable[str] | None) -> tuple[str, ...]:
    """Validate a tenant's phone regions: ISO 3166-1 alpha-2 codes phonenumbers supports.

    ``None`` gives :data:`DEFAULT_PHONE_REGIONS`. Codes are upper-cased and
    de-duplicated, first occurrence kept (order is the order tried). An empty
    list is allowed: only ``+``-prefixed numbers are then found. Raises
    ``ValueError`` (naming the position, never the value) on a non-list, a
    code phonenumbers does not know, or more than :data:`MAX_PHONE_REGIONS`.
    """
    if regions is None:
        return DEFAULT_PHONE_REGIONS
    if isinstance(regions, (str, bytes)) or not isinstance(regions, Iterable):
        raise ValueError("phone regions must be a list of ISO 3166-1 alpha-2 codes")
    out: list[str] = []
    for i, region in enumerate(regions):
        code = region.upper() if isinstance(region, str) else None
        if code is None or code not in phonenumbers.SUPPORTED_REGIONS:
            raise ValueError(f"phone region at position {i} is not an ISO 3166-1 alpha-2 code phonenumbers supports")
        if code not in out:
            out.append(code)
    if len(out) > MAX_PHONE_REGIONS:
        raise ValueError(f"at most {MAX_PHONE_REGIONS} phone regions")
    return tuple(out)


# --------------------------------------------------------------------------
# Detectors. Each yields (kind, start, end); classify() resolves overlaps.
# Regexes are written so each is linear-ish on adversarial input: candidate
# runs are maximal (anchored by look-arounds) and validation happens in
# Python rather than by nested quantifiers.
# --------------------------------------------------------------------------

_Span = tuple[str, int, int]


# ---- normalised view ----------------------------------------------------------

# Label separators IDNA reads as "." (RFC 3490 section 3.1; NFKC maps only
# U+FF0E), and the middle dots used to group digits ("020·7946·0958", "・").
_DOTS: Final[frozenset[str]] = frozenset({"\u3002", "\uff0e", "\uff61", "\u00b7", "\u2027", "\u30fb", "\uff65"})


@functools.lru_cache(maxsize=8192)
def _fold(ch: str) -> str:
    """Detection form of one non-ASCII code point (possibly empty, possibly several characters).

    NFKC (fullwidth forms, ligatures, compatibility digits), then per
    resulting character: format characters (Unicode category Cf: zero-width
    space and joiners, soft hyphen, word joiner, BOM) and combining marks
    dropped; every space separator (Zs: no-break, thin, narrow no-break,
    ideographic ...) to " "; line and paragraph separators to "\n"; every
    dash (Pd) to "-"; IDNA dots and middle dots to "."; every decimal digit
    (Nd) to ASCII.
    """
    out = []
    for c in unicodedata.normalize("NFKC", ch):
        cat = unicodedata.category(c)
        if cat == "Cf" or cat[0] == "M":
            continue
        if cat == "Zs":
            c = " "
        elif cat in ("Zl", "Zp"):
            c = "\n"
        elif cat == "Pd":
            c = "-"
        elif c in _DOTS:
            c = "."
        elif cat == "Nd":
            c = str(unicodedata.decimal(c))
        out.append(c)
    return "".join(out)


@functools.lru_cache(maxsize=8192)
def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "M"


@dataclass(frozen=True, slots=True)
class _View:
    """The text detectors scan, and the way back to the submitted text.

    ``starts[i]``/``ends[i]`` are the original half-open span of normalised
    character ``i``; both are ``None`` when the view *is* the original.
    """

    text: str
    original: str
    starts: list[int] | None = None
    ends: list[int] | None = None

    def span(self, start: int, end: int) -> tuple[int, int]:
        if self.starts is None or self.ends is None:
            return start, end
        return self.starts[start], self.ends[end - 1]

    def before(self, start: int) -> str:
        """The original character just before normalised offset ``start`` ("" at the start)."""
        i = start if self.starts is None else self.starts[start]
        return self.original[i - 1] if i > 0 else ""

    def after(self, end: int) -> str:
        """The original character just after normalised span end ``end`` ("" at the end)."""
        i = end if self.ends is None else (self.ends[end - 1] if end > 0 else 0)
        return self.original[i] if i < len(self.original) else ""


# Everything the ASCII fast path cannot copy: non-ASCII, tabs, runs of spaces.
_SPECIAL_RE = re.compile(r"[^\x00-\x7f]|[ \t]{2,}|\t")


def _view(text: str) -> _View:
    """Normalise ``text`` for detection, keeping an offset map (see :func:`_fold`).

    Runs of horizontal white space collapse to one " " (a doubled space
    inside a card number does not hide it; line breaks are kept, so values on
    separate lines are not joined). A combining mark extends the span of the
    character it follows. Linear in ``len(text)``; pure ASCII without tabs or
    doubled spaces is returned as is.
    """
    if text.isascii() and "\t" not in text and "  " not in text:
        return _View(text, text)
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    last = ""

    def put(piece: str, a: int, b: int) -> None:
        nonlocal last
        for c in piece:
            if c == " " and last == " ":
                ends[-1] = b
                continue
            out.append(c)
            starts.append(a)
            ends.append(b)
            last = c

    def copy(a: int, b: int) -> None:
        # Plain ASCII is copied in bulk; it holds no doubled space, but its
        # first character may continue a space just emitted.
        nonlocal last
        if a < b and text[a] == " " and last == " ":
            ends[-1] = a + 1
            a += 1
        if a < b:
            out.append(text[a:b])
            starts.extend(range(a, b))
            ends.extend(range(a + 1, b + 1))
            last = text[b - 1]

    pos = 0
    for m in _SPECIAL_RE.finditer(text):
        a, b = m.span()
        copy(pos, a)
        c = text[a]
        if c in " \t":
            put(" ", a, b)
        elif _is_mark(c):
            if ends:
                ends[-1] = b
        else:
            put(_fold(c), a, b)
        pos = b
    copy(pos, len(text))
    return _View("".join(out), text, starts, ends)


def _compact(s: str) -> str:
    return re.sub(r"[ .\-]", "", s)


# ---- e-mail ---------------------------------------------------------------

_EMAIL_RE = re.compile(r"(?<![\w.%+-])[\w.%+-]+@[\w.-]+")
# Retina-asset names ("icon@2x.png") look like addresses; these are file
# extensions, not TLDs.
_NOT_TLDS = frozenset({"png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp", "tif", "tiff"})


def _valid_label(label: str) -> bool:
    return (
        0 < len(label) <= 63
        and "_" not in label
        and not label.startswith("-")
        and not label.endswith("-")
    )


def _emails(text: str) -> Iterator[_Span]:
    for m in _EMAIL_RE.finditer(text):
        start, end = m.span()
        at = text.index("@", start, end)
        local_start = start
        while local_start < at and text[local_start] == ".":
            local_start += 1
        local = text[local_start:at]
        if not local or len(local) > 64 or local.endswith(".") or ".." in local:
            continue
        dom_end = end
        # Sentence punctuation after an address ("mail bob@x.org.") is not
        # part of it.
        while dom_end > at + 1 and text[dom_end - 1] in ".-":
            dom_end -= 1
        domain = text[at + 1 : dom_end]
        labels = domain.split(".")
        if len(labels) < 2 or not all(_valid_label(lb) for lb in labels):
            continue
        tld = labels[-1]
        if not ((tld.isalpha() and len(tld) >= 2) or tld.lower().startswith("xn--")):
            continue
        if tld.lower() in _NOT_TLDS:
            continue
        # scp-style "git@github.com:org/repo" is an SSH target, not a mailbox.
        if dom_end < len(text) and text[dom_end] == ":" and dom_end + 1 < len(text) and not text[dom_end + 1].isspace():
            continue
        yield ("email", local_start, dom_end)


# Addresses written out to keep them from scrapers: "oncall [at] example [dot] com", "oncall(at)example.com",
# "oncall at example dot com", "oncall @ example . com". The at-sign is a bracketed "at" ([at] (at) {at} <at>), a
# spaced "@", or the word "at"; the dots are bracketed or spaced "dot", or ".". A bare word "at" is everyday
# English ("look at github.com"), so it counts only with a written-out "dot" after it; a spaced "." only after a
# spaced "@" ("see you [at] home. Then" has no address). Measured on ordinary text by `oml bench pii-fp`.
_B_AT = r"\s*[\[({<]\s*at\s*[\])}>]\s*"
_B_DOT = r"\s*[\[({<]\s*dot\s*[\])}>]\s*"
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_LOCAL = r"(?<![\w.%+-])[\w%+-]+(?:\.[\w%+-]+)*"
_WORD_DOT = r"\s+dot\s+"


def _written(at: str, dot: str) -> re.Pattern[str]:
    return re.compile(rf"(?i){_LOCAL}(?:{at})(?:{_LABEL}(?:{dot}))+{_LABEL}(?![\w-])")


_WRITTEN_EMAIL_RES = (
    _written(_B_AT, rf"{_B_DOT}|{_WORD_DOT}|\.(?=[a-z0-9])"),    # [at]: any dot
    _written(r"\s+at\s+", rf"{_B_DOT}|{_WORD_DOT}"),             # the word at: a written-out dot
    _written(r"\s+@\s+", rf"{_B_DOT}|{_WORD_DOT}|\s*\.\s*"),      # a spaced @: a spaced . too
)
_WRITTEN_AT_SPLIT_RE = re.compile(rf"(?i){_B_AT}|\s+at\s+|\s+@\s+")
_WRITTEN_DOT_SPLIT_RE = re.compile(rf"(?i){_B_DOT}|{_WORD_DOT}|\s*\.\s*")
# Gate of :func:`_written_emails`, on lower-cased text (the ASCII short cut uses it too).
_WRITTEN_AT_GATE_RE = re.compile(r"[\[({<]\s*at\s*[\])}>]|\bat\s[^\n]{0,200}?\bdot\b|\s@\s")
_NOT_LABELS = frozenset({"at", "dot"})


def _written_emails(text: str) -> Iterator[_Span]:
    seen: set[tuple[int, int]] = set()
    for pattern in _WRITTEN_EMAIL_RES:
        for m in pattern.finditer(text):
            labels = _WRITTEN_DOT_SPLIT_RE.split(_WRITTEN_AT_SPLIT_RE.split(m.group(), maxsplit=1)[1])
            tld = labels[-1]
            if not (tld.isalpha() and 2 <= len(tld) <= 24) or _NOT_LABELS & {lb.lower() for lb in labels}:
                continue
            if tld.lower() in _NOT_TLDS or m.span() in seen:
                continue
            seen.add(m.span())
            yield ("email", m.start(), m.end())


# ---- phone ----------------------------------------------------------------

# A digit run with the separators phone numbers are written with (the view has
# already folded spaces and dashes). Cheap prefilter: phonenumbers only sees
# runs with enough digits, and only those not glued to an identifier.
_PHONE_RUN_RE = re.compile(r"[(+]{0,3}[0-9][0-9 ()./\[\]~-]*")
_MIN_PHONE_DIGITS: Final[int] = 5
# Context the matcher's own checks read around a candidate (a time after a
# date, a letter before a number); windows closer than this share one call,
# up to a group of _PHONE_GROUP characters (bounds the work per match).
_PHONE_PAD: Final[int] = 12
_PHONE_GROUP: Final[int] = 256
# Nouns after which a bare, unformatted digit run is an identifier, not a phone
# number ("Order 4155550134", "Ticket #4155550134"). A formatted or "+" number
# after them is still a phone number.
_ID_NOUN_RE = re.compile(
    r"(?i)\b(?:order|invoice|ticket|incident|case|ref|reference|build|job|run|issue|bug|pr|change|request|req|"
    r"tracking|shipment|transaction|txn|po|sku|serial|batch|version|commit|bestellung|auftrag|rechnung|"
    r"commande|facture|pedido|factura|fatura)s?\.?(?:\s*(?:no|nr|num|id|number)\.?)?\s*[:#]?\s*$"
)


# Calendar dates (dd.mm.yyyy, yyyy-mm-dd, dd/mm/yy) parse as numbers in some regions.
_DATE_RE = re.compile(r"(?:[0-3]?[0-9][./-][01]?[0-9][./-](?:[0-9]{2}|[12][0-9]{3})|[12][0-9]{3}[./-][01][0-9][./-][0-3][0-9])")


def _glued(c: str, inside: str = "") -> bool:
    # A letter, digit or "_" (or "-", "#", "/" before) touching the run makes it
    # part of an identifier ("INC-4155550134", "job_4155550134", ".../orders/4155550134").
    return bool(c) and (c.isalnum() or c == "_" or c in inside)


def _dotted_name(text: str, start: int, end: int) -> bool:
    # A run between dots with letters or digits on both sides is a part of a file or version name
    # ("image.rev.1613000755.jpg"), not a number written on its own.
    return (start >= 2 and text[start - 1] == "." and text[start - 2].isalnum()
            and end + 1 < len(text) and text[end] == "." and text[end + 1].isalnum())


def _phone_windows(view: _View, taken: Sequence[_Span]) -> list[tuple[int, int]]:
    text = view.text
    out = []
    # Runs come in order, so one sweep over the taken spans (sorted by start)
    # answers "does any taken span overlap this run" in O(n + k) overall.
    taken_sorted = sorted((s, e) for _, s, e in taken)
    j, reach = 0, -1
    for m in _PHONE_RUN_RE.finditer(text):
        start = m.start()
        end = start + len(m.group().rstrip(" ()./[]~-"))
        run = text[start:end]
        if sum(c.isdigit() for c in run) < _MIN_PHONE_DIGITS:
            continue
        # A run already found as a card, IBAN or national id cannot yield a
        # phone finding that survives _resolve: skip the parser for it.
        while j < len(taken_sorted) and taken_sorted[j][0] < end:
            reach = max(reach, taken_sorted[j][1])
            j += 1
        if reach > start:
            continue
        if "+" not in run[:3]:
            # Glue is judged on the submitted text too, so a zero-width character
            # between a word and a number does not make the number an identifier.
            if _glued(view.before(start), "-#/") and _glued(text[start - 1] if start else "", "-#/"):
                continue
            if _glued(view.after(end)) and _glued(text[end : end + 1]):
                continue
            if _dotted_name(text, start, end):
                continue
            if run.isdigit() and _ID_NOUN_RE.search(text, max(0, start - 40), start):
                continue
            if _DATE_RE.fullmatch(run):
                continue
        out.append((start, end))
    return out


def _phones(view: _View, regions: Sequence[str], taken: Sequence[_Span] = ()) -> Iterator[_Span]:
    text = view.text
    windows = _phone_windows(view, taken)
    groups: list[list[tuple[int, int]]] = []
    for w in windows:
        if groups and w[0] - groups[-1][-1][1] <= _PHONE_PAD and w[1] - groups[-1][0][0] <= _PHONE_GROUP:
            groups[-1].append(w)
        else:
            groups.append([w])
    for group in groups:
        lo = max(0, group[0][0] - _PHONE_PAD)
        piece = text[lo : group[-1][1] + _PHONE_PAD]
        pending = set(group)
        # A "+" number parses under any region; None covers an empty region list.
        for region in regions or (None,):
            try:
                matches = [(lo + m.start, lo + m.end) for m in phonenumbers.PhoneNumberMatcher(
                    piece, region, leniency=phonenumbers.Leniency.VALID)]
            except Exception:  # noqa: BLE001 -- a parser hiccup must not abort admission
                continue
            for start, end in matches:
                if _local_only(text[start:end], region):
                    continue
                hit = {w for w in group if start < w[1] and w[0] < end}
                if hit:
                    pending -= hit
                    yield ("phone", start, end)
            if not pending:
                break
        for w in sorted(pending):
            found = _plus_prefix(text, *w)
            if found is not None:
                yield ("phone", w[0], found)


# A national-format number shorter than this, written without its region's trunk prefix ("0" in DE, GB, FR …),
# is at most a local subscriber number with no area code, which text cannot tell from a count, a score or a page
# range: phonenumbers accepts "1640 0" and "164-458" as German numbers, so "par 1640 0" was refused. Every default
# region's number with its area code has at least this many digits (docs/personal-data.md, measured by
# `oml bench pii-fp`).
_MIN_LOCAL_DIGITS: Final[int] = 7
_TRUNK_PREFIX: dict[str, str | None] = {}


def _local_only(raw: str, region: str | None) -> bool:
    """True when the matcher's ``raw`` (found reading ``region``'s national format) is too short to be more than a
    local number written without the trunk prefix: no "+", fewer than :data:`_MIN_LOCAL_DIGITS` digits, and the
    region has a trunk prefix that ``raw`` does not start with. Regions without one (e.g. SH) are not affected."""
    if region is None or "+" in raw:
        return False
    digits = "".join(c for c in raw if c.isdigit())
    if len(digits) >= _MIN_LOCAL_DIGITS:
        return False
    if region not in _TRUNK_PREFIX:
        meta = phonenumbers.PhoneMetadata.metadata_for_region(region)
        _TRUNK_PREFIX[region] = meta.national_prefix if meta is not None else None
    trunk = _TRUNK_PREFIX[region]
    return trunk is not None and trunk != "" and not digits.startswith(trunk)


_PHONE_SEPARATORS: Final[str] = " ()./[]~-"
_MAX_PREFIX_TRIES: Final[int] = 8


def _plus_prefix(text: str, start: int, end: int) -> int | None:
    """End of the longest valid "+" number at the start of run ``[start, end)``, or None.

    The matcher refuses a whole run that is not one number, so "+44 20 7946
    0958 1234" would hide a number behind trailing digits. A "+" anchors
    where a number starts, so its prefixes ending at a group boundary with
    at most 15 digits (E.164; longest first, at most _MAX_PREFIX_TRIES) are
    parsed. National formats have no such anchor and are not split
    (docs/personal-data.md).
    """
    if "+" not in text[start : start + 3]:
        return None
    cuts: list[int] = []
    digits = 0
    for i in range(start, end):
        if text[i].isdigit():
            digits += 1
            if digits > 15:  # E.164: at most 15 digits with the country code
                break
        elif text[i - 1].isdigit():
            cuts.append(i)
    for cut in reversed(cuts[-_MAX_PREFIX_TRIES:]):
        candidate = text[start:cut]
        try:
            number = phonenumbers.parse(candidate, None)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(number):
            return cut
    return None


# ---- payment cards --------------------------------------------------------

# Digit runs of 13-19 digits with optional single space/dot/dash separators.
# The look-arounds make a run maximal so windows inside a longer number
# (or a spaced sequence of groups) are not considered.
_CARD_RE = re.compile(r"(?<![\w+-])(?<!\d[ .-])\d(?:[ .-]?\d){12,18}(?![\w-])(?![ .-]\d)")

# (low, high, prefix length, min length, max length)
_IIN_TABLE: Final[tuple[tuple[int, int, int, int, int], ...]] = (
    (4, 4, 1, 13, 19),  # Visa (13, 16, 19 in practice)
    (51, 55, 2, 16, 16),  # Mastercard
    (2221, 2720, 4, 16, 16),  # Mastercard 2-series
    (34, 34, 2, 15, 15),  # American Express
    (37, 37, 2, 15, 15),
    (6011, 6011, 4, 16, 19),  # Discover
    (644, 649, 3, 16, 19),
    (65, 65, 2, 16, 19),  # Discover / RuPay
    (622126, 622925, 6, 16, 19),
    (3528, 3589, 4, 16, 19),  # JCB
    (300, 305, 3, 14, 19),  # Diners Club
    (3095, 3095, 4, 14, 19),
    (36, 36, 2, 14, 19),
    (38, 39, 2, 14, 19),
    (62, 62, 2, 16, 19),  # UnionPay
    (81, 82, 2, 16, 16),  # RuPay
    (60, 60, 2, 16, 16),
    (508, 508, 3, 16, 16),
    (2200, 2204, 4, 16, 19),  # Mir
    (5018, 5018, 4, 13, 19),  # Maestro
    (5020, 5020, 4, 13, 19),
    (5038, 5038, 4, 13, 19),
    (5893, 5893, 4, 13, 19),
    (6304, 6304, 4, 13, 19),
    (6759, 6759, 4, 13, 19),
    (6761, 6763, 4, 13, 19),
    (506099, 506198, 6, 16, 19),  # Verve
    (650002, 650027, 6, 16, 19),
    (9792, 9792, 4, 16, 16),  # Troy
)


def _known_iin(digits: str) -> bool:
    n = len(digits)
    for low, high, plen, lmin, lmax in _IIN_TABLE:
        if lmin <= n <= lmax and low <= int(digits[:plen]) <= high:
            return True
    return False


def _cards(text: str) -> Iterator[_Span]:
    for m in _CARD_RE.finditer(text):
        digits = _compact(m.group())
        if 13 <= len(digits) <= 19 and _known_iin(digits) and _luhn.is_valid(digits):
            yield ("payment_card", m.start(), m.end())


# ---- IBAN -----------------------------------------------------------------

# Either case: "gb82 west ..." is the same account (ISO 13616 is case-insensitive
# on input); stdnum checks the country's length and format and the mod-97 key.
# Groups separated by spaces, dots or dashes ("GB82-WEST-…" once slipped through as dashes).
_IBAN_RE = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}[0-9]{2}(?:[ .-]?[A-Za-z0-9]){11,30}(?![A-Za-z0-9])")
_IBAN_SEPARATORS = str.maketrans("", "", " .-")


def _ibans(text: str) -> Iterator[_Span]:
    for m in _IBAN_RE.finditer(text):
        start, end = m.span()
        # The candidate may swallow words after a grouped IBAN
        # ("... 3000 OK"); retry at each earlier group boundary.
        ends = [end] + [i for i in range(end - 1, start, -1) if text[i] in " .-"]
        for e in ends:
            cand = text[start:e].translate(_IBAN_SEPARATORS).upper()
            if len(cand) < 15:
                break
            if _iban.is_valid(cand):
                yield ("iban", start, e)
                break


# ---- national ids -----------------------------------------------------------

_L = r"(?<![\w+-])(?<!\d[ .])"  # not glued to a longer token or digit group
_R = r"(?![\w-])(?![ .]\d)"


@dataclass(frozen=True, slots=True)
class _IdRule:
    pattern: re.Pattern[str]
    is_valid: Callable[[str], bool]
    # Short checksummed numbers (9-10 digits, ~1 in 11 random numbers pass)
    # only count next to a keyword, else every invoice number would trip.
    context: re.Pattern[str] | None = None
    min_digits: int = 0
    # The fewest ASCII digits any match of ``pattern`` holds, and the fewest characters (gates: a text with fewer
    # skips the rule; tests/unit/claims/test_pii.py checks both against the pattern's parse tree).
    needs: int = 7
    min_len: int = 0


def _safe(fn: Callable[[str], bool]) -> Callable[[str], bool]:
    def run(value: str) -> bool:
        try:
            return bool(fn(value))
        except Exception:  # noqa: BLE001 -- validators may raise on odd input
            return False

    return run


_ID_RULES: Final[tuple[_IdRule, ...]] = (
    # US SSN: only the ddd-dd-dddd shape; bare 9-digit numbers are too common.
    _IdRule(re.compile(r"(?<![\w+-])\d{3}-\d{2}-\d{4}(?![\w-])(?!\.\d)"), _safe(lambda s: _us_ssn.is_valid(s)), needs=9),
    # France NIR (13 digits + 2-digit key; Corsica 2A/2B), grouped or not.
    _IdRule(
        re.compile(_L + r"[1-478] ?\d{2} ?\d{2} ?(?:\d{2}|2[ABab]) ?\d{3} ?\d{3} ?\d{2}" + _R),
        _safe(lambda s: _fr_nir.is_valid(_compact(s))),
        needs=14,
    ),
    # Germany Steuer-IdNr (11 digits; check digit + digit-repetition rule).
    _IdRule(
        re.compile(_L + r"\d{2} ?\d{3} ?\d{3} ?\d{3}" + _R),
        _safe(lambda s: _de_idnr.is_valid(_compact(s))),
        needs=11,
    ),
    # Spain DNI and NIE (check letter).
    _IdRule(re.compile(_L + r"\d{8}[ -]?[A-Za-z](?![\w-])"), _safe(lambda s: _es_dni.is_valid(_compact(s))), needs=8),
    _IdRule(
        re.compile(r"(?<![\w-])[XYZxyz][ -]?\d{7}[ -]?[A-Za-z](?![\w-])"),
        _safe(lambda s: _es_nie.is_valid(_compact(s))),
        needs=7,
    ),
    # Italy codice fiscale (omocodia letters allowed in digit positions).
    _IdRule(
        re.compile(
            r"(?<![A-Za-z0-9])[A-Za-z]{6}[0-9LMNP-Vlmnp-v]{2}[A-EHLMPR-Ta-ehlmpr-t]"
            r"[0-9LMNP-Vlmnp-v]{2}[A-Za-z][0-9LMNP-Vlmnp-v]{3}[A-Za-z](?![A-Za-z0-9])"
        ),
        _safe(lambda s: _it_cf.is_valid(s)),
        min_digits=2,
        needs=2,
        min_len=16,
    ),
    # Netherlands BSN: dotted form stands alone, bare 9 digits need context.
    _IdRule(re.compile(_L + r"\d{4}\.\d{2}\.\d{3}" + _R), _safe(lambda s: _nl_bsn.is_valid(_compact(s))), needs=9),
    _IdRule(
        re.compile(_L + r"\d{9}" + _R),
        _safe(lambda s: _nl_bsn.is_valid(_compact(s))),
        context=re.compile(r"(?i)\b(?:bsn|burgerservicenummer|sofi(?:nummer)?)\b"),
        needs=9,
    ),
    # Sweden personnummer: (YY)YYMMDD-NNNN / +NNNN with Luhn and date.
    _IdRule(
        re.compile(r"(?<![\w+-])(?:\d{2})?\d{6}[-+]\d{4}(?![\w-])(?!\.\d)"),
        _safe(lambda s: _se_pnr.is_valid(s)),
        needs=10,
    ),
    # Brazil CPF (11 digits, two check digits): the dotted form stands alone, bare digits need context.
    _IdRule(re.compile(_L + r"\d{3}\.\d{3}\.\d{3}-\d{2}" + _R), _safe(lambda s: _br_cpf.is_valid(s)), needs=11),
    _IdRule(re.compile(_L + r"\d{11}" + _R), _safe(lambda s: _br_cpf.is_valid(s)), context=re.compile(r"(?i)\bcpf\b"), needs=11),
    # India Aadhaar (12 digits, Verhoeff, first digit 2-9): grouped 4-4-4 stands alone, bare needs context.
    _IdRule(re.compile(_L + r"[2-9]\d{3} \d{4} \d{4}" + _R), _safe(lambda s: _in_aadhaar.is_valid(s)), needs=12),
    _IdRule(
        re.compile(_L + r"[2-9]\d{3}[ -]?\d{4}[ -]?\d{4}" + _R),
        _safe(lambda s: _in_aadhaar.is_valid(s)),
        # Context is matched in the normalised view, where combining vowel signs are dropped.
        context=re.compile(r"(?i)\b(?:aadhaa?r|uidai)\b|आधा?र"),
        needs=12,
    ),
    # Japan Individual Number (My Number; 12 digits, mod 11): only next to its name.
    _IdRule(
        re.compile(_L + r"\d{4}[ -]?\d{4}[ -]?\d{4}" + _R),
        _safe(lambda s: _jp_in.is_valid(s)),
        context=re.compile(r"(?i)マイナンバー|個人番号|\bmy ?number\b|\bkojin\b"),
        needs=12,
    ),
    # UK NHS number (10 digits, mod 11): only next to "NHS".
    _IdRule(
        re.compile(_L + r"\d{3}[ -]?\d{3}[ -]?\d{4}" + _R),
        _safe(lambda s: _gb_nhs.is_valid(_compact(s))),
        context=re.compile(r"(?i)\bnhs\b"),
        needs=10,
    ),
)

_CONTEXT_WINDOW: Final[int] = 40


def _national_ids(text: str, digits: int) -> Iterator[_Span]:
    """``digits``: the number of ASCII digits in ``text`` (rules needing more cannot match)."""
    for rule in _ID_RULES:
        if digits < rule.needs or len(text) < rule.min_len:
            continue
        for m in rule.pattern.finditer(text):
            s = m.group()
            if rule.min_digits and sum(c.isdigit() for c in s) < rule.min_digits:
                continue
            if rule.context is not None and not rule.context.search(
                text, max(0, m.start() - _CONTEXT_WINDOW), m.start()
            ):
                continue
            if rule.is_valid(s):
                yield ("national_id", m.start(), m.end())


# ---- IP addresses -----------------------------------------------------------

_IPV4_RE = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w])(?!\.\d)")
# Maximal runs of hex digits, colons and dots; validated by ipaddress.
_IPV6_RUN_RE = re.compile(r"(?<![\w:.])[0-9A-Fa-f:][0-9A-Fa-f:.]*")
_VERSION_WORD_RE = re.compile(r"(?i)\b(?:v|ver|version|release|build|rev|revision)\.?\s*$")


def _ip_is_personal(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    # Loopback and unspecified addresses identify nobody ("listens on
    # 0.0.0.0", "127.0.0.1"); every other address may locate a person or
    # device, private ranges included.
    return not (addr.is_loopback or addr.is_unspecified)


_CIDR_SUFFIX_RE = re.compile(r"/(\d{1,3})(?!\d)")


def _is_network_range(text: str, addr: str, end: int) -> bool:
    # "10.0.0.0/8" names a range, not a host; "10.1.2.3/24" is still a host.
    m = _CIDR_SUFFIX_RE.match(text, end)
    if m is None:
        return False
    try:
        net = ipaddress.ip_network(f"{addr}/{m.group(1)}", strict=True)
    except ValueError:
        return False
    return net.num_addresses > 1


def _ip_gate(text: str, digits: int) -> bool:
    """Whether ``text`` (``digits`` ASCII digits) can hold an address :func:`_ips` reports: an IPv4 match holds
    four digits and three dots, an IPv6 candidate two colons and a digit."""
    return (digits >= 4 and text.count(".") >= 3) or (digits > 0 and text.count(":") >= 2)


def _ips(text: str) -> Iterator[_Span]:
    for m in _IPV4_RE.finditer(text):
        if _VERSION_WORD_RE.search(text, max(0, m.start() - 12), m.start()):
            continue
        try:
            addr4 = ipaddress.IPv4Address(m.group())
        except ValueError:
            continue
        if _ip_is_personal(addr4) and not _is_network_range(text, m.group(), m.end()):
            yield ("ip_address", m.start(), m.end())
    for m in _IPV6_RUN_RE.finditer(text):
        start, end = m.span()
        if end < len(text) and (text[end].isalnum() or text[end] == "_"):
            continue
        while end > start and text[end - 1] == ".":
            end -= 1
        cand = text[start:end]
        # "a::b" and "dead::beef" parse as IPv6 but are C++/Rust scope paths
        # far more often than addresses; real ones nearly always hold a digit.
        if cand.count(":") < 2 or len(cand) > 45 or not any(c in "0123456789" for c in cand):
            continue
        try:
            addr6 = ipaddress.IPv6Address(cand)
        except ValueError:
            continue
        if _ip_is_personal(addr6) and not _is_network_range(text, cand, end):
            yield ("ip_address", start, end)


# ---- credentials --------------------------------------------------------------

_AWS_KEY_RE = re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}(?![A-Za-z0-9])")
_GITHUB_RE = re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})(?![A-Za-z0-9_])")
_SLACK_RE = re.compile(r"(?<![A-Za-z0-9])xox[baprs]-[A-Za-z0-9-]{10,}")
_JWT_RE = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_PEM_BEGIN_RE = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY(?: BLOCK)?-----")
_BEARER_RE = re.compile(r"(?i)(?<![A-Za-z0-9])bearer\s+([A-Za-z0-9._~+/-]{16,}=*)")
_BASIC_RE = re.compile(r"(?i)authorization\s*[:=]\s*[\"']?basic\s+([A-Za-z0-9+/]{8,}={0,2})")
# OML principal keys: oml_<key id>_<secret> (docs/design.md §Tenants).
_OML_KEY_RE = re.compile(r"(?<![A-Za-z0-9_])oml_[A-Za-z0-9-]{4,64}_([A-Za-z0-9_-]{16,256})(?![A-Za-z0-9_-])")
_URL_USERINFO_RE = re.compile(r"(?i)\b[a-z][a-z0-9+.-]{1,20}://[^\s/:@]{1,256}:([^\s/@]{1,256})@")
_ASSIGN_RE = re.compile(
    r"(?i)(?<![A-Za-z0-9])[A-Za-z0-9_.-]{0,40}?"
    r"(?P<kw>password|passwd|passphrase|pwd|secret|api[_-]?key|apikey|access[_-]?key|"
    r"(?:access|auth|refresh|session|bearer|id)?[_-]?token|private[_-]?key)"
    r"(?:[_.-]?(?:access[_-]?key|key|id|value|hash))?"
    r"(?P<q1>[\"']?)(?P<sep>\s{0,3}[:=]\s{0,3})(?P<q2>[\"']?)"
    r"(?P<val>[^\s\"'`,;<>(){}\[\]]{4,512})"
)
_PLACEHOLDERS = frozenset(
    {
        "none", "null", "nil", "true", "false", "undefined", "redacted", "required",
        "optional", "string", "empty", "hidden", "masked", "example", "placeholder",
        "secret", "password", "token", "changeit", "xxxx",
    }
)


def _placeholder(value: str) -> bool:
    v = value.lower()
    return (
        v in _PLACEHOLDERS
        or set(v) <= set("*x•.#-_")
        or v.startswith(("$", "%(", "{{", "env(", "process.env", "os.environ", "os.getenv", "getenv("))
    )


# For ASCII text, each credential pattern runs only when a substring every one of its matches holds is present
# (matched on the lower-case form for the case-insensitive patterns; non-ASCII runs them all, as for the gate above):
# English prose trips the gate with "passed", "monkey" or "author", and the assignment pattern's leading
# identifier run is the costly one (about 60 of ~100 µs on a 130-character turn).
_AWS_PREFIX_RE = re.compile(r"A(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|PKA|ROA|SCA)")
_ASSIGN_GATE_LOWER_RE = re.compile(
    r"(?:password|passwd|passphrase|pwd|secret|key|token)(?:[_.-]?(?:access[_-]?key|key|id|value|hash))?[\"']?\s{0,3}[:=]"
)


def _credentials(text: str, *, gated: bool = True) -> Iterator[_Span]:
    """Credential spans in ``text``; ``gated=False`` runs every pattern whatever its gate says (tests)."""
    gate = gated and text.isascii()
    lower = text.lower() if gate else ""

    def runs(present: bool) -> bool:  # every pattern runs on non-ASCII text; on ASCII, when its substring is there
        return not gate or present

    for rx, present in ((_AWS_KEY_RE, _AWS_PREFIX_RE.search(text) is not None),
                        (_GITHUB_RE, "gh" in text or "github_pat_" in text),
                        (_SLACK_RE, "xox" in text), (_JWT_RE, "eyJ" in text)):
        for m in rx.finditer(text) if runs(present) else ():
            yield ("credential", m.start(), m.end())
    for m in _PEM_BEGIN_RE.finditer(text) if runs("PRIVATE KEY" in text) else ():
        end_marker = "-----END " + m.group(1) + "PRIVATE KEY"
        stop = text.find(end_marker, m.end())
        if stop == -1:
            end = m.end()
        else:
            close = text.find("-----", stop + len(end_marker))
            end = close + 5 if close != -1 else stop + len(end_marker)
        yield ("credential", m.start(), end)
    for m in _BEARER_RE.finditer(text) if runs("bearer" in lower) else ():
        if any(c.isdigit() for c in m.group(1)):
            yield ("credential", m.start(1), m.end(1))
    for m in _BASIC_RE.finditer(text) if runs("authorization" in lower) else ():
        yield ("credential", m.start(1), m.end(1))
    for m in _OML_KEY_RE.finditer(text) if runs("oml_" in text) else ():
        # Two or more digits separates a random secret from a long
        # snake_case identifier such as a role or setting name.
        if sum(c.isdigit() for c in m.group(1)) >= 2:
            yield ("credential", m.start(), m.end())
    for m in _URL_USERINFO_RE.finditer(text) if runs("://" in text and "@" in text) else ():
        yield ("credential", m.start(1), m.end(1))
    for m in _ASSIGN_RE.finditer(text) if runs(_ASSIGN_GATE_LOWER_RE.search(lower) is not None) else ():
        val = m.group("val")
        if _placeholder(val):
            continue
        quoted = bool(m.group("q2"))
        code_style = m.group("sep") == "="
        # "password: rotated monthly" is prose about a password, not one.
        prose_word = val.isalpha() and (val.islower() or val.istitle())
        if prose_word and not (quoted or code_style):
            continue
        # "token: 4096" / "max token=512" are budgets, not bearer tokens.
        if "token" in m.group("kw").lower() and val.isdigit():
            continue
        yield ("credential", m.start("val"), m.end("val"))


# --------------------------------------------------------------------------


def _resolve(spans: Iterable[_Span]) -> list[Finding]:
    ranked = sorted(set(spans), key=lambda s: (-_PRIORITY[s[0]], -(s[2] - s[1]), s[1]))
    # Kept spans never overlap, so sorted by start their ends are sorted
    # too, and an overlap can only be with the neighbours of the insertion
    # point: O(k log k) even for bodies with thousands of hits.
    starts: list[int] = []
    kept: list[_Span] = []
    for span in ranked:
        _, start, end = span
        if end <= start:
            continue
        i = bisect.bisect_left(starts, start)
        if i > 0 and kept[i - 1][2] > start:
            continue
        if i < len(kept) and kept[i][1] < end:
            continue
        starts.insert(i, start)
        kept.insert(i, span)
    return [Finding(kind, start, end) for kind, start, end in kept]


# Cheap gates: a detector runs only when its trigger is in the view. Each gate
# is implied by every match of its detector, so gating changes no result.
_CREDENTIAL_GATE_RE = re.compile(
    r"(?i)pass|pwd|secret|key|token|auth|bearer|://|gh[pousr]_|github_pat_|xox[baprs]-|eyJ|oml_|"
    r"A(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|PKA|ROA|SCA)"
)
# The same gate for ASCII text, matched on its lower-case form: Python's case-insensitive matching
# gives up the literal scan of the alternatives (about 15 µs against 3 µs on a 130-character turn).
# Non-ASCII text keeps the case-insensitive pattern (Unicode case folding is not ``str.lower``).
_CREDENTIAL_GATE_LOWER_RE = re.compile(
    r"pass|pwd|secret|key|token|auth|bearer|://|gh[pousr]_|github_pat_|xox[baprs]-|eyj|oml_|"
    r"a(?:kia|sia|bia|cca|gpa|ida|ipa|npa|nva|pka|roa|sca)"
)
_NO_DIGITS: Final[dict[int, None]] = dict.fromkeys(range(ord("0"), ord("9") + 1))
# The shortest text an IBAN (15 characters, Norway) or a codice fiscale (16) can be found in.
_MIN_IBAN_LEN: Final[int] = 15


def _credential_gate(text: str) -> bool:
    """``_CREDENTIAL_GATE_RE.search(text)`` is not None, computed faster for ASCII text."""
    if text.isascii():
        return _CREDENTIAL_GATE_LOWER_RE.search(text.lower()) is not None
    return _CREDENTIAL_GATE_RE.search(text) is not None


def _spans(view: _View, regions: Sequence[str]) -> Iterator[_Span]:
    # Each detector behind its gate; _may_find restates these gates for the ASCII short cut: change both together
    # (tests/unit/claims/test_pii.py compares the two, exhaustively over short strings).
    text = view.text
    digits = len(text) - len(text.translate(_NO_DIGITS))
    structured: list[_Span] = []
    if digits >= 13:
        structured.extend(_cards(text))
    if digits >= 2:
        if len(text) >= _MIN_IBAN_LEN:
            structured.extend(_ibans(text))
        structured.extend(_national_ids(text, digits))
    yield from structured
    if "@" in text:
        yield from _emails(text)
    if _WRITTEN_AT_GATE_RE.search(text.lower()):
        yield from _written_emails(text)
    if digits >= _MIN_PHONE_DIGITS:
        yield from _phones(view, regions, structured)
    if _ip_gate(text, digits):
        yield from _ips(text)
    if _credential_gate(text):
        yield from _credentials(text)


# Every detector above runs only on a digit, an "@" or its credential gate (:func:`_spans`); an ASCII text
# with none of them is answered without building its view (most member names, most sentences).
_ANY_TRIGGER_LOWER_RE = re.compile(r"[0-9@]|" + _WRITTEN_AT_GATE_RE.pattern + "|" + _CREDENTIAL_GATE_LOWER_RE.pattern)


def _may_find(text: str, digits: int) -> bool:
    """Whether :func:`_spans` would run any detector on ``text`` (``digits`` ASCII digits): its gates, in its order.
    For ASCII text, whose view differs only in collapsed blanks (no gate counts them; a length only shrinks)."""
    return (digits >= 13 or (digits >= 2 and (len(text) >= _MIN_IBAN_LEN or any(
                digits >= r.needs and len(text) >= r.min_len for r in _ID_RULES)))
            or "@" in text or _WRITTEN_AT_GATE_RE.search(text.lower()) is not None or digits >= _MIN_PHONE_DIGITS or _ip_gate(text, digits) or _credential_gate(text))


def _classify(text: str, regions: Sequence[str]) -> list[Finding]:
    # For ASCII the view differs only in collapsed blanks, which no trigger contains: a text no detector would
    # run on (most member names and sentences, short locators such as "D1:3") is answered without building it.
    if text.isascii() and (_ANY_TRIGGER_LOWER_RE.search(text.lower()) is None
                           or not _may_find(text, len(text) - len(text.translate(_NO_DIGITS)))):
        return []
    view = _view(text)
    out: list[Finding] = []
    for f in _resolve(_spans(view, regions)):
        start, end = view.span(f.start, f.end)
        # Two normalised characters from one original (a ligature) can put two
        # findings' edges on the same code point; the first keeps it.
        if out and start < out[-1].end:
            continue
        out.append(Finding(f.kind, start, end))
    return out


def classify(text: str, *, phone_regions: Sequence[str] | None = None) -> list[Finding]:
    """Find personal data and credentials in ``text``.

    ``phone_regions``: ISO 3166-1 alpha-2 regions whose national formats are
    read (validated by :func:`phone_regions`; ``None`` means
    :data:`DEFAULT_PHONE_REGIONS`); ``+``-prefixed numbers are found whatever
    the regions. A bare digit run glued to an identifier
    (``INC-4155550134``, ``job_4155550134``) or right after an identifier
    noun (``Order 4155550134``) is not a phone number.

    Returns non-overlapping :class:`Finding` objects sorted by ``start``
    (code-point offsets into ``text`` as given, not into its normalised
    view). Where detectors overlap, the most specific kind is kept
    (credential > iban > payment_card > national_id > email > ip_address >
    phone), then the longer span. Never raises on any ``str``; raises
    ``TypeError`` if ``text`` is not a ``str`` and ``ValueError`` on invalid
    regions.
    """
    if not isinstance(text, str):
        raise TypeError("classify() expects str")
    regions = _regions(phone_regions)
    return _classify(text, regions) if text else []


def _regions(given: Sequence[str] | None) -> tuple[str, ...]:
    return DEFAULT_PHONE_REGIONS if given is None else phone_regions(given)


def _escape_segment(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def classify_body(body: Mapping[str, object], *, phone_regions: Sequence[str] | None = None) -> list[BodyFinding]:
    """Classify every string in a JSON-object body.

    Walks nested objects and arrays depth first, in the body's own member
    order, scanning string values, integer values (as their decimal text:
    a card number sent as a JSON number is still a card number) and member
    names. The top-level ``data_subjects`` member is skipped: it *is* the
    declared personal data. Nested members of that name are scanned.

    ``phone_regions`` as for :func:`classify` (validated once per body).

    Returns :class:`BodyFinding` objects in walk order, each with an RFC
    6901 ``path`` and offsets within that one string. Raises ``TypeError``
    if ``body`` is not a mapping and ``ValueError`` if nesting exceeds
    256 levels (cyclic input) or the regions are invalid.
    """
    if not isinstance(body, Mapping):
        raise TypeError("classify_body() expects a mapping")
    regions = _regions(phone_regions)
    out: list[BodyFinding] = []
    # Explicit stack (not recursion) so hostile nesting cannot blow the
    # interpreter stack; reversed pushes keep document order. A member's
    # name findings ride with it so they are emitted in document order too.
    stack: list[tuple[str, object, int, list[Finding]]] = [("", body, 0, [])]
    while stack:
        path, node, depth, name_findings = stack.pop()
        if depth > _MAX_DEPTH:
            raise ValueError("body nesting exceeds the supported depth")
        out.extend(BodyFinding(path, f.kind, f.start, f.end, in_key=True) for f in name_findings)
        if isinstance(node, str):
            found = _classify(node, regions) if node else []
            out.extend(BodyFinding(path, f.kind, f.start, f.end) for f in found)
        elif isinstance(node, int) and not isinstance(node, bool):
            try:
                digits = str(node)
            except ValueError:  # beyond int->str digit limit; no id is that long
                continue
            found = _classify(digits, regions)
            out.extend(BodyFinding(path, f.kind, f.start, f.end) for f in found)
        elif isinstance(node, Mapping):
            children: list[tuple[str, object, int, list[Finding]]] = []
            for index, (key, value) in enumerate(node.items()):
                if depth == 0 and key == DATA_SUBJECTS_KEY:
                    continue
                name = key if isinstance(key, str) else str(key)
                key_findings = _classify(name, regions) if name else []
                segment = f"~r{index}" if key_findings else _escape_segment(name)
                children.append((f"{path}/{segment}", value, depth + 1, key_findings))
            stack.extend(reversed(children))
        elif isinstance(node, (list, tuple)):
            stack.extend(reversed([(f"{path}/{i}", v, depth + 1, []) for i, v in enumerate(node)]))
    return out


# --------------------------------------------------------------------------


def normalise_subject(kind: str, value: str, *, default_region: str | None = None) -> str:
    """Canonical form of a declared data subject, for HMAC and erasure.

    - ``email``: stripped and lower-cased; must contain ``@``.
    - ``phone``: E.164 (``+14155552671``) via phonenumbers; numbers without
      ``+`` are read in ``default_region`` (``None`` ->
      :data:`DEFAULT_PHONE_REGION`, the same default :func:`classify` uses,
      so admission and erasure agree). Must be a valid number.
    - ``name``, ``customer_id``, ``other``: NFKC, stripped, case-folded.

    Raises ``ValueError`` on an unknown kind, an empty result, an e-mail
    without ``@`` or an unparsable/invalid phone number; messages never
    echo ``value``.
    """
    if kind not in SUBJECT_KINDS:
        raise ValueError("unknown subject kind; expected one of " + ", ".join(sorted(SUBJECT_KINDS)))
    if not isinstance(value, str):
        raise ValueError("subject value must be a string")
    if kind == "email":
        out = value.strip().lower()
        if "@" not in out or out.startswith("@") or out.endswith("@"):
            raise ValueError("subject of kind 'email' is not an e-mail address")
        return out
    if kind == "phone":
        region = (default_region or DEFAULT_PHONE_REGION).upper()
        try:
            number = phonenumbers.parse(value.strip(), region)
        except phonenumbers.NumberParseException:
            raise ValueError("subject of kind 'phone' could not be parsed as a phone number") from None
        if not phonenumbers.is_valid_number(number):
            raise ValueError("subject of kind 'phone' is not a valid phone number")
        return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    out = unicodedata.normalize("NFKC", value).strip().casefold()
    if not out:
        raise ValueError(f"subject of kind {kind!r} is empty")
    return out


def decide(policy: str, findings: Sequence[AnyFinding], declared_subjects: Sequence[object]) -> None:
    """Apply a workarea personal-data policy to a body's findings.

    First, under every policy: any ``credential`` finding raises
    :class:`CredentialRefused` (``admission.credential``, reason
    ``"credentials"``, the credential findings only) -- a secret is not
    personal data, declaring subjects cannot make it admissible, and once
    admitted it would be served to every reader in scope. Then, over the
    personal-data findings (:data:`PERSONAL_KINDS`):

    - ``allow``: always passes.
    - ``declare``: refuses (reason ``"undeclared"``) when there are findings
      and ``declared_subjects`` is empty.
    - ``deny``: refuses (reason ``"findings"``) on any finding, and (reason
      ``"subjects_under_deny"``) when subjects are declared at all: a body
      naming data subjects carries personal data by its own account.

    Returns ``None`` when admitted. Raises :class:`CredentialRefused` or
    :class:`PersonalDataRefused` (carrying the findings) when refused,
    ``ValueError`` on an unknown policy.
    """
    if policy not in POLICIES:
        raise ValueError("unknown personal-data policy; expected one of allow, declare, deny")
    secrets = tuple(f for f in findings if f.kind == "credential")
    if secrets:
        raise CredentialRefused(secrets, policy=policy, reason="credentials")
    if policy == "allow":
        return None
    found = tuple(f for f in findings if f.kind != "credential")
    if policy == "deny":
        if found:
            raise PersonalDataRefused(found, policy=policy, reason="findings")
        if declared_subjects:
            raise PersonalDataRefused(found, policy=policy, reason="subjects_under_deny")
        return None
    if found and not declared_subjects:
        raise PersonalDataRefused(found, policy=policy, reason="undeclared")
    return None
