"""`str(exc)` of the Python client names the field(s) a problem points at, never a value."""
from oml.client.errors import InvalidRequest, OMLProblem


def test_str_names_the_fields_of_a_validation_problem():
    e = OMLProblem.from_body(422, {"code": "admission.invalid", "detail": "the request does not match the schema",
                                   "errors": [{"field": "claims[0].kind", "rule": "enum", "message": "not allowed"},
                                              {"field": "claims[0].body", "rule": "missing", "message": "required"}]})
    assert isinstance(e, InvalidRequest)
    assert str(e) == ("admission.invalid (422): the request does not match the schema "
                      "[field claims[0].kind (enum): not allowed; field claims[0].body (missing): required]")


def test_str_names_a_single_field_member_and_caps_long_lists():
    e = OMLProblem.from_body(422, {"code": "evidence.invalid_range", "detail": "to_seq is beyond the chain head",
                                   "field": "to_seq", "head": 12})
    assert str(e).endswith("[field to_seq]")
    many = OMLProblem.from_body(422, {"code": "admission.invalid", "detail": "bad",
                                      "errors": [{"field": f"f{i}", "rule": "r"} for i in range(5)]})
    assert str(many).endswith("[field f0 (r); field f1 (r); field f2 (r); 2 more]")


def test_str_without_fields_is_unchanged():
    assert str(OMLProblem.from_body(404, {"code": "claim.not_found", "detail": "claim not found"})) == \
        "claim.not_found (404): claim not found"


def test_str_carries_the_servers_hint_and_allowed_values():
    """The server's message (never a submitted value) and the closed list reach a traceback."""
    hint = ("must be a UUID: a workarea is named by its id (a UUID), not by its path such as main.ops: "
            "`oml workarea list` or GET /v1/workareas lists each path with its id")
    e = OMLProblem.from_body(422, {"code": "recall.invalid", "detail": "the request does not match the schema",
                                   "errors": [{"field": "workarea_id", "rule": "string_pattern_mismatch", "message": hint}]})
    assert str(e).endswith(f"[field workarea_id (string_pattern_mismatch): {hint}]")
    kind = OMLProblem.from_body(422, {"code": "admission.invalid", "detail": "the request does not match the schema",
                                      "errors": [{"field": "kind", "rule": "literal_error", "allowed": ["person", "service"],
                                                  "message": "must be one of the allowed values (see allowed)"}]})
    assert "field kind (literal_error): must be one of the allowed values (see allowed) (allowed: person, service)" in str(kind)


def test_str_names_a_field_once_and_does_not_repeat_the_detail():
    """A rule checked past the schema sends `field` and one `errors` entry with the detail as its message."""
    e = OMLProblem.from_body(422, {"code": "admission.invalid", "detail": "body.statement must not be blank",
                                   "field": "body.statement",
                                   "errors": [{"field": "body.statement", "rule": "invalid",
                                               "message": "body.statement must not be blank"}]})
    assert str(e) == "admission.invalid (422): body.statement must not be blank [field body.statement (invalid)]"
    twice = OMLProblem.from_body(422, {"code": "admission.invalid", "detail": "bad",
                                       "errors": [{"field": "a", "rule": "r1"}, {"field": "a", "rule": "r2"}]})
    assert str(twice) == "admission.invalid (422): bad [field a (r1)]"
