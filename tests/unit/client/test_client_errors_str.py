"""`str(exc)` of the Python client names the field(s) a problem points at, never a value."""
from oml.client.errors import InvalidRequest, OMLProblem


def test_str_names_the_fields_of_a_validation_problem():
    e = OMLProblem.from_body(422, {"code": "admission.invalid", "detail": "the request does not match the schema",
                                   "errors": [{"field": "claims[0].kind", "rule": "enum", "message": "not allowed"},
                                              {"field": "claims[0].body", "rule": "missing", "message": "required"}]})
    assert isinstance(e, InvalidRequest)
    assert str(e) == ("admission.invalid (422): the request does not match the schema "
                      "[field claims[0].kind (enum); field claims[0].body (missing)]")


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
