"""REST endpoints for job arrays (sweeps): ``/api/v1/job-arrays/``.

- ``POST /job-arrays/`` ``{"name", "team", "template": {job fields}, "items": [{overrides}, …]}``
  (or ``"count": N`` for N identical indices, like ``sbatch --array=0-(N-1)``) creates every index
  or none: a bad index is a 400 naming it, ``{"items[3].gpus_per_worker": ["…"]}``.
- ``GET /job-arrays/`` and ``/job-arrays/<id>/``: the arrays with their members' count per state.
- ``GET /job-arrays/<id>/jobs/``: the members, paginated, in the job list's shape.
- ``POST /job-arrays/<id>/cancel/``: cancel every live member.

The view only checks shapes (per field, with the single-job serializer's own field definitions, so
the two endpoints cannot drift) and calls ``scheduler.arrays``.
"""

from __future__ import annotations

from typing import Any, cast

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from core.bounds import api_number
from core.errors import FieldErrors, NotFound
from core.ids import parse_id
from tenants.pagination import BoundedLimitOffsetPagination
from tenants.permissions import signed_in

from .. import arrays, selectors
from ..models import Job, JobArray
from .serializers import JobSerializer, JobSubmitSerializer

# The template's and an index's fields are the single job's, each optional (the view checks
# them with the same fields: ``_check_fields``); the document declares them so.
JOB_FIELDS_OPTIONAL = JobSubmitSerializer(partial=True)


@extend_schema_field(JOB_FIELDS_OPTIONAL)
class TemplateField(serializers.DictField):
    """An array's template: read as a dict, checked field by field by the view."""


@extend_schema_field(JOB_FIELDS_OPTIONAL)
class ItemField(serializers.DictField):
    """One index's overrides: read as a dict, checked field by field by the view."""


class JobArraySubmitSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=180)
    team = serializers.SlugField()
    template = TemplateField(
        help_text="Job fields shared by every index (as for POST /jobs/, without name and team)."
    )
    items = serializers.ListField(
        child=ItemField(),
        required=False,
        max_length=arrays.MAX_ARRAY_SIZE,
        help_text="Per-index overrides of the template; an item's env is merged over the "
        "template's. Give items or count.",
    )
    count = api_number(JobArray, "size", required=False, help_text="N equal indices.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("items" in attrs) == ("count" in attrs):
            raise serializers.ValidationError({"items": ["give either items or count"]})
        if "count" in attrs:
            attrs["items"] = [{} for _ in range(attrs.pop("count"))]
        return attrs


class JobArraySerializer(serializers.Serializer[Any]):
    """An array as the API shows it (output only)."""

    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(read_only=True)
    team = serializers.CharField(source="team.slug", read_only=True)
    submitter = serializers.CharField(source="submitter.username", read_only=True)
    size = serializers.IntegerField(read_only=True)
    template = serializers.SerializerMethodField()
    submitted_at = serializers.DateTimeField(read_only=True)
    cancelled_at = serializers.DateTimeField(allow_null=True, read_only=True)
    counts = serializers.SerializerMethodField()

    def get_counts(self, array: JobArray) -> dict[str, int]:
        return arrays.array_counts(array)

    def get_template(self, array: JobArray) -> dict[str, Any]:
        """The template; its env values only for those who may submit to the team."""
        # DRF keeps the dict its caller passed (a new one when none was); the stubs type it as a
        # read-only Mapping. A page's serializers share what was computed once there.
        context = cast(dict[str, Any], self.context)
        if "may_see" not in context:
            request = context.get("request")
            context["may_see"] = (
                arrays.submit_team_ids(request.user) if request is not None else set()
            )
        return arrays.shown_template(array, may_see=context["may_see"])


_JOB_FIELDS = JobSubmitSerializer().fields
_NOT_PER_INDEX = {"team"}


def _check_fields(
    values: dict[str, Any], prefix: str, errors: dict[str, list[str]], *, template: bool
) -> dict[str, Any]:
    """Type-check each given job field with the single-job serializer's field; collect errors
    under ``<prefix>.<field>``."""
    clean: dict[str, Any] = {}
    for key, value in values.items():
        fld = _JOB_FIELDS.get(key)
        if fld is None or key in _NOT_PER_INDEX or (template and key == "name"):
            errors[f"{prefix}.{key}"] = ["not a job field that can be set here"]
            continue
        try:
            clean[key] = fld.run_validation(value)
        except serializers.ValidationError as exc:
            detail = exc.detail
            if isinstance(detail, dict):
                for sub, messages in detail.items():
                    errors[f"{prefix}.{key}.{sub}"] = [str(m) for m in messages]
            else:
                errors[f"{prefix}.{key}"] = [str(m) for m in detail]
    return clean


def _shape(data: dict[str, Any]) -> arrays.ArrayRequest:
    errors: dict[str, list[str]] = {}
    template = _check_fields(data["template"], "template", errors, template=True)
    for required in ("workers", "gpus_per_worker"):
        if required not in template and f"template.{required}" not in errors:
            missing = [i for i, item in enumerate(data["items"]) if required not in item]
            if missing:
                errors[f"template.{required}"] = [
                    f"required (index {missing[0]} and {len(missing) - 1} more do not set it)"
                    if len(missing) > 1
                    else f"required (index {missing[0]} does not set it)"
                ]
    items = []
    for i, item in enumerate(data["items"]):
        items.append(_check_fields(item, f"items[{i}]", errors, template=False))
        if len(errors) > arrays.MAX_REPORTED_ERRORS:
            break
    if errors:
        raise FieldErrors(errors)
    return arrays.ArrayRequest(name=data["name"], team=data["team"], template=template, items=items)


class JobArrayViewSet(
    viewsets.GenericViewSet[JobArray],
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
):
    # When an action answers 409 (the OpenAPI document declares it: gpuplatform.apischema).
    conflicts = {"cancel": "no job of the array is live any more"}
    serializer_class = JobArraySerializer
    pagination_class = BoundedLimitOffsetPagination

    def get_queryset(self) -> QuerySet[JobArray]:
        return arrays.array_list(user=self.request.user)

    def get_throttles(self) -> list[BaseThrottle]:
        # An array submission counts as one submission against the per-user and per-team limits.
        if self.action == "create":
            from tenants.throttles import job_submit_throttles

            return job_submit_throttles()
        return super().get_throttles()

    def _array_id(self) -> int:
        array_id = parse_id(self.kwargs.get("pk"))
        if array_id is None:
            raise NotFound("no such job array", field="id")
        return array_id

    def get_object(self) -> JobArray:
        return arrays.array_get(user=self.request.user, array_id=self._array_id())

    @extend_schema(request=JobArraySubmitSerializer, responses={201: JobArraySerializer})
    def create(self, request: Request) -> Response:
        incoming = JobArraySubmitSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        array = arrays.array_submit(
            user=signed_in(request), request=_shape(incoming.validated_data)
        )
        array = arrays.array_get(user=request.user, array_id=array.pk)
        body = JobArraySerializer(array, context=self.get_serializer_context()).data
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: JobArraySerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        array = arrays.array_cancel(user=signed_in(request), array_id=self._array_id())
        return Response(JobArraySerializer(array, context=self.get_serializer_context()).data)

    @extend_schema(responses={200: JobSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def jobs(self, request: Request, pk: str | None = None) -> Response:
        array = arrays.array_get(user=request.user, array_id=self._array_id())
        members = selectors.job_list(user=request.user).filter(array=array).order_by("array_index")
        # The array's member jobs, paged as this viewset pages arrays (its model to the stubs).
        page: list[Job] | None = self.paginate_queryset(members)  # type: ignore[arg-type]
        return self.get_paginated_response(
            JobSerializer(page, many=True, context=self.get_serializer_context()).data
        )
