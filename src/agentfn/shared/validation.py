"""Request bodies checked against the same JSON Schemas the OpenAPI document publishes."""

from __future__ import annotations

import json
from itertools import islice
from typing import Any

from flask import request
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import best_match

from .problems import ProblemError, bad_request, unprocessable


def _where(error) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    return path or "body"


def _message(error) -> str:
    # jsonschema repeats the offending instance in its messages; an instance may be the caller's text.
    validator, value = error.validator, error.validator_value
    if validator == "required":
        missing = [name for name in value if name not in (error.instance or {})]
        return f"missing required field {', '.join(repr(m) for m in missing)}"
    if validator == "additionalProperties":
        allowed = set((error.schema.get("properties") or {}).keys())
        unknown = sorted(k for k in (error.instance or {}) if k not in allowed)
        return f"unknown field {', '.join(repr(u) for u in unknown)}"
    if validator == "enum":
        return f"must be one of {', '.join(map(str, value))}"
    messages = {
        "type": "must be of type {}",
        "const": "must be {!r}",
        "minLength": "must be at least {} characters",
        "maxLength": "must be at most {} characters",
        "minimum": "must be >= {}",
        "maximum": "must be <= {}",
        "minItems": "must have at least {} items",
        "maxItems": "must have at most {} items",
        "pattern": "has an invalid format",
        "format": "must be a valid {}",
        "minProperties": "must have at least {} fields",
        "uniqueItems": "must not repeat items",
    }
    return messages.get(validator, f"fails the {validator} rule").format(value)


MAX_ERRORS = 10


def _pattern(validator, pattern, instance, schema):
    # A text over its maxLength is refused by that keyword already: a regex is never run on it, so the
    # body size, not the schema's length, would bound what a backtracking engine may be made to do.
    if validator.is_type(instance, "string") and len(instance) > schema.get("maxLength", len(instance)):
        return
    yield from Draft202012Validator.VALIDATORS["pattern"](validator, pattern, instance, schema)


# Draft 2020-12, but `pattern` skips a string its own `maxLength` refuses.
Validator = validators.extend(Draft202012Validator, {"pattern": _pattern})


class Schema:
    """A compiled JSON Schema whose failures become 422 problems naming the field."""

    def __init__(self, schema: dict[str, Any]):
        Validator.check_schema(schema)
        self.schema = schema
        self._validator = Validator(schema)

    def check(self, value: Any) -> Any:
        # Lazily, and no more than the problem lists: a body with many bad fields costs no more than ten.
        errors = list(islice(self._validator.iter_errors(value), MAX_ERRORS))
        if errors:
            first = best_match(errors)
            detail = f"{_where(first)}: {_message(first)}"
            raise unprocessable(detail, errors=[{"field": _where(e), "message": _message(e)} for e in errors])
        return value


def json_body(schema: Schema) -> dict[str, Any]:
    """The request's JSON body, checked; bad JSON is a 400, a body that breaks the schema a 422."""
    if not request.mimetype or request.mimetype != "application/json":
        raise ProblemError(415, "Unsupported Media Type", "send the body as application/json")
    data = request.get_data(cache=True)
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise bad_request("the body is not valid JSON") from None
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise bad_request("the body holds an unpaired surrogate; send valid UTF-8 text") from None
    return schema.check(value)
