"""The live loop on the simulated backend: submit → running → succeeded, idempotent apply,
node failure → requeue from checkpoint, quarantine after K failures, release after probation."""

import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.backends import get_backend, reset_backends
from scheduler.loop.apply import apply_decisions
from scheduler.loop.cycle import run_cycle
from scheduler.models import Allocation, Job, JobEvent, Node, NodeEvent
from scheduler.policy import decide
from scheduler.snapshot import build_snapshot
from scheduler.transitions import job_requeue

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_simulation(settings):
    settings.SIMULATED_TIME_SCALE = 3600.0  # one real second = one simulated hour
    settings.SCHEDULER_QUARANTINE_FAILURES = 2
    settings.SCHEDULER_PROBATION_SECONDS = 0.5
    reset_backends()
    yield
    reset_backends()


def advance(seconds: float):
    """Move the simulated cluster forward by ``seconds`` of real time (x SIMULATED_TIME_SCALE of
    simulated work) by shifting its runs and faults back in time."""
    from scheduler.models import SimulatedNodeFault, SimulatedRun

    delta = timedelta(seconds=seconds)
    for run in SimulatedRun.objects.all():
        run.started_at -= delta
        run.save(update_fields=["started_at"])
    for fault in SimulatedNodeFault.objects.all():
        fault.failed_at -= delta
        fault.repaired_at -= delta
        fault.save(update_fields=["failed_at", "repaired_at"])


def test_submitted_job_runs_and_succeeds(platform, submit):
    job_id = submit(
        platform["alice"],
        gpus_per_worker=4,
        gpu_model="h100-80gb",
        simulated_duration_s=None,
        runtime_limit_s=3600,
    ).json()["id"]
    result = run_cycle()
    assert result.ran and result.started == [job_id]
    job = Job.objects.get(pk=job_id)
    assert job.state == "running" and job.backend_ref == f"gp-{job_id}-a1"
    assert Allocation.objects.filter(job=job, ended_at__isnull=True).count() == 4
    assert {a.node.gpu_model.name for a in job.allocations.all()} == {"h100-80gb"}
    advance(1.0)  # one simulated hour; without simulated_duration_s a job does 30 minutes
    run_cycle()
    job.refresh_from_db()
    assert job.state == "succeeded" and job.exit_code == 0
    assert not Allocation.objects.filter(job=job, ended_at__isnull=True).exists()
    kinds = list(JobEvent.objects.filter(job=job).values_list("kind", flat=True))
    assert kinds[0] == "submitted" and "started" in kinds and kinds[-1] == "succeeded"


def test_applying_the_same_decisions_twice_changes_nothing(platform, submit):
    for i in range(3):
        submit(platform["alice"], name=f"j{i}", gpus_per_worker=8)
    snapshot, index = build_snapshot(now=timezone.now())
    decisions = decide(snapshot)
    assert len(decisions.start) == 3
    apply_decisions(decisions, index=index, now=timezone.now())
    before = (
        list(Allocation.objects.values_list("node_id", "gpu_index", "job_id")),
        list(Job.objects.values_list("id", "state", "attempts")),
    )
    second = apply_decisions(decisions, index=index, now=timezone.now())
    after = (
        list(Allocation.objects.values_list("node_id", "gpu_index", "job_id")),
        list(Job.objects.values_list("id", "state", "attempts")),
    )
    assert second.started == [] and before == after


def test_crash_between_commit_and_backend_is_healed_by_next_cycle(platform, submit):
    job_id = submit(platform["alice"], gpus_per_worker=2).json()["id"]
    snapshot, index = build_snapshot(now=timezone.now())
    apply_decisions(decide(snapshot), index=index, now=timezone.now())
    job = Job.objects.get(pk=job_id)
    assert job.state == "running" and job.backend_ref == ""  # the "worker died" here
    from scheduler.models import SimulatedRun

    assert not SimulatedRun.objects.exists()
    run_cycle()
    job.refresh_from_db()
    assert job.backend_ref == f"gp-{job_id}-a1"
    assert SimulatedRun.objects.filter(job_id=str(job_id), attempt=1).count() == 1


def test_node_failure_requeues_and_resumes_from_checkpoint(platform, submit, settings):
    settings.SIMULATED_TIME_SCALE = 60.0  # slow enough that the job outlives the test's cycles
    job_id = submit(
        platform["alice"],
        gpus_per_worker=8,
        gpu_model="h100-80gb",
        checkpoint_interval_s=600,
        simulated_duration_s=7200,
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    first_started = job.started_at
    first_node = job.allocations.get(gpu_index=0).node
    advance(1900 / 60)  # 3 checkpoints (600, 1200, 1800 s of work) written
    run_cycle()
    job.refresh_from_db()
    assert job.checkpointed_progress_s == pytest.approx(1800)
    get_backend(job.cluster).fail_node(first_node.name, repair_after_s=600)
    run_cycle()
    job.refresh_from_db()
    first_node.refresh_from_db()
    assert first_node.state == "down"
    assert NodeEvent.objects.filter(node=first_node, kind="failed").count() == 1
    # Requeued and restarted at once on the other H100 node, resuming from 1800 s of work.
    assert job.state == "running" and job.attempts == 2 and job.requeued
    assert job.allocations.filter(ended_at__isnull=True).first().node != first_node
    assert job.lost_gpu_seconds > 0
    from scheduler.models import SimulatedRun

    assert SimulatedRun.objects.get(job_id=str(job_id), attempt=2).resume_from_s == 1800
    requeued_at = JobEvent.objects.get(job=job, kind="requeued").time
    # Seconds of the first attempt, not GPU-seconds: the engine multiplies by the 8 GPUs itself.
    assert job.earlier_runs_s == pytest.approx((requeued_at - first_started).total_seconds())


def outage(backend, node) -> None:
    """The node fails (a cycle sees it down) and is repaired (a cycle sees it back); ``node`` is
    read again after each."""
    backend.fail_node(node.name, repair_after_s=0.2)
    run_cycle()
    node.refresh_from_db()
    assert node.state == "down"
    advance(0.3)
    run_cycle()
    node.refresh_from_db()


def test_a_release_made_in_another_process_is_no_cluster_hold(platform):
    """The loop's worker quarantined n3 (its backend drained it); an admin released it through
    the web process, whose backend object (another process's) made the undrain. A simulated
    node's drain lived in each process's object, so the worker's still said drained and its
    sync took that for a site admin's drain: a cluster hold nobody could lift."""
    from scheduler.services import node_release

    node = Node.objects.get(name="n3")
    worker = get_backend(node.cluster)
    worker.drain_node("n3", "quarantine")
    Node.objects.filter(pk=node.pk).update(state="quarantined", state_reason="repeated failures")
    # The admin's request: its undrain (after commit) goes to the web process's object, never
    # to this one, as here, where the test's transaction runs no commit callbacks.
    node_release(user=platform["admin"], node_id=node.pk)
    assert "n3" in worker.config["drained"]
    run_cycle()
    node.refresh_from_db()
    assert (node.state, node.cluster_hold) == ("ready", "")


def test_repeated_failures_quarantine_then_probation_releases(platform):
    node = Node.objects.get(name="n3")
    backend = get_backend(node.cluster)
    for _ in range(2):
        outage(backend, node)
    assert node.state == "quarantined" and node.probation_until is not None
    assert "n3" in backend.config["drained"]
    kinds = list(NodeEvent.objects.filter(node=node).order_by("id").values_list("kind", flat=True))
    assert kinds == ["failed", "recovered", "failed", "quarantined", "probation"]
    Node.objects.filter(pk=node.pk).update(probation_until=timezone.now() - timedelta(seconds=1))
    run_cycle()
    node.refresh_from_db()
    assert node.state == "ready" and "n3" not in backend.config["drained"]
    assert NodeEvent.objects.filter(node=node, kind="released").exists()


def test_cancel_of_running_job_frees_gpus_and_stops_the_run(
    platform, submit, api_as, django_capture_on_commit_callbacks
):
    job_id = submit(platform["alice"], gpus_per_worker=8).json()["id"]
    run_cycle()
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(platform["alice"]).post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 200
    assert not Allocation.objects.filter(job_id=job_id, ended_at__isnull=True).exists()
    from scheduler.models import SimulatedRun

    assert SimulatedRun.objects.get(job_id=str(job_id)).cancelled_at is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("through", ["job", "array"])
def test_a_cancel_racing_the_cycle_that_starts_the_job_stops_its_run(
    platform, submit, api_as, through
):
    """The member cancels a pending job (or its array) while a cycle starts it and submits its
    run. The job cancel read the job as pending, waited for the cycle's row lock, then cancelled
    the now running job; deciding from the pending row it had read, it never told the backend
    to stop the run. The array cancel locked the fresh row but took its cluster from the join
    read before the wait (none): stopping the run raised after commit and was only logged.
    Either way the run went on holding the GPUs the cancel had just freed, until the next
    sync's stale-run sweep. Both now stop the run after commit."""
    from scheduler.models import SimulatedRun
    from tests.integration.concurrency import race

    alice = api_as(platform["alice"])
    if through == "job":
        job_id = submit(platform["alice"], gpus_per_worker=8).json()["id"]
        url = f"/api/v1/jobs/{job_id}/cancel/"
    else:
        body = {
            "name": "sweep",
            "team": "vision",
            "template": {"workers": 1, "gpus_per_worker": 8},
            "count": 1,
        }
        array_id = alice.post("/api/v1/job-arrays/", body, format="json").json()["id"]
        job_id = Job.objects.get(array_id=array_id).pk
        url = f"/api/v1/job-arrays/{array_id}/cancel/"

    response = race(lambda: run_cycle(), lambda: alice.post(url))
    assert response.status_code == 200, response.content
    assert Job.objects.get(pk=job_id).state == "cancelled"
    assert not Allocation.objects.filter(job_id=job_id, ended_at__isnull=True).exists()
    assert SimulatedRun.objects.get(job_id=str(job_id)).cancelled_at is not None


def test_pending_job_gets_a_reason(platform, submit):
    # Both H100 nodes go to the first gang; the second waits for them.
    shape = {"workers": 2, "gpus_per_worker": 8, "gpu_model": "h100-80gb"}
    submit(platform["alice"], name="first", **shape)
    job_id = submit(platform["alice"], name="second", **shape).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job.state == "pending" and job.why_pending
    assert "waiting for the next" not in job.why_pending


def test_blocked_job_gets_a_reservation_and_an_estimated_start(platform, submit, api_as):
    big = submit(
        platform["alice"],
        name="big",
        workers=2,
        gpus_per_worker=8,
        gpu_model="h100-80gb",
        runtime_limit_s=3600,
        simulated_duration_s=360000,
    ).json()["id"]
    run_cycle()
    assert Job.objects.get(pk=big).state == "running"
    waiting = submit(
        platform["bob"],
        team="nlp",
        name="next",
        gpus_per_worker=8,
        gpu_model="h100-80gb",
        runtime_limit_s=600,
    ).json()["id"]
    run_cycle()
    job = Job.objects.get(pk=waiting)
    assert job.state == "pending" and job.estimated_start is not None
    expected = Job.objects.get(pk=big).started_at + timedelta(seconds=3600)
    assert abs((job.estimated_start - expected).total_seconds()) <= 60
    body = api_as(platform["bob"]).get(f"/api/v1/jobs/{waiting}/").json()
    assert body["estimated_start"] and body["why"]
    assert "UTC" in job.why_pending and "t=" not in job.why_pending, job.why_pending


def test_an_elastic_run_keeps_its_workers_and_a_requeued_one_asks_for_its_own(
    platform, submit, api_as
):
    # No backend changes a run's workers after submit, so the loop neither grows a running
    # elastic job into idle GPUs (its team would be billed for GPUs its run never got) nor
    # shrinks it for a blocked job (the GPUs would go to a job the cluster cannot start there).
    def elastic(model, workers):
        response = submit(
            platform["alice"],
            name=f"elastic-{model}",
            workers=workers,
            gpus_per_worker=8,
            gpu_model=model,
            elastic={"min_workers": 1, "max_workers": 2},
            simulated_duration_s=360000,
        )
        assert response.status_code == 201, response.json()
        return response.json()["id"]

    def live(job_id):
        rows = Allocation.objects.filter(job_id=job_id, ended_at__isnull=True)
        return set(rows.values_list("node", "gpu_index"))

    # one H100 worker, the other H100 node idle: no growth into it
    small = elastic("h100-80gb", 1)
    # both A100 nodes: no shrink for a production job that needs one of them
    big = elastic("a100-40gb", 2)
    run_cycle()
    started = {job_id: live(job_id) for job_id in (small, big)}
    assert [len(started[small]), len(started[big])] == [8, 16]
    snapshot, _ = build_snapshot(now=timezone.now())
    assert all(r.elastic is None for r in snapshot.running)
    response = submit(
        platform["bob"],
        team="nlp",
        name="next",
        gpus_per_worker=8,
        gpu_model="a100-40gb",
        priority_class="production",
    )
    assert response.status_code == 201, response.json()
    blocked = response.json()["id"]
    for _ in range(3):
        run_cycle()
    job = Job.objects.get(pk=small)
    assert job.state == "running" and job.workers == 1 and live(small) == started[small]
    # the production job takes an A100 node by preempting the elastic job whole, which the
    # cluster carries out: a new run of it with the one worker that fits
    job = Job.objects.get(pk=big)
    assert job.attempts == 2 and job.workers == 1 and len(live(big)) == 8
    assert Job.objects.get(pk=blocked).state == "running"
    assert not JobEvent.objects.filter(job_id__in=(small, big), kind="resized").exists()
    # once the A100 nodes are free again, its next run asks for the two workers it asked for
    assert api_as(platform["bob"]).post(f"/api/v1/jobs/{blocked}/cancel/").status_code == 200
    assert job_requeue(job=job, now=timezone.now(), reason="node failure")
    assert Job.objects.get(pk=big).workers == 2
    run_cycle()
    job = Job.objects.get(pk=big)
    assert job.state == "running" and job.attempts == 3 and len(live(big)) == 16


def test_snapshot_times_are_exactly_the_rows_timestamps(platform, submit):
    # PostgreSQL computes epoch seconds itself (snapshot._seconds_of); they must equal what
    # datetime.timestamp() gives for the same rows, to the last bit, or ordering ties could flip.
    ids = [
        submit(platform["alice"], name=f"t{i}", gpus_per_worker=8).json()["id"] for i in range(2)
    ]
    run_cycle()
    odd = timezone.now().replace(microsecond=123457) - timedelta(days=3, seconds=0.5)
    Job.objects.filter(pk=ids[0]).update(
        started_at=odd, last_checkpoint_at=odd + timedelta(microseconds=1)
    )
    submit(platform["alice"], name="waits", gpus_per_worker=8, workers=2)  # no cycle: pending
    snapshot, _ = build_snapshot(now=timezone.now())
    rows = {str(j.pk): j for j in Job.objects.all()}
    assert snapshot.running and snapshot.pending
    for r in snapshot.running:
        row = rows[r.id]
        assert r.started_at == row.started_at.timestamp()
        assert r.submitted_at == row.submitted_at.timestamp()
        expected_checkpoint = row.last_checkpoint_at.timestamp() if row.last_checkpoint_at else None
        assert r.last_checkpoint_at == expected_checkpoint
    assert any(r.started_at == odd.timestamp() for r in snapshot.running)
    for p in snapshot.pending:
        assert p.submitted_at == rows[p.id].submitted_at.timestamp()


@pytest.mark.parametrize("hold", ["drain", "quarantine"])
def test_a_node_an_admin_took_out_stays_out_through_an_outage(platform, hold):
    """An admin drains (or quarantines) a node for maintenance; it then goes down. The loop's
    DOWN replaced the admin's state, and when the node came back it was ready (or, after enough
    failures, quarantined on a probation the loop ends): new jobs went to the node under
    maintenance. As in Slurm (DOWN+DRAIN comes back drained), it now comes back as the admin
    left it, reason included, however often it fails, until an admin releases it."""
    from scheduler.services import node_drain, node_quarantine, node_release

    admin = platform["admin"]
    node = Node.objects.get(name="n3")
    backend = get_backend(node.cluster)
    if hold == "drain":
        node_drain(user=admin, node_id=node.pk, reason="firmware update")
    else:
        node_quarantine(user=admin, node_id=node.pk, reason="firmware update")
    held = Node.objects.get(pk=node.pk).state
    for _ in range(2):  # SCHEDULER_QUARANTINE_FAILURES failures
        outage(backend, node)
        assert (node.state, node.state_reason) == (held, "firmware update")
    run_cycle()  # nor does the loop release it later
    node.refresh_from_db()
    assert node.state == held and node.probation_until is None
    kinds = list(NodeEvent.objects.filter(node=node).order_by("id").values_list("kind", flat=True))
    assert kinds[1:] == ["failed", "recovered", "failed", "recovered"]
    assert not Allocation.objects.filter(node=node, ended_at__isnull=True).exists()
    node_release(user=admin, node_id=node.pk)
    node.refresh_from_db()
    assert node.state == "ready"


def take_out_while_down(platform, hold, capture_on_commit):
    """n3 fails and the loop sees it down; then the admin drains or quarantines it ("firmware
    update"). Returns the node, its backend and the admin's action, to repeat it."""
    from scheduler.services import node_drain, node_quarantine

    action = node_drain if hold == "drain" else node_quarantine
    node = Node.objects.get(name="n3")
    backend = get_backend(node.cluster)
    backend.fail_node(node.name, repair_after_s=60)
    run_cycle()

    def take_out():
        return action(user=platform["admin"], node_id=node.pk, reason="firmware update")

    with capture_on_commit(execute=True):
        take_out()
    return node, backend, take_out


@pytest.mark.parametrize(
    "hold, held, kind",
    [("drain", "draining", "drained"), ("quarantine", "quarantined", "quarantined")],
)
def test_a_node_taken_out_while_down_fails_once_and_comes_back_held(
    platform, django_capture_on_commit_callbacks, hold, held, kind
):
    """An admin drains (or quarantines) a node that is already down. The service marked it
    draining, so the next cycle saw a node in service go down: a second `failed` event for one
    outage, in the timeline and in the failures that quarantine a node. As Slurm's DOWN+DRAIN,
    the node now stays down with the hold to come back to: one failure, the drain, and it comes
    back held."""
    node, backend, take_out = take_out_while_down(
        platform, hold, django_capture_on_commit_callbacks
    )
    taken = Node.objects.get(pk=node.pk)
    assert (taken.state, taken.resume_state) == ("down", held)
    assert "n3" in backend.config["drained"]  # Slurm: DOWN+DRAIN
    take_out()  # again: nothing new
    run_cycle()
    node.refresh_from_db()
    assert (node.state, node.resume_state, node.resume_reason) == ("down", held, "firmware update")
    advance(61)
    run_cycle()
    node.refresh_from_db()
    assert (node.state, node.state_reason, node.resume_state) == (held, "firmware update", "")
    kinds = list(NodeEvent.objects.filter(node=node).order_by("id").values_list("kind", flat=True))
    assert kinds == ["failed", kind, "recovered"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("failures", [0, 1], ids=["comes-back-ready", "comes-back-quarantined"])
def test_a_drain_while_the_loop_sees_the_node_back_is_kept(platform, settings, failures):
    """An admin drains a down node while a cycle, which read it down with nothing to come back
    to, sees it back. The cycle's UPDATE to ready (or to a failure-count quarantine on a
    probation the loop ends) overwrote the drain, left behind in resume_state. The drain now
    wins: the node comes back drained, on the next pass."""
    from scheduler.services import node_drain
    from tests.integration.concurrency import race

    settings.SCHEDULER_QUARANTINE_FAILURES = 1
    node = Node.objects.get(name="n3")
    Node.objects.filter(pk=node.pk).update(state="down", state_reason="node failure")
    if failures:
        NodeEvent.objects.create(
            node=node, kind="failed", message="node failure", time=timezone.now()
        )
    outcome = race(
        lambda: node_drain(user=platform["admin"], node_id=node.pk, reason="firmware update"),
        run_cycle,  # the simulated backend reports n3 up
    )
    assert not isinstance(outcome, Exception), repr(outcome)
    node.refresh_from_db()
    assert (node.state, node.resume_state) == ("down", "draining")
    run_cycle()
    node.refresh_from_db()
    assert (node.state, node.state_reason, node.probation_until) == (
        "draining",
        "firmware update",
        None,
    )
    kinds = list(NodeEvent.objects.filter(node=node).order_by("id").values_list("kind", flat=True))
    assert kinds[failures:] == ["drained", "recovered"]


@pytest.mark.django_db(transaction=True)
def test_a_release_while_the_loop_brings_a_held_node_back_leaves_no_blank_state(platform):
    """An admin releases a down, drained node while a cycle, which read it with its drain,
    brings it back. The cycle's UPDATE (back to the held state) waited for the release and then
    set the state to the hold the release had just cleared: a node in the state ''. It now
    finds no hold and leaves the node to come back ready, the next pass."""
    from scheduler.services import node_release
    from tests.integration.concurrency import race

    node = Node.objects.get(name="n3")
    Node.objects.filter(pk=node.pk).update(
        state="down",
        state_reason="node failure",
        resume_state="draining",
        resume_reason="firmware update",
    )
    outcome = race(
        lambda: node_release(user=platform["admin"], node_id=node.pk),
        run_cycle,  # the simulated backend reports n3 up
    )
    assert not isinstance(outcome, Exception), repr(outcome)
    node.refresh_from_db()
    assert (node.state, node.resume_state) == ("down", "")
    run_cycle()
    node.refresh_from_db()
    assert (node.state, node.state_reason) == ("ready", "")


@pytest.mark.parametrize("hold", ["drain", "quarantine"])
def test_a_node_released_while_down_comes_back_ready(
    platform, django_capture_on_commit_callbacks, hold
):
    """A release of a down node lifts its hold where it stands (Slurm: resume of DOWN+DRAIN):
    it stays down through the outage, with no second failure, and comes back ready."""
    from scheduler.services import node_release

    node, backend, _ = take_out_while_down(platform, hold, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        released = node_release(user=platform["admin"], node_id=node.pk)
    assert (released.state, released.resume_state) == ("down", "")
    assert "n3" not in backend.config["drained"]
    run_cycle()
    node.refresh_from_db()
    assert (node.state, node.resume_state) == ("down", "")
    advance(61)
    run_cycle()
    node.refresh_from_db()
    assert (node.state, node.state_reason, node.probation_until) == ("ready", "", None)
    kinds = list(NodeEvent.objects.filter(node=node).order_by("id").values_list("kind", flat=True))
    assert kinds == [
        "failed",
        "drained" if hold == "drain" else "quarantined",
        "released",
        "recovered",
    ]


def test_a_preemption_for_another_teams_job_does_not_name_it_to_the_victims_team(
    platform, submit, api_as
):
    # The victim's team reads the reason (its job's events, in the portal and the API), and
    # another team's job is a 404 to it: the reason says what kind of job, not which one.
    victim = submit(
        platform["alice"], workers=2, gpus_per_worker=8, gpu_model="a100-40gb",
        priority_class="best-effort", simulated_duration_s=360000,
    ).json()["id"]  # fmt: skip
    run_cycle()
    response = submit(
        platform["bob"], team="nlp", name="bobs-urgent-run", gpus_per_worker=8,
        gpu_model="a100-40gb", priority_class="production",
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    preemptor = str(response.json()["id"])
    run_cycle()
    assert Job.objects.get(pk=victim).state in ("preempted", "pending")
    events = api_as(platform["alice"]).get(f"/api/v1/jobs/{victim}/events/").json()
    (preempted,) = [e for e in events if e["kind"] == "preempted"]
    assert "a production job of another team needs 8 a100-40gb GPUs" in preempted["message"]
    told = json.dumps(preempted)
    assert not re.search(rf"\b{preemptor}\b", told) and "nlp" not in told, told
