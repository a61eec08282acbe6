"""``gpuctl record`` and ``gpuctl resubmit`` against a live server: the record of a started job
as JSON, resubmission as exactly that spec, and the usage/API errors (exit 2 / exit 1)."""

from __future__ import annotations

import json

import pytest

from scheduler.loop.cycle import run_cycle
from scheduler.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def _started_job(as_alice) -> int:
    result = as_alice(
        "submit",
        "--json",
        "-J",
        "cli-repro",
        "-N",
        "1",
        "--gpus-per-worker",
        "1",
        "--code-ref",
        "git:abc1234",
        "--dataset",
        "c4",
        "--dataset-version",
        "2024-05",
        "-e",
        "WANDB_API_KEY=s3cret",
        "--",
        "python",
        "train.py",
    )
    assert result.code == 0, result.err
    job_id = json.loads(result.out)["id"]
    run_cycle()
    assert Job.objects.get(pk=job_id).state == "running"
    return job_id


def test_record_prints_the_attempts_record_as_json(as_alice):
    job_id = _started_job(as_alice)
    result = as_alice("record", str(job_id))
    assert result.code == 0, result.err
    record = json.loads(result.out)
    assert (record["job"], record["attempt"], record["code_ref"]) == (job_id, 1, "git:abc1234")
    assert record["dataset"] == {"name": "c4", "version": "2024-05"}
    assert record["env"]["WANDB_API_KEY"] == "[redacted]" and "s3cret" not in result.out
    assert json.loads(as_alice("record", str(job_id), "--attempt", "1").out) == record


def test_resubmit_creates_the_same_job(as_alice):
    job_id = _started_job(as_alice)
    result = as_alice("resubmit", str(job_id))
    assert result.code == 0, result.err
    assert "exactly as job" in result.out
    original, again = Job.objects.get(pk=job_id), Job.objects.exclude(pk=job_id).get()
    assert (again.command, again.env, again.code_ref, again.dataset_version) == (
        original.command,
        original.env,
        original.code_ref,
        original.dataset_version,
    )


def test_record_errors(as_alice):
    assert as_alice("record", "abc").code == 2
    assert as_alice("record", "1", "--attempt", "0").code == 2
    missing = as_alice("record", "999")
    assert missing.code == 1 and "no such job" in missing.err
    submitted = as_alice("submit", "--json", "-J", "later", "-N", "1", "--gpus-per-worker", "1")
    pending = json.loads(submitted.out)
    none_yet = as_alice("record", str(pending["id"]))
    assert none_yet.code == 1 and "no record yet" in none_yet.err
    assert as_alice("resubmit", str(pending["id"])).code == 1
    assert Job.objects.count() == 1


def test_resubmit_says_when_a_passed_deadline_is_dropped(as_alice):
    from datetime import timedelta

    from django.utils import timezone

    job_id = _started_job(as_alice)
    Job.objects.filter(pk=job_id).update(deadline=timezone.now() - timedelta(minutes=5))
    result = as_alice("resubmit", str(job_id))
    assert result.code == 0, result.err
    assert f"note: job {job_id}'s deadline" in result.out and "has passed" in result.out
    assert Job.objects.exclude(pk=job_id).get().deadline is None


def test_record_shows_a_viewer_the_env_names_not_the_values(as_alice, gpuctl, live_server):
    job_id = _started_job(as_alice)
    Job.objects.filter(pk=job_id).update(env={"DATA_BUCKET": "private-bucket-7"})
    from scheduler.models import AttemptRecord

    stored = AttemptRecord.objects.get(job_id=job_id)
    stored.record["env"]["DATA_BUCKET"] = "private-bucket-7"
    stored.save(update_fields=["record"])
    login = gpuctl(
        "login", "--url", live_server.url, "-u", "charlie", "--password-stdin", stdin="pw-charlie\n"
    )
    assert login.code == 0, login.err
    result = gpuctl("record", str(job_id))
    assert result.code == 0, result.err
    assert json.loads(result.out)["env"]["DATA_BUCKET"] == "(hidden)"
    assert "private-bucket-7" not in result.out
