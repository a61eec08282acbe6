"""Migration 0005: requeues stored attained service as GPU-seconds, which the engine multiplied
by the job's GPUs again; existing rows become seconds."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("scheduler", "0004_job_arrays")]
AFTER = [("scheduler", "0005_attained_service_in_seconds")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_existing_gpu_seconds_become_seconds_and_back():
    apps = _migrate(BEFORE)
    team = apps.get_model("tenants", "Team").objects.create(slug="t", name="T")
    pc = apps.get_model("tenants", "PriorityClass").objects.create(name="research", value=500)
    user = apps.get_model("auth", "User").objects.create(username="u")
    job_model = apps.get_model("scheduler", "Job")
    common = {
        "team": team,
        "submitter": user,
        "priority_class": pc,
        "submitted_at": timezone.now(),
        "name": "j",
    }
    gang = job_model.objects.create(
        workers=2, gpus_per_worker=8, attained_service_s=16_000.0, **common
    )
    fresh = job_model.objects.create(workers=1, gpus_per_worker=4, attained_service_s=0.0, **common)
    try:
        apps = _migrate(AFTER)
        job_model = apps.get_model("scheduler", "Job")
        assert job_model.objects.get(pk=gang.pk).attained_service_s == 1_000.0
        assert job_model.objects.get(pk=fresh.pk).attained_service_s == 0.0
        apps = _migrate(BEFORE)
        job_model = apps.get_model("scheduler", "Job")
        assert job_model.objects.get(pk=gang.pk).attained_service_s == 16_000.0
    finally:
        # Back to the latest schema (not to 0005: later migrations exist), for the tests after.
        executor = MigrationExecutor(connection)
        _migrate(executor.loader.graph.leaf_nodes())
