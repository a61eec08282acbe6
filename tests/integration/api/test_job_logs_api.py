"""Job logs and attempts through the REST API, on the simulated backend: tail, follow by cursor
(nothing twice, nothing lost), attempts after a requeue, validation naming the field, team
scoping (another team's job is a 404), a cluster that does not answer (503), and the schema."""

import pytest
from django.utils import timezone

from scheduler.backends.base import worker_envs
from scheduler.loop.cycle import run_cycle
from scheduler.models import Cluster, Job
from scheduler.transitions import job_requeue
from tests.simclock import SimulatedClock

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _simulated_minutes(sim_clock, monkeypatch):
    sim_clock.stop_real_time(monkeypatch)
    return sim_clock


advance = SimulatedClock.advance


def logs(client, job_id, **params):
    return client.get(f"/api/v1/jobs/{job_id}/logs/", params)


def test_tail_then_follow_reads_every_line_once(platform, submit, api_as):
    alice = api_as(platform["alice"])
    job_id = submit(platform["alice"], workers=2, gpus_per_worker=8, gpu_model="h100-80gb").json()[
        "id"
    ]
    pending = logs(alice, job_id).json()
    assert pending | {"text": None} == {
        "job": job_id,
        "state": "pending",
        "attempts": 0,
        "attempt": None,
        "text": None,
        "cursor": None,
        "truncated": False,
        "finished": False,
    }
    run_cycle()
    advance(5)
    first = logs(alice, job_id).json()
    assert (first["state"], first["attempt"], first["finished"]) == ("running", 1, False)
    lines = first["text"].splitlines()
    assert lines[0].startswith("[gpuplatform] attempt 1 on ")
    # Every worker's launcher variables, as every backend gives them.
    job = Job.objects.get(pk=job_id)
    nodes = sorted({a.node.name for a in job.allocations.all()})
    expected = worker_envs(
        run_spec(job), master_addr=nodes[0], master_port=29500
    )  # worker 0's node is the master
    assert f"RANK=1 WORLD_SIZE=2 MASTER_ADDR={nodes[0]} MASTER_PORT=29500" in lines[2]
    assert expected[1]["RANK"] == "1" and expected[1]["PET_NODE_RANK"] == "1"
    assert "step      5" in first["text"]

    advance(3)
    more = logs(alice, job_id, cursor=first["cursor"]).json()
    assert more["text"].splitlines() == [
        line for line in full_log(alice, job_id).splitlines() if line not in lines
    ]
    assert more["text"].startswith("step      6")
    again = logs(alice, job_id, cursor=more["cursor"]).json()
    assert again["text"] == "" and again["cursor"] == more["cursor"]

    # Small chunks: the pieces add up to the whole, split on line boundaries (a line longer than
    # a chunk is split at the chunk's size).
    pieces, cursor = [], "0"
    while True:
        chunk = logs(alice, job_id, cursor=cursor, limit_bytes=50).json()
        if not chunk["text"]:
            break
        pieces.append(chunk["text"])
        cursor = chunk["cursor"]
    assert "".join(pieces) == full_log(alice, job_id)
    assert all(piece.endswith("\n") or len(piece.encode()) == 50 for piece in pieces)
    assert sum(piece.endswith("\n") for piece in pieces) > len(pieces) / 2


def run_spec(job):
    from scheduler.loop.enforce import job_spec
    from scheduler.selectors import job_placement

    return job_spec(job, job_placement(job))


def full_log(client, job_id) -> str:
    return logs(client, job_id, cursor="0", limit_bytes=1024 * 1024).json()["text"]


def test_attempts_after_a_requeue_and_each_attempts_log(platform, submit, api_as):
    alice = api_as(platform["alice"])
    job_id = submit(
        platform["alice"], gpus_per_worker=8, checkpoint_interval_s=120, gpu_model="h100-80gb"
    ).json()["id"]
    run_cycle()
    advance(5)  # 5 simulated minutes: checkpoints at 2 and 4 minutes
    run_cycle()
    job = Job.objects.get(pk=job_id)
    assert job_requeue(job=job, now=timezone.now(), reason="preempted")
    run_cycle()
    advance(2)
    attempts = alice.get(f"/api/v1/jobs/{job_id}/attempts/").json()
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "requeued"), (2, "running")]
    assert attempts[0]["ended_at"] and attempts[0]["reason"] == "preempted"
    assert attempts[0]["lost_gpu_s"] > 0 and attempts[0]["gpus"] == 8
    assert attempts[1]["resumed_from_s"] == 240.0 and attempts[1]["ended_at"] is None

    old = logs(alice, job_id, attempt=1).json()
    assert (old["attempt"], old["finished"]) == (1, True)
    assert "[gpuplatform] attempt 1" in old["text"]
    new = logs(alice, job_id).json()
    assert (new["attempt"], new["finished"]) == (2, False)
    # The resumed attempt continues the loss curve from its checkpoint (step 5 = minute 4 + 1).
    assert "resumed from checkpoint at 240 s of work: step 5" in new["text"]
    old_steps = {line.split()[1]: line for line in old["text"].splitlines() if line[:4] == "step"}
    new_steps = {line.split()[1]: line for line in new["text"].splitlines() if line[:4] == "step"}
    assert min(int(s) for s in new_steps) == 5
    assert new_steps["5"] == old_steps["5"]  # the same step has the same loss: one curve


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"attempt": 2}, "attempt"),
        ({"attempt": 0}, "attempt"),
        ({"attempt": "x"}, "attempt"),
        ({"cursor": "../etc/passwd"}, "cursor"),
        ({"cursor": "k8s-1-2"}, "cursor"),  # not a cursor of this backend
        ({"limit_bytes": 0}, "limit_bytes"),
        ({"limit_bytes": 2 * 1024 * 1024}, "limit_bytes"),
    ],
)
def test_bad_parameters_are_400_naming_the_field(platform, submit, api_as, params, field):
    alice = api_as(platform["alice"])
    job_id = submit(platform["alice"], gpus_per_worker=1).json()["id"]
    run_cycle()
    response = logs(alice, job_id, **params)
    assert response.status_code == 400, response.content
    assert field in response.json()


def test_another_teams_job_is_404_and_viewers_may_read(platform, submit, api_as):
    job_id = submit(platform["alice"], gpus_per_worker=1).json()["id"]
    run_cycle()
    bob = api_as(platform["bob"])
    for path in ("logs", "attempts"):
        response = bob.get(f"/api/v1/jobs/{job_id}/{path}/")
        assert response.status_code == 404 and "attempt" not in response.content.decode()
    # 404 first: a bad parameter on another team's job does not reveal that it exists.
    assert logs(bob, job_id, attempt=99).status_code == 404
    assert api_as(None).get(f"/api/v1/jobs/{job_id}/logs/").status_code in (401, 403)
    assert logs(api_as(platform["charlie"]), job_id).status_code == 200
    assert logs(api_as(platform["admin"]), job_id).status_code == 200


def test_a_cluster_that_does_not_answer_is_503_not_500(platform, submit, api_as, tmp_path):
    job_id = submit(platform["alice"], gpus_per_worker=1).json()["id"]
    run_cycle()
    broken = Cluster.objects.create(
        name="unreachable",
        backend_kind="slurm",
        backend_config={"command_prefix": [str(tmp_path / "no-such-ssh"), "login"]},
    )
    Job.objects.filter(pk=job_id).update(cluster=broken)
    response = logs(api_as(platform["alice"]), job_id)
    assert response.status_code == 503
    assert "did not answer" in response.json()["cluster"][0]


def test_logs_and_attempts_are_in_the_openapi_schema(platform, api_as):
    schema = api_as(platform["alice"]).get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/jobs/{id}/logs/"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"attempt", "cursor", "limit_bytes"}
    assert "503" in operation["responses"]
    assert "/api/v1/jobs/{id}/attempts/" in schema["paths"]
    component = schema["components"]["schemas"]["JobLog"]["properties"]
    assert {"text", "cursor", "finished", "attempt", "truncated"} <= set(component)


# --- what a team's viewer reads of the output (scheduler.env_visibility.shown_log) -----------


def printing_job(platform, submit, tmp_path):
    """alice's running job, given ENV and COMMAND, and its output file (tests/joblogs.py)."""
    from tests.joblogs import COMMAND, ENV, OutputFile

    response = submit(platform["alice"], env=ENV, command=COMMAND)
    assert response.status_code == 201, response.content
    run_cycle()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == "running"
    return job, OutputFile(job, tmp_path)


def test_a_viewer_reads_the_jobs_env_values_and_secrets_masked(platform, submit, api_as, tmp_path):
    from tests.joblogs import MASKED, PRINTED, SECRET

    job, output = printing_job(platform, submit, tmp_path)
    output.write(PRINTED)
    viewer = logs(api_as(platform["charlie"]), job.pk).json()
    assert viewer["text"] == MASKED
    assert SECRET not in logs(api_as(platform["charlie"]), job.pk, cursor="0").content.decode()
    # those who may submit to the team read it as written: members, platform admins
    assert logs(api_as(platform["alice"]), job.pk).json()["text"] == PRINTED
    assert logs(api_as(platform["admin"]), job.pk).json()["text"] == PRINTED
    assert viewer["cursor"] == logs(api_as(platform["alice"]), job.pk).json()["cursor"]


def test_a_secret_written_across_two_reads_is_masked_for_a_viewer(
    platform, submit, api_as, tmp_path
):
    """A read that ends inside a line the job has not finished: the viewer reads that line
    when it is whole, so a value split by the read is still found."""
    from tests.joblogs import SECRET

    job, output = printing_job(platform, submit, tmp_path)
    charlie, alice = api_as(platform["charlie"]), api_as(platform["alice"])
    output.write(f"step 1\ntoken {SECRET[:8]}")
    first = logs(charlie, job.pk, cursor="0").json()
    assert first["text"] == "step 1\n" and first["finished"] is False
    # the member reads the unfinished line as it is
    assert logs(alice, job.pk, cursor="0").json()["text"] == f"step 1\ntoken {SECRET[:8]}"
    again = logs(charlie, job.pk, cursor=first["cursor"]).json()
    assert (again["text"], again["cursor"]) == ("", first["cursor"])  # still unfinished
    output.write(f"{SECRET[8:]} ok\nstep 2\n")
    second = logs(charlie, job.pk, cursor=first["cursor"]).json()
    assert second["text"] == "token [redacted] ok\nstep 2\n"
    assert logs(charlie, job.pk, cursor=second["cursor"]).json()["text"] == ""

    # A line longer than a read: broken after a blank, never inside the value.
    output.write("x" * 40 + f" {SECRET} and more words after it\n")
    pieces, cursor = [], second["cursor"]
    while text := (chunk := logs(charlie, job.pk, cursor=cursor, limit_bytes=48).json())["text"]:
        pieces.append(text)
        cursor = chunk["cursor"]
    assert "".join(pieces) == "x" * 40 + " [redacted] and more words after it\n"

    # Once the attempt is over, its unfinished last line is shown whole (nothing follows).
    output.write(f"crashed holding {SECRET}")
    tail = logs(charlie, job.pk, cursor=cursor).json()
    assert tail["text"] == "" and tail["finished"] is False
    Job.objects.filter(pk=job.pk).update(state="failed", finished_at=timezone.now())
    last = logs(charlie, job.pk, cursor=cursor).json()
    assert (last["text"], last["finished"]) == ("crashed holding [redacted]", True)
    assert logs(charlie, job.pk).json()["text"].endswith("crashed holding [redacted]")
