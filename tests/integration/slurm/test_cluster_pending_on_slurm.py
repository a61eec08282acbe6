"""A platform run that the real Slurm keeps PENDING: a maintenance reservation that starts in ten
minutes, on the node the engine chose, which the run's one-hour time limit reaches into (Slurm:
``ReqNodeNotAvail, May be reserved for other job`` on 22.05 and 24.11).

Before, the loop ignored a pending run: the job showed as running and its GPUs were billed for as
long as Slurm kept it waiting. Now the job gets one ``held_pending`` event with Slurm's reason; past
the grace its Slurm job is cancelled, the job goes back to the queue without an interruption, lost
work or a cent billed, and the engine places it on another node, where it runs.
"""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from billing.meter import meter_run
from billing.models import UsageRecord
from scheduler.backends import backend_run_id
from scheduler.loop.cycle import run_cycle
from scheduler.models import Job, Node
from scheduler.policy import decide
from scheduler.snapshot import build_snapshot
from scheduler.states import JobState

from .conftest import wait_for
from .test_platform_on_slurm import slurm_state

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slurm_versions("24.11", "26.05", "22.05"),
    pytest.mark.django_db,
]


def test_a_run_slurm_keeps_pending_is_requeued_unbilled_and_runs_elsewhere(
    slurm_platform, submit, alice, settings
):
    settings.SCHEDULER_BACKEND_PENDING_GRACE_SECONDS = 6
    slurm, cluster = slurm_platform["slurm"], slurm_platform["cluster"]
    gpu_model = Node.objects.filter(cluster=cluster).first().gpu_model.name
    job_id = submit(
        alice,
        name="long",
        gpus_per_worker=1,
        gpu_model=gpu_model,
        runtime_limit_s=3600,
        command="exec sleep 300",
    ).json()["id"]
    # Where the engine will put it (the same snapshot gives the same decision): a future
    # reservation is not a cluster hold, so making it there changes nothing in the platform.
    snapshot, index = build_snapshot(now=timezone.now())
    (start,) = [s for s in decide(snapshot).start if index.job_pk[s.job] == job_id]
    (chosen,) = start.placement
    name = f"maint-{uuid.uuid4().hex[:6]}"
    slurm.run(
        "scontrol", "create", "reservation", f"reservationname={name}",
        "starttime=now+10minutes", "duration=60", f"nodes={chosen}", "flags=maint", "users=root",
    )  # fmt: skip
    try:
        run_cycle()
        job = Job.objects.get(pk=job_id)
        assert job.state == JobState.RUNNING and job.attempts == 1 and job.backend_ref
        assert {a.node.name for a in job.allocations.all()} == {chosen}
        first = f"gp-{backend_run_id(job)}-a1"

        def held():
            run_cycle()
            return Job.objects.get(pk=job_id).events.filter(kind="held_pending").first()

        event = wait_for(held, 30, "the platform to see the run held pending", every=1.0)
        assert event.message.startswith("held pending on the cluster: ReqNodeNotAvail"), (
            event.message
        )
        assert slurm_state(slurm, first) == "PENDING"
        job.refresh_from_db()
        assert job.state == JobState.RUNNING and job.cluster_pending_since is not None
        # The meter bills the live allocation meanwhile, as it does every minute.
        meter_run()
        assert UsageRecord.objects.filter(job_id=job_id, attempt=1).exists()

        def elsewhere():
            run_cycle()
            return Job.objects.get(pk=job_id).attempts == 2

        wait_for(elsewhere, 60, "the job to be requeued and placed again", every=1.0)
        job.refresh_from_db()
        assert job.state == JobState.RUNNING
        second = {a.node.name for a in job.allocations.filter(attempt=2)}
        assert second and chosen not in second
        requeue = job.events.get(kind="requeued")
        assert requeue.data["never_ran"] is True and requeue.data["lost_gpu_s"] == 0.0
        assert "ReqNodeNotAvail" in requeue.message and "nothing billed" in requeue.message
        assert job.events.filter(kind="held_pending").count() == 1
        # Not an interruption: no lost work, no run time, the limit does not count it.
        assert (job.lost_gpu_seconds, job.earlier_runs_s, job.unstarted_attempts) == (0, 0, 1)
        assert not job.events.filter(kind__in=["preempted", "failed"]).exists()
        # Attempt 1's GPUs held nothing: ended where they began; the meter drops its rows.
        assert all(a.ended_at == a.started_at for a in job.allocations.filter(attempt=1))
        meter_run()
        assert not UsageRecord.objects.filter(job_id=job_id, attempt=1).exists()
        assert Node.objects.get(cluster=cluster, name=chosen).avoid_until > timezone.now()
        # Slurm: attempt 1 cancelled, attempt 2 runs.
        wait_for(lambda: slurm_state(slurm, first) == "CANCELLED", 20, "attempt 1 cancelled")
        run_cycle()
        wait_for(
            lambda: slurm_state(slurm, f"gp-{backend_run_id(job)}-a2") == "RUNNING",
            30,
            "attempt 2 to run in Slurm",
        )
        run_cycle()
        job.refresh_from_db()
        assert job.state == JobState.RUNNING and job.cluster_pending_since is None
    finally:
        slurm.run("scontrol", "delete", f"reservation={name}", check=False)
