"""`manage.py export_trace`: the platform's finished history as a `gpuplatform-trace` file
(docs/simulation.md), exact to the second, loadable by the simulator, never half-written."""

import io
import json
import os
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.loop.cycle import run_cycle
from scheduler.management.commands import export_trace
from scheduler.models import Allocation, Cluster, Job, Node
from scheduler.policy.codec import config_from_dict
from scheduler.simulation.history import load_history
from scheduler.snapshot import policy_config
from scheduler.states import JobState
from scheduler.transitions import job_cancel, job_finish, job_requeue
from tenants.models import PriorityClass, Quota, Team

pytestmark = [pytest.mark.engines, pytest.mark.django_db]

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
WINDOW = ("--since", "2026-11-01", "--until", "2026-11-03")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def make_job(platform, gpu_models):
    """A job row written directly, every time and counter explicit."""

    def make(name, *, state, submitted, started=None, finished=None, **fields):
        defaults = {
            "team": "vision",
            "priority_class": "research",
            "gpu_model": "h100",
            "cluster": "test",
            "workers": 1,
            "gpus_per_worker": 1,
            "attempts": 0 if started is None else 1,
        }
        defaults.update(fields)
        defaults["team"] = Team.objects.get(slug=defaults["team"])
        defaults["priority_class"] = PriorityClass.objects.get(name=defaults["priority_class"])
        model = defaults["gpu_model"]
        defaults["gpu_model"] = gpu_models[model] if model else None
        where = defaults["cluster"]
        defaults["cluster"] = Cluster.objects.get(name=where) if where else None
        return Job.objects.create(
            name=name,
            submitter=platform["alice"],
            state=state,
            submitted_at=submitted if isinstance(submitted, datetime) else at(submitted),
            started_at=None if started is None else at(started),
            finished_at=None if finished is None else at(finished),
            **defaults,
        )

    return make


def allocate(job, *, attempt, started, ended, node="n1"):
    """One GPU of ``job``'s attempt ``attempt``, released at ``ended``: what the loop leaves."""
    Allocation.objects.create(
        job=job,
        node=Node.objects.get(name=node),
        gpu_index=0,
        attempt=attempt,
        started_at=at(started),
        ended_at=at(ended),
    )


@pytest.fixture
def history(platform, teams, gpu_models, make_job):
    """Two clusters, quotas, and one job of every kind the export tells apart."""
    other = Cluster.objects.create(name="other")
    Node.objects.create(
        cluster=other,
        name="m1",
        gpu_model=gpu_models["a100"],
        gpu_count=4,
        zone="z2",
        rack="r9",
        fabric="ib1",
        spot=True,
    )
    Quota.objects.create(
        team=teams["vision"], gpu_model=gpu_models["h100"], guaranteed_gpus=8, borrow_limit_gpus=4
    )
    Quota.objects.create(
        team=teams["vision"], gpu_model=gpu_models["a100"], guaranteed_gpus=2, borrow_limit_gpus=0
    )
    Quota.objects.create(
        team=teams["nlp"], gpu_model=gpu_models["a100"], guaranteed_gpus=4, borrow_limit_gpus=8
    )
    jobs = {
        # Ran 1,800 s, requeued with 600 s since its checkpoint lost on 16 GPUs, then 3,000 s.
        "requeued": make_job(
            "requeued",
            state=JobState.SUCCEEDED,
            submitted=0,
            started=5000,
            finished=8000,
            team="nlp",
            priority_class="best-effort",
            gpu_model=None,
            workers=2,
            gpus_per_worker=8,
            attempts=2,
            earlier_runs_s=1800.0,
            lost_gpu_seconds=600.0 * 16,
            checkpoint_interval_s=900,
        ),
        "one-shot": make_job(
            "one-shot",
            state=JobState.SUCCEEDED,
            submitted=100,
            started=160,
            finished=3760,
            gpus_per_worker=4,
            preemptible=False,
            checkpoint_interval_s=600,
            runtime_limit_s=7200,
        ),
        "elsewhere": make_job(
            "elsewhere",
            state=JobState.FAILED,
            submitted=400,
            started=500,
            finished=1500.5,
            cluster="other",
            gpu_model="a100",
            gpus_per_worker=2,
        ),
        # The earliest submission, but it never ran: it must not set the origin.
        "never-ran": make_job(
            "never-ran", state=JobState.CANCELLED, submitted=-500, finished=-100, cluster=None
        ),
        "running": make_job("running", state=JobState.RUNNING, submitted=200, started=300),
        "pending": make_job("pending", state=JobState.PENDING, submitted=50, cluster=None),
        "last-month": make_job(
            "last-month",
            state=JobState.SUCCEEDED,
            submitted=datetime(2026, 10, 1, tzinfo=UTC),
            started=-100,
            finished=0,
        ),
        # Exactly at --until, which is exclusive.
        "at-until": make_job(
            "at-until",
            state=JobState.SUCCEEDED,
            submitted=datetime(2026, 11, 3, tzinfo=UTC),
            started=86400,
            finished=90000,
        ),
    }
    allocate(jobs["requeued"], attempt=1, started=60, ended=1860)
    allocate(jobs["requeued"], attempt=2, started=5000, ended=8000)
    return jobs


def export(tmp_path, *args, name="history.jsonl"):
    """Run the command into a file; returns (header, job lines, stderr)."""
    out = tmp_path / name
    err = io.StringIO()
    call_command("export_trace", "--out", str(out), *args, stderr=err)
    header, *jobs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return header, jobs, err.getvalue()


def test_header_and_jobs_are_exact(history, tmp_path):
    before = timezone.now()
    header, jobs, err = export(tmp_path, *WINDOW)
    assert list(header) == [
        "format",
        "version",
        "exported_at",
        "origin",
        "priority_classes",
        "teams",
        "nodes",
        "config",
        "skipped",
    ]
    assert header["format"] == "gpuplatform-trace" and header["version"] == 1
    exported_at = datetime.fromisoformat(header["exported_at"])
    assert exported_at.tzinfo is not None and before <= exported_at <= timezone.now()
    assert header["origin"] == "2026-11-02T09:00:00+00:00"
    assert list(header["priority_classes"].items()) == [
        ("production", 1000),
        ("research", 500),
        ("best-effort", 100),
    ]
    assert header["teams"] == [
        {"name": "nlp", "parent": "research", "weight": 1.0, "quota": {"a100-40gb": [4, 8]}},
        {"name": "research", "parent": None, "weight": 1.0, "quota": {}},
        {
            "name": "vision",
            "parent": "research",
            "weight": 2.0,
            "quota": {"a100-40gb": [2, 0], "h100-80gb": [8, 4]},
        },
    ]
    m1 = {
        "name": "m1",
        "gpu_model": "a100-40gb",
        "gpus": 4,
        "zone": "z2",
        "rack": "r9",
        "nvlink_domain": "",
        "fabric": "ib1",
        "spot": True,
    }
    n1 = {
        "name": "n1",
        "gpu_model": "h100-80gb",
        "gpus": 8,
        "zone": "z1",
        "rack": "r1",
        "nvlink_domain": "n1",
        "fabric": "",
        "spot": False,
    }
    assert header["nodes"][:2] == [m1, n1]
    assert [n["name"] for n in header["nodes"]] == ["m1", "n1", "n2", "n3", "n4"]
    assert header["config"] == {}
    assert header["skipped"] == {"never_ran": 1, "unfinished": 2}
    assert jobs == [
        {
            "id": str(history["requeued"].pk),
            "submit_s": 0.0,
            # 1,800 s earlier attempt + 3,000 s last attempt - 9,600 GPU-s lost / 16 GPUs
            "duration_s": 4200.0,
            "workers": 2,
            "gpus_per_worker": 8,
            "team": "nlp",
            "gpu_model": None,
            "priority_class": "best-effort",
            "preemptible": True,
            "checkpoint_interval_s": 900,
            "runtime_limit_s": None,
            "user": "alice",
            "name": "requeued",
            "image": "",
        },
        {
            "id": str(history["one-shot"].pk),
            "submit_s": 100.0,
            "duration_s": 3600.0,
            "workers": 1,
            "gpus_per_worker": 4,
            "team": "vision",
            "gpu_model": "h100-80gb",
            "priority_class": "research",
            "preemptible": False,
            "checkpoint_interval_s": 600,
            "runtime_limit_s": 7200,
            "user": "alice",
            "name": "one-shot",
            "image": "",
        },
        {
            "id": str(history["elsewhere"].pk),
            "submit_s": 400.0,
            "duration_s": 1000.5,
            "workers": 1,
            "gpus_per_worker": 2,
            "team": "vision",
            "gpu_model": "a100-40gb",
            "priority_class": "research",
            "preemptible": True,
            "checkpoint_interval_s": None,
            "runtime_limit_s": None,
            "user": "alice",
            "name": "elsewhere",
            "image": "",
        },
    ]
    out = tmp_path / "history.jsonl"
    assert err.strip() == f"exported 3 jobs (skipped: 1 never ran, 2 unfinished) to {out}"


def test_the_simulator_loads_the_file(history, tmp_path):
    export(tmp_path, *WINDOW)
    loaded = load_history(tmp_path / "history.jsonl")
    assert [(j.id, j.submit, j.duration, j.gpus) for j in loaded.jobs] == [
        (str(history["requeued"].pk), 0.0, 4200.0, 16),
        (str(history["one-shot"].pk), 100.0, 3600.0, 4),
        (str(history["elsewhere"].pk), 400.0, 1000.5, 2),
    ]
    assert loaded.teams["vision"] == {
        "parent": "research",
        "weight": 2.0,
        "quota": {"a100-40gb": (2, 0), "h100-80gb": (8, 4)},
    }
    # who asked and what it is come through, for the run-time model of a replay
    assert {(j.user, j.name) for j in loaded.jobs} == {
        ("alice", "requeued"),
        ("alice", "one-shot"),
        ("alice", "elsewhere"),
    }
    assert [n.name for n in loaded.cluster.nodes] == ["m1", "n1", "n2", "n3", "n4"]
    assert loaded.skipped == {"never_ran": 1, "unfinished": 2}


def test_the_export_replays_under_the_platform_policy_and_a_candidate(history, tmp_path, capsys):
    from scheduler.simulation.cli import main

    export(tmp_path, *WINDOW)
    capsys.readouterr()
    out = tmp_path / "compare.json"
    argv = ["compare", "--trace", str(tmp_path / "history.jsonl"), "--quiet", "--out", str(out)]
    argv += ["--policies", "fifo,gpuplatform,candidate"]
    argv += ["--engine-config", 'candidate={"las_thresholds_gpu_s": []}']
    assert main(argv) == 0
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"fifo", "gpuplatform", "candidate"}
    for metrics in results.values():
        assert metrics["jobs"] == 3 and metrics["cluster"] == "history.jsonl"
        assert metrics["cluster_gpus"] == sum(n.gpu_count for n in Node.objects.all())
    assert "candidate" in capsys.readouterr().out


def test_without_a_window_every_submission_counts(history, tmp_path):
    header, jobs, _ = export(tmp_path)
    # The job of last month is now the earliest export, so everything is measured from it.
    assert header["origin"] == "2026-10-01T00:00:00+00:00"
    shift = (T0 - datetime(2026, 10, 1, tzinfo=UTC)).total_seconds()
    names = {str(j.pk): name for name, j in history.items()}
    assert [(names[j["id"]], j["submit_s"]) for j in jobs] == [
        ("last-month", 0.0),
        ("requeued", shift),
        ("one-shot", shift + 100),
        ("elsewhere", shift + 400),
        ("at-until", shift + 15 * 3600),
    ]


def test_window_bounds_since_inclusive_until_exclusive(make_job, platform, tmp_path, settings):
    edges = {
        "before": datetime(2026, 10, 31, 23, 59, 59, tzinfo=UTC),
        "at-since": datetime(2026, 11, 1, tzinfo=UTC),
        "last-instant": datetime(2026, 11, 2, 23, 59, 59, 999999, tzinfo=UTC),
        "at-until": datetime(2026, 11, 3, tzinfo=UTC),
    }
    ids = {
        str(make_job(n, state=JobState.SUCCEEDED, submitted=t, started=0, finished=60).pk): n
        for n, t in edges.items()
    }
    _, jobs, _ = export(tmp_path, *WINDOW)
    assert [ids[j["id"]] for j in jobs] == ["at-since", "last-instant"]
    _, jobs, _ = export(tmp_path, "--since", "2026-11-01T00:00:00Z", "--until", "2026-11-02T12:00")
    assert [ids[j["id"]] for j in jobs] == ["at-since"]
    # A naive value is the server's local time: in Berlin, 01:00 on 1 November is 00:00 UTC and
    # midnight on 3 November is 23:00 UTC on the 2nd.
    settings.TIME_ZONE = "Europe/Berlin"
    _, jobs, _ = export(tmp_path, "--since", "2026-11-01T01:00", "--until", "2026-11-03")
    assert [ids[j["id"]] for j in jobs] == ["at-since"]


def test_cluster_selects_its_jobs_nodes_and_counts(history, tmp_path):
    header, jobs, err = export(tmp_path, "--cluster", "other")
    assert [n["name"] for n in header["nodes"]] == ["m1"]
    assert [j["id"] for j in jobs] == [str(history["elsewhere"].pk)]
    assert jobs[0]["submit_s"] == 0.0
    assert header["origin"] == at(400).isoformat()
    assert header["skipped"] == {"never_ran": 0, "unfinished": 0}
    header, jobs, _ = export(tmp_path, "--cluster", "test", *WINDOW)
    assert [n["name"] for n in header["nodes"]] == ["n1", "n2", "n3", "n4"]
    assert [j["id"] for j in jobs] == [str(history[k].pk) for k in ("requeued", "one-shot")]
    # The pending and the never-started job were on no cluster yet.
    assert header["skipped"] == {"never_ran": 0, "unfinished": 1}
    # Teams and priority classes are the platform's, whatever the cluster.
    assert [t["name"] for t in header["teams"]] == ["nlp", "research", "vision"]


def test_a_job_cancelled_while_queued_to_resume_counts_only_its_runs(make_job, tmp_path):
    # Ran 1,000 s on 2 GPUs, lost 200 s of it at the requeue, was cancelled in the queue at
    # 5,000 s: started_at is still the requeued attempt's, whose run attained already holds.
    queued = make_job(
        "queued",
        state=JobState.CANCELLED,
        submitted=0,
        started=10,
        finished=5000,
        gpus_per_worker=2,
        earlier_runs_s=1000.0,
        lost_gpu_seconds=400.0,
    )
    allocate(queued, attempt=1, started=10, ended=1010)
    # The same counters, but cancelled while running its attempt: that run counts.
    running = make_job(
        "running",
        state=JobState.CANCELLED,
        submitted=1,
        started=2000,
        finished=5000,
        gpus_per_worker=2,
        attempts=2,
        earlier_runs_s=1000.0,
        lost_gpu_seconds=400.0,
    )
    allocate(running, attempt=1, started=10, ended=1010)
    allocate(running, attempt=2, started=2000, ended=5000, node="n2")
    # No checkpoint before the requeue: all of its run was lost, nothing was served.
    wasted = make_job(
        "wasted",
        state=JobState.CANCELLED,
        submitted=2,
        started=10,
        finished=5000,
        gpus_per_worker=2,
        earlier_runs_s=1000.0,
        lost_gpu_seconds=2000.0,
    )
    allocate(wasted, attempt=1, started=10, ended=1010, node="n3")
    header, jobs, _ = export(tmp_path)
    assert [(j["id"], j["duration_s"]) for j in jobs] == [
        (str(queued.pk), 800.0),
        (str(running.pk), 1000.0 + 3000.0 - 200.0),
    ]
    assert header["skipped"] == {"never_ran": 1, "unfinished": 0}


def test_durations_follow_the_loop_across_a_requeue(platform, submit, tmp_path):
    """The live code paths, with explicit times: start, requeue 300 s after a checkpoint, restart,
    finish; and a second job requeued, then cancelled in the queue."""
    t0 = timezone.now().replace(microsecond=0) - timedelta(hours=10)
    first = submit(platform["alice"], name="a", gpus_per_worker=4, gpu_model="h100-80gb")
    second = submit(platform["alice"], name="b", gpus_per_worker=2, gpu_model="a100-40gb")
    finished_id, queued_id = first.json()["id"], second.json()["id"]
    Job.objects.update(submitted_at=t0 - timedelta(seconds=60))
    assert set(run_cycle(now=t0, sync=False).started) == {finished_id, queued_id}
    Job.objects.update(last_checkpoint_at=t0 + timedelta(seconds=1500))
    for job in Job.objects.all():
        assert job_requeue(job=job, now=t0 + timedelta(seconds=1800), reason="node failure")
    job_cancel(user=platform["alice"], job_id=queued_id)
    t2 = t0 + timedelta(seconds=4000)
    assert run_cycle(now=t2, sync=False).started == [finished_id]
    job = Job.objects.get(pk=finished_id)
    assert job.started_at == t2 and job.attempts == 2
    assert job_finish(job=job, target=JobState.SUCCEEDED, now=t2 + timedelta(seconds=2500))
    _, jobs, _ = export(tmp_path)
    assert {j["id"]: j["duration_s"] for j in jobs} == {
        # 1,800 s first attempt (300 s of it lost) + 2,500 s second attempt
        str(finished_id): 1800.0 - 300.0 + 2500.0,
        # only its first attempt, less the 300 s lost; not the hours it waited to be cancelled
        str(queued_id): 1800.0 - 300.0,
    }


def test_ties_in_submission_go_in_string_id_order(make_job, tmp_path):
    for pk in (900_000_009, 1_000_000_010, 1_000_000_100):
        make_job(
            f"member-{pk}", id=pk, state=JobState.SUCCEEDED, submitted=0, started=1, finished=2
        )
    make_job("later", id=900_000_001, state=JobState.SUCCEEDED, submitted=1, started=1, finished=3)
    _, jobs, _ = export(tmp_path)
    assert [(j["id"], j["submit_s"]) for j in jobs] == [
        ("1000000010", 0.0),
        ("1000000100", 0.0),
        ("900000009", 0.0),
        ("900000001", 1.0),
    ]


def test_config_is_the_policy_override_as_json(history, tmp_path, settings):
    settings.SCHEDULER_POLICY = {
        "las_thresholds_gpu_s": (3600, 36000, 360000),
        "backfill": False,
        "preemption_grace_s": 60.0,
    }
    header, _, _ = export(tmp_path, *WINDOW)
    assert header["config"] == {
        "las_thresholds_gpu_s": [3600, 36000, 360000],
        "backfill": False,
        "preemption_grace_s": 60.0,
    }
    # What the replay builds from the file is the engine configuration the platform ran with.
    assert config_from_dict(header["config"]) == policy_config()


def test_stdout(history):
    out, err = io.StringIO(), io.StringIO()
    call_command("export_trace", "--out", "-", *WINDOW, stdout=out, stderr=err)
    header, *jobs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert out.getvalue().endswith("\n") and len(out.getvalue().splitlines()) == 4
    assert header["format"] == "gpuplatform-trace"
    assert header["skipped"] == {"never_ran": 1, "unfinished": 2}
    assert [j["id"] for j in jobs] == [
        str(history[k].pk) for k in ("requeued", "one-shot", "elsewhere")
    ]
    assert (
        err.getvalue().strip() == "exported 3 jobs (skipped: 1 never ran, 2 unfinished) to stdout"
    )


def test_queries_do_not_grow_with_the_jobs(make_job, platform, tmp_path):
    def count():
        with CaptureQueriesContext(connection) as captured:
            export(tmp_path)
        return len(captured)

    make_job("first", state=JobState.SUCCEEDED, submitted=0, started=1, finished=2)
    few = count()
    for i in range(40):
        make_job(f"j{i}", state=JobState.SUCCEEDED, submitted=i, started=i + 1, finished=i + 9)
    assert count() == few <= 6


def test_a_failed_export_leaves_the_old_file_and_no_temporary(history, tmp_path, monkeypatch):
    out = tmp_path / "history.jsonl"
    out.write_text("the previous export\n")
    real = export_trace.job_line
    calls = []

    def fail_on_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("database went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(export_trace, "job_line", fail_on_the_second)
    with pytest.raises(RuntimeError):
        call_command("export_trace", "--out", str(out), stderr=io.StringIO())
    assert out.read_text() == "the previous export\n"
    assert os.listdir(tmp_path) == ["history.jsonl"]
    fresh = tmp_path / "fresh.jsonl"
    calls.clear()
    with pytest.raises(RuntimeError):
        call_command("export_trace", "--out", str(fresh), stderr=io.StringIO())
    assert os.listdir(tmp_path) == ["history.jsonl"]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--since", "yesterday"], "--since"),
        (["--until", "2026-02-30"], "--until"),
        (["--since", "2026-11-03", "--until", "2026-11-01"], "--since"),
        (["--since", "2026-11-01", "--until", "2026-11-01T00:00:00+00:00"], "--since"),
        (["--cluster", "nope"], "--cluster"),
    ],
)
def test_bad_input_is_a_clear_error(history, tmp_path, args, option):
    out = tmp_path / "history.jsonl"
    with pytest.raises(CommandError) as raised:
        call_command("export_trace", "--out", str(out), *args)
    assert raised.value.returncode == 2
    assert str(raised.value).startswith(f"{option}: ")
    assert not out.exists()


@pytest.mark.parametrize("where", ["missing/history.jsonl", "."])
def test_an_unwritable_path_is_a_clear_error(history, tmp_path, where):
    with pytest.raises(CommandError) as raised:
        call_command("export_trace", "--out", str(tmp_path / where))
    assert raised.value.returncode == 2
    assert str(raised.value).startswith("--out: ")
    assert os.listdir(tmp_path) == []


def test_node_names_repeated_across_clusters_are_refused(history, gpu_models, tmp_path):
    Node.objects.create(
        cluster=Cluster.objects.get(name="other"),
        name="n1",
        gpu_model=gpu_models["a100"],
        gpu_count=8,
    )
    with pytest.raises(CommandError) as raised:
        call_command("export_trace", "--out", str(tmp_path / "h.jsonl"))
    assert raised.value.returncode == 2 and str(raised.value).startswith("--cluster: ")
    assert "n1" in str(raised.value)
    header, _, _ = export(tmp_path, "--cluster", "other")
    assert [n["name"] for n in header["nodes"]] == ["m1", "n1"]
