"""``gpuctl`` as a shell script uses it (as ``squeue``/``sbatch --wait`` are used): ``--mine``
means the token's user, ``ls`` lists what ``--limit`` asks for and ``--json`` says when the list
was cut, and ``wait`` blocks until jobs end with an exit status that tells success from failure."""

from __future__ import annotations

import json
import time

import pytest
from django.utils import timezone

from scheduler.loop.cycle import run_cycle
from scheduler.models import Job, JobState
from scheduler.transitions import job_finish
from tests.integration.cli.background import Background, RestartingServer
from tests.simclock import SimulatedClock


@pytest.fixture(autouse=True)
def _simulated_minutes(sim_clock):
    return sim_clock


def _token_of(user) -> str:
    from tenants.services import token_create

    _token, raw = token_create(user=user, name="ci")
    return raw


# --- ls --mine ---------------------------------------------------------------------------------


def test_mine_is_the_tokens_user_not_the_name_saved_at_login(
    as_alice, gpuctl, live_server, platform, submit, monkeypatch, cli_config
):
    """``GPUCTL_TOKEN`` overrides the saved login, so ``--mine`` must follow the token: it used
    the saved file's user name (bob's token listed alice's jobs: none he can see, exit 0, so a
    "wait until none of mine is pending" loop ended at once), and without a saved file (CI) it
    refused with exit 2."""
    submit(platform["alice"], name="alices")
    bobs = submit(platform["bob"], name="bobs", team="nlp").json()["id"]
    monkeypatch.setenv("GPUCTL_TOKEN", _token_of(platform["bob"]))

    result = as_alice("ls", "--mine", "--json")
    assert result.code == 0, result.err
    assert [job["id"] for job in json.loads(result.out)] == [bobs]

    cli_config.unlink()  # CI: no file at all, only the environment
    monkeypatch.setenv("GPUCTL_URL", live_server.url)
    result = gpuctl("ls", "--mine", "--json")
    assert result.code == 0, result.err
    assert [job["id"] for job in json.loads(result.out)] == [bobs]


# --- ls --limit --------------------------------------------------------------------------------


@pytest.fixture
def two_per_page(monkeypatch):
    """The server's largest page, made small enough to cross with a few jobs."""
    from tenants.pagination import BoundedLimitOffsetPagination

    monkeypatch.setattr(BoundedLimitOffsetPagination, "max_limit", 2)


def test_ls_lists_as_many_as_limit_asks_beyond_the_servers_page(
    as_alice, platform, submit, two_per_page
):
    """``--limit 4`` got the server's largest page (1,000 in production, 2 here) and no more."""
    ids = [submit(platform["alice"], name=f"j{i}").json()["id"] for i in range(5)]
    result = as_alice("ls", "--limit", "4", "--json")
    assert result.code == 0, result.err
    assert [job["id"] for job in json.loads(result.out)] == ids[::-1][:4]
    table = as_alice("ls", "--limit", "4")
    assert len(table.out.splitlines()) == 1 + 4 + 1, table.out
    assert "(4 of 5 shown; use --limit or filters)" in table.out


def test_ls_lists_each_job_once_when_one_is_submitted_between_pages(
    as_alice, platform, submit, two_per_page, monkeypatch
):
    """Newest first by offset: a job submitted while ``ls`` reads moves every later one down a
    place, so the next page began with the last of the one before (a script cancelling the
    list cancelled it twice, and the second failed)."""
    from gpuctl.client import Client

    ids = [submit(platform["alice"], name=f"j{i}").json()["id"] for i in range(4)]
    real_get = Client.get
    pages = []

    def get_then_submit(self, path, params=None):
        answer = real_get(self, path, params)
        pages.append(path)
        if len(pages) == 1:
            submit(platform["alice"], name="meanwhile")
        return answer

    monkeypatch.setattr(Client, "get", get_then_submit)
    result = as_alice("ls", "--limit", "4", "--json")
    assert result.code == 0, result.err
    assert [job["id"] for job in json.loads(result.out)] == ids[::-1]


def test_ls_json_says_on_stderr_when_the_list_was_cut(as_alice, platform, submit):
    """``ls --json`` printed the first 50 (the default --limit) and nothing else: a script
    cancelling "all my pending jobs" from it silently missed the rest."""
    for i in range(3):
        submit(platform["alice"], name=f"j{i}")
    cut = as_alice("ls", "--limit", "2", "--json")
    assert cut.code == 0, cut.err
    assert len(json.loads(cut.out)) == 2
    assert cut.err == "note: 2 of 3 jobs listed; use --limit or filters for the rest\n"
    whole = as_alice("ls", "--limit", "3", "--json")
    assert (whole.code, whole.err, len(json.loads(whole.out))) == (0, "", 3)


# --- wait --------------------------------------------------------------------------------------


def _waiting(monkeypatch, *args: str) -> Background:
    """``gpuctl wait`` running in a thread (it blocks until the jobs end)."""
    return Background(monkeypatch, "wait", "--interval", "0.1", *args)


def _running(platform, submit, n: int) -> list[int]:
    ids = [submit(platform["alice"], name=f"w{i}").json()["id"] for i in range(n)]
    run_cycle()
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"running"}
    return ids


def _end(job_id: int, state: JobState, exit_code: int | None) -> None:
    job = Job.objects.get(pk=job_id)
    assert job_finish(job=job, target=state, now=timezone.now(), exit_code=exit_code)


def test_wait_blocks_until_every_job_ends_and_exits_0_when_all_succeeded(
    as_alice, platform, submit, monkeypatch
):
    first, second = _running(platform, submit, 2)
    waiter = _waiting(monkeypatch, str(first), str(second))
    time.sleep(0.5)
    assert waiter.thread.is_alive()  # both still running: it waits
    _end(first, JobState.SUCCEEDED, 0)
    time.sleep(0.5)
    assert waiter.thread.is_alive()  # one still running
    _end(second, JobState.SUCCEEDED, 0)
    code, out = waiter.result()
    assert code == 0
    assert (
        out
        == f"job {first} (w0) succeeded, exit code 0\njob {second} (w1) succeeded, exit code 0\n"
    )


def test_wait_exits_3_when_a_job_failed_or_was_cancelled(as_alice, platform, submit):
    """What ``sbatch --wait`` gives a script: a failed job is a failed step under ``set -e``;
    1 stays "the request failed" (no such job, server unreachable)."""
    ok, bad, gone = _running(platform, submit, 3)
    _end(ok, JobState.SUCCEEDED, 0)
    _end(bad, JobState.FAILED, 137)
    assert as_alice("cancel", str(gone)).code == 0

    result = as_alice("wait", str(ok), str(bad), str(gone))
    assert result.code == 3, result
    assert result.out.splitlines() == [
        f"job {ok} (w0) succeeded, exit code 0",
        f"job {bad} (w1) failed, exit code 137",
        f"job {gone} (w2) cancelled",
    ]
    as_json = as_alice("wait", str(ok), str(bad), "--json")
    assert as_json.code == 3
    assert [(j["id"], j["state"], j["exit_code"]) for j in json.loads(as_json.out)] == [
        (ok, "succeeded", 0),
        (bad, "failed", 137),
    ]
    assert as_alice("wait", str(ok)).code == 0


def test_wait_timeout_exits_124_and_leaves_the_job_alone(as_alice, platform, submit):
    (job_id,) = _running(platform, submit, 1)
    started = time.monotonic()
    result = as_alice("wait", str(job_id), "--timeout", "0.5", "--interval", "0.1")
    assert 0.4 < time.monotonic() - started < 10
    assert result.code == 124, result
    assert f"job {job_id} (w0) is still running" in result.err
    as_json = as_alice("wait", str(job_id), "--timeout", "0", "--json")
    assert as_json.code == 124
    assert [job["state"] for job in json.loads(as_json.out)] == ["running"]
    assert json.loads(as_json.err) == {
        "error": "timed out: 1 job still live",
        "kind": "timeout",
        "fields": {str(job_id): ["still running"]},
    }
    assert Job.objects.get(pk=job_id).state == "running"


def test_wait_on_another_teams_or_no_job_is_not_found_and_bad_usage_exits_2(
    as_alice, platform, submit
):
    theirs = submit(platform["bob"], team="nlp").json()["id"]
    for job_id in (theirs, 999999):
        result = as_alice("wait", str(job_id))
        assert (result.code, result.out) == (1, ""), result
        assert "no such job" in result.err and "Traceback" not in result.err
    for flags, needle in (
        (["x"], "JOB_ID: must be a number"),
        (["1", "--interval", "0"], "--interval: must be >= 0.1"),
        (["1", "--timeout", "-1"], "--timeout: must be >= 0"),
        (["1", "--timeout", "nan"], "--timeout: must be a finite number"),
    ):
        bad = as_alice("wait", *flags)
        assert bad.code == 2 and needle in bad.err, (flags, bad)


def test_wait_follows_a_job_the_loop_runs_to_its_end(as_alice, platform, submit, monkeypatch):
    """Through the real loop on the simulated cluster, not a state written by the test."""
    job_id = submit(platform["alice"], name="real", simulated_duration_s=180).json()["id"]
    waiter = _waiting(monkeypatch, str(job_id))
    deadline = time.monotonic() + 30
    while Job.objects.get(pk=job_id).state != "succeeded":
        assert time.monotonic() < deadline, "the job never finished"
        SimulatedClock.advance(1)
        run_cycle()
        time.sleep(0.2)
    assert waiter.result() == (0, f"job {job_id} (real) succeeded, exit code 0\n")


def test_wait_outlasts_a_server_that_stops_answering_for_a_while(
    as_alice, platform, submit, monkeypatch, capsys, live_server
):
    """A night's wait met a deploy: the first unanswered read ended it, exit 1, with the job
    still running. Once the job has been read, "not now" answers (unreachable, 502-504, 429)
    are noted once and asked again; a first read that fails still fails at once."""
    (job_id,) = _running(platform, submit, 1)
    front = RestartingServer(live_server.url)
    try:
        waiter = _waiting(monkeypatch, str(job_id), "--url", front.url)
        front.outlasted_by(waiter)
        _end(job_id, JobState.SUCCEEDED, 0)
        assert waiter.result() == (0, f"job {job_id} (w0) succeeded, exit code 0\n")
    finally:
        front.close()
    noted = capsys.readouterr().err
    assert noted.count("still waiting") == 1, noted

    nowhere = as_alice("wait", str(job_id), "--url", "http://127.0.0.1:9")
    assert nowhere.code == 1 and "cannot reach" in nowhere.err


# --- submit --wait ------------------------------------------------------------------------------


def _created(query, count: int) -> list[int]:
    """The ids of the ``count`` jobs ``query`` selects, once the command has created them."""
    deadline = time.monotonic() + 10
    while len(ids := sorted(query.values_list("pk", flat=True))) < count:
        assert time.monotonic() < deadline, "the jobs were never created"
        time.sleep(0.05)
    return ids


ONE_GPU = ("-N", "1", "--gpus-per-worker", "1", "--", "python", "train.py")


def test_submit_wait_blocks_until_the_job_ends_and_exits_as_wait_does(as_alice, monkeypatch):
    """``sbatch --wait``: a pipeline step submits and blocks on the outcome in one command. Its
    absence made every script pair submit with a parse of its id and a wait."""
    run = Background(
        monkeypatch, "submit", "--wait", "--wait-interval", "0.1", "-J", "step", *ONE_GPU
    )
    (job_id,) = _created(Job.objects.filter(name="step"), 1)
    run_cycle()
    time.sleep(0.5)
    assert run.thread.is_alive()  # running: it waits
    _end(job_id, JobState.FAILED, 137)
    code, out = run.result()
    lines = out.splitlines()
    assert code == 3, out
    assert lines[0].startswith(f"job {job_id} submitted (step, team vision): pending")
    assert lines[1:] == [f"job {job_id} (step) failed, exit code 137"]


def test_array_submit_wait_reads_the_arrays_counts_until_every_job_ended(as_alice, monkeypatch):
    """An array is waited for by its count per state, one read per interval for the whole
    array; ``--json`` prints one document, the array at its end."""
    run = Background(
        monkeypatch,
        "array", "submit", "--wait", "--wait-interval", "0.1", "--count", "2", "-J", "pair",
        "--json", *ONE_GPU,
    )  # fmt: skip
    first, second = _created(Job.objects.filter(array__isnull=False), 2)
    run_cycle()
    _end(first, JobState.SUCCEEDED, 0)
    time.sleep(0.5)
    assert run.thread.is_alive()  # one still running
    _end(second, JobState.SUCCEEDED, 0)
    code, out = run.result()
    assert code == 0, out
    array = json.loads(out)
    assert (array["name"], array["size"], array["counts"]["succeeded"]) == ("pair", 2, 2)


def test_submit_wait_refuses_a_bad_interval_before_sending(as_alice):
    result = as_alice("submit", "--wait", "--wait-interval", "0", "-J", "never", *ONE_GPU)
    assert result.code == 2 and "--wait-interval: must be >= 0.1" in result.err
    assert not Job.objects.filter(name="never").exists()


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_json_reports_every_failure_in_one_error_object(as_alice, platform, submit):
    """With --json the errors are one JSON object on stderr (docs/jobspec.md); cancel wrote one
    per job that failed, a stream no JSON parser reads, each with its reason out of ``fields``."""
    live, done = (submit(platform["alice"], name=f"c{i}").json()["id"] for i in range(2))
    theirs = submit(platform["bob"], team="nlp").json()["id"]
    assert as_alice("cancel", str(done)).code == 0

    result = as_alice("cancel", "--json", str(live), str(done), str(theirs))
    assert result.code == 1
    assert [job["id"] for job in json.loads(result.out)] == [live]
    error = json.loads(result.err)
    assert error["kind"] == "api"
    assert error["fields"] == {
        str(done): ["state: job is already cancelled"],
        str(theirs): ["id: no such job"],
    }
    assert error["error"] == "2 of 3 jobs not cancelled"
    assert "status" not in error  # 409 and 404: no one status for the whole
    assert Job.objects.get(pk=theirs).state == "pending"

    one = as_alice("cancel", "--json", str(done))
    assert json.loads(one.err) == {
        "error": f"job {done}: state: job is already cancelled",
        "kind": "api",
        "fields": {str(done): ["state: job is already cancelled"]},
        "status": 409,
    }
