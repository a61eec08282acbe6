"""The enforce stage submits a cycle's started jobs as one batch (``scheduler.loop.submit_batch``):
their placements' nodes, checkpoint advice and attempt records read and written once for all. A
run must get what it got when each was read alone: the same checkpoint advice in its environment
(its pool, its own or its team's checkpoint cost) and the same attempt record; and one record
the database refuses must not cost the other runs theirs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from scheduler import checkpoint_advice
from scheduler.backends import get_backend
from scheduler.checkpoint_advice import ENV_NAME
from scheduler.loop.cycle import run_cycle
from scheduler.loop.enforce import job_spec, reconcile
from scheduler.models import Allocation, AttemptRecord, Job, Node
from scheduler.reproducibility import attempt_provenance, record_build
from scheduler.selectors import job_placement
from scheduler.transitions import event_record, job_requeue
from tests.integration.concurrency import require_postgresql

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("fast_simulation", "jobs_outlive_the_test"),
]


@pytest.fixture(autouse=True)
def _fresh_rates():
    cache.delete(checkpoint_advice._CACHE_KEY)
    yield
    cache.delete(checkpoint_advice._CACHE_KEY)


def _started(platform, submit, user="alice", **fields) -> Job:
    response = submit(platform[user], **fields)
    assert response.status_code == 201, response.json()
    return Job.objects.get(pk=response.json()["id"])


def _interrupted_history(platform, submit) -> None:
    """A vision job that ran 30 h on H100 on-demand and was requeued once, so every pool has an
    interruption rate (the team's, or the platform's) and every run gets advice."""
    now = timezone.now()
    job = _started(platform, submit, name="history", gpu_model="h100-80gb")
    run_cycle()
    Allocation.objects.filter(job=job, ended_at__isnull=True).update(
        started_at=now - timedelta(hours=30)
    )
    Job.objects.filter(pk=job.pk).update(started_at=now - timedelta(hours=30))
    assert job_requeue(job=Job.objects.get(pk=job.pk), now=now, reason="node failure (test)")
    run_cycle()


def _checkpoints(job: Job, *costs_s: int) -> None:
    """Checkpoint requests and their reports, ``costs_s`` apart: the job's measured cost."""
    now = timezone.now()
    for i, cost in enumerate(costs_s):
        asked = now - timedelta(hours=1 + i)
        event_record(job=job, kind="checkpoint_requested", time=asked)
        event_record(job=job, kind="checkpoint", time=asked + timedelta(seconds=cost))


def _resubmitted_as_after_a_crash(ids: list[int]) -> None:
    # Running, no run reference, no record: as when the worker died between the apply's commit
    # and the backend call (the runs exist on the simulated cluster; its submit is idempotent).
    Job.objects.filter(pk__in=ids).update(backend_ref="")
    AttemptRecord.objects.filter(job_id__in=ids).delete()


def test_each_run_gets_the_advice_and_record_it_got_when_read_alone(platform, submit):
    _interrupted_history(platform, submit)
    Node.objects.filter(name="n3").update(spot=True)  # an A100 pool on spot capacity
    own = _started(platform, submit, name="own", gpu_model="h100-80gb", checkpoint_interval_s=600)
    other = _started(platform, submit, name="other", gpu_model="h100-80gb")
    team = _started(platform, submit, name="team", gpu_model="a100-40gb", gpus_per_worker=2)
    gang = _started(
        platform, submit, name="gang", gpu_model="a100-40gb", workers=2, gpus_per_worker=6
    )
    nlp = _started(platform, submit, user="bob", team="nlp", name="nlp", gpu_model="h100-80gb")
    chosen = _started(platform, submit, name="chosen", gpu_model="h100-80gb", env={ENV_NAME: "7"})
    run_cycle()
    jobs = [own, other, team, gang, nlp, chosen]
    ids = [job.pk for job in jobs]
    states = {j.name: (j.state, j.why_pending) for j in Job.objects.filter(pk__in=ids)}
    assert {state for state, _ in states.values()} == {"running"}, states
    gang_nodes = set(job_placement(Job.objects.get(pk=gang.pk)))
    assert gang_nodes == {"n3", "n4"}, gang_nodes  # a spot node and an on-demand one
    _checkpoints(own, 90)  # vision: own 90 s, other 150 s; the team's median 120 s
    _checkpoints(other, 150)
    cache.delete(checkpoint_advice._CACHE_KEY)  # the cycles cached the rates before the history
    _resubmitted_as_after_a_crash(ids)

    now = timezone.now()
    reconcile(now=now)

    batch = {r.job_id: r.record for r in AttemptRecord.objects.filter(job_id__in=ids)}
    assert set(batch) == set(ids)
    advised = {job_id: record["env"].get(ENV_NAME) for job_id, record in batch.items()}
    assert advised[chosen.pk] == "7"
    # Four checkpoint costs (90, 150, the team's 120, nlp's default 60 s): four intervals.
    assert len({advised[j.pk] for j in (own, other, team, nlp)}) == 4, advised
    for job in Job.objects.filter(pk__in=ids).select_related(
        "team", "cluster", "gpu_model", "priority_class", "submitter"
    ):
        assert job.backend_ref == f"gp-{job.pk}-a{job.attempts}"
        # The record built for this job alone: its advice, placement nodes and policy read
        # for it by the one-job paths (job_spec, record_build), stored as the batch's was.
        AttemptRecord.objects.filter(job=job).delete()
        spec = job_spec(job, job_placement(job))
        alone = AttemptRecord.objects.create(
            job=job,
            attempt=spec.attempt,
            recorded_at=now,
            record=record_build(
                job=job,
                spec=spec,
                provenance=attempt_provenance(job, spec, get_backend(job.cluster), job.backend_ref),
                now=now,
                account=job.backend_accounts[str(job.attempts)],
            ),
        )
        alone.refresh_from_db()
        assert batch[job.pk] == alone.record, job.name


def test_a_record_the_database_refuses_costs_the_other_runs_nothing(platform, submit):
    """PostgreSQL refuses a JSON number it cannot hold (an infinite duration: a row from before
    the bounds, which the cycle's guard would fail first; this reconcile runs alone, as after a
    crash). The batch's INSERT fails whole; each record is then written alone."""
    require_postgresql()
    bad = _started(platform, submit, name="bad")
    good = [_started(platform, submit, name=f"good-{i}") for i in range(2)]
    run_cycle()
    ids = [bad.pk] + [job.pk for job in good]
    _resubmitted_as_after_a_crash(ids)
    Job.objects.filter(pk=bad.pk).update(simulated_duration_s=float("inf"))

    reconcile(now=timezone.now())

    assert not AttemptRecord.objects.filter(job=bad).exists()
    assert set(AttemptRecord.objects.filter(job_id__in=ids).values_list("job_id", flat=True)) == {
        job.pk for job in good
    }
    # Every run the cluster accepted is the job's, the one without its record too.
    for job in Job.objects.filter(pk__in=ids):
        assert (job.state, job.backend_ref) == ("running", f"gp-{job.pk}-a1")
