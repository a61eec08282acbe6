"""The demo: its organisation, cluster, users and price book (``seed``, idempotent) and the
steady trickle of jobs that keeps the demo cluster busy (``demo_workload_tick``). Nothing here
runs with DEBUG off, so demo passwords never reach a production database."""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.utils import timezone

from billing.models import Capacity, PriceRate
from catalogue.models import GpuModel
from core.errors import DomainError
from scheduler.models import BackendKind, Cluster, Job, Node
from scheduler.services import JobRequest, job_submit
from scheduler.states import LIVE_STATES
from tenants.models import Membership, PriorityClass, Quota, Role, Team, TeamEntitlements

from .history import seed_history

log = logging.getLogger(__name__)

DEMO_PASSWORD = "demo"


def _seed_prices(h100: GpuModel, a100: GpuModel) -> None:
    """A demo price book from the start of the year, so the cost pages show money at once. (The
    billing service refuses backdated rates, which protects real bills; the demo writes rows.)"""
    # From the start of last year, so the demo's invented past (up to two months) is priced.
    since = datetime(datetime.now(UTC).year - 1, 1, 1, tzinfo=UTC)
    for model, on_demand, spot in ((h100, "3.00", "1.20"), (a100, "1.80", "0.70")):
        for capacity, rate in ((Capacity.ON_DEMAND, on_demand), (Capacity.SPOT, spot)):
            PriceRate.objects.get_or_create(
                gpu_model=model,
                capacity=capacity,
                effective_from=since,
                defaults={"rate_per_gpu_hour": Decimal(rate), "note": "demo price book"},
            )


def default_history_days(now: datetime) -> int:
    """Days back to the first day of the previous month: last month's cost page is complete."""
    first_of_month = now.date().replace(day=1)
    previous = (first_of_month - timedelta(days=1)).replace(day=1)
    return (now.date() - previous).days + 1


def seed(*, jobs: int = 12, history_days: int = 0) -> bool:
    """Create the demo objects that are missing. On a cluster without jobs, first invent
    ``history_days`` of finished history (``demo_history``), then queue ``jobs`` live jobs.
    Returns True when anything new was queued."""
    h100, _ = GpuModel.objects.get_or_create(name="h100-80gb", defaults={"memory_gib": 80})
    a100, _ = GpuModel.objects.get_or_create(name="a100-40gb", defaults={"memory_gib": 40})

    # Production preempts the others and is not preemptible itself: restricted to the teams
    # granted it (the prod team below), as docs/tenancy.md recommends.
    for name, value, preemptible in (
        ("production", 1000, False),
        ("research", 500, True),
        ("best-effort", 100, True),
    ):
        PriorityClass.objects.get_or_create(
            name=name,
            defaults={
                "value": value,
                "preemptible_by_default": preemptible,
                "restricted": not preemptible,
            },
        )

    research, _ = Team.objects.get_or_create(slug="research", defaults={"name": "Research"})
    vision, _ = Team.objects.get_or_create(
        slug="vision", defaults={"name": "Vision", "parent": research, "fair_share_weight": 2.0}
    )
    nlp, _ = Team.objects.get_or_create(
        slug="nlp", defaults={"name": "NLP", "parent": research, "fair_share_weight": 1.0}
    )
    prod, _ = Team.objects.get_or_create(
        slug="prod", defaults={"name": "Production", "fair_share_weight": 1.0}
    )
    for team, model, guaranteed, borrow in (
        (vision, h100, 64, 32),
        (nlp, h100, 32, 32),
        (nlp, a100, 32, 32),
        (prod, h100, 32, 0),
        (prod, a100, 64, 0),
    ):
        Quota.objects.get_or_create(
            team=team,
            gpu_model=model,
            defaults={"guaranteed_gpus": guaranteed, "borrow_limit_gpus": borrow},
        )

    prod_settings, _ = TeamEntitlements.objects.get_or_create(
        team=prod, defaults={"may_opt_out_of_preemption": True}
    )
    prod_settings.priority_classes.add(*PriorityClass.objects.filter(restricted=True))

    cluster, _ = Cluster.objects.get_or_create(
        name="demo",
        defaults={
            "backend_kind": BackendKind.SIMULATED,
            # About one node failure every two minutes of demo time, so fault handling shows.
            "backend_config": {"seed": 7, "failure_rate_per_node_hour": 0.015, "repair_s": 40},
        },
    )
    # 32 nodes x 8 GPUs in 4 racks: racks 1-2 H100, racks 3-4 A100; the last node of each rack spot.
    for rack in range(1, 5):
        model = h100 if rack <= 2 else a100
        for n in range(1, 9):
            name = f"r{rack}-n{n:02d}"
            Node.objects.get_or_create(
                cluster=cluster,
                name=name,
                defaults={
                    "gpu_model": model,
                    "gpu_count": 8,
                    "zone": "z1",
                    "rack": f"r{rack}",
                    "nvlink_domain": name,
                    "fabric": f"ib{(rack + 1) // 2}",
                    "spot": n == 8,
                    "datasets": ["c4"] if n <= 4 else [],
                },
            )

    _seed_prices(h100, a100)

    User = get_user_model()
    # One hash for the three demo users (same known password): the hasher's deliberate cost,
    # paid three times, was the largest part of seeding after the history itself.
    demo_hash = None

    def set_demo_password(user: AbstractBaseUser) -> None:
        nonlocal demo_hash
        if demo_hash is None:
            demo_hash = make_password(DEMO_PASSWORD)
        user.password = demo_hash
        user.save()

    admin, created = User.objects.get_or_create(
        username="admin",
        defaults={"is_staff": True, "is_superuser": True, "email": "admin@example.com"},
    )
    if created:
        set_demo_password(admin)
    people = {}
    for username, team in (("alice", vision), ("bob", nlp)):
        # Addresses so the demo's notifications show (console email backend).
        user, created = User.objects.get_or_create(
            username=username, defaults={"email": f"{username}@example.com"}
        )
        if created:
            set_demo_password(user)
        Membership.objects.get_or_create(user=user, team=team, defaults={"role": Role.MEMBER})
        people[username] = user
    Membership.objects.get_or_create(user=admin, team=prod, defaults={"role": Role.OWNER})

    if cluster.jobs.exists() or vision.jobs.exists():
        return False
    if history_days > 0:
        seed_history(
            cluster=cluster, people=people, admin=admin, now=timezone.now(), days=history_days
        )
    if jobs <= 0:
        return history_days > 0

    rng = random.Random(42)
    for i in range(jobs):
        submit_demo_job(rng, people, number=i + 1)
    return True


DEMO_TEAMS = (("alice", "vision"), ("bob", "nlp"))


def submit_demo_job(rng: random.Random, people: dict[str, User], *, number: int) -> Job:
    """One plausible training job of a demo user: a mix of single-GPU runs and gangs, models,
    priorities and lengths (2-8 simulated hours, minutes of demo time), checkpointing every 30
    minutes of work."""
    username, team = DEMO_TEAMS[number % 2]
    workers = rng.choice([1, 1, 1, 2, 4])
    return job_submit(
        user=people[username],
        request=JobRequest(
            name=f"{team}-train-{number:02d}",
            team=team,
            workers=workers,
            gpus_per_worker=rng.choice([1, 2, 4, 8]) if workers == 1 else 8,
            image="nvcr.io/nvidia/pytorch:24.05-py3",
            command="python train.py",
            gpu_model=rng.choice(["h100-80gb", "a100-40gb", None]),
            priority_class=rng.choice(["research", "research", "best-effort"]),
            checkpoint_interval_s=1800,
            runtime_limit_s=rng.choice([14400, 28800, 43200]),
            simulated_duration_s=rng.choice([7200, 14400, 21600, 28800]),
        ),
    )


def demo_workload_tick(*, target_live: int = 16) -> int:
    """Keep the demo cluster busy: submit jobs for the demo users until ``target_live`` jobs are
    pending or running. Does nothing outside DEBUG or before the demo is seeded. A submission the
    platform refuses (its user removed from the team, a hard budget reached) is logged and
    skipped. Returns how many jobs it submitted."""
    if not settings.DEBUG:
        return 0
    User = get_user_model()
    people = {u.username: u for u in User.objects.filter(username__in=["alice", "bob"])}
    if len(people) < 2:
        return 0
    live = Job.objects.filter(state__in=list(LIVE_STATES)).count()
    rng = random.Random()
    submitted = 0
    first = Job.objects.count() + 1
    for number in range(first, first + min(3, max(0, target_live - live))):
        try:
            submit_demo_job(rng, people, number=number)
        except DomainError as exc:
            # The demo's people and teams are the admin's to change (a member removed, a hard
            # budget reached): a refusal is the demo user's, and the other user goes on.
            username, team = DEMO_TEAMS[number % 2]
            log.warning("demo workload: %s's job for %s refused: %s", username, team, exc)
            continue
        submitted += 1
    return submitted
