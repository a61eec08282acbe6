"""The portal's routing facts: what the cluster page shows about each cluster (region,
interconnect, datasets held, prices in force, observed spot interruptions) and the platform
admins' page that sets them (``/cluster/routing/``; 403 for anyone else), through the services
of ``scheduler.routing_admin``, whose errors show next to the field they name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from core.errors import DomainError, ListErrors, NotFound
from scheduler import routing_admin, routing_facts
from scheduler.models import Cluster, ClusterDataset, Dataset, Interconnect, TeamClusterAccess
from tenants.models import Team
from tenants.permissions import Caller, is_platform_admin

# --- what the cluster page shows ------------------------------------------------------------------


@dataclass
class ClusterFacts:
    name: str
    region: str
    interconnect: str
    # (dataset, egress USD per GB as written, e.g. "0.02")
    datasets: list[tuple[str, str]] = field(default_factory=list)
    # (GPU model, capacity type, USD per GPU-hour) in force now
    prices: list[tuple[str, str, float]] = field(default_factory=list)
    spot_interruption_rate: float | None = None
    teams: list[str] = field(default_factory=list)


def cluster_facts(*, with_teams: bool) -> dict[str, ClusterFacts]:
    """Per cluster name, what routing knows of it. Teams' lists only ``with_teams`` (admins):
    which teams are held to which clusters is not every user's business."""
    rows = list(
        Cluster.objects.order_by("name").prefetch_related(
            Prefetch(
                "dataset_copies",
                queryset=ClusterDataset.objects.select_related("dataset").order_by("dataset__name"),
            )
        )
    )
    now = timezone.now()
    source = routing_facts.price_book_source()
    book = source(at=now, cluster_names=[c.name for c in rows]) if source else {}
    rates = routing_facts.spot_interruption_rates(now=now)
    teams: dict[int, list[str]] = {}
    if with_teams:
        for cluster_id, slug in TeamClusterAccess.objects.order_by("team__slug").values_list(
            "cluster_id", "team__slug"
        ):
            teams.setdefault(cluster_id, []).append(slug)
    out = {}
    for c in rows:
        prices = [
            (model, capacity, price)
            for model, by_capacity in sorted(book.get(c.name, {}).items())
            for capacity, price in sorted(by_capacity.items())
        ]
        out[c.name] = ClusterFacts(
            name=c.name,
            region=c.region,
            interconnect=c.get_interconnect_display(),
            datasets=[
                (h.dataset.name, f"{h.egress_price_per_gb.normalize():f}")
                for h in c.dataset_copies.all()
            ],
            prices=prices,
            spot_interruption_rate=rates.get(c.pk),
            teams=teams.get(c.pk, []),
        )
    return out


# --- forms --------------------------------------------------------------------------------------


class ClusterFactsForm(forms.Form):
    region = forms.CharField(
        max_length=routing_admin.REGION_MAX_LENGTH,
        required=False,
        help_text="e.g. eu-west; empty: no region (jobs that name regions never run here)",
    )
    interconnect = forms.ChoiceField(choices=Interconnect.choices)


class DatasetForm(forms.Form):
    name = forms.CharField(max_length=routing_admin.DATASET_NAME_MAX_LENGTH, strip=False)
    size_gb = forms.FloatField(
        label="Size (GB)",
        required=False,
        min_value=0,
        max_value=routing_admin.MAX_DATASET_SIZE_GB,
        help_text="Empty: unknown (moving it costs nothing).",
    )
    residency = forms.CharField(
        label="Residency regions",
        required=False,
        help_text="Comma-separated regions it may be read in; empty: anywhere.",
    )
    copies = forms.CharField(
        label="Copies",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text="One line per cluster holding a copy: CLUSTER=egress USD per GB (e.g. "
        "onprem=0.02).",
    )

    def clean_residency(self) -> list[str] | None:
        text = self.cleaned_data.get("residency") or ""
        regions = [r.strip() for r in text.split(",") if r.strip()]
        return regions or None

    def clean_copies(self) -> list[dict[str, Any]]:
        copies: list[dict[str, Any]] = []
        # The first bad lines are named, the rest counted, as the service names its errors.
        errors: dict[str, list[str]] = {}
        listed = ListErrors(errors)
        for number, line in enumerate((self.cleaned_data.get("copies") or "").splitlines(), 1):
            if not line.strip():
                continue
            cluster, sep, price = line.partition("=")
            if not sep or not cluster.strip():
                listed.add("lines", f"line {number}", "write CLUSTER=price per GB")
                continue
            copies.append({"cluster": cluster.strip(), "egress_price_per_gb": price.strip()})
        listed.close()
        if errors:
            raise forms.ValidationError(
                [m if key == "lines" else f"{key}: {m}" for key, ms in errors.items() for m in ms]
            )
        return copies

    def service_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "size_gb": data.get("size_gb"),
            "residency_regions": data.get("residency"),
            "copies": data.get("copies") or [],
        }

    def add_domain_error(self, error: DomainError) -> None:
        """Service errors on the fields they name (``copies[2].cluster`` -> the copies box,
        saying which line; copies lines are numbered among the non-empty ones)."""
        for key, messages_ in error.as_dict().items():
            root, _, rest = key.partition("[")
            target: str | None = {"residency_regions": "residency", "copies": "copies"}.get(
                root, root
            )
            if target not in self.fields:
                target = None
            for message in messages_:
                if rest and root == "copies":
                    index = int(rest.split("]")[0])
                    message = f"copy {index + 1}: {message}"
                self.add_error(target, message)


def dataset_initial(dataset: Dataset) -> dict[str, Any]:
    return {
        "name": dataset.name,
        "size_gb": dataset.size_gb,
        "residency": ", ".join(dataset.residency_regions or []),
        "copies": "\n".join(
            f"{c.cluster.name}={c.egress_price_per_gb.normalize():f}" for c in dataset.copies.all()
        ),
    }


class TeamClustersForm(forms.Form):
    clusters = forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: the team may use any cluster.",
    )

    def __init__(self, *args: Any, cluster_names: Iterable[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The field declared above: a copy of it, still a MultipleChoiceField.
        clusters = cast(forms.MultipleChoiceField, self.fields["clusters"])
        clusters.choices = [(n, n) for n in cluster_names]


# --- the admin page -----------------------------------------------------------------------------


def _require_admin(user: Caller) -> User:
    """``user``, a platform admin; PermissionDenied (403) for anyone else."""
    if not is_platform_admin(user):
        raise PermissionDenied("platform admins only")
    return user


def _page(
    request: HttpRequest, *, status: int = 200, bound: dict[str, forms.Form] | None = None
) -> HttpResponse:
    """The page, with ``bound`` forms (keyed ``cluster:NAME``, ``dataset:ID``, ``dataset:new``,
    ``team:SLUG``) shown in place of the blank ones, errors and all."""
    bound = bound or {}
    clusters = list(Cluster.objects.order_by("name"))
    names = [c.name for c in clusters]
    facts = cluster_facts(with_teams=True)
    datasets = list(
        Dataset.objects.order_by("name").prefetch_related(
            Prefetch(
                "copies",
                queryset=ClusterDataset.objects.select_related("cluster").order_by("cluster__name"),
            )
        )
    )
    access: dict[int, list[str]] = {}
    for team_id, name in TeamClusterAccess.objects.order_by("cluster__name").values_list(
        "team_id", "cluster__name"
    ):
        access.setdefault(team_id, []).append(name)
    teams = list(Team.objects.order_by("slug"))
    context = {
        "clusters": [
            (
                c,
                facts[c.name],
                bound.get(f"cluster:{c.name}")
                or ClusterFactsForm(
                    initial={"region": c.region, "interconnect": c.interconnect},
                    prefix=f"c-{c.pk}",
                ),
            )
            for c in clusters
        ],
        "datasets": [
            (
                d,
                bound.get(f"dataset:{d.pk}")
                or DatasetForm(initial=dataset_initial(d), prefix=f"d-{d.pk}"),
            )
            for d in datasets
        ],
        "new_dataset_form": bound.get("dataset:new") or DatasetForm(prefix="new"),
        "teams": [
            (
                t,
                access.get(t.pk, []),
                bound.get(f"team:{t.slug}")
                or TeamClustersForm(
                    initial={"clusters": access.get(t.pk, [])},
                    cluster_names=names,
                    prefix=f"t-{t.pk}",
                ),
            )
            for t in teams
        ],
        "page": "cluster",
    }
    return render(request, "frontend/routing_facts.html", context, status=status)


@login_required
@require_GET
def routing_facts_page(request: HttpRequest) -> HttpResponse:
    """Clusters' region and interconnect, datasets and their copies, teams' clusters."""
    _require_admin(request.user)
    return _page(request)


def _back(anchor: str) -> HttpResponseRedirect:
    return redirect(reverse("routing-facts") + f"#{anchor}")


@login_required
@require_POST
def routing_cluster_set(request: HttpRequest, name: str) -> HttpResponse:
    admin = _require_admin(request.user)
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise Http404("no such cluster")
    form = ClusterFactsForm(request.POST, prefix=f"c-{cluster.pk}")
    if form.is_valid():
        try:
            routing_admin.cluster_routing_set(
                user=admin,
                name=name,
                region=form.cleaned_data["region"].strip(),
                interconnect=form.cleaned_data["interconnect"],
            )
        except DomainError as exc:
            for key, reasons in exc.as_dict().items():
                for reason in reasons:
                    form.add_error(key if key in form.fields else None, reason)
        else:
            messages.success(request, f"Cluster {name}: routing facts saved.")
            return _back(f"cluster-{name}")
    return _page(request, status=400, bound={f"cluster:{name}": form})


@login_required
@require_POST
def routing_dataset_new(request: HttpRequest) -> HttpResponse:
    admin = _require_admin(request.user)
    form = DatasetForm(request.POST, prefix="new")
    if form.is_valid():
        try:
            dataset = routing_admin.dataset_create(user=admin, **form.service_fields())
        except DomainError as exc:
            form.add_domain_error(exc)
        else:
            messages.success(request, f"Dataset {dataset.name} added.")
            return _back(f"dataset-{dataset.pk}")
    return _page(request, status=400, bound={"dataset:new": form})


@login_required
@require_POST
def routing_dataset_edit(request: HttpRequest, dataset_id: int) -> HttpResponse:
    admin = _require_admin(request.user)
    form = DatasetForm(request.POST, prefix=f"d-{dataset_id}")
    if form.is_valid():
        try:
            dataset = routing_admin.dataset_update(
                user=admin, dataset_id=dataset_id, **form.service_fields()
            )
        except NotFound:
            raise Http404("no such dataset") from None
        except DomainError as exc:
            form.add_domain_error(exc)
        else:
            messages.success(request, f"Dataset {dataset.name} saved.")
            return _back(f"dataset-{dataset.pk}")
    if not Dataset.objects.filter(pk=dataset_id).exists():
        raise Http404("no such dataset")
    return _page(request, status=400, bound={f"dataset:{dataset_id}": form})


@login_required
@require_POST
def routing_dataset_delete(request: HttpRequest, dataset_id: int) -> HttpResponse:
    admin = _require_admin(request.user)
    try:
        routing_admin.dataset_delete(user=admin, dataset_id=dataset_id)
    except NotFound:
        raise Http404("no such dataset") from None
    messages.success(request, "Dataset deleted.")
    return _back("datasets")


@login_required
@require_POST
def routing_team_set(request: HttpRequest, slug: str) -> HttpResponse:
    admin = _require_admin(request.user)
    team = Team.objects.filter(slug=slug).first()
    if team is None:
        raise Http404("no such team")
    names = list(Cluster.objects.order_by("name").values_list("name", flat=True))
    form = TeamClustersForm(request.POST, cluster_names=names, prefix=f"t-{team.pk}")
    if form.is_valid():
        try:
            now = routing_admin.team_clusters_set(
                user=admin, slug=slug, clusters=form.cleaned_data["clusters"]
            )
        except DomainError as exc:
            for reasons in exc.as_dict().values():
                for reason in reasons:
                    form.add_error("clusters", reason)
        else:
            listed = ", ".join(now) if now else "any cluster"
            messages.success(request, f"Team {slug} may use: {listed}.")
            return _back(f"team-{slug}")
    return _page(request, status=400, bound={f"team:{slug}": form})
