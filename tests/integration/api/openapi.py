"""Check real API answers against the OpenAPI document drf-spectacular generates.

The document is built in-process by drf-spectacular's own generator (what /api/schema/ serves),
then each answer is looked up by its concrete path, method and status code and its body
validated with ``jsonschema`` (Draft 2020-12) against the schema the document declares.

OpenAPI 3.0's dialect differs from JSON Schema in two ways that matter here, translated before
validating: ``nullable: true`` becomes a union with ``null``; and objects are closed
(``additionalProperties: false`` where the document lists ``properties`` and says nothing of
others), so a field the API sends but the document does not declare is a mismatch, as it is for
a client generated from the document (it drops the field). Formats the clients parse (date-time,
date, decimal, uuid) are checked too; jsonschema's own date-time check needs a package the lock
does not have, so the checks are written here with the standard library.
"""

from __future__ import annotations

import decimal
import json
import re
import uuid
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

FORMATS = FormatChecker(formats=())


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    # RFC 3339 needs the offset: a naive timestamp is read as local time by most clients.
    return parsed.tzinfo is not None


@FORMATS.checks("date", raises=ValueError)
def _date(value: object) -> bool:
    return not isinstance(value, str) or bool(date.fromisoformat(value))


@FORMATS.checks("decimal", raises=decimal.InvalidOperation)
def _decimal(value: object) -> bool:
    return not isinstance(value, str) or decimal.Decimal(value).is_finite()


@FORMATS.checks("uuid", raises=ValueError)
def _uuid(value: object) -> bool:
    return not isinstance(value, str) or bool(uuid.UUID(value))


def schema_document() -> dict[str, Any]:
    """The OpenAPI document, as /api/schema/ serves it (public: every operation)."""
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


def _to_json_schema(node: Any) -> Any:
    """OpenAPI 3.0 schema objects (recursively) as JSON Schema 2020-12."""
    if isinstance(node, list):
        return [_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _to_json_schema(value) for key, value in node.items()}
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    if out.pop("nullable", False):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass(frozen=True)
class Operation:
    path: str  # the document's path template
    method: str
    spec: dict[str, Any]


class Document:
    def __init__(self, document: dict[str, Any]):
        self.raw = document
        self.components = _to_json_schema(document.get("components", {}))
        self._paths = []
        for template, item in document["paths"].items():
            pattern = re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(template))
            self._paths.append((template.count("{"), re.compile(pattern + r"\Z"), template, item))
        # The most literal template first: /jobs/estimate/ before /jobs/{id}/.
        self._paths.sort(key=lambda entry: entry[0])

    def template_of(self, path: str) -> str | None:
        """The document's path template that ``path`` is an instance of."""
        for _, pattern, template, _ in self._paths:
            if pattern.match(path):
                return template
        return None

    def operation(self, path: str, method: str) -> Operation | None:
        template = self.template_of(path)
        spec = self.raw["paths"][template].get(method.lower()) if template else None
        return Operation(template, method.lower(), spec) if template and spec else None

    def operations(self) -> list[Operation]:
        return [
            Operation(template, method, spec)
            for template, item in self.raw["paths"].items()
            for method, spec in item.items()
            if method in {"get", "post", "put", "patch", "delete"}
        ]

    def check(self, operation: Operation, response) -> list[str]:
        """What in ``response`` the document does not declare for ``operation``: an undeclared
        status code, an undeclared content type, or a body its schema refuses (each error with
        the JSON path where it is)."""
        status = str(response.status_code)
        declared = operation.spec.get("responses", {})
        answer = declared.get(status) or declared.get("default")
        where = f"{operation.method.upper()} {operation.path} {status}"
        if answer is None:
            return [f"{where}: status not declared (declared: {sorted(declared)})"]
        content = answer.get("content", {})
        body = _body_bytes(response)
        if not content:
            return [] if not body else [f"{where}: a body where none is declared"]
        media = response.get("Content-Type", "").split(";")[0].strip()
        if media not in content:
            return [f"{where}: content type {media!r} not declared ({sorted(content)})"]
        schema = content[media].get("schema")
        if media != "application/json" or schema is None:
            return []
        validator = Draft202012Validator(
            {**_to_json_schema(schema), "components": self.components}, format_checker=FORMATS
        )
        data = json.loads(body)
        return [
            f"{where}: at {error.json_path}: {error.message[:300]}"
            for error in sorted(validator.iter_errors(data), key=lambda e: e.json_path)
        ]


def _body_bytes(response) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return response.content
