"""Personal-data classifier for claim bodies (pure: no I/O, no logging).

Admission runs this over every body before anything is committed; the
workarea's personal-data policy (``deny`` | ``declare`` | ``allow``, see
DESIGN.md "Workareas") then decides with :func:`decide`.

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
``[start, end)``.
"""

from __future__ import annotations

import bisect
import ipaddress
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Callable, Final, Literal, Union

import phonenumbers
from stdnum import iban as _iban
from stdnum import luhn as _luhn
from stdnum.de import idnr as _de_idnr
from stdnum.es import dni as _es_dni
from stdnum.es import nie as _es_nie
from stdnum.fr import nir as _fr_nir
from stdnum.gb import nhs as _gb_nhs
from stdnum.it import codicefiscale as _it_cf
from stdnum.nl import bsn as _nl_bsn
from stdnum.se import personnummer as _se_pnr
from stdnum.us import ssn as _us_ssn

__all__ = [
    "KINDS",
    "SUBJECT_KINDS",
    "POLICIES",
    "DEFAULT_PHONE_REGION",
    "DATA_SUBJECTS_KEY",
    "ERROR_CODE",
    "Kind",
    "Finding",
    "BodyFinding",
    "PersonalDataRefused",
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

#: Kinds a declared data subject may have (see :func:`normalise_subject`).
SUBJECT_KINDS: Final[frozenset[str]] = frozenset(
    {"email", "phone", "name", "customer_id", "other"}
)

POLICIES: Final[frozenset[str]] = frozenset({"deny", "declare", "allow"})

#: Region used for national-format phone numbers when the caller gives none.
#: Shared by :func:`classify` and :func:`normalise_subject` on purpose: the
#: subject HMAC written at admission must equal the one computed at erasure,
#: so both sides must resolve "(415) 555-2671" the same way.
DEFAULT_PHONE_REGION: Final[str] = "US"

#: Top-level body member holding declared subjects; never scanned.
DATA_SUBJECTS_KEY: Final[str] = "data_subjects"

#: Problem-details code for a refusal (DESIGN.md "Interfaces").
ERROR_CODE: Final[str] = "admission.personal_data"

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


AnyFinding = Union[Finding, BodyFinding]

RefusalReason = Literal["findings", "undeclared", "subjects_under_deny"]


class PersonalDataRefused(Exception):
    """The workarea's personal-data policy refuses this body.

    Attributes: ``code`` (``"admission.personal_data"``), ``policy``,
    ``reason`` (``"findings"`` under ``deny``; ``"undeclared"`` under
    ``declare`` without subjects; ``"subjects_under_deny"`` when subjects
    are declared in a ``deny`` workarea), ``findings`` (tuple of
    :class:`Finding`/:class:`BodyFinding`; kinds, paths and offsets only).
    ``str()`` and ``repr()`` never contain scanned text.
    """

    code: Final[str] = ERROR_CODE

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

    def _message(self) -> str:
        parts = []
        for f in self.findings[: self.MAX_LISTED]:
            part = f"{f.kind} at {getattr(f, 'path', '')}[{f.start}:{f.end}]"
            if getattr(f, "in_key", False):
                part += " in member name"
            parts.append(part)
        if len(self.findings) > self.MAX_LISTED:
            parts.append(f"and {len(self.findings) - self.MAX_LISTED} more")
        head = f"personal data refused under policy {self.policy!r} ({self.reason})"
        return head + (": " + "; ".join(parts) if parts else "")

    def __repr__(self) -> str:
        return f"PersonalDataRefused({self._message()!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # The default would rebuild from args (the message) and lose the
        # structured fields when the exception crosses a process boundary.
        return (_rebuild_refusal, (self.findings, self.policy, self.reason))


def _rebuild_refusal(findings: tuple[AnyFinding, ...], policy: str, reason: RefusalReason) -> PersonalDataRefused:
    return PersonalDataRefused(findings, policy=policy, reason=reason)


# --------------------------------------------------------------------------
# Detectors. Each yields (kind, start, end); classify() resolves overlaps.
# Regexes are written so each is linear-ish on adversarial input: candidate
# runs are maximal (anchored by look-arounds) and validation happens in
# Python rather than by nested quantifiers.
# --------------------------------------------------------------------------

_Span = tuple[str, int, int]


def _ascii_digits(s: str) -> str:
    # Patterns use Unicode \d (full-width or Arabic-Indic digits are still
    # digits to a reader); validators expect ASCII.
    return "".join(str(unicodedata.digit(c)) if c.isdigit() and not c.isascii() else c for c in s)


def _compact(s: str) -> str:
    return _ascii_digits(re.sub(r"[ .\-]", "", s))


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


# ---- phone ----------------------------------------------------------------


def _phones(text: str, region: str) -> Iterator[_Span]:
    # Region None only accepts "+"-prefixed numbers; the region pass also
    # finds national formats. Both are run so an unusual region cannot hide
    # international numbers.
    for reg in (None, region):
        try:
            matcher = phonenumbers.PhoneNumberMatcher(
                text, reg, leniency=phonenumbers.Leniency.VALID
            )
            for m in matcher:
                if m.end > m.start:
                    yield ("phone", m.start, m.end)
        except Exception:  # noqa: BLE001 -- a parser hiccup must not abort admission
            continue


# ---- payment cards --------------------------------------------------------

# Digit runs of 13-19 digits with optional single space/dash separators.
# The look-arounds make a run maximal so windows inside a longer number
# (or a spaced sequence of groups) are not considered.
_CARD_RE = re.compile(r"(?<![\w+-])(?<!\d[ .-])\d(?:[ -]?\d){12,18}(?![\w-])(?![ .-]\d)")

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

_IBAN_RE = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])")


def _ibans(text: str) -> Iterator[_Span]:
    for m in _IBAN_RE.finditer(text):
        start, end = m.span()
        # The candidate may swallow upper-case words after a grouped IBAN
        # ("... 3000 OK"); retry at each earlier group boundary.
        ends = [end] + [i for i in range(end - 1, start, -1) if text[i] == " "]
        for e in ends:
            cand = text[start:e].replace(" ", "")
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


def _safe(fn: Callable[[str], bool]) -> Callable[[str], bool]:
    def run(value: str) -> bool:
        try:
            return bool(fn(value))
        except Exception:  # noqa: BLE001 -- validators may raise on odd input
            return False

    return run


_ID_RULES: Final[tuple[_IdRule, ...]] = (
    # US SSN: only the ddd-dd-dddd shape; bare 9-digit numbers are too common.
    _IdRule(re.compile(r"(?<![\w+-])\d{3}-\d{2}-\d{4}(?![\w-])(?!\.\d)"), _safe(lambda s: _us_ssn.is_valid(_ascii_digits(s)))),
    # France NIR (13 digits + 2-digit key; Corsica 2A/2B), grouped or not.
    _IdRule(
        re.compile(_L + r"[1-478] ?\d{2} ?\d{2} ?(?:\d{2}|2[ABab]) ?\d{3} ?\d{3} ?\d{2}" + _R),
        _safe(lambda s: _fr_nir.is_valid(_compact(s))),
    ),
    # Germany Steuer-IdNr (11 digits; check digit + digit-repetition rule).
    _IdRule(
        re.compile(_L + r"\d{2} ?\d{3} ?\d{3} ?\d{3}" + _R),
        _safe(lambda s: _de_idnr.is_valid(_compact(s))),
    ),
    # Spain DNI and NIE (check letter).
    _IdRule(re.compile(_L + r"\d{8}[ -]?[A-Za-z](?![\w-])"), _safe(lambda s: _es_dni.is_valid(_compact(s)))),
    _IdRule(
        re.compile(r"(?<![\w-])[XYZxyz][ -]?\d{7}[ -]?[A-Za-z](?![\w-])"),
        _safe(lambda s: _es_nie.is_valid(_compact(s))),
    ),
    # Italy codice fiscale (omocodia letters allowed in digit positions).
    _IdRule(
        re.compile(
            r"(?<![A-Za-z0-9])[A-Za-z]{6}[0-9LMNP-Vlmnp-v]{2}[A-EHLMPR-Ta-ehlmpr-t]"
            r"[0-9LMNP-Vlmnp-v]{2}[A-Za-z][0-9LMNP-Vlmnp-v]{3}[A-Za-z](?![A-Za-z0-9])"
        ),
        _safe(lambda s: _it_cf.is_valid(_ascii_digits(s))),
        min_digits=2,
    ),
    # Netherlands BSN: dotted form stands alone, bare 9 digits need context.
    _IdRule(re.compile(_L + r"\d{4}\.\d{2}\.\d{3}" + _R), _safe(lambda s: _nl_bsn.is_valid(_compact(s)))),
    _IdRule(
        re.compile(_L + r"\d{9}" + _R),
        _safe(lambda s: _nl_bsn.is_valid(_compact(s))),
        context=re.compile(r"(?i)\b(?:bsn|burgerservicenummer|sofi(?:nummer)?)\b"),
    ),
    # Sweden personnummer: (YY)YYMMDD-NNNN / +NNNN with Luhn and date.
    _IdRule(
        re.compile(r"(?<![\w+-])(?:\d{2})?\d{6}[-+]\d{4}(?![\w-])(?!\.\d)"),
        _safe(lambda s: _se_pnr.is_valid(_ascii_digits(s))),
    ),
    # UK NHS number (10 digits, mod 11): only next to "NHS".
    _IdRule(
        re.compile(_L + r"\d{3}[ -]?\d{3}[ -]?\d{4}" + _R),
        _safe(lambda s: _gb_nhs.is_valid(_compact(s))),
        context=re.compile(r"(?i)\bnhs\b"),
    ),
)

_CONTEXT_WINDOW: Final[int] = 40


def _national_ids(text: str) -> Iterator[_Span]:
    for rule in _ID_RULES:
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
# OML principal keys, DESIGN.md: oml_<key id>_<secret>.
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


def _credentials(text: str) -> Iterator[_Span]:
    for rx in (_AWS_KEY_RE, _GITHUB_RE, _SLACK_RE, _JWT_RE):
        for m in rx.finditer(text):
            yield ("credential", m.start(), m.end())
    for m in _PEM_BEGIN_RE.finditer(text):
        end_marker = "-----END " + m.group(1) + "PRIVATE KEY"
        stop = text.find(end_marker, m.end())
        if stop == -1:
            end = m.end()
        else:
            close = text.find("-----", stop + len(end_marker))
            end = close + 5 if close != -1 else stop + len(end_marker)
        yield ("credential", m.start(), end)
    for m in _BEARER_RE.finditer(text):
        if any(c.isdigit() for c in m.group(1)):
            yield ("credential", m.start(1), m.end(1))
    for m in _BASIC_RE.finditer(text):
        yield ("credential", m.start(1), m.end(1))
    for m in _OML_KEY_RE.finditer(text):
        # Two or more digits separates a random secret from a long
        # snake_case identifier such as a role or setting name.
        if sum(c.isdigit() for c in m.group(1)) >= 2:
            yield ("credential", m.start(), m.end())
    for m in _URL_USERINFO_RE.finditer(text):
        yield ("credential", m.start(1), m.end(1))
    for m in _ASSIGN_RE.finditer(text):
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


def classify(text: str, *, default_region: str | None = None) -> list[Finding]:
    """Find personal data in ``text``.

    ``default_region`` is the ISO 3166-1 alpha-2 region for phone numbers
    written without a ``+`` country code; ``None`` means
    :data:`DEFAULT_PHONE_REGION` (``"US"``). ``+``-prefixed numbers are
    found whatever the region.

    Returns non-overlapping :class:`Finding` objects sorted by ``start``
    (offsets are code-point indices into ``text``). Where detectors
    overlap, the most specific kind is kept (credential > iban >
    payment_card > national_id > email > ip_address > phone), then the
    longer span. Never raises on any ``str``; raises ``TypeError`` if
    ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError("classify() expects str")
    if not text:
        return []
    region = (default_region or DEFAULT_PHONE_REGION).upper()
    spans: list[_Span] = []
    spans.extend(_emails(text))
    spans.extend(_phones(text, region))
    spans.extend(_cards(text))
    spans.extend(_ibans(text))
    spans.extend(_national_ids(text))
    spans.extend(_ips(text))
    spans.extend(_credentials(text))
    return _resolve(spans)


def _escape_segment(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def classify_body(body: Mapping[str, object], *, default_region: str | None = None) -> list[BodyFinding]:
    """Classify every string in a JSON-object body.

    Walks nested objects and arrays depth first, in the body's own member
    order, scanning string values, integer values (as their decimal text:
    a card number sent as a JSON number is still a card number) and member
    names. The top-level ``data_subjects`` member is skipped: it *is* the
    declared personal data. Nested members of that name are scanned.

    Returns :class:`BodyFinding` objects in walk order, each with an RFC
    6901 ``path`` and offsets within that one string. Raises ``TypeError``
    if ``body`` is not a mapping and ``ValueError`` if nesting exceeds
    256 levels (cyclic input).
    """
    if not isinstance(body, Mapping):
        raise TypeError("classify_body() expects a mapping")
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
            found = classify(node, default_region=default_region)
            out.extend(BodyFinding(path, f.kind, f.start, f.end) for f in found)
        elif isinstance(node, int) and not isinstance(node, bool):
            try:
                digits = str(node)
            except ValueError:  # beyond int->str digit limit; no id is that long
                continue
            found = classify(digits, default_region=default_region)
            out.extend(BodyFinding(path, f.kind, f.start, f.end) for f in found)
        elif isinstance(node, Mapping):
            children: list[tuple[str, object, int, list[Finding]]] = []
            for index, (key, value) in enumerate(node.items()):
                if depth == 0 and key == DATA_SUBJECTS_KEY:
                    continue
                name = key if isinstance(key, str) else str(key)
                key_findings = classify(name, default_region=default_region)
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

    - ``allow``: always passes.
    - ``declare``: refuses (reason ``"undeclared"``) when there are findings
      and ``declared_subjects`` is empty.
    - ``deny``: refuses (reason ``"findings"``) on any finding, and (reason
      ``"subjects_under_deny"``) when subjects are declared at all: a body
      naming data subjects carries personal data by its own account.

    Returns ``None`` when admitted. Raises :class:`PersonalDataRefused`
    (carrying the findings) when refused, ``ValueError`` on an unknown
    policy.
    """
    if policy not in POLICIES:
        raise ValueError("unknown personal-data policy; expected one of allow, declare, deny")
    if policy == "allow":
        return None
    found = tuple(findings)
    if policy == "deny":
        if found:
            raise PersonalDataRefused(found, policy=policy, reason="findings")
        if declared_subjects:
            raise PersonalDataRefused(found, policy=policy, reason="subjects_under_deny")
        return None
    if found and not declared_subjects:
        raise PersonalDataRefused(found, policy=policy, reason="undeclared")
    return None
