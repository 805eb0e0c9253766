"""Request-model building blocks: strict, closed, bounded, NUL-free (docs/design.md §Interfaces).

Every request model derives from :class:`Closed` (``extra="forbid"``,
``strict=True``: no coercion, so ``"1"`` is not an integer and ``1`` is not
a string). Every string — fields, JSON object keys and string values inside
a claim body — is bounded and refuses NUL and lone surrogates (JSON can
carry ``\\u0000`` and ``\\ud800`` escapes that the raw-byte checks in
``app.py`` never see). Error messages name the rule, never the value. The string
and body rules are :mod:`oml.domain.input_rules`, which admission applies again
for every other entry point.
"""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from oml.domain.input_rules import check_json, clean


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NoBody(Closed):
    """The body of an act that takes no input (``req: NoBody | None = None``): absent, ``null`` or ``{}``. Anything
    else is refused as invalid input before the act runs, so a malformed request never rotates a key or closes a
    simulation."""


def _body(value: dict[str, Any]) -> dict[str, Any]:
    check_json(value)
    return value


# Any case on input, lowercase from here on: ids are lowercase in the journal (RFC 9562 §4 reads either case).
UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
KEY_ID_PATTERN = r"^[0-9a-f]{16}$"
LABEL_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"

UUIDStr = Annotated[str, StringConstraints(pattern=UUID_PATTERN, max_length=36), AfterValidator(str.lower),
                    Field(description="UUID, any case on input; answered and journalled lowercase",
                          examples=["0b5e7c1e-3f1d-4d38-9a51-7f2d2c1f4a10"])]
KeyId = Annotated[str, StringConstraints(pattern=KEY_ID_PATTERN), Field(description="principal (API key) id: 16 hex")]
Label = Annotated[str, StringConstraints(pattern=LABEL_PATTERN), Field(description="workarea label [a-z0-9][a-z0-9-]{0,62}")]
Time = Annotated[str, StringConstraints(max_length=40), AfterValidator(clean),
                 Field(description="ISO 8601 time with a zone; stored as YYYY-MM-DDTHH:MM:SS.ffffffZ")]


def uuid_path(description: str = "") -> Any:
    """A path parameter holding a UUID, normalised like :data:`UUIDStr` (a ``Path`` default would drop the rules)."""
    return Annotated[UUIDStr, Path(description=description)]


def text(max_length: int, description: str = "") -> Any:
    """A bounded, NUL-free string type."""
    return Annotated[str, StringConstraints(max_length=max_length), AfterValidator(clean), Field(description=description)]


Body = Annotated[dict[str, Any], AfterValidator(_body),
                 Field(description="the claim body, encrypted at admission: `statement` (required), optional `subject`, "
                                   "`tags`, `source` {uri, title, locator}, `data_subjects` [{kind, value}], …; "
                                   "no floating-point numbers")]
