"""Whose a run is, with ``team_accounts``, as the loop sees it on a real Slurm: the stale-run
sweep judges only the runs of a job's own team, and a run stays its team's after the team is
mapped to another account.

The accounts are those of ``test_team_accounts_on_slurm.py`` (``gp-ci-team-a`` and
``gp-ci-team-b``); the platform reaches them through ``runuser -u {account} --``.
"""

from __future__ import annotations

import logging

import pytest
from django.utils import timezone

from scheduler.backends import backend_run_id, backend_run_ref, get_backend, reset_backends
from scheduler.backends.base import BackendJobState, backend_job_name
from scheduler.loop.cycle import run_cycle
from scheduler.loop.observe import sync_all
from scheduler.models import AttemptRecord, Cluster, Job, Node
from scheduler.states import JobState
from scheduler.transitions import job_requeue
from tests.integration.slurm.conftest import LocalSlurm, idle_nodes, spec, wait_for

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.django_db,
    pytest.mark.slurm_versions("24.11", "26.05", "22.05"),
]

A, B = "gp-ci-team-a", "gp-ci-team-b"
AS = ["runuser", "-u", "{account}", "--"]


def _map_teams(cluster: Cluster, team_accounts: dict[str, str]) -> None:
    """The cluster's ``team_accounts`` from now on (as an admin edits it; backends rebuilt)."""
    cluster.backend_config = {
        **cluster.backend_config,
        "team_accounts": team_accounts,
        "team_command_prefix": AS,
    }
    cluster.save(update_fields=["backend_config"])
    reset_backends()


def _slurm_state(slurm: LocalSlurm, slurm_id: str) -> str:
    out = slurm.run("squeue", "-h", "-t", "all", "-j", slurm_id, "-o", "%T", check=False).stdout
    return out.strip()


def _held_copy(slurm: LocalSlurm, account: str, name: str) -> str:
    """A held job that ``account`` makes with the run name ``name`` (any account may)."""
    as_account = ["runuser", "-u", account, "--"]
    own_dir = f"{slurm.dir}/jobs/{account}"
    slurm.run(*as_account, "install", "-d", "-m", "0700", own_dir)
    out = slurm.run(
        *as_account, "sbatch", "--parsable", "--hold", "--partition=gpu", f"--job-name={name}",
        f"--chdir={own_dir}", f"--output={own_dir}/{name}.out", "--wrap=sleep 300",
    ).stdout  # fmt: skip
    return out.strip().split(";")[0]


def _finished_job(cluster: Cluster, team, submitter, priority_class) -> Job:
    """A job that is over in the platform (its attempt 1 ran on ``cluster``)."""
    now = timezone.now()
    return Job.objects.create(
        team=team,
        submitter=submitter,
        name="over",
        workers=1,
        gpus_per_worker=1,
        priority_class=priority_class,
        state=JobState.SUCCEEDED,
        attempts=1,
        cluster=cluster,
        submitted_at=now,
        finished_at=now,
    )


def test_the_sweep_neither_logs_nor_cancels_another_teams_job_named_like_a_run(
    slurm_platform, team_uids, teams, alice, priorities, caplog
):
    """Two vision jobs are over in the platform. The first's run still lives, as vision's
    account: the sweep cancels it, once. nlp's account made a job named like the second's run:
    it is not vision's, and the sweep logged "cancelled stale run" for it on every sync (the
    cancel, as vision's run, found nothing to cancel), so the log said a job was cancelled that
    never was, again and again. Now the sweep says and does nothing about it."""
    cluster, slurm = slurm_platform["cluster"], slurm_platform["slurm"]
    _map_teams(cluster, {"vision": A, "nlp": B})
    own = _finished_job(cluster, teams["vision"], alice, priorities["research"])
    copied = _finished_job(cluster, teams["vision"], alice, priorities["research"])
    own_name = backend_job_name(backend_run_id(own), 1)
    copied_name = backend_job_name(backend_run_id(copied), 1)
    (node,) = idle_nodes(slurm, 1)
    own_ref = get_backend(cluster).submit(
        spec(backend_run_id(own), "exec sleep 300", {node: (0,)}, team="vision")
    )
    copy = _held_copy(slurm, B, copied_name)
    try:
        with caplog.at_level(logging.INFO, logger="scheduler.loop.stale_runs"):
            for _ in range(3):
                sync_all()
        wait_for(lambda: _slurm_state(slurm, own_ref) == "CANCELLED", 15, "vision's run cancelled")
        assert caplog.text.count(f"cancelled stale run {own_name} ") == 1, caplog.text
        assert caplog.text.count(copied_name) == 0, caplog.text
        assert _slurm_state(slurm, copy) == "PENDING"  # nlp's job, left as it was
    finally:
        slurm.run("scancel", copy, own_ref, check=False)


def test_a_run_stays_its_teams_after_the_team_is_mapped_to_another_account(
    slurm_platform, team_uids, submit, alice, api_as, caplog, django_capture_on_commit_callbacks
):
    """Two vision jobs run as ``gp-ci-team-a``; then an admin maps vision to ``gp-ci-team-b``.
    Every call about a run looked for a job of the team's account now (b's), so the platform
    lost both: the poll found no such job, the loop started another attempt as b's beside the
    one still running as a's, and no cancel or sweep ever reached a's. Now a run keeps the
    account it was submitted as: the platform still sees it and reads its log, a user's cancel
    stops it, the sweep stops one the platform gave up on, and the team's new runs are b's."""
    cluster, slurm = slurm_platform["cluster"], slurm_platform["slurm"]
    _map_teams(cluster, {"vision": A})
    gpu_model = Node.objects.filter(cluster=cluster).first().gpu_model.name
    command = 'echo "started as $(id -un)"; exec sleep 300'
    first, second = (
        submit(alice, gpu_model=gpu_model, command=command).json()["id"] for _ in range(2)
    )
    run_cycle()
    jobs = {pk: Job.objects.select_related("team", "cluster").get(pk=pk) for pk in (first, second)}
    refs = {pk: job.backend_ref for pk, job in jobs.items()}
    assert all(job.state == "running" for job in jobs.values()) and all(refs.values())
    try:
        for ref in refs.values():
            wait_for(lambda r=ref: _slurm_state(slurm, r) == "RUNNING", 30, f"run {ref} to start")
            owner = slurm.run("squeue", "-h", "-j", ref, "-o", "%U").stdout.strip()
            assert owner == str(team_uids[A])

        _map_teams(cluster, {"vision": B})
        for _ in range(2):
            run_cycle()
        for pk, job in jobs.items():
            job.refresh_from_db()
            assert (job.state, job.attempts, job.backend_ref) == ("running", 1, refs[pk])
            (status,) = get_backend(cluster).poll_jobs([backend_run_ref(job)])
            assert (status.state, status.backend_ref) == (BackendJobState.RUNNING, refs[pk])

        # The run may not have written its first line yet when Slurm says RUNNING.
        def log_text() -> str:
            return api_as(alice).get(f"/api/v1/jobs/{first}/logs/").json()["text"] or ""

        wait_for(lambda: "started as" in log_text(), 30, "the run's first line")
        assert f"started as {A}" in log_text()

        # The user's cancel stops the run, as a's.
        with django_capture_on_commit_callbacks(execute=True):
            assert api_as(alice).post(f"/api/v1/jobs/{first}/cancel/").status_code == 200
        wait_for(lambda: _slurm_state(slurm, refs[first]) == "CANCELLED", 30, "the cancel")

        # The platform gives up on the other's run without reaching Slurm (a lost scancel): the
        # sweep finds it under a's account and stops it.
        assert job_requeue(job=jobs[second], now=timezone.now(), reason="test: moved on")
        with caplog.at_level(logging.WARNING, logger="scheduler.loop.stale_runs"):
            sync_all()
        wait_for(lambda: _slurm_state(slurm, refs[second]) == "CANCELLED", 30, "the sweep")
        run = backend_job_name(backend_run_id(jobs[second]), 1)
        assert f"cancelled stale run {run} (the job was requeued" in caplog.text

        third = submit(alice, gpu_model=gpu_model, command=command).json()["id"]
        run_cycle()
        new_ref = Job.objects.get(pk=third).backend_ref
        assert new_ref
        refs[third] = new_ref
        owner = slurm.run("squeue", "-h", "-j", new_ref, "-o", "%U").stdout.strip()
        assert owner == str(team_uids[B])
        # Each attempt's reproducibility record names the account it ran as.
        accounts = {
            pk: AttemptRecord.objects.get(job_id=pk, attempt=1).record["backend_account"]
            for pk in (first, second, third)
        }
        assert accounts == {first: A, second: A, third: B}
    finally:
        slurm.run("scancel", *refs.values(), check=False)


def test_a_run_recorded_without_an_account_learns_it_from_slurm_before_or_after_a_remap(
    slurm_platform, team_uids, submit, alice, api_as, caplog, django_capture_on_commit_callbacks
):
    """Runs submitted before the platform recorded each run's account have none recorded (the
    rows are cleared here, as such a run's row is). Every call about them looked for a job of
    the team's account now, so once vision was mapped to ``gp-ci-team-b`` the poll found
    nothing, the loop started attempt 2 as b's beside attempt 1, and no cancel or sweep ever
    reached a's job. Now the sync learns such a run's account from Slurm (the owner of the run's
    Slurm job) and records it: ``early`` at the first sync after the upgrade, before the remap
    (as it happens in practice); ``late`` at the first sync after a remap that came first."""
    cluster, slurm = slurm_platform["cluster"], slurm_platform["slurm"]
    _map_teams(cluster, {"vision": A})
    gpu_model = Node.objects.filter(cluster=cluster).first().gpu_model.name
    command = 'echo "started as $(id -un)"; exec sleep 300'
    early, late = (
        submit(alice, gpu_model=gpu_model, command=command).json()["id"] for _ in range(2)
    )
    run_cycle()
    refs = dict(Job.objects.filter(pk__in=(early, late)).values_list("pk", "backend_ref"))
    assert all(refs.values()), refs
    try:
        for ref in refs.values():
            wait_for(lambda r=ref: _slurm_state(slurm, r) == "RUNNING", 30, f"run {ref} to start")
        Job.objects.filter(pk__in=refs).update(backend_accounts={})
        sync_all()  # the first sync after the upgrade
        Job.objects.filter(pk=late).update(backend_accounts={})  # ... had the remap come first

        _map_teams(cluster, {"vision": B})
        for _ in range(2):
            run_cycle()
        jobs = {pk: Job.objects.select_related("team", "cluster").get(pk=pk) for pk in refs}
        for pk, job in jobs.items():
            assert (job.state, job.attempts, job.backend_ref) == ("running", 1, refs[pk])
            assert job.backend_accounts == {"1": A}
            (status,) = get_backend(cluster).poll_jobs([backend_run_ref(job)])
            assert (status.state, status.backend_ref) == (BackendJobState.RUNNING, refs[pk])
        assert Job.objects.filter(cluster=cluster).count() == 2  # nothing else started

        def log_text() -> str:
            return api_as(alice).get(f"/api/v1/jobs/{late}/logs/").json()["text"] or ""

        wait_for(lambda: "started as" in log_text(), 30, "the run's first line")
        assert f"started as {A}" in log_text()

        # The user's cancel stops the run, as a's.
        with django_capture_on_commit_callbacks(execute=True):
            assert api_as(alice).post(f"/api/v1/jobs/{early}/cancel/").status_code == 200
        wait_for(lambda: _slurm_state(slurm, refs[early]) == "CANCELLED", 30, "the cancel")

        # A run the platform gave up on without reaching Slurm: the sweep stops it, as a's.
        assert job_requeue(job=jobs[late], now=timezone.now(), reason="test: moved on")
        with caplog.at_level(logging.WARNING, logger="scheduler.loop.stale_runs"):
            sync_all()
        wait_for(lambda: _slurm_state(slurm, refs[late]) == "CANCELLED", 30, "the sweep")
        run = backend_job_name(backend_run_id(jobs[late]), 1)
        assert f"cancelled stale run {run} (the job was requeued" in caplog.text
    finally:
        slurm.run("scancel", *refs.values(), check=False)


def test_a_service_account_run_records_it_at_submission_and_is_swept_after_a_mapping(
    slurm_platform, team_uids, submit, alice, caplog, monkeypatch
):
    """Without ``team_accounts`` every run is the service account's, and its account ("") was
    not recorded: every sync asked the backend about every such run, as one submitted before
    the platform recorded accounts. Now "" is recorded at submission and nothing is asked. The
    stale-run sweep reads such a record as it read a run with none: once vision is mapped to
    ``gp-ci-team-a``, the run is still polled as the service account's, the sweep stops it when
    the platform gives up on it, and vision's next run is a's."""
    cluster, slurm = slurm_platform["cluster"], slurm_platform["slurm"]
    assert not cluster.backend_config.get("team_accounts")
    gpu_model = Node.objects.filter(cluster=cluster).first().gpu_model.name
    job_id = submit(alice, gpu_model=gpu_model, command="exec sleep 300").json()["id"]
    run_cycle()
    job = Job.objects.select_related("team", "cluster").get(pk=job_id)
    ref = job.backend_ref
    assert job.state == JobState.RUNNING and ref
    assert job.backend_accounts == {"1": ""}
    try:
        wait_for(lambda: _slurm_state(slurm, ref) == "RUNNING", 30, f"run {ref} to start")

        _map_teams(cluster, {"vision": A})
        backend = get_backend(Cluster.objects.get(pk=cluster.pk))
        asked = []
        answer = backend.run_owners
        monkeypatch.setattr(backend, "run_owners", lambda runs: asked.append(runs) or answer(runs))
        for _ in range(2):
            run_cycle()
        assert asked == []
        job.refresh_from_db()
        assert (job.state, job.attempts, job.backend_ref) == ("running", 1, ref)
        assert job.backend_accounts == {"1": ""}
        (status,) = backend.poll_jobs([backend_run_ref(job)])
        assert (status.state, status.backend_ref) == (BackendJobState.RUNNING, ref)

        # The platform gives up on the run without reaching Slurm (a lost scancel).
        assert job_requeue(job=job, now=timezone.now(), reason="test: moved on")
        with caplog.at_level(logging.WARNING, logger="scheduler.loop.stale_runs"):
            sync_all()
        wait_for(lambda: _slurm_state(slurm, ref) == "CANCELLED", 30, "the sweep")
        run = backend_job_name(backend_run_id(job), 1)
        assert f"cancelled stale run {run} (the job was requeued" in caplog.text

        run_cycle()
        job.refresh_from_db()
        assert job.state == JobState.RUNNING and job.attempts == 2 and job.backend_ref
        assert job.backend_accounts == {"1": "", "2": A}
        owner = slurm.run("squeue", "-h", "-j", job.backend_ref, "-o", "%U").stdout.strip()
        assert owner == str(team_uids[A])
    finally:
        slurm.run("scancel", ref, *([job.backend_ref] if job.backend_ref else []), check=False)
