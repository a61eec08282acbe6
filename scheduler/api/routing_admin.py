"""Platform admins: the facts routing reads (docs/routing.md, "Admins: setting the facts").

- ``GET /admin/clusters/``, ``GET|PATCH /admin/clusters/<name>/`` ``{"region", "interconnect"}``
- ``POST /admin/clusters/<name>/retire/`` ``{"reason"}`` (optional) and
  ``POST /admin/clusters/<name>/reinstate/`` (``scheduler.retirement``)
- ``GET|POST /admin/datasets/``, ``GET|PATCH|DELETE /admin/datasets/<id>/``
  ``{"name", "size_gb", "residency_regions", "copies": [{"cluster", "egress_price_per_gb"}]}``
  (``copies`` given replaces every copy)
- ``GET /admin/team-clusters/``, ``GET|PUT /admin/team-clusters/<slug>/`` ``{"clusters": [...]}``
  (``[]``: any cluster)

Anyone but a platform admin gets a 403. Bad input is a 400 naming each field
(``copies[1].egress_price_per_gb: must be >= 0``) and writes nothing; every change is audited.
The views only shape HTTP; ``scheduler.routing_admin`` validates and writes.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from decimal import Decimal
from typing import Any

from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.errors import FieldErrors, NotFound
from core.ids import parse_id
from tenants.models import Team
from tenants.permissions import IsPlatformAdmin, signed_in

from .. import retirement, routing_admin
from ..models import Cluster, ClusterDataset, Dataset, Interconnect, Node, TeamClusterAccess


class CopySerializer(serializers.ModelSerializer[ClusterDataset]):
    cluster: serializers.SlugRelatedField[Cluster] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )

    class Meta:
        model = ClusterDataset
        fields = ["cluster", "egress_price_per_gb"]
        read_only_fields = fields


class HeldSerializer(serializers.ModelSerializer[ClusterDataset]):
    dataset: serializers.SlugRelatedField[Dataset] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )

    class Meta:
        model = ClusterDataset
        fields = ["dataset", "egress_price_per_gb"]
        read_only_fields = fields


class ClusterRoutingSerializer(serializers.ModelSerializer[Cluster]):
    """A cluster's routing facts (output)."""

    datasets = HeldSerializer(source="dataset_copies", many=True, read_only=True)
    teams = serializers.SerializerMethodField(
        help_text="Teams restricted to a list that includes this cluster."
    )

    class Meta:
        model = Cluster
        fields = [
            "name",
            "region",
            "interconnect",
            "backend_kind",
            "enabled",
            "retiring_since",
            "retired_at",
            "datasets",
            "teams",
        ]
        read_only_fields = fields

    def get_teams(self, cluster: Cluster) -> list[str]:
        return [access.team.slug for access in cluster.team_access.all()]


class DatasetSerializer(serializers.ModelSerializer[Dataset]):
    copies = CopySerializer(many=True, read_only=True)

    class Meta:
        model = Dataset
        fields = ["id", "name", "size_gb", "residency_regions", "copies"]
        # Output only: writes go through scheduler.routing_admin, which bounds every number.
        read_only_fields = fields


class TeamClustersSerializer(serializers.ModelSerializer[Team]):
    clusters = serializers.SerializerMethodField(help_text="[]: the team may use any cluster.")

    class Meta:
        model = Team
        fields = ["slug", "name", "clusters"]

    def get_clusters(self, team: Team) -> list[str]:
        return [access.cluster.name for access in team.cluster_access.all()]


# Request bodies, declared for the OpenAPI document (clients are generated from it). They do not
# validate: ``scheduler.routing_admin`` does, naming each bad field (``copies[1].cluster``), and
# ``_body`` takes its allowed keys from them, so a key declared is a key accepted.
class ClusterFactsSerializer(serializers.Serializer[Any]):
    region = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=routing_admin.REGION_MAX_LENGTH,
        help_text='Lowercase words joined by "-" (eu-west); "": no region. Left out: kept.',
    )
    interconnect = serializers.ChoiceField(
        choices=Interconnect.choices, required=False, help_text="Left out: kept."
    )


class ClusterRetireSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=Node._meta.get_field("retire_reason").max_length,
        help_text="Shown on the cluster's nodes.",
    )


class DatasetCopyFactsSerializer(serializers.Serializer[Any]):
    cluster = serializers.CharField(help_text="The name of a cluster holding a copy.")
    egress_price_per_gb = serializers.DecimalField(
        max_digits=8,
        decimal_places=4,
        min_value=Decimal(0),
        max_value=routing_admin.MAX_EGRESS_PRICE_PER_GB,
        required=False,
        help_text="USD per GB of moving the dataset out of this cluster (default 0).",
    )


class DatasetFactsSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=routing_admin.DATASET_NAME_MAX_LENGTH)
    size_gb = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=routing_admin.MAX_DATASET_SIZE_GB,
        help_text="null: unknown (moving it is then free).",
    )
    residency_regions = serializers.ListField(
        child=serializers.CharField(max_length=routing_admin.REGION_MAX_LENGTH),
        required=False,
        allow_null=True,
        min_length=1,
        help_text="The regions it may be read in; null: anywhere.",
    )
    copies = DatasetCopyFactsSerializer(
        many=True, required=False, help_text="The copies clusters hold; given, replaces them all."
    )


class TeamClustersSetSerializer(serializers.Serializer[Any]):
    clusters = serializers.ListField(
        child=serializers.CharField(),
        help_text="Cluster names the team (and its subteams) may use; []: any cluster.",
    )


def _declared(serializer: type[serializers.Serializer[Any]]) -> set[str]:
    return set(serializer().fields)


def _body(
    request: Request, allowed: set[str], *, required: AbstractSet[str] = frozenset()
) -> dict[str, Any]:
    """The JSON object sent, refusing unknown and missing keys (a misspelt fact must not be
    dropped silently)."""
    data = request.data
    if not isinstance(data, dict):
        raise FieldErrors({"non_field_errors": ["send a JSON object"]})
    errors = {key: ["unknown field"] for key in data if key not in allowed}
    errors |= {key: ["is required"] for key in required if key not in data}
    if errors:
        raise FieldErrors(errors)
    return dict(data)


def _clusters() -> QuerySet[Cluster]:
    return Cluster.objects.order_by("name").prefetch_related(
        Prefetch(
            "dataset_copies",
            queryset=ClusterDataset.objects.select_related("dataset").order_by("dataset__name"),
        ),
        Prefetch(
            "team_access",
            queryset=TeamClusterAccess.objects.select_related("team").order_by("team__slug"),
        ),
    )


def _datasets() -> QuerySet[Dataset]:
    return Dataset.objects.order_by("name").prefetch_related(
        Prefetch(
            "copies",
            queryset=ClusterDataset.objects.select_related("cluster").order_by("cluster__name"),
        )
    )


def _teams() -> QuerySet[Team]:
    return Team.objects.order_by("slug").prefetch_related(
        Prefetch(
            "cluster_access",
            queryset=TeamClusterAccess.objects.select_related("cluster").order_by("cluster__name"),
        )
    )


class ClusterRoutingAdminViewSet(viewsets.GenericViewSet[Cluster]):
    # When an action answers 409 (the OpenAPI document declares it: gpuplatform.apischema).
    conflicts = {"reinstate": "the cluster is not retired or retiring"}
    permission_classes = [IsPlatformAdmin]
    serializer_class = ClusterRoutingSerializer
    # The list answers every row as a plain list (a platform's clusters, datasets or teams are
    # few): no page, as the OpenAPI document says.
    pagination_class = None
    lookup_field = "name"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"

    def get_queryset(self) -> QuerySet[Cluster]:
        return _clusters()

    def list(self, request: Request) -> Response:
        return Response(ClusterRoutingSerializer(self.get_queryset(), many=True).data)

    def retrieve(self, request: Request, name: str | None = None) -> Response:
        return Response(ClusterRoutingSerializer(self.get_object()).data)

    @extend_schema(request=ClusterFactsSerializer, responses={200: ClusterRoutingSerializer})
    def partial_update(self, request: Request, name: str | None = None) -> Response:
        self.get_object()  # 404 before 400
        body = _body(request, _declared(ClusterFactsSerializer))
        routing_admin.cluster_routing_set(
            user=signed_in(request),
            name=str(name),
            region=body.get("region"),
            interconnect=body.get("interconnect"),
        )
        return Response(ClusterRoutingSerializer(self.get_queryset().get(name=name)).data)

    @extend_schema(request=ClusterRetireSerializer, responses={200: ClusterRoutingSerializer})
    @action(detail=True, methods=["post"])
    def retire(self, request: Request, name: str | None = None) -> Response:
        """Retire the cluster: its nodes drain and retire, no new job is routed to it (a job
        confined to it is refused at submission; one pending stays pending, saying why), and
        the loop stops polling it once nothing runs there. Idempotent."""
        _cluster_exists(name)  # 404 before 400
        reason = _body(request, _declared(ClusterRetireSerializer)).get("reason", "")
        limit = Node._meta.get_field("retire_reason").max_length
        assert limit is not None  # Node.retire_reason declares its length
        if not isinstance(reason, str):
            raise FieldErrors({"reason": ["must be a string"]})
        if len(reason) > limit:
            raise FieldErrors({"reason": [f"must be at most {limit} characters"]})
        retirement.cluster_retire(user=signed_in(request), name=str(name), reason=reason)
        return Response(ClusterRoutingSerializer(self.get_queryset().get(name=name)).data)

    @extend_schema(request=None, responses={200: ClusterRoutingSerializer})
    @action(detail=True, methods=["post"])
    def reinstate(self, request: Request, name: str | None = None) -> Response:
        """Undo the retirement: jobs may be routed there again, its nodes come back drained.
        409 when the cluster is not retired or retiring."""
        _cluster_exists(name)
        retirement.cluster_reinstate(user=signed_in(request), name=str(name))
        return Response(ClusterRoutingSerializer(self.get_queryset().get(name=name)).data)


def _cluster_exists(name: str | None) -> None:
    if not Cluster.objects.filter(name=name).exists():
        raise NotFound(f"no cluster is named {name!r}", field="cluster")


class DatasetAdminViewSet(viewsets.GenericViewSet[Dataset]):
    permission_classes = [IsPlatformAdmin]
    serializer_class = DatasetSerializer
    pagination_class = None  # a plain list, as ClusterRoutingAdminViewSet's

    def get_queryset(self) -> QuerySet[Dataset]:
        return _datasets()

    def _id(self) -> int:
        dataset_id = parse_id(self.kwargs.get("pk"))
        if dataset_id is None:
            raise NotFound("no such dataset", field="id")
        return dataset_id

    def list(self, request: Request) -> Response:
        return Response(DatasetSerializer(self.get_queryset(), many=True).data)

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response(DatasetSerializer(self.get_object()).data)

    @extend_schema(request=DatasetFactsSerializer, responses={201: DatasetSerializer})
    def create(self, request: Request) -> Response:
        body = _body(request, _declared(DatasetFactsSerializer), required={"name"})
        dataset = routing_admin.dataset_create(user=signed_in(request), **body)
        return Response(
            DatasetSerializer(self.get_queryset().get(pk=dataset.pk)).data,
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(request=DatasetFactsSerializer, responses={200: DatasetSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        self.get_object()  # 404 before 400
        body = _body(request, _declared(DatasetFactsSerializer))
        dataset = routing_admin.dataset_update(
            user=signed_in(request), dataset_id=self._id(), **body
        )
        return Response(DatasetSerializer(self.get_queryset().get(pk=dataset.pk)).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        routing_admin.dataset_delete(user=signed_in(request), dataset_id=self._id())
        return Response(status=status.HTTP_204_NO_CONTENT)


class TeamClustersAdminViewSet(viewsets.GenericViewSet[Team]):
    permission_classes = [IsPlatformAdmin]
    serializer_class = TeamClustersSerializer
    pagination_class = None  # a plain list, as ClusterRoutingAdminViewSet's
    lookup_field = "slug"
    lookup_value_regex = r"[-a-zA-Z0-9_]+"

    def get_queryset(self) -> QuerySet[Team]:
        return _teams()

    def list(self, request: Request) -> Response:
        return Response(TeamClustersSerializer(self.get_queryset(), many=True).data)

    def retrieve(self, request: Request, slug: str | None = None) -> Response:
        return Response(TeamClustersSerializer(self.get_object()).data)

    @extend_schema(request=TeamClustersSetSerializer, responses={200: TeamClustersSerializer})
    def update(self, request: Request, slug: str | None = None) -> Response:
        self.get_object()  # 404 before 400
        body = _body(request, _declared(TeamClustersSetSerializer), required={"clusters"})
        routing_admin.team_clusters_set(
            user=signed_in(request), slug=str(slug), clusters=body["clusters"]
        )
        return Response(TeamClustersSerializer(self.get_queryset().get(slug=slug)).data)
