"""Platform admins set the facts routing reads (docs/routing.md, "Admins: setting the facts"):
a cluster's region and interconnect, datasets (size and residency) with the copies clusters hold
and their egress price, and the clusters each team may use.

Every service here:
- is for platform admins only (``Forbidden`` for anyone else: the API and the portal refuse
  earlier with a 403, this is the last line);
- validates the whole request before writing anything and raises one ``FieldErrors`` naming
  every bad field (``copies[1].egress_price_per_gb: must be >= 0``), so nothing is half-written;
- writes in one transaction with one audit entry (``tenants.audit``) holding the state before and
  after;
- asks for a scheduling cycle (sent after commit), since where pending jobs may run has changed.

A job's own routing object is validated elsewhere, by ``scheduler.services.routing_errors``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from core.bounds import finite_number
from core.errors import FieldErrors, Forbidden, ListErrors, NotFound, duplicate_refused
from core.names import name_errors
from tenants.audit import audit_record
from tenants.models import Team
from tenants.permissions import is_platform_admin
from tenants.tree import TeamTree

from .models import Cluster, ClusterDataset, Dataset, Interconnect, TeamClusterAccess
from .services import MAX_ROUTING_ERRORS_REPORTED
from .triggers import request_cycle

# A region or site name as cloud providers write them: lowercase words joined by '-'
# (eu-west, us-east-1, onprem-zurich). One spelling per region keeps "EU-West" and "eu-west"
# from being two regions that residency and a job's regions silently fail to match.
REGION_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
REGION_MAX_LENGTH = 64
DATASET_NAME_MAX_LENGTH = 200
# Mirrors ClusterDataset.egress_price_per_gb's validators (USD per GB).
MAX_EGRESS_PRICE_PER_GB = Decimal(1000)
MAX_DATASET_SIZE_GB = 1e9


def _require_admin(user: User) -> None:
    if not is_platform_admin(user):
        raise Forbidden("only platform admins set routing facts")


def region_error(value: Any) -> str | None:
    """Why ``value`` is not a region name, or None."""
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > REGION_MAX_LENGTH:
        return f"must be at most {REGION_MAX_LENGTH} characters"
    if not REGION_RE.match(value):
        return (
            f"{value!r} is not a region name: lowercase letters and digits in words joined by "
            "'-' (e.g. eu-west, us-east-1)"
        )
    return None


def cluster_facts(cluster: Cluster) -> dict[str, Any]:
    return {"region": cluster.region, "interconnect": cluster.interconnect}


def cluster_routing_set(
    *, user: User, name: str, region: str | None = None, interconnect: str | None = None
) -> Cluster:
    """Set a cluster's region and/or interconnect (a value left None is kept). An empty region
    means "no region" (a job that names regions never runs there). NotFound for no such
    cluster."""
    _require_admin(user)
    errors: dict[str, list[str]] = {}
    if region is not None and region != "" and (problem := region_error(region)):
        errors["region"] = [problem]
    if interconnect is not None and interconnect not in Interconnect.values:
        errors["interconnect"] = [f"must be one of {', '.join(Interconnect.values)}"]
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().filter(name=name).first()
        if cluster is None:
            raise NotFound(f"no cluster is named {name!r}", field="cluster")
        if errors:
            raise FieldErrors(errors)
        before = cluster_facts(cluster)
        if region is not None:
            cluster.region = region
        if interconnect is not None:
            cluster.interconnect = interconnect
        after = cluster_facts(cluster)
        if after != before:
            cluster.save(update_fields=["region", "interconnect"])
            audit_record(
                actor=user, action="cluster.routing_set", target=cluster, before=before, after=after
            )
            request_cycle()
    return cluster


# --- datasets ------------------------------------------------------------------------------------


def dataset_facts(dataset: Dataset) -> dict[str, Any]:
    return {
        "name": dataset.name,
        "size_gb": dataset.size_gb,
        "residency_regions": dataset.residency_regions,
        "copies": [
            {"cluster": c.cluster.name, "egress_price_per_gb": str(c.egress_price_per_gb)}
            for c in dataset.copies.select_related("cluster").order_by("cluster__name")
        ],
    }


_UNSET: Any = object()


def _check_dataset(
    *,
    name: Any,
    size_gb: Any,
    residency_regions: Any,
    copies: Any,
    errors: dict[str, list[str]],
    clusters: dict[str, Cluster],
) -> list[tuple[Cluster, Decimal]] | None:
    """Check the given fields (``_UNSET`` ones are not checked); return the copies resolved.
    Bad entries of the lists (regions, copies, a copy's fields) are named up to
    ``MAX_ROUTING_ERRORS_REPORTED`` over the request, then counted (``core.errors.ListErrors``):
    each was named, and 300,000 of them made a 400 body of 44 MB."""
    listed = ListErrors(errors, limit=MAX_ROUTING_ERRORS_REPORTED)
    try:
        return _check_dataset_fields(
            name=name,
            size_gb=size_gb,
            residency_regions=residency_regions,
            copies=copies,
            errors=errors,
            listed=listed,
            clusters=clusters,
        )
    finally:
        listed.close()


def _check_dataset_fields(
    *,
    name: Any,
    size_gb: Any,
    residency_regions: Any,
    copies: Any,
    errors: dict[str, list[str]],
    listed: ListErrors,
    clusters: dict[str, Cluster],
) -> list[tuple[Cluster, Decimal]] | None:
    if name is not _UNSET:
        if not isinstance(name, str) or not name.strip():
            errors["name"] = ["is required (a non-empty string)"]
        elif len(name) > DATASET_NAME_MAX_LENGTH:
            errors["name"] = [f"must be at most {DATASET_NAME_MAX_LENGTH} characters"]
        elif name != name.strip():
            errors["name"] = ["must not start or end with spaces (jobs name it exactly)"]
        elif problems := name_errors(name):
            errors["name"] = problems
    if size_gb is not _UNSET and size_gb is not None:
        if isinstance(size_gb, bool) or not isinstance(size_gb, int | float):
            errors["size_gb"] = ["must be a number of GB, or null for unknown"]
        elif not finite_number(size_gb) or size_gb < 0:
            errors["size_gb"] = ["must be >= 0"]
        elif size_gb > MAX_DATASET_SIZE_GB:
            errors["size_gb"] = [f"must be at most {MAX_DATASET_SIZE_GB:.0f}"]
    if residency_regions is not _UNSET and residency_regions is not None:
        if not isinstance(residency_regions, list | tuple) or not residency_regions:
            errors["residency_regions"] = [
                "must be a non-empty list of regions, or null for anywhere"
            ]
        else:
            seen: set[str] = set()
            for i, region in enumerate(residency_regions):
                path = f"residency_regions[{i}]"
                if problem := region_error(region):
                    listed.add("residency_regions", path, problem)
                elif region in seen:
                    listed.add("residency_regions", path, f"{region!r} listed twice")
                else:
                    seen.add(region)
    if copies is _UNSET:
        return None
    if not isinstance(copies, list | tuple):
        errors["copies"] = ["must be a list of {cluster, egress_price_per_gb}"]
        return None
    resolved: list[tuple[Cluster, Decimal]] = []
    held: set[str] = set()
    for i, copy in enumerate(copies):
        path = f"copies[{i}]"
        if not isinstance(copy, dict):
            listed.add("copies", path, "must be an object {cluster, egress_price_per_gb}")
            continue
        for key in copy:
            if key not in ("cluster", "egress_price_per_gb"):
                listed.add("copies", f"{path}.{key}", "unknown field")
        cluster_name = copy.get("cluster")
        cluster = clusters.get(cluster_name) if isinstance(cluster_name, str) else None
        if cluster is None:
            listed.add("copies", f"{path}.cluster", f"no cluster is named {cluster_name!r}")
        elif cluster_name in held:
            listed.add("copies", f"{path}.cluster", f"{cluster_name!r} listed twice")
        price_errors: dict[str, list[str]] = {}
        price = _egress_price(
            copy.get("egress_price_per_gb", 0), f"{path}.egress_price_per_gb", price_errors
        )
        for price_path, messages in price_errors.items():
            for message in messages:
                listed.add("copies", price_path, message)
        if cluster is not None and cluster_name not in held and price is not None:
            resolved.append((cluster, price))
        if isinstance(cluster_name, str):
            held.add(cluster_name)
    return resolved


def _egress_price(value: Any, path: str, errors: dict[str, list[str]]) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        errors[path] = ["must be a number (USD per GB)"]
        return None
    try:
        price = Decimal(str(value))
    except InvalidOperation:
        errors[path] = [f"{value!r} is not a number (USD per GB)"]
        return None
    if not price.is_finite():
        errors[path] = ["must be a finite number"]
    elif price < 0:
        errors[path] = ["must be >= 0"]
    elif price > MAX_EGRESS_PRICE_PER_GB:
        errors[path] = [f"must be at most {MAX_EGRESS_PRICE_PER_GB}"]
    elif price != price.quantize(Decimal("0.0001")):
        errors[path] = ["at most 4 decimal places"]
    else:
        return price
    return None


def _write_copies(dataset: Dataset, copies: list[tuple[Cluster, Decimal]]) -> None:
    ClusterDataset.objects.filter(dataset=dataset).delete()
    ClusterDataset.objects.bulk_create(
        ClusterDataset(cluster=cluster, dataset=dataset, egress_price_per_gb=price)
        for cluster, price in copies
    )


def dataset_create(
    *,
    user: User,
    name: str,
    size_gb: float | None = None,
    residency_regions: list[str] | None = None,
    copies: list[dict[str, Any]] | None = None,
) -> Dataset:
    """Describe a dataset jobs name: its size in GB (null: unknown, moving it is then free),
    where it may be read (null: anywhere) and the clusters holding a copy with the price per GB
    of moving it out. A name already described is a 400 on ``name``."""
    _require_admin(user)
    errors: dict[str, list[str]] = {}
    with transaction.atomic():
        clusters = {c.name: c for c in Cluster.objects.all()}
        resolved = _check_dataset(
            name=name,
            size_gb=size_gb,
            residency_regions=residency_regions,
            copies=copies or [],
            errors=errors,
            clusters=clusters,
        )
        if "name" not in errors and Dataset.objects.filter(name=name).exists():
            errors["name"] = [f"a dataset named {name!r} exists already"]
        if errors:
            raise FieldErrors(errors)
        with duplicate_refused("name", f"a dataset named {name!r} exists already"):
            dataset = Dataset.objects.create(
                name=name,
                size_gb=None if size_gb is None else float(size_gb),
                residency_regions=None if residency_regions is None else list(residency_regions),
            )
        _write_copies(dataset, resolved or [])
        audit_record(
            actor=user, action="dataset.create", target=dataset, after=dataset_facts(dataset)
        )
        request_cycle()
    return dataset


def dataset_update(
    *,
    user: User,
    dataset_id: int,
    name: Any = _UNSET,
    size_gb: Any = _UNSET,
    residency_regions: Any = _UNSET,
    copies: Any = _UNSET,
) -> Dataset:
    """Change the fields given (others kept); ``copies`` given replaces every copy. NotFound for
    no such dataset; a name another dataset has is a 400 on ``name``."""
    _require_admin(user)
    errors: dict[str, list[str]] = {}
    with transaction.atomic():
        dataset = Dataset.objects.select_for_update().filter(pk=dataset_id).first()
        if dataset is None:
            raise NotFound("no such dataset", field="id")
        clusters = {c.name: c for c in Cluster.objects.all()}
        resolved = _check_dataset(
            name=name,
            size_gb=size_gb,
            residency_regions=residency_regions,
            copies=copies,
            errors=errors,
            clusters=clusters,
        )
        if (
            name is not _UNSET
            and "name" not in errors
            and Dataset.objects.filter(name=name).exclude(pk=dataset.pk).exists()
        ):
            errors["name"] = [f"a dataset named {name!r} exists already"]
        if errors:
            raise FieldErrors(errors)
        before = dataset_facts(dataset)
        if name is not _UNSET:
            dataset.name = name
        if size_gb is not _UNSET:
            dataset.size_gb = None if size_gb is None else float(size_gb)
        if residency_regions is not _UNSET:
            dataset.residency_regions = (
                None if residency_regions is None else list(residency_regions)
            )
        dataset.save()
        if resolved is not None:
            _write_copies(dataset, resolved)
        after = dataset_facts(dataset)
        if after != before:
            audit_record(
                actor=user, action="dataset.update", target=dataset, before=before, after=after
            )
            request_cycle()
    return dataset


def dataset_delete(*, user: User, dataset_id: int) -> None:
    """Forget a dataset's description and copies (jobs naming it keep their text: it then has no
    size and no residency)."""
    _require_admin(user)
    with transaction.atomic():
        dataset = Dataset.objects.select_for_update().filter(pk=dataset_id).first()
        if dataset is None:
            raise NotFound("no such dataset", field="id")
        before = dataset_facts(dataset)
        audit_record(actor=user, action="dataset.delete", target=dataset, before=before)
        dataset.delete()
        request_cycle()


# --- teams' clusters -----------------------------------------------------------------------------


def team_clusters(team: Team) -> list[str]:
    return list(
        TeamClusterAccess.objects.filter(team=team)
        .order_by("cluster__name")
        .values_list("cluster__name", flat=True)
    )


def _stranded_by(team: Team, new_list: set[str]) -> str:
    """Why giving ``team`` the list ``new_list`` would leave it, or a team below it, no cluster
    at all: a team may use its own list intersected with every ancestor's (as the engine reads
    them), so an empty intersection holds each of its jobs pending for ever. "" when none."""
    tree = TeamTree.load()
    lists: dict[int, set[str]] = {}
    for team_id, name in TeamClusterAccess.objects.values_list("team_id", "cluster__name"):
        lists.setdefault(team_id, set()).add(name)
    lists[team.pk] = new_list
    # The team itself, then each team below it with a list of its own.
    below = [t for t in tree.subtree(team.pk) if t != team.pk and t in lists]
    for team_id in [team.pk, *sorted(below)]:
        holders = [t for t in tree.ancestors_and_self(team_id) if t in lists]
        usable = set.intersection(*(lists[h] for h in holders))
        if not usable:
            named = "; ".join(f"{tree.slugs[h]}: {', '.join(sorted(lists[h]))}" for h in holders)
            who = "it" if team_id == team.pk else f"its sub-team {tree.slugs[team_id]}"
            return (
                f"this list would leave {who} no cluster in common with the lists above or "
                f"below it ({named}), so no job of {tree.slugs[team_id]} could ever start; "
                "include one cluster of each, or change the other list first"
            )
    return ""


def team_clusters_set(*, user: User, slug: str, clusters: list[str]) -> list[str]:
    """The clusters a team (and its subteams) may use, replacing the list; an empty list lifts
    the restriction (any cluster). NotFound for no such team; an unknown or repeated cluster is
    a 400 on ``clusters[i]``. Returns the list now in force."""
    _require_admin(user)
    errors: dict[str, list[str]] = {}
    given: object = clusters  # from a request body: checked here whatever its type
    if not isinstance(given, list | tuple):
        raise FieldErrors({"clusters": ["must be a list of cluster names ([] for any)"]})
    with transaction.atomic():
        team = Team.objects.select_for_update().filter(slug=slug).first()
        if team is None:
            raise NotFound("no such team", field="team")
        known = {c.name: c for c in Cluster.objects.all()}
        chosen: list[Cluster] = []
        # A set beside the list: a search of the list per name is quadratic in what the sender
        # sends. Only the first bad names are listed (an error body of one entry per name
        # of a 300,000-name list is tens of MB); the rest are counted.
        chosen_names: set[str] = set()
        listed = ListErrors(errors, limit=MAX_ROUTING_ERRORS_REPORTED)
        for i, name in enumerate(given):
            if not isinstance(name, str) or name not in known:
                problem = f"no cluster is named {name!r}"
            elif name in chosen_names:
                problem = f"{name!r} listed twice"
            else:
                chosen.append(known[name])
                chosen_names.add(name)
                continue
            listed.add("clusters", f"clusters[{i}]", problem)
        listed.close()
        if errors:
            raise FieldErrors(errors)
        if chosen_names and (stranded := _stranded_by(team, chosen_names)):
            raise FieldErrors({"clusters": [stranded]})
        before = team_clusters(team)
        TeamClusterAccess.objects.filter(team=team).delete()
        TeamClusterAccess.objects.bulk_create(
            TeamClusterAccess(team=team, cluster=cluster) for cluster in chosen
        )
        after = team_clusters(team)
        if after != before:
            audit_record(
                actor=user,
                action="team.clusters_set",
                target=team,
                team=team,
                before={"clusters": before},
                after={"clusters": after},
            )
            request_cycle()
    return after
