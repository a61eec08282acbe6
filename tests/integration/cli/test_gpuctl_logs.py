"""``gpuctl logs``: the tail of a job's output, and ``-f`` following a running job on the
simulated cluster to its end (through a requeue), against a live server; scoping and bad usage."""

from __future__ import annotations

import json
import time

import pytest
from django.utils import timezone

from scheduler.loop.cycle import run_cycle
from scheduler.models import Job
from scheduler.transitions import job_requeue
from tests.integration.cli.background import Background, RestartingServer
from tests.simclock import SimulatedClock


@pytest.fixture(autouse=True)
def _simulated_minutes(sim_clock):
    return sim_clock


advance = SimulatedClock.advance


def _following(monkeypatch, *args: str) -> Background:
    """``gpuctl logs -f`` running in a thread (it blocks until the job ends)."""
    return Background(monkeypatch, "logs", "-f", "--interval", "0.1", *args)


def drive_until(job_id: int, state: str, timeout: float = 30.0) -> None:
    """The scheduling loop's part: a simulated minute per step, a cycle after each."""
    deadline = time.monotonic() + timeout
    while Job.objects.get(pk=job_id).state != state:
        assert time.monotonic() < deadline, f"job {job_id} never reached {state}"
        advance(1)
        run_cycle()
        time.sleep(0.3)


def test_logs_prints_the_tail(as_alice, platform, submit):
    job_id = submit(platform["alice"], gpus_per_worker=1, simulated_duration_s=600).json()["id"]
    pending = as_alice("logs", str(job_id))
    assert (pending.code, pending.out) == (0, "")
    run_cycle()
    advance(3)
    result = as_alice("logs", str(job_id))
    assert result.code == 0, result.err
    assert result.out.startswith("[gpuplatform] attempt 1 on n")
    assert "step      3  loss" in result.out
    as_json = json.loads(as_alice("logs", str(job_id), "--json").out)
    assert as_json["attempt"] == 1 and as_json["cursor"] and "step      3" in as_json["text"]


def test_follow_reads_a_running_job_to_its_end_through_a_requeue(
    as_alice, platform, submit, monkeypatch
):
    job_id = submit(
        platform["alice"], gpus_per_worker=1, simulated_duration_s=420, checkpoint_interval_s=120
    ).json()["id"]
    run_cycle()
    follower = _following(monkeypatch, str(job_id))
    drive_until(job_id, "running", timeout=5)
    advance(3)
    run_cycle()  # records the checkpoint at minute 2
    time.sleep(0.5)
    job = Job.objects.get(pk=job_id)
    assert job_requeue(job=job, now=timezone.now(), reason="preempted")
    run_cycle()  # attempt 2 starts, resuming from minute 2
    drive_until(job_id, "succeeded")
    code, out = follower.result()
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("[gpuplatform] attempt 1 on ")
    assert "--- attempt 2 ---" in lines
    second = lines.index("--- attempt 2 ---")
    assert lines[second + 1].startswith("[gpuplatform] attempt 2 on ")
    assert lines[-1] == "[gpuplatform] training finished"
    steps = [int(line.split()[1]) for line in lines[second:] if line.startswith("step ")]
    assert steps == list(range(3, 8))  # resumed after step 2; 7 minutes of work in all
    first_steps = [int(line.split()[1]) for line in lines[:second] if line.startswith("step ")]
    assert first_steps[:3] == [1, 2, 3] and len(first_steps) == len(set(first_steps))


def test_follow_outlasts_a_server_that_stops_answering_for_a_while(
    as_alice, platform, submit, monkeypatch, capsys, live_server
):
    """A deploy during a night's training ended ``logs -f`` with exit 1 at its first unanswered
    read, and the rest of the log was never shown. Once the first read is answered, "not now"
    answers (a dropped connection, 503) are noted once and read again, and no line is lost or
    shown twice."""
    job_id = submit(platform["alice"], gpus_per_worker=1, simulated_duration_s=300).json()["id"]
    run_cycle()
    front = RestartingServer(live_server.url)
    try:
        follower = _following(monkeypatch, str(job_id), "--url", front.url)
        front.outlasted_by(follower)
        drive_until(job_id, "succeeded")
        code, out = follower.result()
    finally:
        front.close()
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("[gpuplatform] attempt 1 on ")
    assert lines[-1] == "[gpuplatform] training finished"
    assert [int(line.split()[1]) for line in lines if line.startswith("step ")] == [1, 2, 3, 4, 5]
    assert capsys.readouterr().err.count("still following") == 1


def test_follow_with_attempt_stops_at_that_attempts_end(as_alice, platform, submit):
    job_id = submit(platform["alice"], gpus_per_worker=1, simulated_duration_s=600).json()["id"]
    run_cycle()
    advance(2)
    assert job_requeue(job=Job.objects.get(pk=job_id), now=timezone.now(), reason="test")
    result = as_alice("logs", str(job_id), "-f", "--attempt", "1", "--interval", "0.05")
    assert result.code == 0, result.err
    assert result.out.startswith("[gpuplatform] attempt 1") and "step      2" in result.out


def test_another_teams_job_and_bad_usage(as_alice, platform, submit):
    theirs = submit(platform["bob"], team="nlp", gpus_per_worker=1).json()["id"]
    result = as_alice("logs", str(theirs))
    assert result.code == 1 and "no such job" in result.err
    mine = submit(platform["alice"], gpus_per_worker=1).json()["id"]
    for flags, needle in (
        (["--attempt", "x"], "--attempt: must be a number"),
        (["--attempt", "0"], "--attempt: must be >= 1"),
        (["--interval", "0"], "--interval: must be >= 0.05"),
    ):
        bad = as_alice("logs", str(mine), *flags)
        assert bad.code == 2 and needle in bad.err, bad.err
    too_far = as_alice("logs", str(mine), "--attempt", "3")
    assert too_far.code == 2 and "attempt: the job has 0 attempts" in too_far.err


def test_a_viewer_reads_the_jobs_secrets_masked_a_member_as_written(
    as_alice, gpuctl, live_server, platform, submit, tmp_path, monkeypatch
):
    """``gpuctl logs`` and ``logs -f`` as the team's viewer: the env values the job printed and
    the token it was given are masked, also the one it wrote in two pieces; alice (a member)
    reads them as written."""
    from tests.joblogs import COMMAND, ENV, MASKED, PRINTED, SECRET, OutputFile

    job_id = submit(platform["alice"], env=ENV, command=COMMAND).json()["id"]
    run_cycle()
    output = OutputFile(Job.objects.get(pk=job_id), tmp_path)
    output.write(PRINTED + f"token {SECRET[:8]}")
    assert as_alice("logs", str(job_id)).out == PRINTED + f"token {SECRET[:8]}"

    login = gpuctl(
        "login", "--url", live_server.url, "-u", "charlie", "--password-stdin", stdin="pw-charlie\n"
    )
    assert login.code == 0, login.err
    assert gpuctl("logs", str(job_id)).out == MASKED
    follower = _following(monkeypatch, str(job_id))
    deadline = time.monotonic() + 30
    while not follower.out.getvalue():  # its first read; the unfinished line is held back
        assert time.monotonic() < deadline, "gpuctl logs -f printed nothing"
        time.sleep(0.05)
    output.write(f"{SECRET[8:]} ok\n")
    Job.objects.filter(pk=job_id).update(state="succeeded", finished_at=timezone.now())
    assert follower.result()[1] == MASKED + "token [redacted] ok\n"


def test_follow_json_is_one_object_per_line(as_alice, platform, submit, monkeypatch):
    """``logs -f --json`` wrote each chunk as an indented document, one after another, and one
    for every empty read: a stream no JSON parser reads (``json.load``: "Extra data") and that
    a line-by-line reader cannot split. Now JSON Lines: a compact object per line, for each
    chunk that has text or ends the attempt."""
    job_id = submit(platform["alice"], gpus_per_worker=1, simulated_duration_s=180).json()["id"]
    run_cycle()
    follower = _following(monkeypatch, str(job_id), "--json")
    time.sleep(1)  # several empty reads
    drive_until(job_id, "succeeded")
    code, text = follower.result()
    lines = text.splitlines()
    assert code == 0
    chunks = [json.loads(line) for line in lines]
    assert all(chunk["text"] or chunk["finished"] for chunk in chunks), chunks
    assert chunks[-1]["finished"] and chunks[-1]["attempt"] == 1
    text = "".join(chunk["text"] for chunk in chunks)
    assert text.startswith("[gpuplatform] attempt 1 on ")
    assert text.endswith("[gpuplatform] training finished\n")
