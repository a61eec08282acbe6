"""The layout change of issue 22 upgrades a database with data in it and loses nothing.

The database is put back at the schema main had before the change (scheduler 0007, tenants 0005,
billing 0002, no catalogue app), filled through that schema's own models, and migrated forward to
today's leaves. Then every row is still there with the same ids and values: GPU models (now
``catalogue.GpuModel``, still table ``scheduler_gpumodel``), the quotas, quota requests, price
rates, nodes and jobs pointing at them, a job's run and loss figures under their new names,
telemetry's rows (an app moved out of ``scheduler/`` with its label kept), and the GPU model's
content type and permissions, moved to the catalogue app with their ids. The database still
refuses to delete a GPU model in use (the foreign keys kept their constraints).

Runs on PostgreSQL when DATABASE_URL points there (CI), on SQLite otherwise.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [
    ("contenttypes", "0002_remove_content_type_name"),
    ("auth", "0012_alter_user_first_name_max_length"),
    ("scheduler", "0007_bounded_numbers"),
    ("tenants", "0005_team_entitlements"),
    ("billing", "0002_bounded_numbers"),
    ("telemetry", "0001_initial"),
    ("catalogue", None),
]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    # (app, None) means "none of the app's migrations": there is no state node to ask for.
    return executor.loader.project_state([t for t in targets if t[1] is not None]).apps


def _latest():
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


def _fill(apps) -> dict:
    """Rows of every kind the change touches, through the old schema's models."""
    now = timezone.now()
    User = apps.get_model("auth", "User")
    user = User.objects.create(username="upgrader")
    GpuModel = apps.get_model("scheduler", "GpuModel")
    h100 = GpuModel.objects.create(name="h100-80gb", memory_gib=80)
    a100 = GpuModel.objects.create(name="a100-40gb", memory_gib=40)
    team = apps.get_model("tenants", "Team").objects.create(slug="vision", name="Vision")
    pc = apps.get_model("tenants", "PriorityClass").objects.create(name="research", value=500)
    quota = apps.get_model("tenants", "Quota").objects.create(
        team=team, gpu_model=h100, guaranteed_gpus=16, borrow_limit_gpus=8
    )
    request = apps.get_model("tenants", "QuotaRequest").objects.create(
        team=team,
        gpu_model=a100,
        requested_by=user,
        guaranteed_gpus=4,
        borrow_limit_gpus=0,
        reason="more",
        created_at=now,
    )
    cluster = apps.get_model("scheduler", "Cluster").objects.create(name="c1")
    node = apps.get_model("scheduler", "Node").objects.create(
        cluster=cluster, name="n1", gpu_model=h100, gpu_count=8
    )
    job = apps.get_model("scheduler", "Job").objects.create(
        name="resumed",
        team=team,
        submitter=user,
        priority_class=pc,
        gpu_model=h100,
        workers=2,
        gpus_per_worker=8,
        submitted_at=now,
        attained_service_s=1234.5,
        lost_gpu_s=678.25,
        attempts=2,
        requeued=True,
    )
    rate = apps.get_model("billing", "PriceRate").objects.create(
        gpu_model=h100,
        capacity="on_demand",
        effective_from=now - dt.timedelta(days=1),
        rate_per_gpu_hour=Decimal("3.0000"),
        created_at=now,
    )
    token = apps.get_model("telemetry", "NodeAgentToken").objects.create(
        node=node, key_hash="f" * 64, key_prefix="gpn_ffff", created_at=now
    )
    ContentType = apps.get_model("contenttypes", "ContentType")
    content_type, _ = ContentType.objects.get_or_create(app_label="scheduler", model="gpumodel")
    permission = apps.get_model("auth", "Permission").objects.create(
        content_type=content_type, codename="change_gpumodel_upgrade", name="upgrade test"
    )
    return {
        "h100": h100.pk,
        "a100": a100.pk,
        "quota": quota.pk,
        "request": request.pk,
        "node": node.pk,
        "job": job.pk,
        "rate": rate.pk,
        "token": token.pk,
        "content_type": content_type.pk,
        "permission": permission.pk,
    }


def test_todays_schema_with_data_upgrades_to_the_new_layout_with_nothing_lost():
    apps = _migrate(BEFORE)
    ids = _fill(apps)
    try:
        apps = _migrate(_latest())
        GpuModel = apps.get_model("catalogue", "GpuModel")
        assert GpuModel._meta.db_table == "scheduler_gpumodel"
        assert {(m.pk, m.name, m.memory_gib) for m in GpuModel.objects.all()} == {
            (ids["h100"], "h100-80gb", 80),
            (ids["a100"], "a100-40gb", 40),
        }
        quota = apps.get_model("tenants", "Quota").objects.get(pk=ids["quota"])
        assert (quota.gpu_model.name, quota.guaranteed_gpus, quota.borrow_limit_gpus) == (
            "h100-80gb",
            16,
            8,
        )
        request = apps.get_model("tenants", "QuotaRequest").objects.get(pk=ids["request"])
        assert request.gpu_model.name == "a100-40gb"
        node = apps.get_model("scheduler", "Node").objects.get(pk=ids["node"])
        assert node.gpu_model_id == ids["h100"]
        job = apps.get_model("scheduler", "Job").objects.get(pk=ids["job"])
        assert job.gpu_model_id == ids["h100"]
        assert (job.earlier_runs_s, job.lost_gpu_seconds) == (1234.5, 678.25)
        assert (job.attempts, job.requeued) == (2, True)
        rate = apps.get_model("billing", "PriceRate").objects.get(pk=ids["rate"])
        assert (rate.gpu_model_id, rate.rate_per_gpu_hour) == (ids["h100"], Decimal("3.0000"))
        token = apps.get_model("telemetry", "NodeAgentToken").objects.get(pk=ids["token"])
        assert (token.node_id, token.key_prefix) == (ids["node"], "gpn_ffff")
        content_type = apps.get_model("contenttypes", "ContentType").objects.get(
            pk=ids["content_type"]
        )
        assert (content_type.app_label, content_type.model) == ("catalogue", "gpumodel")
        permission = apps.get_model("auth", "Permission").objects.get(pk=ids["permission"])
        assert permission.content_type_id == ids["content_type"]
        # The foreign keys to the moved model are still constraints in the database.
        with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM scheduler_gpumodel WHERE id = %s", [ids["h100"]])
        # And the move runs backwards too (a rollback of the release).
        apps = _migrate(BEFORE)
        old = apps.get_model("scheduler", "GpuModel").objects.get(pk=ids["h100"])
        assert old.name == "h100-80gb"
        assert apps.get_model("scheduler", "Job").objects.get(pk=ids["job"]).lost_gpu_s == 678.25
        assert (
            apps.get_model("contenttypes", "ContentType").objects.get(pk=ids["content_type"])
        ).app_label == "scheduler"
    finally:
        _migrate(_latest())
