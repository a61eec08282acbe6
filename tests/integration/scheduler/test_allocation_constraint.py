"""The database itself refuses a GPU held by two live allocations (SQLite and PostgreSQL)."""

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduler.models import Allocation, Job, Node

pytestmark = [pytest.mark.engines, pytest.mark.django_db]


def _job(alice, teams, priorities, name="j"):
    return Job.objects.create(
        team=teams["vision"],
        submitter=alice,
        name=name,
        workers=1,
        gpus_per_worker=1,
        priority_class=priorities["research"],
        submitted_at=timezone.now(),
    )


def test_second_live_allocation_of_a_gpu_is_rejected(cluster, alice, teams, priorities):
    node = Node.objects.get(name="n1")
    first, second = _job(alice, teams, priorities, "a"), _job(alice, teams, priorities, "b")
    Allocation.objects.create(job=first, node=node, gpu_index=3, started_at=timezone.now())
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(job=second, node=node, gpu_index=3, started_at=timezone.now())
    assert Allocation.objects.filter(node=node, gpu_index=3).count() == 1


def test_gpu_is_reusable_once_the_allocation_ended(cluster, alice, teams, priorities):
    node = Node.objects.get(name="n1")
    first, second = _job(alice, teams, priorities, "a"), _job(alice, teams, priorities, "b")
    held = Allocation.objects.create(job=first, node=node, gpu_index=3, started_at=timezone.now())
    held.ended_at = timezone.now()
    held.save()
    Allocation.objects.create(job=second, node=node, gpu_index=3, started_at=timezone.now())
    assert Allocation.objects.filter(node=node, gpu_index=3, ended_at__isnull=True).count() == 1


def test_same_index_on_another_node_is_fine(cluster, alice, teams, priorities):
    job = _job(alice, teams, priorities)
    for node in Node.objects.filter(name__in=["n1", "n2"]):
        Allocation.objects.create(job=job, node=node, gpu_index=0, started_at=timezone.now())
    assert Allocation.objects.filter(gpu_index=0, ended_at__isnull=True).count() == 2
