"""Reproducibility records on the simulated cluster: written when an attempt starts, secrets
redacted, per attempt across a requeue, exported through the API and the portal, scoped to the
caller's teams, and "resubmit exactly this" through the API."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from scheduler.loop.cycle import run_cycle
from scheduler.models import AttemptRecord, Job
from scheduler.transitions import job_requeue

pytestmark = pytest.mark.django_db

DIGEST = "sha256:" + "ab" * 32


def _run(platform, submit, **fields):
    body = {
        "name": "repro",
        "image": f"registry.example.com/vision/train@{DIGEST}",
        "command": "python train.py --wandb-token=hunter2 --lr 0.1",
        "env": {"HF_TOKEN": "hf_secret", "LR": "0.1", "DB": "postgres://u:pw@db/x"},
        "code_ref": "git:4f2c9e1",
        "dataset": "imagenet-1k",
        "dataset_version": "2012-v2",
        "gpus_per_worker": 2,
        "checkpoint_interval_s": 600,
        "simulated_duration_s": 10_000,
    }
    body.update(fields)
    response = submit(platform["alice"], **body)
    assert response.status_code == 201, response.json()
    run_cycle()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == "running"
    return job


def test_a_started_attempt_has_a_record_with_secrets_redacted(platform, submit, api_as):
    job = _run(platform, submit)
    record = api_as(platform["alice"]).get(f"/api/v1/jobs/{job.pk}/records/1/").json()
    assert record["format"] == "gpuplatform.attempt-record/v1"
    assert (record["job"], record["attempt"], record["team"]) == (job.pk, 1, "vision")
    assert record["image"]["digest"] == DIGEST and record["image"]["resolved_by"] == "reference"
    assert record["code_ref"] == "git:4f2c9e1"
    assert record["dataset"] == {"name": "imagenet-1k", "version": "2012-v2"}
    assert record["command"] == "python train.py --wandb-token=[redacted] --lr 0.1"
    assert record["env"]["HF_TOKEN"] == "[redacted]"
    assert record["env"]["DB"] == "postgres://u:[redacted]@db/x"
    assert record["env"]["LR"] == "0.1" and record["env"]["CHECKPOINT_INTERVAL_S"] == "600"
    placed = {a.node.name for a in job.allocations.all()}
    assert {p["node"] for p in record["placement"]} == placed
    assert record["gpu_models"] and all(p["gpu_model"] for p in record["placement"])
    assert len(record["policy"]["sha256"]) == 64 and "backfill" in record["policy"]["config"]
    assert record["policy"]["version"] is None  # no policy version stored yet
    assert record["cluster"] == {"name": "test", "backend": "simulated"}
    assert record["backend_account"] == ""  # the simulated cluster runs everything as itself
    # No secret anywhere in what is stored or exported.
    stored = json.dumps(AttemptRecord.objects.get(job=job).record)
    assert "hunter2" not in stored and "hf_secret" not in stored and ":pw@" not in stored


def test_the_record_names_the_account_the_run_was_submitted_as(
    platform, submit, api_as, client, monkeypatch
):
    """The record said where and what ran, not as whom: a cluster that runs each team as an
    account of its own (Slurm's team_accounts, docs/backends/slurm.md) kept the account in
    ``Job.backend_accounts`` only, which the next attempt or a remap of the team moves on."""
    from scheduler.backends import get_backend

    # The simulated cluster, mapping teams to accounts as Slurm's team_accounts does (the real
    # mapping is tested on Slurm): what is under test is the record and what shows it.
    backend = get_backend(platform["cluster"])
    monkeypatch.setattr(backend, "team_account", lambda team: f"gp-{team}")
    job = _run(platform, submit)
    assert job.backend_accounts == {"1": "gp-vision"}
    record = api_as(platform["alice"]).get(f"/api/v1/jobs/{job.pk}/records/1/").json()
    assert record["backend_account"] == "gp-vision"
    # The team's account changes; the attempt's record keeps the account it ran as.
    monkeypatch.setattr(backend, "team_account", lambda team: f"gp2-{team}")
    job_requeue(job=job, now=timezone.now(), reason="node lost")
    run_cycle()
    job.refresh_from_db()
    assert job.backend_accounts == {"1": "gp-vision", "2": "gp2-vision"}
    api = api_as(platform["charlie"])  # a viewer reads it too: an account is no secret
    assert api.get(f"/api/v1/jobs/{job.pk}/records/1/").json()["backend_account"] == "gp-vision"
    assert api.get(f"/api/v1/jobs/{job.pk}/records/2/").json()["backend_account"] == "gp2-vision"
    client.force_login(platform["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert '<code data-field="backend-account">gp2-vision</code>' in page


def test_the_record_names_the_policy_version_in_force(platform, submit, api_as):
    from policyversions.services import policy_version_seed

    assert policy_version_seed().number == 1
    job = _run(platform, submit)
    record = api_as(platform["alice"]).get(f"/api/v1/jobs/{job.pk}/records/1/").json()
    assert record["policy"]["version"] == 1


def test_each_attempt_gets_its_own_record_and_the_first_is_kept(platform, submit, api_as):
    job = _run(platform, submit)
    first = AttemptRecord.objects.get(job=job, attempt=1).record
    run_cycle()  # a second cycle changes nothing: a record is written once
    assert AttemptRecord.objects.get(job=job, attempt=1).record == first
    assert job_requeue(job=job, now=timezone.now(), reason="node failure (test)")
    run_cycle()
    body = api_as(platform["alice"]).get(f"/api/v1/jobs/{job.pk}/records/").json()
    assert [r["attempt"] for r in body["records"]] == [1, 2]


def test_records_of_another_team_are_404_and_viewers_may_read(platform, submit, api_as, client):
    job = _run(platform, submit)
    bob = api_as(platform["bob"])
    assert bob.get(f"/api/v1/jobs/{job.pk}/records/").status_code == 404
    assert bob.get(f"/api/v1/jobs/{job.pk}/records/1/").status_code == 404
    assert bob.post(f"/api/v1/jobs/{job.pk}/resubmit/", {}, format="json").status_code == 404
    assert api_as(platform["alice"]).get(f"/api/v1/jobs/{job.pk}/records/9/").status_code == 404
    assert api_as(platform["charlie"]).get(f"/api/v1/jobs/{job.pk}/records/1/").status_code == 200
    client.force_login(platform["bob"])
    assert client.get(f"/jobs/{job.pk}/records/1.json").status_code == 404
    assert client.post(f"/jobs/{job.pk}/resubmit/", {"attempt": "1"}).status_code == 404
    assert Job.objects.count() == 1


def test_resubmit_runs_exactly_what_the_attempt_ran(platform, submit, api_as):
    job = _run(platform, submit, image="registry.example.com/vision/train:1.4")
    response = api_as(platform["alice"]).post(
        f"/api/v1/jobs/{job.pk}/resubmit/", {"attempt": 1}, format="json"
    )
    assert response.status_code == 201, response.json()
    again = Job.objects.get(pk=response.json()["id"])
    assert again.pk != job.pk and again.state == "pending"
    same = ["team_id", "image", "command", "env", "workers", "gpus_per_worker", "code_ref"]
    same += ["dataset", "dataset_version", "checkpoint_interval_s", "priority_class_id"]
    assert {f: getattr(again, f) for f in same} == {f: getattr(job, f) for f in same}
    # The secret values that ran, not the redacted ones the record shows.
    assert again.env["HF_TOKEN"] == "hf_secret"
    # Pinned to the GPU model the attempt ran on (the original asked for any).
    assert job.gpu_model is None
    ran_on = AttemptRecord.objects.get(job=job).record["gpu_models"]
    assert again.gpu_model.name == ran_on[0]
    assert again.events.filter(kind="resubmitted").exists()


def test_viewer_cannot_resubmit_and_nothing_is_written(platform, submit, api_as):
    job = _run(platform, submit)
    response = api_as(platform["charlie"]).post(f"/api/v1/jobs/{job.pk}/resubmit/", {})
    assert response.status_code in (400, 403)
    assert Job.objects.count() == 1


def test_resubmit_of_a_record_without_its_submission_is_a_409_not_a_500(platform, submit, api_as):
    """Records carry their submission ("resubmit") since the format began; one without it (edited
    by hand, or restored from elsewhere) raised a TypeError: a 500."""
    job = _run(platform, submit)
    record = AttemptRecord.objects.get(job=job)
    record.record = {k: v for k, v in record.record.items() if k != "resubmit"}
    record.save(update_fields=["record"])
    response = api_as(platform["alice"]).post(
        f"/api/v1/jobs/{job.pk}/resubmit/", {"attempt": 1}, format="json"
    )
    assert response.status_code == 409, response.content
    assert "submission" in json.dumps(response.json())
    assert Job.objects.count() == 1


def test_resubmit_of_a_job_that_never_started_is_404_naming_the_attempt(platform, submit, api_as):
    pending = submit(platform["alice"]).json()["id"]  # no cycle ran: no attempt yet
    response = api_as(platform["alice"]).post(
        f"/api/v1/jobs/{pending}/resubmit/", {}, format="json"
    )
    assert response.status_code == 404
    assert "attempt" in json.dumps(response.json())
    assert Job.objects.count() == 1


def test_bad_attempt_is_400_naming_it(platform, submit, api_as):
    job = _run(platform, submit)
    response = api_as(platform["alice"]).post(
        f"/api/v1/jobs/{job.pk}/resubmit/", {"attempt": "first"}, format="json"
    )
    assert response.status_code == 400 and "attempt" in response.json()


def test_job_page_shows_the_record_and_links_its_export(platform, submit, client):
    job = _run(platform, submit)
    client.force_login(platform["alice"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Reproducibility record" in page and DIGEST in page and "git:4f2c9e1" in page
    assert "hf_secret" not in page and "Resubmit exactly this" in page
    export = client.get(f"/jobs/{job.pk}/records/1.json")
    assert export.status_code == 200 and "attachment" in export["Content-Disposition"]
    assert json.loads(export.content)["attempt"] == 1
    client.force_login(platform["charlie"])  # a viewer sees the record, not the button
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Reproducibility record" in page and "Resubmit exactly this" not in page


@pytest.fixture
def resubmitted_events_refused():
    """The database refuses to store a "resubmitted" event (a real failure at that INSERT, as a
    full disk or a lost connection would be), and takes the refusal away afterwards."""
    from django.db import connection

    from scheduler.models import JobEvent
    from tests.integration.concurrency import require_postgresql

    require_postgresql()
    table = JobEvent._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_refuse_resubmitted() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN IF NEW.kind = 'resubmitted' THEN RAISE EXCEPTION 'event refused (test)'; "
            "END IF; RETURN NEW; END $$"
        )
        cursor.execute(
            f"CREATE TRIGGER test_refuse_resubmitted BEFORE INSERT ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION test_refuse_resubmitted()"
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER test_refuse_resubmitted ON {table}")
        cursor.execute("DROP FUNCTION test_refuse_resubmitted()")


@pytest.mark.django_db(transaction=True)
def test_a_resubmission_whose_event_fails_writes_no_job(
    platform, submit, resubmitted_events_refused
):
    """The new job was committed in its own transaction and the "resubmitted" event written
    after it: a failure writing the event left a job with no trace of where it came from. The
    job and its event are now one transaction: nothing of the resubmission is written."""
    from django.db import DatabaseError

    from scheduler.models import JobEvent
    from scheduler.reproducibility import job_resubmit

    job = _run(platform, submit)
    events = JobEvent.objects.count()
    with pytest.raises(DatabaseError, match="event refused"):
        job_resubmit(user=platform["alice"], job_id=job.pk, attempt=1)
    assert list(Job.objects.values_list("pk", flat=True)) == [job.pk]
    assert JobEvent.objects.count() == events


def test_the_portals_resubmit_of_an_attempt_that_is_no_number_resubmits_nothing(
    platform, submit, client
):
    """It resubmitted the latest attempt, which the user had not picked."""
    job = _run(platform, submit)
    client.force_login(platform["alice"])
    response = client.post(f"/jobs/{job.pk}/resubmit/", {"attempt": "1x"}, follow=True)
    assert response.status_code == 200
    assert "is not a number" in response.content.decode()
    assert Job.objects.count() == 1
    # Without an attempt, the latest is meant, as before.
    assert client.post(f"/jobs/{job.pk}/resubmit/", {}).status_code == 302
    assert Job.objects.count() == 2


def _submission_fields(job: Job) -> dict:
    """Every field a submission sets on a job (``JobRequest``), as the job holds it."""
    import dataclasses

    from scheduler.services import JobRequest

    out = {}
    for f in dataclasses.fields(JobRequest):
        if f.name == "team":
            out["team"] = job.team_id
        elif f.name in ("gpu_model", "priority_class"):
            out[f.name] = getattr(job, f"{f.name}_id")
        elif f.name == "elastic":
            out["elastic"] = job.elastic
        else:
            out[f.name] = getattr(job, f.name)
    return out


def test_resubmit_carries_every_field_of_the_submission(platform, submit, api_as):
    # checkpoint_on_advice and deadline were not in the record's submission: the resubmitted
    # job was not checkpointed on advice and had no deadline, with no word said.
    from datetime import timedelta

    due = timezone.now() + timedelta(hours=6)
    job = _run(
        platform,
        submit,
        gpu_model="h100-80gb",
        checkpoint_on_advice=True,
        deadline=due.isoformat(),
        runtime_limit_s=7200,
        priority_class="research",
        routing={"clusters": ["test"]},
    )
    response = api_as(platform["alice"]).post(
        f"/api/v1/jobs/{job.pk}/resubmit/", {"attempt": 1}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["notes"] == []
    again = Job.objects.get(pk=response.json()["id"])
    assert _submission_fields(again) == _submission_fields(job)
    assert again.checkpoint_on_advice is True and again.deadline == due


def test_resubmit_of_a_job_whose_deadline_passed_drops_it_and_says_so(
    platform, submit, api_as, client
):
    from datetime import timedelta

    job = _run(platform, submit, deadline=(timezone.now() + timedelta(hours=1)).isoformat())
    passed = timezone.now() - timedelta(minutes=5)
    Job.objects.filter(pk=job.pk).update(deadline=passed)

    response = api_as(platform["alice"]).post(
        f"/api/v1/jobs/{job.pk}/resubmit/", {"attempt": 1}, format="json"
    )
    assert response.status_code == 201, response.json()
    (note,) = response.json()["notes"]
    assert "deadline" in note and "passed" in note
    again = Job.objects.get(pk=response.json()["id"])
    assert again.deadline is None
    assert note in again.events.get(kind="resubmitted").message

    client.force_login(platform["alice"])
    page = client.post(f"/jobs/{job.pk}/resubmit/", {"attempt": "1"}, follow=True)
    assert "deadline" in page.content.decode() and "passed" in page.content.decode()
    assert Job.objects.filter(deadline__isnull=True).count() == 2


def test_resubmit_of_an_elastic_job_asks_for_the_workers_it_asked_for(platform, submit, api_as):
    # An elastic run starts with as many workers as fit; its record holds that count. The
    # resubmission asks for the original request again, as a requeue of the job would.
    job = _run(
        platform, submit, workers=4, gpus_per_worker=1, elastic={"min_workers": 1, "max_workers": 4}
    )
    record = AttemptRecord.objects.get(job=job)
    record.record["resubmit"]["workers"] = 2  # as recorded by a run that started shrunk
    record.save(update_fields=["record"])
    response = api_as(platform["alice"]).post(
        f"/api/v1/jobs/{job.pk}/resubmit/", {"attempt": 1}, format="json"
    )
    assert response.status_code == 201, response.json()
    again = Job.objects.get(pk=response.json()["id"])
    assert (again.workers, again.requested_workers, again.elastic) == (
        4,
        4,
        {"min_workers": 1, "max_workers": 4},
    )
