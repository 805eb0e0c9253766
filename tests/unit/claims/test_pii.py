"""Unit tests for oml.domain.pii (personal-data classifier and policy)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stdnum import luhn

from oml.domain.pii import (
    DATA_SUBJECTS_KEY,
    ERROR_CODE,
    KINDS,
    BodyFinding,
    ContentRefused,
    Finding,
    PersonalDataRefused,
    classify,
    classify_body,
    decide,
    normalise_subject,
)

GH_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
OML_KEY = "oml_k1a2b3c4_Zx9fJ3kL0pQ7rT2vW8yB1nM4"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"


def spans(text: str, **kw: object) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start : f.end]) for f in classify(text, **kw)]  # type: ignore[arg-type]


def one(text: str, needle: str, kind: str) -> None:
    """Exactly one finding, of ``kind``, exactly covering ``needle``."""
    found = classify(text)
    start = text.index(needle)
    assert found == [Finding(kind, start, start + len(needle))], spans(text)


# ---------------------------------------------------------------- positives


@pytest.mark.parametrize(
    ("text", "needle", "kind"),
    [
        ("Write to alice.smith+ops@example.co.uk.", "alice.smith+ops@example.co.uk", "email"),
        ("contact: Bob@Example.ORG", "Bob@Example.ORG", "email"),
        ("call +44 20 7946 0958 after lunch", "+44 20 7946 0958", "phone"),
        ("office (415) 555-2671 ext", "(415) 555-2671", "phone"),
        ("tel:+33 1 42 68 53 00", "+33 1 42 68 53 00", "phone"),
        ("card 4111 1111 1111 1111 on file", "4111 1111 1111 1111", "payment_card"),
        ("mc 5555-5555-5555-4444.", "5555-5555-5555-4444", "payment_card"),
        ("amex 378282246310005", "378282246310005", "payment_card"),
        ("pay to GB82 WEST 1234 5698 7654 32 OK", "GB82 WEST 1234 5698 7654 32", "iban"),
        ("iban DE89370400440532013000.", "DE89370400440532013000", "iban"),
        ("ssn 536-90-4399 on record", "536-90-4399", "national_id"),
        ("NIR 2 95 10 99 126 111 93", "2 95 10 99 126 111 93", "national_id"),
        ("IdNr 36 574 261 809", "36 574 261 809", "national_id"),
        ("DNI 54362315K", "54362315K", "national_id"),
        ("NIE X2482300W", "X2482300W", "national_id"),
        ("CF RCCMNL83S18D969H", "RCCMNL83S18D969H", "national_id"),
        ("BSN: 111222333", "111222333", "national_id"),
        ("bsn 1112.22.333", "1112.22.333", "national_id"),
        ("personnummer 880320-0016", "880320-0016", "national_id"),
        ("NHS number 943 476 5919", "943 476 5919", "national_id"),
        ("client at 192.168.1.10 today", "192.168.1.10", "ip_address"),
        ("resolver 8.8.8.8.", "8.8.8.8", "ip_address"),
        ("peer [2001:db8::1]:443", "2001:db8::1", "ip_address"),
        ("host 10.1.2.3/24 is up", "10.1.2.3", "ip_address"),
        ("mapped ::ffff:192.0.2.1 seen", "::ffff:192.0.2.1", "ip_address"),
        ("id AKIAIOSFODNN7EXAMPLE leaked", "AKIAIOSFODNN7EXAMPLE", "credential"),
        (f"token {GH_TOKEN} here", GH_TOKEN, "credential"),
        ("pat github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv", "credential"),
        ("slack xoxb-123456789012-abcdefGHIJ", "xoxb-123456789012-abcdefGHIJ", "credential"),
        (f"jwt {JWT} end", JWT, "credential"),
        ("DB_PASSWORD=hunter2", "hunter2", "credential"),
        ('{"api_key": "abcd1234efgh"}', "abcd1234efgh", "credential"),
        ("secret = s3cr3t-Value", "s3cr3t-Value", "credential"),
        ("Authorization: Bearer abc123def456ghi789jkl", "abc123def456ghi789jkl", "credential"),
        (f"use {OML_KEY} for ci", OML_KEY, "credential"),
        (f"key:\n{PEM}\n", PEM, "credential"),
        ("dsn postgres://app:s3cretpw@db.internal/x", "s3cretpw", "credential"),
    ],
)
def test_positive_exact_offsets(text: str, needle: str, kind: str) -> None:
    one(text, needle, kind)


def test_multiple_findings_sorted_by_offset() -> None:
    text = "ip 10.0.0.7, mail a@b.io, card 4111111111111111"
    assert [k for k, _ in spans(text)] == ["ip_address", "email", "payment_card"]
    found = classify(text)
    assert [f.start for f in found] == sorted(f.start for f in found)


def test_phone_regions() -> None:
    text = "ring 020 7946 0958"
    # Regression: the default used to be the US alone, so this UK number was admitted.
    assert spans(text) == [("phone", "020 7946 0958")]
    assert spans(text, phone_regions=["US"]) == []  # national UK format is not a valid US number
    assert spans(text, phone_regions=["GB"]) == [("phone", "020 7946 0958")]
    # "+"-prefixed numbers are found whatever the regions, even none.
    assert spans("ring +1 415 555 2671", phone_regions=["GB"]) == [("phone", "+1 415 555 2671")]
    assert spans("ring +1 415 555 2671", phone_regions=[]) == [("phone", "+1 415 555 2671")]
    assert spans("ring (415) 555-2671", phone_regions=[]) == []


def test_pem_header_without_footer() -> None:
    text = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE"
    assert spans(text) == [("credential", "-----BEGIN OPENSSH PRIVATE KEY-----")]


def test_overlaps_keep_most_specific() -> None:
    # A card number is not additionally reported as a phone number.
    assert spans("4111111111111111") == [("payment_card", "4111111111111111")]
    # A credential wins over the e-mail-looking part of a URL's userinfo.
    assert spans("smtp://u:pa55w0rd@mail.example.com") == [("credential", "pa55w0rd")]
    # An IPv4-mapped IPv6 address is one finding, not two.
    assert len(classify("::ffff:192.0.2.1")) == 1


# ---------------------------------------------------------------- negatives


def _luhn_valid(prefix: str, length: int) -> str:
    body = prefix + "0" * (length - len(prefix) - 1)
    return body + luhn.calc_check_digit(body)


@pytest.mark.parametrize(
    "text",
    [
        "we shipped 3 releases in 2024",
        "the meeting is on 2024-01-02 at 10:30",
        "timestamp 2024-01-02T10:30:00Z",
        "upgrade to version 1.2.3 next week",
        "version 1.2.3.4 is out",
        "pinned v1.2.3.4",
        "listen on 0.0.0.0 or 127.0.0.1 or ::1",
        "mac 00:1a:2b:3c:4d:5e",
        "see std::vector and a::b",
        "route 10.0.0.0/8 and 2001:db8::/32 internally",
        "4111111111111112",  # fails Luhn
        _luhn_valid("7", 16),  # Luhn-valid but no known IIN
        "order 123456789 shipped",  # bare 9 digits: not SSN, not BSN without context
        "SSN 000-12-3456 is invalid",
        "ssn 666-12-3456",
        "GB83 WEST 1234 5698 7654 32",  # bad IBAN check digits
        "icon@2x.png and user@localhost",
        "git clone git@github.com:org/repo.git",
        "npm i @types/node react@18.2.0",
        "the password: rotated monthly",
        "max_tokens=4096 and token: 512",
        "password=${DB_PASSWORD} api_key: <your key> secret=******",
        "oml_lake_writer and oml_admission_service_config_v2 are roles",
        "Bearer authentication is described in RFC 6750",
        "It cost $1,234,567.89 over 12 months.",
        "",
    ],
)
def test_negative(text: str) -> None:
    assert spans(text) == []


# ---------------------------------------------------------------- canary


CANARY_TEXTS = [
    "Reach alice@example.com or +44 20 7946 0958 now.",
    "card 4111 1111 1111 1111, iban GB82 WEST 1234 5698 7654 32.",
    "ssn 536-90-4399; cf RCCMNL83S18D969H; ip 192.168.1.10; 2001:db8::1",
    f"password=hunter2x {GH_TOKEN} {JWT} {OML_KEY} AKIAIOSFODNN7EXAMPLE",
]


def _matched(text: str, found: list[Finding]) -> list[str]:
    return [text[f.start : f.end] for f in found]


@pytest.mark.parametrize("text", CANARY_TEXTS)
def test_canary_matched_text_never_rendered(text: str) -> None:
    found = classify(text)
    assert found
    body = {"statement": text, "source": {"title": text}, "tags": [text]}
    body_found = classify_body(body)
    rendered = [repr(found), str(found), repr(body_found), str(body_found)]
    with pytest.raises(ContentRefused) as info:
        decide("deny", body_found, [])
    exc = info.value
    rendered += [str(exc), repr(exc), repr(exc.args), repr(exc.findings)]
    for secret in _matched(text, found):
        for out in rendered:
            assert secret not in out


def test_canary_member_names_are_redacted_in_paths() -> None:
    body = {"statement": "ok", "bob@example.com": "hi", "x": {"a/b~c": "+44 20 7946 0958"}}
    found = classify_body(body)
    assert found == [
        BodyFinding("/~r1", "email", 0, 15, in_key=True),
        BodyFinding("/x/a~1b~0c", "phone", 0, 16),
    ]
    with pytest.raises(PersonalDataRefused) as info:
        decide("deny", found, [])
    assert "bob@example.com" not in str(info.value)
    assert "bob@example.com" not in repr(found)


def test_normalise_errors_do_not_echo_value() -> None:
    for kind, value in [("phone", "call-me-maybe-1234"), ("email", "not-an-address"), ("phone", "+1 000")]:
        with pytest.raises(ValueError) as info:
            normalise_subject(kind, value)
        assert value not in str(info.value)
        assert value not in repr(info.value)


# ---------------------------------------------------------------- body walk


def test_classify_body_paths_and_offsets() -> None:
    body = {
        "statement": "Mail carol@example.com about it",
        "subject": "nothing here",
        "tags": ["a", "b", "+1 415 555 2671"],
        "source": {"uri": "https://x.test/", "title": "from 10.1.2.3", "locator": {"n": [None, "a@b.io"]}},
        "count": 4111111111111111,
        "flag": True,
        "ratio": 1.5,
        DATA_SUBJECTS_KEY: [{"kind": "email", "value": "carol@example.com"}],
    }
    assert classify_body(body) == [
        BodyFinding("/statement", "email", 5, 22),
        BodyFinding("/tags/2", "phone", 0, 15),
        BodyFinding("/source/title", "ip_address", 5, 13),
        BodyFinding("/source/locator/n/1", "email", 0, 6),
        BodyFinding("/count", "payment_card", 0, 16),
    ]


def test_data_subjects_skipped_only_at_top_level() -> None:
    assert classify_body({DATA_SUBJECTS_KEY: ["dave@example.com"]}) == []
    nested = {"source": {DATA_SUBJECTS_KEY: ["dave@example.com"]}}
    assert classify_body(nested) == [BodyFinding("/source/data_subjects/0", "email", 0, 16)]


def test_classify_body_rejects_non_mapping_and_cycles() -> None:
    with pytest.raises(TypeError):
        classify_body(["a@b.io"])  # type: ignore[arg-type]
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    with pytest.raises(ValueError):
        classify_body(cyclic)


def test_finding_validation() -> None:
    with pytest.raises(ValueError):
        Finding("name", 0, 1)
    with pytest.raises(ValueError):
        Finding("email", 3, 3)
    assert KINDS == {"email", "phone", "payment_card", "national_id", "iban", "ip_address", "credential"}


# ---------------------------------------------------------------- normalisation


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("email", "  Alice.Smith@Example.COM \n", "alice.smith@example.com"),
        ("phone", "(415) 555-2671", "+14155552671"),
        ("phone", "+44 20 7946 0958", "+442079460958"),
        ("phone", "+1-415-555-2671", "+14155552671"),
        ("name", "  Ｊｏｈｎ  Straße ", "john  strasse"),
        ("customer_id", "CUST-0042", "cust-0042"),
        ("other", "ﬁle", "file"),
    ],
)
def test_normalise_subject(kind: str, value: str, expected: str) -> None:
    assert normalise_subject(kind, value) == expected


def test_normalise_phone_region() -> None:
    assert normalise_subject("phone", "020 7946 0958", default_region="GB") == "+442079460958"


@pytest.mark.parametrize(("kind", "value"), [("ssn", "x"), ("name", "   "), ("phone", "12"), ("email", "@")])
def test_normalise_subject_rejects(kind: str, value: str) -> None:
    with pytest.raises(ValueError):
        normalise_subject(kind, value)


# ---------------------------------------------------------------- policy

FINDINGS = [BodyFinding("/statement", "email", 5, 22)]


def test_decide_allow_passes() -> None:
    assert decide("allow", FINDINGS, []) is None


def test_decide_deny() -> None:
    assert decide("deny", [], []) is None
    with pytest.raises(PersonalDataRefused) as info:
        decide("deny", FINDINGS, [])
    exc = info.value
    assert exc.code == ERROR_CODE == "admission.personal_data"
    assert exc.findings == tuple(FINDINGS)
    assert exc.reason == "findings"
    assert "email" in str(exc) and "/statement" in str(exc) and "[5:22]" in str(exc)
    # Declaring subjects does not unlock a deny workarea.
    with pytest.raises(PersonalDataRefused) as info2:
        decide("deny", FINDINGS, ["s"])
    assert info2.value.reason == "findings"
    with pytest.raises(PersonalDataRefused) as info3:
        decide("deny", [], ["s"])
    assert info3.value.reason == "subjects_under_deny"


def test_decide_declare() -> None:
    assert decide("declare", [], []) is None
    assert decide("declare", FINDINGS, ["alice@example.com"]) is None
    with pytest.raises(PersonalDataRefused) as info:
        decide("declare", FINDINGS, [])
    assert info.value.reason == "undeclared"


def test_refusal_message_is_bounded_and_pickles() -> None:
    import pickle

    many = [BodyFinding(f"/tags/{i}", "phone", 0, 12) for i in range(50)]
    exc = PersonalDataRefused(many, policy="declare", reason="undeclared")
    assert "and 30 more" in str(exc)
    back = pickle.loads(pickle.dumps(exc))
    assert (back.findings, back.policy, back.reason, back.code) == (exc.findings, "declare", "undeclared", ERROR_CODE)


def test_decide_unknown_policy() -> None:
    with pytest.raises(ValueError):
        decide("maybe", [], [])


# ---------------------------------------------------------------- properties

_HOT = list("0123456789 -+.:@_=/\x00") + ["eyJ", "AKIA", "ghp_", "oml_", "password=", "+44 ", "GB82", "::", "Bearer "]
_text = st.one_of(
    st.text(max_size=200),  # Hypothesis never draws surrogates by default
    st.text(alphabet=st.characters(codec="utf-8"), max_size=200),
    st.lists(st.sampled_from(_HOT + list("abcXYZé٣")), max_size=60).map("".join),
)


def _check(text: str, found: list[Finding]) -> None:
    prev_end = 0
    for f in found:
        assert f.kind in KINDS
        assert 0 <= f.start < f.end <= len(text)
        assert f.start >= prev_end  # sorted and non-overlapping
        prev_end = f.end


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(_text)
def test_classify_never_raises_and_offsets_in_bounds(text: str) -> None:
    _check(text, classify(text))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_text, _json, max_size=4))
def test_classify_body_never_raises(body: dict[str, object]) -> None:
    for f in classify_body(body):
        assert f.path.startswith("/")
        assert f.kind in KINDS and 0 <= f.start < f.end


# ---------------------------------------------------------------- evasion and false alarms
# Each row: text, the exact ORIGINAL substring the finding must cover, kind.
# Offsets are into the text as submitted, not into the normalised view.

EVASIONS = [
    ("mail ali\u200bce@example.com now", "ali\u200bce@example.com", "email"),  # zero-width space
    ("mail alice@exam\u00adple.com now", "alice@exam\u00adple.com", "email"),  # soft hyphen
    ("mail alice\uff20example.com now", "alice\uff20example.com", "email"),  # fullwidth @
    ("\uff4d\uff41\uff49\uff4c\u3000\uff41\uff4c\uff49\uff43\uff45\uff20\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45\uff0e\uff43\uff4f\uff4d",
     "\uff41\uff4c\uff49\uff43\uff45\uff20\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45\uff0e\uff43\uff4f\uff4d", "email"),
    ("mail al\u2060ice@example\u200d.com", "al\u2060ice@example\u200d.com", "email"),  # word joiner, ZWJ
    ("mail jose\u0301@example.com", "jose\u0301@example.com", "email"),  # decomposed accent
    ("mail alice@example\u3002com", "alice@example\u3002com", "email"),  # ideographic full stop (IDNA dot)
    ("call +44\u200920\u20097946\u20090958 now", "+44\u200920\u20097946\u20090958", "phone"),  # thin spaces
    ("call +44\u202f20\u202f7946\u202f0958 now", "+44\u202f20\u202f7946\u202f0958", "phone"),  # narrow no-break
    ("call +44\u200b20\u200b7946\u200b0958 now", "+44\u200b20\u200b7946\u200b0958", "phone"),  # zero-width
    ("call 020\u20117946\u20110958 now", "020\u20117946\u20110958", "phone"),  # non-breaking hyphens
    ("call 020\u00b77946\u00b70958 now", "020\u00b77946\u00b70958", "phone"),  # middle dots
    ("電話 03\u30fb1234\u30fb5678 まで", "03\u30fb1234\u30fb5678", "phone"),  # katakana middle dots
    ("call \uff0b\uff14\uff14 20 7946 0958", "\uff0b\uff14\uff14 20 7946 0958", "phone"),  # fullwidth + and digits
    ("card 4111\u20091111\u20091111\u20091111 on file", "4111\u20091111\u20091111\u20091111", "payment_card"),
    ("card 4111\u00a01111\u00a01111\u00a01111 on file", "4111\u00a01111\u00a01111\u00a01111", "payment_card"),
    ("card 4111\u200b1111\u200b1111\u200b1111 on file", "4111\u200b1111\u200b1111\u200b1111", "payment_card"),
    ("card 4111  1111  1111  1111 on file", "4111  1111  1111  1111", "payment_card"),  # doubled spaces
    ("card 4111.1111.1111.1111 on file", "4111.1111.1111.1111", "payment_card"),
    ("card \uff14\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11 ok",
     "\uff14\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11", "payment_card"),
    ("pay gb82 west 1234 5698 7654 32 now", "gb82 west 1234 5698 7654 32", "iban"),  # lower case
    ("pay GB82\u2009WEST\u20091234\u20095698\u20097654\u200932 now", "GB82\u2009WEST\u20091234\u20095698\u20097654\u200932", "iban"),
    ("pay GB82-WEST-1234-5698-7654-32 now", "GB82-WEST-1234-5698-7654-32", "iban"),  # dashes
    ("pay GB82.WEST.1234.5698.7654.32 now", "GB82.WEST.1234.5698.7654.32", "iban"),
    ("ssn 536\u201190\u20114399 here", "536\u201190\u20114399", "national_id"),
    ("ssn 536\u00ad-90-4399 here", "536\u00ad-90-4399", "national_id"),
    ("key AKIA\u200bIOSFODNN7EXAMPLE leaked", "AKIA\u200bIOSFODNN7EXAMPLE", "credential"),
]


@pytest.mark.parametrize(("text", "needle", "kind"), EVASIONS)
def test_evasions_found_with_original_offsets(text: str, needle: str, kind: str) -> None:
    one(text, needle, kind)


# Positives and negatives per kind, other scripts and regions included. With the default
# regions (DEFAULT_PHONE_REGIONS) unless a row names its own.
PER_KIND_POSITIVE = [
    # e-mail in other scripts
    ("почта иван@пример.рф сегодня", "иван@пример.рф", "email"),
    ("γράψε στο θανάσης@παράδειγμα.ελ τώρα", "θανάσης@παράδειγμα.ελ", "email"),
    ("連絡 用户@例子.广告 まで", "用户@例子.广告", "email"),
    ("राम संपर्क@उदाहरण.भारत पर", "संपर्क@उदाहरण.भारत", "email"),
    ("راسلني على مستخدم@مثال.شبكة", "مستخدم@مثال.شبكة", "email"),
    # e-mail written out to keep it from scrapers (docs/personal-data.md)
    ("page oncall [at] example [dot] com now", "oncall [at] example [dot] com", "email"),
    ("page oncall[at]example[dot]com now", "oncall[at]example[dot]com", "email"),
    ("page oncall (at) example (dot) com now", "oncall (at) example (dot) com", "email"),
    ("page oncall(at)example.com.", "oncall(at)example.com", "email"),
    ("page oncall at example dot com now", "oncall at example dot com", "email"),
    ("page oncall AT example DOT co DOT uk now", "oncall AT example DOT co DOT uk", "email"),
    ("page oncall {at} example {dot} com now", "oncall {at} example {dot} com", "email"),
    ("page oncall <at> example <dot> com now", "oncall <at> example <dot> com", "email"),
    ("page first.last [at] mail.example.org now", "first.last [at] mail.example.org", "email"),
    ("page oncall @ example . com now", "oncall @ example . com", "email"),
    # phones by region, national formats (default regions) and + forms
    ("Call 020 7946 0958 for escalations.", "020 7946 0958", "phone"),  # GB
    ("Ruf 030 12345678 an", "030 12345678", "phone"),  # DE
    ("appelez le 01 42 68 53 00 demain", "01 42 68 53 00", "phone"),  # FR
    ("call 98765 43210 today", "98765 43210", "phone"),  # IN
    ("電話 03-1234-5678 まで", "03-1234-5678", "phone"),  # JP
    ("ligue (11) 91234-5678 hoje", "(11) 91234-5678", "phone"),  # BR
    ("office (415) 555-2671", "(415) 555-2671", "phone"),  # US
    ("Call 4155550134 now", "4155550134", "phone"),  # bare digits after an ordinary word
    ("my number is 4155550134.", "4155550134", "phone"),
    ("Order 415-555-0134 shipped.", "415-555-0134", "phone"),  # formatted: a phone whatever precedes it
    ("Order for +1 415 555 0134", "+1 415 555 0134", "phone"),
    ("INC-+14155550134", "+14155550134", "phone"),  # "+" forms everywhere
    ("call +44 20 7946 0958 1234 now", "+44 20 7946 0958", "phone"),  # trailing digits do not hide a "+" number
    ("call (+44) 20 7946 0958 99 99", "(+44) 20 7946 0958", "phone"),
    ("phone=4155550134", "4155550134", "phone"),
    ("tel:4155550134", "4155550134", "phone"),
    ("٠٢٠ ٧٩٤٦ ٠٩٥٨ رقم", "٠٢٠ ٧٩٤٦ ٠٩٥٨", "phone"),  # Arabic-Indic digits
    ("+49 30 12345678", "+49 30 12345678", "phone"),
    ("+91 98765 43210", "+91 98765 43210", "phone"),
    ("+81 3-1234-5678", "+81 3-1234-5678", "phone"),
    ("+55 11 91234-5678", "+55 11 91234-5678", "phone"),
    # cards
    ("visa 4012 8888 8888 1881", "4012 8888 8888 1881", "payment_card"),
    ("jcb 3530 1113 3330 0000", "3530 1113 3330 0000", "payment_card"),
    # IBANs
    ("iban FR14 2004 1010 0505 0001 3M02 606", "FR14 2004 1010 0505 0001 3M02 606", "iban"),
    ("iban DE89 3704 0044 0532 0130 00", "DE89 3704 0044 0532 0130 00", "iban"),
    ("iban NL91ABNA0417164300", "NL91ABNA0417164300", "iban"),
    # national ids (python-stdnum validators)
    ("ssn 536-90-4399", "536-90-4399", "national_id"),
    ("NIR 1 84 12 76 451 089 46", "1 84 12 76 451 089 46", "national_id"),
    ("IdNr 36\u2009574\u2009261\u2009809", "36\u2009574\u2009261\u2009809", "national_id"),
    ("personnummer 19880320-0016", "19880320-0016", "national_id"),
    ("CPF 111.444.777-35 do cliente", "111.444.777-35", "national_id"),  # BR, was reported as a phone
    ("cpf: 11144477735", "11144477735", "national_id"),
    ("aadhaar 2341 2341 2346", "2341 2341 2346", "national_id"),  # IN
    ("आधार 234123412346", "234123412346", "national_id"),
    ("マイナンバー 1234 5678 9018", "1234 5678 9018", "national_id"),  # JP
]

PER_KIND_NEGATIVE = [
    # ordinary numbers phonenumbers reads as short German numbers (no trunk 0, under 7 digits)
    "Finished the round at par 1640 0 after a long day.",
    "Read chapter 75, pages 164-458, before Monday.",
    "A batch of 3625 48 units shipped on the 8th.",
    "We finished in the top 75 of 16947 entrants.",
    "They won 337-488 in the end.",
    # a run between dots of a file or version name
    "see 150_Dance_main_image.rev.1613000755.jpg above",
    # the word "at" and everyday dots are not an address
    "look at github.com for the code",
    "see you [at] home. Then we left",
    "I was at home dot dot dot",
    "meet @ 5pm at the cafe",
    "we met at the park, then had lunch at noon",
    # identifiers, not phones (false alarms)
    "Incident INC-4155550134 resolved",
    "Order 4155550134 shipped.",
    "order #4155550134 shipped",
    "Ticket: 4155550134 closed",
    "Bestellung 4155550134 versandt",
    "commande 4155550134 livrée",
    "see https://shop.example.test/orders/4155550134 for details",
    "job_4155550134 finished",
    "run 4155550134abc failed",
    "build 20240102 failed",
    "sha 4155550134ab",
    # dates, times, counts, amounts
    "the meeting is on 2024-01-02 10:30 in room 4",
    "took 12345678 ms over 1048576 rows",
    "価格は1,234円です",
    "Die Sitzung ist am 02.01.2024 um 10:30.",
    "le 02/01/2024 à 10h30",
    # other scripts without personal data
    "東京の会議は来週です",
    "встреча в понедельник",
    "कल बैठक है",
    # not an e-mail
    "@mention in chat and user@localhost",
    "ＡＢＣ＠ｌｏｃａｌ",
    # cards, IBANs, ids failing checksums
    "4111\u20091111\u20091111\u20091112",
    "gb83 west 1234 5698 7654 32",
    "ssn 666\u201112\u20113456",
    "order 11144477735 shipped",  # a valid CPF's digits without "CPF" nearby
    "2341 2341 2347",  # Aadhaar shape, Verhoeff fails
    "ticket 1234 5678 9018",  # My Number digits without its name
]


@pytest.mark.parametrize(("text", "needle", "kind"), PER_KIND_POSITIVE)
def test_per_kind_positive(text: str, needle: str, kind: str) -> None:
    one(text, needle, kind)


@pytest.mark.parametrize("text", PER_KIND_NEGATIVE)
def test_per_kind_negative(text: str) -> None:
    assert spans(text) == []


def test_region_list_validated() -> None:
    from oml.domain.pii import DEFAULT_PHONE_REGIONS, phone_regions

    assert phone_regions(None) == DEFAULT_PHONE_REGIONS
    assert phone_regions(["gb", "US", "GB"]) == ("GB", "US")
    assert phone_regions([]) == ()
    import phonenumbers

    too_many = sorted(phonenumbers.SUPPORTED_REGIONS)[:40]
    for bad in (["XX"], ["G"], [1], "GB", too_many):
        with pytest.raises(ValueError) as info:
            phone_regions(bad)  # type: ignore[arg-type]
        assert "XX" not in str(info.value)


def test_credentials_refused_as_credentials_under_every_policy() -> None:
    from oml.domain.pii import CREDENTIAL_CODE, CredentialRefused

    found = classify_body({"statement": "DB_PASSWORD=hunter2 and mail a@b.io"})
    for policy in ("deny", "declare", "allow"):
        with pytest.raises(CredentialRefused) as info:
            decide(policy, found, ["someone"])
        exc = info.value
        assert exc.code == CREDENTIAL_CODE == "admission.credential"
        assert [f.kind for f in exc.findings] == ["credential"]
        assert not isinstance(exc, PersonalDataRefused)
        assert "hunter2" not in str(exc)
    # Personal data alone is still the personal-data refusal, and lists no credential.
    with pytest.raises(PersonalDataRefused) as pd:
        decide("deny", classify_body({"statement": "mail a@b.io"}), [])
    assert pd.value.code == "admission.personal_data"


def test_normalised_view_offsets_property_on_hostile_mix() -> None:
    # Format characters everywhere: findings still cover exactly the original characters.
    text = "\u200b".join("write to bob@example.org or +44 20 7946 0958")
    kinds = [f.kind for f in classify(text)]
    assert kinds == ["email", "phone"]
    for f in classify(text):
        assert text[f.start] != "\u200b" and text[f.end - 1] != "\u200b"


# ---- the cheap gates change no result -------------------------------


def _min_digits(parsed) -> int:
    """The fewest characters a match of a parsed pattern must take from [0-9] (a lower bound: a class
    that also admits a non-digit counts 0)."""
    import re._constants as c

    total = 0
    for op, av in parsed:
        if op is c.LITERAL:
            total += chr(av).isdigit()
        elif op is c.IN:
            only_digits = all((o is c.CATEGORY and a is c.CATEGORY_DIGIT) or (o is c.RANGE and "0" <= chr(a[0]) and chr(a[1]) <= "9")
                              or (o is c.LITERAL and chr(a).isdigit()) for o, a in av)
            total += only_digits
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            total += av[0] * _min_digits(av[2])
        elif op is c.SUBPATTERN:
            total += _min_digits(av[3])
        elif op is c.BRANCH:
            total += min(_min_digits(b) for b in av[1])
        elif op is c.ATOMIC_GROUP:
            total += _min_digits(av)
    return total


def test_national_id_rules_need_the_digits_their_gate_assumes() -> None:
    """A rule is skipped for a text with fewer digits than ``needs``: every match of its pattern holds at least that many
    (or the rule's own ``min_digits`` check refuses it)."""
    import re._parser as sre_parse

    from oml.domain import pii

    for rule in pii._ID_RULES:
        parsed = sre_parse.parse(rule.pattern.pattern)
        assert rule.needs <= max(_min_digits(parsed), rule.min_digits), rule.pattern.pattern
        assert rule.min_len <= parsed.getwidth()[0], rule.pattern.pattern


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=120)
       | st.builds(lambda a, b, c: a + b + c, st.text(max_size=20), st.sampled_from(
           ["PassWord", "PWD", "Secret", "KEY", "ToKeN", "AUTH", "Bearer", "://", "GHP_", "Github_Pat_", "XOXB-", "EYJ", "OML_",
            "akia", "AsCa", "ghx_", "xoxz-"]), st.text(max_size=20)))
def test_credential_gate_matches_the_case_insensitive_pattern(text: str) -> None:
    from oml.domain import pii

    assert pii._credential_gate(text) == (pii._CREDENTIAL_GATE_RE.search(text) is not None)


@settings(max_examples=300, deadline=None, database=None)
@given(st.text(alphabet=st.sampled_from("abcxyz ASK:/@.-_\t0123456789+"), max_size=60)
       | st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_ascii_text_without_a_trigger_skips_no_finding(text: str) -> None:
    """The short cut for ASCII text with no digit, "@" or credential trigger answers what the detectors would."""
    from oml.domain import pii

    view = pii._view(text)
    full = [Finding(f.kind, *view.span(f.start, f.end)) for f in pii._resolve(pii._spans(view, pii.DEFAULT_PHONE_REGIONS))]
    assert pii._classify(text, pii.DEFAULT_PHONE_REGIONS) == full


@settings(max_examples=400, deadline=None, database=None)
@given(st.text(alphabet=st.sampled_from("0123456789abcdefABCDEF:.x /[]%-"), max_size=60))
def test_the_ip_gate_passes_every_text_an_address_is_found_in(text: str) -> None:
    """_ip_gate is implied by every address _ips reports (four digits and three dots, or two colons and a digit)."""
    from oml.domain import pii

    digits = sum(c in "0123456789" for c in text)
    assert pii._ip_gate(text, digits) or not list(pii._ips(text))


_CREDENTIAL_PARTS = ["password", "PassWord", "passwd", "pwd", "secret", "api_key", "apikey", "access-key", "private_key",
                     "auth_token", "Token", "session.token", "key", "_id", "value", "hash", "=", ":", " ", "  ", "'", '"',
                     "s3cr3tValue99", "hunter2hunter2", "AKIAABCDEFGHIJKLMNOP", "ghp_" + "a1" * 18, "github_pat_" + "b2" * 11,
                     "xoxb-1234567890-abc", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.c2lnbmF0dXJlMTIz", "Bearer ",
                     "abcdef1234567890XYZ", "Authorization: Basic ", "QWxhZGRpbjpvcGVu", "oml_", "0123456789abcdef_",
                     "https://", "user", "@", "host.example", "-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----",
                     "é", "ß", "\u212a"]


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(st.sampled_from(_CREDENTIAL_PARTS) | st.text(alphabet=st.characters(max_codepoint=127), max_size=12),
                max_size=10).map("".join))
def test_credential_patterns_gated_find_what_every_pattern_finds(text: str) -> None:
    """Each credential pattern's gate (a substring every match holds) changes no finding."""
    from oml.domain import pii

    assert list(pii._credentials(text)) == list(pii._credentials(text, gated=False))


@pytest.mark.parametrize("text", ["D1:3", "D12:7", "S3", "1.2.3", "a:b:1", "10.0.0.1", "::1", "fe80::1%eth0", "ab@c.d",
                                  "RSSMRA85T10A562S", "call 555-0134"])
def test_short_texts_take_the_short_cut_only_when_no_detector_would_run(text: str) -> None:
    from oml.domain import pii

    view = pii._view(text)
    full = [Finding(f.kind, *view.span(f.start, f.end)) for f in pii._resolve(pii._spans(view, pii.DEFAULT_PHONE_REGIONS))]
    assert pii._classify(text, pii.DEFAULT_PHONE_REGIONS) == full


def test_every_short_ascii_string_takes_the_short_cut_only_when_no_detector_would_run() -> None:
    """Exhaustive over short strings of the characters the gates count: _may_find restates _spans' gates, so a
    detector added to _spans without its gate in _may_find shows here."""
    import itertools

    from oml.domain import pii

    alphabet = "0125:.af\t @"
    for n in range(1, 5):
        for chars in itertools.product(alphabet, repeat=n):
            text = "".join(chars)
            view = pii._view(text)
            full = [Finding(f.kind, *view.span(f.start, f.end))
                    for f in pii._resolve(pii._spans(view, pii.DEFAULT_PHONE_REGIONS))]
            assert pii._classify(text, pii.DEFAULT_PHONE_REGIONS) == full, text


@pytest.mark.parametrize("text", ["１９２．１６８．０．１", "192。168。0。1", "fe80：：1", "client 10.1.2.3 and ::1"])
def test_the_ip_gate_holds_on_the_normalised_view(text: str) -> None:
    from oml.domain import pii

    view = pii._view(text)
    digits = sum(c in "0123456789" for c in view.text)
    assert pii._ip_gate(view.text, digits) or not list(pii._ips(view.text))


def test_short_local_numbers_stay_phones_where_the_region_has_no_trunk_prefix() -> None:
    """The under-7-digit rule applies only to regions with a trunk prefix: a region without one writes its short
    numbers as they are."""
    from oml.domain import pii

    assert pii._local_only("1640 0", "DE") and not pii._local_only("030 1234", "DE")
    assert not pii._local_only("22158", "SH") and not pii._local_only("+49 16400", "DE")
