"""A valid request for every write operation (POST, PUT, PATCH, DELETE) of the API, on the schema
conformance test's world (``rich_world``: the isolation walk's two teams, team A's objects at
``A_PK``), so its success answer can be validated against the OpenAPI document.

A body is hard to derive from the document alone (a job needs a GPU model that exists, a quota
request a team the caller belongs to, a rollback a version number), so each operation has its
entry here: who sends it, the body, and what must hold first (``before``). An operation added
later without an entry here or in ``SKIPPED`` fails the test, so the table cannot fall behind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone

from tests.integration.security.test_route_isolation import A_PK

# An address that is public (a webhook may not point at a private network) and needs no DNS.
PUBLIC_URL = "https://93.184.216.34/hook"
JOB = {
    "name": "conformance-job",
    "team": "vision",
    "workers": 1,
    "gpus_per_worker": 1,
    "gpu_model": "h100-80gb",
    "command": "python train.py",
}


@dataclass(frozen=True)
class Write:
    """One write request. ``who``: a key of the world ("alice" a member of team A, "vera" its
    admin, "admin" the platform admin), "node agent", or None for no caller. ``body``: the JSON
    body, or a function of the world giving it (None: no body). ``before``: a function of the
    world that puts the object in the state the operation needs (run in the same savepoint).
    ``values``: path values besides the test's (team A's objects)."""

    who: str | None
    body: Any = None
    before: Callable[[dict], None] | None = None
    values: dict[str, str] | Callable[[dict], dict[str, str]] = field(default_factory=dict)


def _first_node(world) -> dict[str, str]:
    from scheduler.models import Node

    return {"pk": str(Node.objects.order_by("pk").first().pk)}


def _node_quarantined(world) -> None:
    from scheduler import services
    from scheduler.models import Node

    node = Node.objects.order_by("pk").first()
    services.node_quarantine(user=world["admin"], node_id=node.pk, reason="bad GPU")


def _node_retired(world) -> None:
    from scheduler import retirement
    from scheduler.models import Node

    node = Node.objects.order_by("pk").first()
    retirement.node_retire(user=world["admin"], node_id=node.pk, reason="old")


def _cluster_retired(world) -> None:
    from scheduler import retirement

    retirement.cluster_retire(user=world["admin"], name="test", reason="moving")


def _webhook_disabled(world) -> None:
    from notifications.models import Webhook

    Webhook.objects.filter(pk=A_PK).update(enabled=False)


def _webhook_public(world) -> None:
    # The world's hook names a host that does not resolve: a change checks the URL again.
    from notifications.models import Webhook

    Webhook.objects.filter(pk=A_PK).update(url=PUBLIC_URL)


def _statement_of_last_month(world) -> None:
    # Only a month that is over can be closed.
    from billing.models import Statement

    month = (timezone.now().replace(day=1) - timedelta(days=1)).replace(day=1).date()
    Statement.objects.filter(pk=A_PK).update(month=month)


def _whatif_running(world) -> None:
    from policyversions.models import WhatIfRun

    WhatIfRun.objects.filter(pk=A_PK).update(status="running")


def _whatif_with_results(world) -> None:
    from policyversions.models import WhatIfRun

    # Replayed against the version in force (v1, the world's), so it may still be applied.
    WhatIfRun.objects.filter(pk=A_PK).update(
        baseline_version=1, candidates={"faster": {"backfill": False}}, results={"faster": {}}
    )


def _price(world) -> dict:
    return {
        "gpu_model": "a100-40gb",
        "capacity": "on_demand",
        "effective_from": (timezone.now() + timedelta(days=1)).isoformat(),
        "rate_per_gpu_hour": "1.75",
        "note": "conformance",
    }


def _samples(world) -> dict:
    at = timezone.now() - timedelta(seconds=1)
    sample = {
        "gpu": 0,
        "time": at.timestamp(),
        "utilization": 50.0,
        "memory_used_mib": 1000,
        "memory_total_mib": 81559,
        "temperature_c": 60,
        "power_w": 300.0,
    }
    return {"samples": [sample]}


WRITES: dict[tuple[str, str], Write] = {
    # Routing facts (platform admins).
    ("patch", "/api/v1/admin/clusters/{name}/"): Write(
        "admin", {"region": "eu-west", "interconnect": "infiniband"}
    ),
    ("post", "/api/v1/admin/clusters/{name}/retire/"): Write("admin", {"reason": "moving"}),
    ("post", "/api/v1/admin/clusters/{name}/reinstate/"): Write("admin", before=_cluster_retired),
    ("post", "/api/v1/admin/datasets/"): Write(
        "admin",
        {
            "name": "coco",
            "size_gb": 20.5,
            "residency_regions": ["eu-west"],
            "copies": [{"cluster": "test", "egress_price_per_gb": "0.02"}],
        },
    ),
    ("patch", "/api/v1/admin/datasets/{id}/"): Write(
        "admin", {"size_gb": 200, "residency_regions": None}
    ),
    ("delete", "/api/v1/admin/datasets/{id}/"): Write("admin"),
    ("put", "/api/v1/admin/team-clusters/{slug}/"): Write("admin", {"clusters": ["test"]}),
    # Nodes (platform admins).
    ("post", "/api/v1/admin/nodes/{id}/drain/"): Write(
        "admin", {"reason": "x"}, values=_first_node
    ),
    ("post", "/api/v1/admin/nodes/{id}/quarantine/"): Write(
        "admin", {"reason": "x"}, values=_first_node
    ),
    ("post", "/api/v1/admin/nodes/{id}/retire/"): Write(
        "admin", {"reason": "x"}, values=_first_node
    ),
    ("post", "/api/v1/admin/nodes/{id}/release/"): Write(
        "admin", before=_node_quarantined, values=_first_node
    ),
    ("post", "/api/v1/admin/nodes/{id}/reinstate/"): Write(
        "admin", before=_node_retired, values=_first_node
    ),
    # Tokens and the token exchange.
    ("post", "/api/v1/auth/token"): Write(None, {"username": "alice", "password": "pw-alice"}),
    ("post", "/api/v1/tokens/"): Write("alice", {"name": "ci"}),
    ("post", "/api/v1/tokens/{id}/revoke/"): Write("alice", values={"id": str(A_PK)}),
    ("delete", "/api/v1/tokens/{id}/"): Write("alice", values={"id": str(A_PK)}),
    # Billing.
    ("post", "/api/v1/billing/budgets/"): Write(
        "admin", {"team": "vision", "month": "2027-01", "amount": "250.00", "hard_stop": False}
    ),
    ("post", "/api/v1/billing/prices/"): Write("admin", _price),
    ("post", "/api/v1/billing/statements/{id}/adjustments/"): Write(
        "admin", {"amount": "-5.00", "reason": "credit for an outage"}
    ),
    ("post", "/api/v1/billing/statements/{id}/close/"): Write(
        "admin", {"mode": "chargeback"}, before=_statement_of_last_month
    ),
    # Jobs and arrays.
    ("post", "/api/v1/jobs/"): Write("alice", JOB),
    ("post", "/api/v1/jobs/estimate/"): Write("alice", JOB),
    ("post", "/api/v1/jobs/{id}/cancel/"): Write("alice"),
    ("post", "/api/v1/jobs/{job_id}/resubmit/"): Write("alice", {"attempt": 1}),
    ("post", "/api/v1/job-arrays/"): Write(
        "alice",
        {
            "name": "sweep",
            "team": "vision",
            "template": {"workers": 1, "gpus_per_worker": 1, "command": "run {index}"},
            "count": 2,
        },
    ),
    ("post", "/api/v1/job-arrays/{id}/cancel/"): Write("alice"),
    # Notifications.
    ("put", "/api/v1/notifications/preferences"): Write(
        "alice", [{"event": "job.failed", "channel": "email", "enabled": True}]
    ),
    ("patch", "/api/v1/notifications/preferences"): Write(
        "alice", [{"event": "job.failed", "channel": "email", "enabled": False}]
    ),
    ("post", "/api/v1/notifications/webhooks/"): Write(
        "alice", {"name": "mine", "url": PUBLIC_URL}
    ),
    ("put", "/api/v1/notifications/webhooks/{id}/"): Write(
        "vera", {"name": "team hook", "url": PUBLIC_URL, "team": "vision"}
    ),
    ("patch", "/api/v1/notifications/webhooks/{id}/"): Write(
        "vera", {"name": "renamed"}, before=_webhook_public
    ),
    ("delete", "/api/v1/notifications/webhooks/{id}/"): Write("vera"),
    ("post", "/api/v1/notifications/webhooks/{id}/enable/"): Write(
        "vera", before=_webhook_disabled
    ),
    ("post", "/api/v1/notifications/webhooks/{id}/test/"): Write("vera"),
    # Policy versions and what-if runs (platform admins).
    ("post", "/api/v1/policy/versions"): Write(
        "admin", {"reason": "less backfill", "engine_config": {"backfill": False}}
    ),
    ("post", "/api/v1/policy/versions/{number}/rollback"): Write("admin", {"reason": "undo"}),
    ("post", "/api/v1/policy/whatif"): Write(
        "admin",
        {"cluster": "test", "window_days": 7, "candidates": {"strict": {"backfill": False}}},
    ),
    ("post", "/api/v1/policy/whatif/{run_id}/apply"): Write(
        "admin", {"candidate": "faster", "reason": "it won"}, before=_whatif_with_results
    ),
    ("post", "/api/v1/policy/whatif/{run_id}/cancel"): Write("admin", before=_whatif_running),
    # Quotas.
    ("post", "/api/v1/quota-requests/"): Write(
        "vera",
        {"team": "vision", "gpu_model": "a100-40gb", "guaranteed_gpus": 2, "reason": "a paper"},
    ),
    ("post", "/api/v1/quota-requests/{id}/approve/"): Write("admin", {"comment": "ok"}),
    ("post", "/api/v1/quota-requests/{id}/reject/"): Write("admin", {"comment": "not now"}),
    ("post", "/api/v1/quotas/"): Write(
        "admin",
        {"team": "vision", "gpu_model": "a100-40gb", "guaranteed_gpus": 1, "borrow_limit_gpus": 0},
    ),
    ("put", "/api/v1/quotas/{id}/"): Write(
        "admin",
        {"team": "vision", "gpu_model": "h100-80gb", "guaranteed_gpus": 3, "borrow_limit_gpus": 1},
    ),
    ("patch", "/api/v1/quotas/{id}/"): Write("admin", {"guaranteed_gpus": 1}),
    # Teams.
    ("put", "/api/v1/teams/{slug}/entitlements/"): Write(
        "admin", {"priority_classes": ["research"], "may_opt_out_of_preemption": False}
    ),
    ("post", "/api/v1/teams/{slug}/members/"): Write(
        "vera", {"username": "charlie", "role": "member"}
    ),
    ("delete", "/api/v1/teams/{slug}/members/{username}/"): Write("vera"),
    # Telemetry (a node's agent).
    ("post", "/api/v1/telemetry/samples"): Write("node agent", _samples),
}

# Write operations whose success answer is not checked, each with the reason. Empty today.
SKIPPED: dict[tuple[str, str], str] = {}


# --- refusals for the state an object is in (409) --------------------------------------------


def _job_finished(world) -> None:
    from scheduler.models import Job

    Job.objects.filter(pk=A_PK).update(state="succeeded", finished_at=timezone.now())


def _quota_request_decided(world) -> None:
    from tenants.models import QuotaRequest

    QuotaRequest.objects.filter(pk=A_PK).update(status="rejected")


def _whatif_live(world) -> None:
    from policyversions.models import WhatIfRun

    WhatIfRun.objects.filter(pk=A_PK).update(status="queued")


def _whatif_stale(world) -> None:
    # Replayed against a version no longer in force.
    from policyversions.models import WhatIfRun

    WhatIfRun.objects.filter(pk=A_PK).update(
        baseline_version=None, candidates={"faster": {"backfill": False}}, results={"faster": {}}
    )


def _vera_sole_owner(world) -> None:
    from tenants.models import Membership

    Membership.objects.filter(team__slug="vision").update(role="member")
    Membership.objects.filter(team__slug="vision", user=world["vera"]).update(role="owner")


# A request that each operation refuses with a 409 (the object's state does not allow it): the
# document must declare it. Operations that can answer 409 only in a race (a policy version saved
# meanwhile) declare it too, but have no entry: a race cannot be set up here.
CONFLICTS: dict[tuple[str, str], Write] = {
    ("post", "/api/v1/admin/clusters/{name}/reinstate/"): Write("admin"),
    ("post", "/api/v1/admin/nodes/{id}/reinstate/"): Write("admin", values=_first_node),
    ("post", "/api/v1/admin/nodes/{id}/release/"): Write("admin", values=_first_node),
    ("post", "/api/v1/billing/statements/{id}/close/"): Write("admin", {"mode": "chargeback"}),
    ("post", "/api/v1/jobs/{id}/cancel/"): Write("alice", before=_job_finished),
    ("post", "/api/v1/job-arrays/{id}/cancel/"): Write("alice", before=_job_finished),
    ("post", "/api/v1/quota-requests/{id}/approve/"): Write(
        "admin", {"comment": "ok"}, before=_quota_request_decided
    ),
    ("post", "/api/v1/quota-requests/{id}/reject/"): Write(
        "admin", {"comment": "no"}, before=_quota_request_decided
    ),
    ("post", "/api/v1/policy/whatif"): Write(
        "admin",
        {"cluster": "test", "window_days": 7, "candidates": {"strict": {"backfill": False}}},
        before=_whatif_live,
    ),
    ("post", "/api/v1/policy/whatif/{run_id}/apply"): Write(
        "admin", {"candidate": "faster", "reason": "it won"}, before=_whatif_stale
    ),
    ("post", "/api/v1/policy/whatif/{run_id}/cancel"): Write("admin"),
    ("post", "/api/v1/teams/{slug}/members/"): Write(
        "admin", {"username": "vera", "role": "member"}, before=_vera_sole_owner
    ),
    ("delete", "/api/v1/teams/{slug}/members/{username}/"): Write(
        "admin", before=_vera_sole_owner, values={"username": "vera"}
    ),
}
