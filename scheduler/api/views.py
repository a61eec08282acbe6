"""REST endpoints for jobs, clusters, nodes and GPU models. Views only translate HTTP to calls of
selectors and services; every queryset comes from a selector scoped to the caller's teams."""

from __future__ import annotations

from typing import Any, TypeVar

import django_filters
from django.db.models import Model, QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from catalogue.models import GpuModel
from core.errors import NotFound
from core.ids import ID_REGEX, parse_id
from scheduler.policy import decisions_to_dict, snapshot_to_dict
from tenants.permissions import IsPlatformAdmin, is_platform_admin, signed_in
from tenants.selectors import team_get

from .. import retirement, selectors, services, transitions
from ..loop.decide import decide_now, last_cycle
from ..models import Cluster, Job, Node, NodeState
from ..states import JobState
from .contract_schema import LastCycleSerializer
from .serializers import (
    ClusterSerializer,
    GpuModelSerializer,
    JobAttemptSerializer,
    JobEventSerializer,
    JobLogQuerySerializer,
    JobLogSerializer,
    JobSerializer,
    JobSubmitSerializer,
    NodeSerializer,
)


class JobFilter(django_filters.FilterSet):
    state = django_filters.CharFilter(method="filter_state", help_text="comma-separated states")
    team = django_filters.CharFilter(
        method="filter_team", help_text="a team slug; a team you do not see is a 404"
    )
    submitter = django_filters.CharFilter(
        method="filter_submitter",
        help_text="a user name: you, a member of your teams, or the submitter of a job you see "
        "(any user for platform admins); anyone else is a 400, as a name no one has",
    )

    class Meta:
        model = Job
        fields = ["state", "team", "submitter"]

    def filter_state(self, queryset: QuerySet[Job], _name: str, value: str) -> QuerySet[Job]:
        return _filter_by_states(queryset, value, known=JobState.values)

    def filter_team(self, queryset: QuerySet[Job], _name: str, value: str) -> QuerySet[Job]:
        # django-filter hands the view's request in (the filter backend always passes it).
        user = self.request.user if self.request is not None else None
        return queryset.filter(team=team_get(user=user, slug=value))

    def filter_submitter(self, queryset: QuerySet[Job], _name: str, value: str) -> QuerySet[Job]:
        user = self.request.user if self.request is not None else None
        # As squeue -u says "Invalid user": a name that selects no one the caller could see is a
        # mistake to name, not a user without jobs (an empty list that looks like success).
        if not selectors.submitter_visible(user=user, username=value):
            who = "no user" if is_platform_admin(user) else "no member of your teams"
            raise serializers.ValidationError({"submitter": [f"{who} is called {value!r}"]})
        return queryset.filter(submitter__username=value)


_M = TypeVar("_M", bound=Model)


def _filter_by_states(queryset: QuerySet[_M], value: str, *, known: list[str]) -> QuerySet[_M]:
    """``queryset`` in any of the comma-separated states of ``value``; a 400 on ``state``
    naming the states known when one is not."""
    states = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in states if v not in known]
    if unknown:
        # a misspelt state would otherwise filter on the others, or on nothing at all
        raise serializers.ValidationError(
            {
                "state": [
                    f"unknown state {', '.join(map(repr, unknown))} (known: {', '.join(known)})"
                ]
            }
        )
    return queryset.filter(state__in=states)


class JobViewSet(viewsets.GenericViewSet[Job], mixins.ListModelMixin, mixins.RetrieveModelMixin):
    # When an action answers 409 (the OpenAPI document declares it: gpuplatform.apischema).
    conflicts = {"cancel": "the job is already finished, or changed state meanwhile"}
    serializer_class = JobSerializer
    filterset_class = JobFilter

    def get_queryset(self) -> QuerySet[Job]:
        return selectors.job_list(user=self.request.user)

    def get_throttles(self) -> list[BaseThrottle]:
        # Submission rate limits per user and per team (tenants.throttles; 429 + Retry-After).
        if self.action == "create":
            from tenants.throttles import job_submit_throttles

            return job_submit_throttles()
        return super().get_throttles()

    def get_object(self) -> Job:
        return selectors.job_get(user=self.request.user, job_id=self._job_id())

    def _job_id(self) -> int:
        job_id = parse_id(self.kwargs.get("pk"))
        if job_id is None:
            raise NotFound("no such job", field="id")
        return job_id

    @extend_schema(request=JobSubmitSerializer, responses={201: JobSerializer})
    def create(self, request: Request) -> Response:
        incoming = JobSubmitSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        job = services.job_submit(
            user=signed_in(request),
            request=services.JobRequest(**incoming.validated_data),
            target=getattr(request, "submission_target", None),
        )
        # The job just written is the response: a new job holds no GPUs, and its team, submitter,
        # model and class are the objects validation loaded (re-reading it cost two queries).
        job.live_allocations = []  # type: ignore[attr-defined]  # (what JobSerializer reads)
        # The submitter just proved they may submit to the job's team: they see its command.
        return Response(
            JobSerializer(job, context={"may_see": None}).data, status=status.HTTP_201_CREATED
        )

    @extend_schema(request=None, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        transitions.job_cancel(user=signed_in(request), job_id=self._job_id())
        return Response(
            # Only those who may submit to the job's team cancel it: they see its command.
            JobSerializer(
                selectors.job_get(user=request.user, job_id=self._job_id()),
                context={"may_see": None},
            ).data
        )

    # Not paginated: pagination_class=None says so in the OpenAPI document, which otherwise
    # wraps a list answer of a paginated viewset in the page object.
    @extend_schema(responses={200: JobEventSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        events = selectors.job_events(user=request.user, job_id=self._job_id())
        return Response(JobEventSerializer(events, many=True).data)

    @extend_schema(responses={200: JobAttemptSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)
    def attempts(self, request: Request, pk: str | None = None) -> Response:
        """Every attempt of the job: nodes, times, how it ended, work lost and resumed from."""
        attempts = selectors.job_attempts(user=request.user, job_id=self._job_id())
        return Response(JobAttemptSerializer(attempts, many=True).data)

    @extend_schema(
        parameters=[JobLogQuerySerializer],
        responses={
            200: JobLogSerializer,
            503: OpenApiResponse(description="The job's cluster did not answer; retry later."),
        },
    )
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str | None = None) -> Response:
        """The output of an attempt: its tail, then (passing back ``cursor``) what follows.
        Follow a job by repeating the call with the last cursor until ``finished`` is true and
        ``text`` is empty."""
        job = selectors.job_get(user=request.user, job_id=self._job_id())  # 404 before 400
        query = JobLogQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        chunk = selectors.job_log_read(
            job=job,
            user=request.user,
            attempt=query.validated_data.get("attempt"),
            cursor=query.validated_data.get("cursor"),
            limit_bytes=query.validated_data["limit_bytes"],
        )
        return Response(JobLogSerializer(chunk).data)


class ClusterViewSet(viewsets.ReadOnlyModelViewSet[Cluster]):
    serializer_class = ClusterSerializer
    queryset = Cluster.objects.order_by("name")


class NodeFilter(django_filters.FilterSet):
    # Not the model field's choice filter: its 400 ("Select a valid choice. drained is not one
    # of the available choices.") named no state a node can be in.
    state = django_filters.CharFilter(method="filter_state", help_text="comma-separated states")

    class Meta:
        model = Node
        fields = ["name", "state", "rack", "gpu_model__name", "cluster__name"]

    def filter_state(self, queryset: QuerySet[Node], _name: str, value: str) -> QuerySet[Node]:
        return _filter_by_states(queryset, value, known=NodeState.values)


class NodeViewSet(viewsets.ReadOnlyModelViewSet[Node]):
    serializer_class = NodeSerializer
    filterset_class = NodeFilter

    def get_queryset(self) -> QuerySet[Node]:
        return selectors.node_list(user=self.request.user)


class GpuModelViewSet(viewsets.ReadOnlyModelViewSet[GpuModel]):
    serializer_class = GpuModelSerializer
    queryset = GpuModel.objects.order_by("name")
    lookup_field = "name"


class LastCycleView(APIView):
    """Platform admins: the last cycle's snapshot and decisions as contract JSON (replayable with
    ``python -m scheduler.policy decide``)."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(responses={200: LastCycleSerializer})
    def get(self, request: Request) -> Response:
        remembered = last_cycle()
        if remembered is None or request.query_params.get("fresh"):
            decided = decide_now(now=timezone.now())
            remembered = {
                "snapshot": snapshot_to_dict(decided.snapshot),
                "decisions": decisions_to_dict(decided.decisions),
            }
        return Response(remembered)


class NodeActionSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=Node._meta.get_field("state_reason").max_length,
    )


class NodeAdminViewSet(viewsets.GenericViewSet[Node]):
    """Platform admins: quarantine, drain, release, retire and reinstate nodes."""

    # When an action answers 409 (the OpenAPI document declares it: gpuplatform.apischema).
    conflicts = {
        "reinstate": "the node is not retired or retiring, or its cluster is retired",
        "release": "the node is neither drained nor quarantined",
    }

    permission_classes = [IsPlatformAdmin]
    serializer_class = NodeSerializer
    queryset = Node.objects.none()  # actions load the node through the admin-only services
    lookup_value_regex = ID_REGEX

    def _node_id(self) -> int:
        """The node's id, once the node is known to exist: a node that is not there is a 404
        whatever the body (the services lock and read it again)."""
        node_id = parse_id(self.kwargs.get("pk"))
        if (
            node_id is None
            or not selectors.node_list(user=self.request.user).filter(pk=node_id).exists()
        ):
            raise NotFound("no such node", field="id")
        return node_id

    @extend_schema(request=NodeActionSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def quarantine(self, request: Request, pk: str | None = None) -> Response:
        node_id = self._node_id()
        node = services.node_quarantine(
            user=signed_in(request), node_id=node_id, reason=_reason(request)
        )
        return Response(NodeSerializer(node).data)

    @extend_schema(request=NodeActionSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, pk: str | None = None) -> Response:
        node_id = self._node_id()
        node = services.node_drain(
            user=signed_in(request), node_id=node_id, reason=_reason(request)
        )
        return Response(NodeSerializer(node).data)

    @extend_schema(request=None, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str | None = None) -> Response:
        node = services.node_release(user=signed_in(request), node_id=self._node_id())
        return Response(NodeSerializer(node).data)

    @extend_schema(request=NodeActionSerializer, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def retire(self, request: Request, pk: str | None = None) -> Response:
        """Drain the node and retire it once nothing runs on it (at once when nothing does):
        never scheduled again, out of capacity, its history kept. Idempotent."""
        node_id = self._node_id()
        node = retirement.node_retire(
            user=signed_in(request), node_id=node_id, reason=_reason(request)
        )
        return Response(NodeSerializer(node).data)

    @extend_schema(request=None, responses={200: NodeSerializer})
    @action(detail=True, methods=["post"])
    def reinstate(self, request: Request, pk: str | None = None) -> Response:
        """Undo a retirement: the node comes back drained (release it to use it). 409 when it
        is not retired or retiring, or its cluster is retired."""
        node = retirement.node_reinstate(user=signed_in(request), node_id=self._node_id())
        return Response(NodeSerializer(node).data)


def _reason(request: Request) -> str:
    body = NodeActionSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    return str(body.validated_data["reason"])
