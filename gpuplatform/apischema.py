"""The OpenAPI document's error answers, declared for every operation that can give them.

drf-spectacular declares only what a view returns on success; clients generated from the
document (openapi-generator, openapi-python-client) then treat every refusal as an undeclared
answer, and readers cannot tell which statuses an operation has. Every refusal of this API has
one body shape (``gpuplatform.api.exception_handler``, DRF's own errors, the 404 handler):
``{"detail": "..."}`` when it names no input, else ``{field: [reason, ...]}``. This schema class
declares it, under the component ``Error``, for:

- 400: operations that read a body or query parameters (a bad field, a bad filter or page);
- 401 and 403: operations that need a caller (no or a bad token; a role that may not);
- 404: operations on one object (a path parameter), operations taking a filter that names a
  team or a webhook (another's is a 404, docs/tenancy.md), and views whose permission refuses
  with a 404 (``refused_status = 404`` on the permission class);
- 409: the actions a view names in ``conflicts`` (action or, for an APIView, method -> when):
  the object's state does not allow the action (cancel a finished job, approve a decided
  request), or the state changed meanwhile;
- 429: operations with a throttle.

What a view declares itself (``@extend_schema(responses=...)``) is kept; an error it declares
without a body gets the ``Error`` body.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.authentication import SessionScheme as SpectacularSessionScheme
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import ComponentRegistry, ResolvedComponent
from rest_framework.permissions import AllowAny

# Query parameters that name a team or a webhook: another's is a 404, never an empty list.
NAMING_FILTERS = {"team", "team__slug", "webhook"}

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "Why the request was refused: `detail` when the refusal names no input; otherwise each "
        "key names the input at fault (`non_field_errors`: the body as a whole) with its "
        "reasons, or, for a nested input, the same shape one level down."
    ),
    "properties": {"detail": {"type": "string"}},
    "additionalProperties": {
        "anyOf": [
            {
                "type": "array",
                "items": {"anyOf": [{"type": "string"}, {"$ref": "#/components/schemas/Error"}]},
            },
            {"$ref": "#/components/schemas/Error"},
        ]
    },
}

DESCRIPTIONS = {
    "400": "A field, parameter or body refused; each key names the input and why.",
    "401": "No credentials, or a token that is unknown, expired or revoked.",
    "403": "The caller's role does not allow this.",
    "404": "No such object, or not one the caller may see (the two are never told apart).",
    "409": "The object's state does not allow this action",
    "429": "Too many requests; retry after the `Retry-After` header's seconds.",
}


class SessionScheme(SpectacularSessionScheme):
    """``cookieAuth`` for the API's session authentication (``gpuplatform.csrf``), which words
    its CSRF refusals; drf-spectacular's own matches DRF's class only, not a subclass."""

    target_class = "gpuplatform.csrf.SessionAuthentication"


class AutoSchema(SpectacularAutoSchema):
    def get_operation(
        self,
        path: str,
        path_regex: str,
        path_prefix: str,
        method: str,
        registry: ComponentRegistry,
    ) -> dict[str, Any] | None:
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        error = self._error_component()
        responses = operation["responses"]
        for status in self._error_statuses(operation):
            responses.setdefault(status, {"description": DESCRIPTIONS[status]})
        if when := self._conflict():
            responses.setdefault("409", {"description": f"{DESCRIPTIONS['409']}: {when}."})
        for status, response in responses.items():
            if status.startswith(("4", "5")) and not response.get("content"):
                response["content"] = {"application/json": {"schema": error.ref}}
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _is_list_view(self, serializer: Any = None) -> bool:
        # drf-spectacular takes every ViewSet ``list`` for an array; a view whose ``list``
        # answers one object (the cost dashboard) says so with ``answers_one_object``.
        if getattr(self.view, "answers_one_object", False):
            return False
        return bool(super()._is_list_view(serializer))

    def _conflict(self) -> str | None:
        """When this operation answers 409 (the view's ``conflicts``), or None. A read never
        conflicts: an action that also answers GET (a team's members) declares it on its write."""
        if self.method == "GET":
            return None
        conflicts: dict[str, str] = getattr(self.view, "conflicts", {})
        return conflicts.get(getattr(self.view, "action", None) or self.method.lower())

    def _error_statuses(self, operation: dict[str, Any]) -> list[str]:
        parameters = operation.get("parameters", [])
        query = {p["name"] for p in parameters if p.get("in") == "query"}
        permissions = self.view.get_permissions()
        needs_caller = any(not isinstance(p, AllowAny) for p in permissions)
        statuses = []
        if "requestBody" in operation or query:
            statuses.append("400")
        if needs_caller:
            statuses += ["401", "403"]
        if (
            any(p.get("in") == "path" for p in parameters)
            or query & NAMING_FILTERS
            or any(getattr(p, "refused_status", None) == 404 for p in permissions)
        ):
            statuses.append("404")
        if self.view.get_throttles():
            statuses.append("429")
        return statuses

    def _error_component(self) -> ResolvedComponent:
        component = ResolvedComponent(
            name="Error", type=ResolvedComponent.SCHEMA, object="Error", schema=ERROR_SCHEMA
        )
        self.registry.register_on_missing(component)
        return component
