"""A cluster's settings that say where its runs live (the backend kind, ``run_namespace``, a
Slurm ``partition``, a Kubernetes ``namespace``, ...) are refused while any of its jobs holds or
is starting GPUs (``scheduler.backend_settings``). Saved anyway, the next poll looked for each run
where it is not, took it for lost and requeued the job, while the old run kept its GPUs on the
cluster with nothing left to find and stop it. Posted to Django admin's real pages, where
clusters are configured, and through the service an API would call (a 409)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from core.errors import Conflict
from scheduler.backend_settings import cluster_backend_change_check, run_locating_changes
from scheduler.backends import get_backend
from scheduler.backends.base import BackendUnavailable
from scheduler.loop.cycle import run_cycle
from scheduler.loop.stale_runs import cancel_stale_runs
from scheduler.models import Cluster, Job
from scheduler.states import JobState
from scheduler.transitions import job_requeue
from tenants.models import AuditEntry

from .test_django_admin_clusters import _cluster_post

pytestmark = pytest.mark.django_db


def start_job(platform, submit) -> Job:
    job_id = submit(
        platform["alice"], team="vision", gpu_model="h100-80gb", simulated_duration_s=100_000
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING and job.backend_ref and job.attempts == 1
    return job


def _change(client, cluster, kind, config):
    return client.post(
        f"/admin/scheduler/cluster/{cluster.pk}/change/", _cluster_post("test", kind, config)
    )


def test_a_run_namespace_change_is_refused_while_a_job_runs_and_the_run_is_polled_as_before(
    platform, submit, client
):
    """Before the refusal the change was saved, and the next cycle polled the run under its new
    name: UNKNOWN, so the job was requeued as attempt 2 beside attempt 1, still running."""
    job = start_job(platform, submit)
    client.force_login(platform["admin"])
    audited = AuditEntry.objects.count()

    response = _change(client, platform["cluster"], "simulated", {"seed": 1, "run_namespace": "x-"})

    assert response.status_code == 200
    (error,) = response.context["adminform"].form.errors["backend_config"]
    assert "run_namespace cannot change while 1 job holds or is starting GPUs" in error
    assert "Drain the cluster's nodes or retire the cluster" in error
    cluster = Cluster.objects.get(pk=platform["cluster"].pk)
    assert cluster.backend_config == {"seed": 1}
    assert AuditEntry.objects.count() == audited
    run_cycle()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempts == 1


def test_a_backend_kind_change_is_refused_on_backend_kind(platform, submit, client):
    start_job(platform, submit)
    client.force_login(platform["admin"])

    response = _change(client, platform["cluster"], "slurm", {"dry_run": True})

    assert response.status_code == 200
    (error,) = response.context["adminform"].form.errors["backend_kind"]
    assert "the backend kind cannot change while 1 job holds" in error
    assert Cluster.objects.get(pk=platform["cluster"].pk).backend_kind == "simulated"


def test_other_settings_change_while_jobs_run(platform, submit, client):
    job = start_job(platform, submit)
    client.force_login(platform["admin"])

    response = _change(client, platform["cluster"], "simulated", {"seed": 1, "repair_s": 30})

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Cluster.objects.get(pk=platform["cluster"].pk).backend_config["repair_s"] == 30
    run_cycle()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.attempts == 1


def test_where_runs_live_changes_once_no_job_holds_gpus(platform, submit, client):
    job = start_job(platform, submit)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    # A pending job holds nothing: it is started under whatever the settings are then.
    submit(platform["alice"], team="vision", gpu_model="h100-80gb", workers=9, gpus_per_worker=8)
    client.force_login(platform["admin"])

    response = _change(client, platform["cluster"], "simulated", {"seed": 1, "run_namespace": "x-"})

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Cluster.objects.get(pk=platform["cluster"].pk).backend_config["run_namespace"] == "x-"


def test_the_service_refuses_with_a_conflict_naming_settings_and_jobs(platform, submit):
    start_job(platform, submit)
    start_job(platform, submit)
    cluster = platform["cluster"]

    with pytest.raises(Conflict) as refused:
        cluster_backend_change_check(
            cluster=cluster, backend_kind="simulated", backend_config={"run_namespace": "x-"}
        )

    assert refused.value.status_code == 409
    assert refused.value.field == "backend_config"
    assert refused.value.message.startswith(
        "run_namespace cannot change while 2 jobs hold or are starting GPUs on cluster test"
    )
    # Unchanged settings, or others, pass.
    cluster_backend_change_check(cluster=cluster, backend_kind="simulated", backend_config={})
    cluster_backend_change_check(
        cluster=cluster, backend_kind="simulated", backend_config={"seed": 2}
    )


def test_a_requeued_jobs_run_still_being_stopped_counts_until_the_sweep_stops_it(
    platform, submit, client
):
    """A job the platform requeued (a node it lost, a preemption, a run the cluster kept
    waiting) is pending, but its old run lives on the cluster until a cancel reaches it: after
    commit, or, when that is lost, by the next sync's stale-run sweep. The check counted only
    jobs holding GPUs, so the change was saved, and the sweep then looked for the old run where
    it is not: it kept its GPUs with nothing left that finds or stops it. Now a pending job
    whose run the cluster still runs counts, until the sweep has stopped it."""
    cluster = platform["cluster"]
    job = start_job(platform, submit)
    assert job_requeue(job=job, now=timezone.now(), reason="test: the platform lost the node")
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    moved = {"seed": 1, "run_namespace": "x-"}

    with pytest.raises(Conflict) as refused:
        cluster_backend_change_check(
            cluster=cluster, backend_kind="simulated", backend_config=moved
        )

    assert refused.value.status_code == 409
    assert refused.value.field == "backend_config"
    assert refused.value.message.startswith(
        "run_namespace cannot change while 1 job's earlier run is still being stopped on "
        "cluster test: "
    )
    client.force_login(platform["admin"])
    response = _change(client, cluster, "simulated", moved)
    assert response.status_code == 200
    (error,) = response.context["adminform"].form.errors["backend_config"]
    assert "1 job's earlier run is still being stopped" in error
    assert Cluster.objects.get(pk=cluster.pk).backend_config == {"seed": 1}

    # The sweep stops the old run; then nothing of the cluster lives under the old settings.
    assert cancel_stale_runs(cluster=cluster, backend=get_backend(cluster), now=timezone.now())
    cluster_backend_change_check(cluster=cluster, backend_kind="simulated", backend_config=moved)
    response = _change(client, cluster, "simulated", moved)
    assert response.status_code == 302, response.context["adminform"].form.errors


def test_running_jobs_and_runs_still_being_stopped_are_both_named(platform, submit):
    start_job(platform, submit)
    requeued = start_job(platform, submit)
    assert job_requeue(job=requeued, now=timezone.now(), reason="test: lost")

    with pytest.raises(Conflict) as refused:
        cluster_backend_change_check(
            cluster=platform["cluster"],
            backend_kind="simulated",
            backend_config={"run_namespace": "x-"},
        )

    assert refused.value.message.startswith(
        "run_namespace cannot change while 1 job holds or is starting GPUs and 1 job's "
        "earlier run is still being stopped on cluster test: "
    )


def test_a_cluster_that_cannot_say_whether_an_earlier_run_lives_refuses(
    platform, submit, monkeypatch
):
    """With a requeued job of the cluster, the cluster is asked whether its old run lives; an
    outage is no answer, so the change waits for one rather than risk losing the run. With a
    job holding GPUs as well, the refusal says so, whatever the cluster answers."""
    cluster = platform["cluster"]
    holding = start_job(platform, submit)
    requeued = start_job(platform, submit)
    assert job_requeue(job=requeued, now=timezone.now(), reason="test: lost")
    backend = get_backend(cluster)

    def unreachable(*args, **kwargs):
        raise BackendUnavailable("cluster unreachable")

    monkeypatch.setattr(backend, "live_runs", unreachable)

    def refusal() -> str:
        with pytest.raises(Conflict) as refused:
            cluster_backend_change_check(
                cluster=cluster, backend_kind="simulated", backend_config={"run_namespace": "x-"}
            )
        return refused.value.message

    assert refusal().startswith(
        "run_namespace cannot change while 1 job holds or is starting GPUs on cluster test: "
    )
    Job.objects.filter(pk=holding.pk).update(state=JobState.SUCCEEDED)
    assert refusal().startswith(
        "run_namespace cannot change while cluster test cannot say whether the earlier runs "
        "of its 1 requeued job still live (cluster unreachable)"
    )


@pytest.mark.parametrize(
    "kind,old,new,changed",
    [
        ("slurm", {"partition": "gpu"}, {"partition": "a100"}, ["partition"]),
        ("slurm", {}, {"partition": "a100"}, ["partition"]),
        ("slurm", {"partition": ""}, {}, []),
        ("slurm", {}, {"command_prefix": ["chroot", "/srv/root"]}, ["command_prefix"]),
        ("slurm", {}, {"slurm_conf": "/etc/other/slurm.conf"}, ["slurm_conf"]),
        ("slurm", {}, {"job_workdir": "/scratch", "log_dir": "/logs"}, ["job_workdir", "log_dir"]),
        ("slurm", {}, {"team_accounts": {"vision": "gp-vision"}}, []),
        ("slurm", {}, {"tries": 5, "account": "ml", "dry_run": True}, []),
        ("kubernetes", {}, {"namespace": "other"}, ["namespace"]),
        ("kubernetes", {}, {"context": "prod", "host": "https://k8s:6443"}, ["context", "host"]),
        ("kubernetes", {}, {"kubeconfig": "/k", "in_cluster": True}, ["in_cluster", "kubeconfig"]),
        ("kubernetes", {}, {"shm_size": "32Gi"}, []),
        ("simulated", {"seed": 1}, {"seed": 2, "run_namespace": "x-"}, ["run_namespace"]),
    ],
)
def test_the_settings_that_say_where_runs_live(kind, old, new, changed):
    assert run_locating_changes(kind, old, kind, new) == changed


def test_a_new_kind_changes_where_every_run_lives():
    assert run_locating_changes("simulated", {}, "slurm", {}) == ["backend_kind"]


def _other_session():
    """A second database session, as a worker running the loop has."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


@pytest.mark.django_db(transaction=True)
def test_a_change_holds_the_loop_off_until_it_is_saved(platform, monkeypatch):
    """Checked with no job running, a cycle could still start one under the old settings
    before the save: the check keeps the loop's lock until its transaction ends, and waits
    for (then refuses past) a cycle that is running."""
    from django.db import transaction

    from scheduler import backend_settings
    from scheduler.locks import ADVISORY_KEY

    cluster = platform["cluster"]
    with _other_session() as worker:
        with transaction.atomic():
            cluster_backend_change_check(
                cluster=cluster, backend_kind="simulated", backend_config={"run_namespace": "x-"}
            )
            held = worker.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_KEY]).fetchone()
            assert held == (False,)
        assert worker.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_KEY]).fetchone() == (
            True,
        )
        # Now the worker's cycle holds it, past the wait.
        monkeypatch.setattr(backend_settings, "CYCLE_WAIT_S", 1)
        refused = pytest.raises(Conflict, match="a scheduling cycle has been running for over 1 s")
        with refused, transaction.atomic():
            cluster_backend_change_check(
                cluster=cluster, backend_kind="simulated", backend_config={"run_namespace": "x-"}
            )
