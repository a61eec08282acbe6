"""``gpuctl`` and job arrays against a live test server: submit (the spec's ``array`` section,
``gpuctl array submit``, ``--count``), list, get, cancel, and the exit-code contract (local
validation: 2, nothing sent; server refusal: 1, naming the user's own field)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scheduler.arrays import ArrayRequest, array_submit
from scheduler.models import Job, JobArray

ROOT = Path(__file__).resolve().parents[3]
SWEEP = ROOT / "examples" / "sweep.yaml"
JOB = ROOT / "examples" / "job.yaml"

SPEC = """\
apiVersion: gpuplatform/v1
kind: TrainingJob
metadata:
  name: sweep
  team: vision
spec:
  workers: 1
  gpusPerWorker: 1
  gpuModel: h100-80gb
"""


def write(tmp_path: Path, text: str, name: str = "sweep.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def server_array(user, team="vision", n=3, name="lr"):
    return array_submit(
        user=user,
        request=ArrayRequest(
            name=name, team=team, template={"workers": 1, "gpus_per_worker": 1}, items=[{}] * n
        ),
    )


# --- submit ------------------------------------------------------------------------------------


def test_the_example_sweep_submits_one_array_as_specified(as_alice, platform):
    result = as_alice("submit", "-f", str(SWEEP))
    assert result.code == 0, result.err
    array = JobArray.objects.get()
    assert result.out == (
        f"array {array.pk} submitted (resnet50-lr-sweep, team vision): 4 jobs 4 pending\n"
    )
    assert (array.size, array.team.slug, array.submitter) == (4, "vision", platform["alice"])
    jobs = list(Job.objects.filter(array=array).order_by("array_index"))
    assert [j.env["LR"] for j in jobs] == ["0.1", "0.01", "0.001", "0.0001"]
    assert [j.env["WD"] for j in jobs] == ["1e-4", "1e-4", "0", "0"]
    assert {j.env["NCCL_DEBUG"] for j in jobs} == {"WARN"}
    assert [(j.gpus_per_worker, j.runtime_limit_s) for j in jobs] == [
        (2, 7200),
        (2, 7200),
        (2, 7200),
        (4, 14400),
    ]
    assert [j.name for j in jobs][-1] == "resnet50-lr-sweep-3"


def test_array_submit_with_count_and_flags(as_alice):
    result = as_alice(
        "array", "submit", "--count", "3", "-J", "seeds", "-N", "1", "--gpus-per-worker", "1",
        "-e", "EPOCHS=5", "--json", "--", "python", "train.py",
    )  # fmt: skip
    assert result.code == 0, result.err
    body = json.loads(result.out)
    assert (body["name"], body["size"], body["counts"]["pending"]) == ("seeds", 3, 3)
    jobs = Job.objects.filter(array_id=body["id"])
    assert jobs.count() == 3 and {j.command for j in jobs} == {"python train.py"}
    assert {j.env["EPOCHS"] for j in jobs} == {"5"}


def test_array_submit_of_a_spec_without_array_is_exit_2_and_sends_nothing(as_alice):
    result = as_alice("array", "submit", "-f", str(JOB))
    assert result.code == 2
    assert result.err.startswith("error: array: is required")
    assert not Job.objects.exists()


def test_bad_array_spec_exits_2_naming_every_field_and_sends_nothing(as_alice, tmp_path):
    bad = SPEC + (
        "array:\n"
        "  count: 3\n"
        "  env: {LR: [0.1, 0.01]}\n"
        "  items: [{}, {gpusPerworker: 2}, {workers: 0}]\n"
        "  size: 3\n"
    )
    result = as_alice("submit", "-f", write(tmp_path, bad))
    assert result.code == 2
    lines = result.err.splitlines()
    assert "error: array.size: unknown field" in lines
    assert (
        "error: array.items[1].gpusPerworker: unknown field (did you mean gpusPerWorker?)" in lines
    )
    assert "error: array.items[2].workers: must be an integer >= 1" in lines
    assert "error: array.env.LR: has 2 entries but array.count gives 3 indices" in lines
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_bad_count_flag_names_the_flag_without_a_server(gpuctl):
    result = gpuctl("array", "submit", "-J", "x", "-N", "1", "--gpus-per-worker", "1",
                    "--count", "many")  # fmt: skip
    assert (result.code, result.err) == (2, "error: --count: must be an integer, not 'many'\n")
    as_json = gpuctl("array", "submit", "--json", "-J", "x", "-N", "1", "--gpus-per-worker",
                     "1", "--count", "0")  # fmt: skip
    assert as_json.code == 2
    assert json.loads(as_json.err)["fields"] == {"--count": ["must be an integer >= 1"]}


def test_server_rejection_of_one_index_names_it_and_creates_nothing(as_alice, tmp_path):
    spec = SPEC + "array:\n  items: [{}, {gpuModel: tpu-v5}, {}]\n"
    result = as_alice("submit", "-f", write(tmp_path, spec))
    assert result.code == 2
    assert "error: array.items[1].gpuModel: unknown GPU model 'tpu-v5'" in result.err
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_server_rejection_of_the_template_names_the_spec_field(as_alice, tmp_path):
    spec = SPEC.replace("gpusPerWorker: 1", "gpusPerWorker: 16") + "array:\n  count: 2\n"
    result = as_alice("submit", "-f", write(tmp_path, spec))
    assert result.code == 2
    assert "error: spec.gpusPerWorker: 16 GPUs per worker is more than" in result.err
    assert not Job.objects.exists()


def test_dry_run_prints_the_request_and_sends_nothing(gpuctl):
    result = gpuctl("submit", "-f", str(SWEEP), "--dry-run", "--json")
    assert result.code == 0, result.err
    body = json.loads(result.out)
    assert body["template"]["gpus_per_worker"] == 2 and len(body["items"]) == 4
    assert body["items"][2]["env"] == {"LR": "0.001", "WD": "0"}


# --- list, get, cancel -------------------------------------------------------------------------


@pytest.fixture
def arrays(platform):
    mine = server_array(platform["alice"], n=3, name="alice-sweep")
    server_array(platform["bob"], team="nlp", n=2, name="bob-secret-sweep")
    Job.objects.filter(array=mine, array_index=0).update(state="running")
    return mine


def test_array_list_shows_only_my_teams_arrays_with_counts(as_alice, arrays):
    result = as_alice("array", "list")
    assert result.code == 0, result.err
    header, *rows = result.out.splitlines()
    assert header.split()[:7] == ["ID", "NAME", "TEAM", "USER", "SIZE", "PENDING", "RUNNING"]
    assert len(rows) == 1 and rows[0].split()[:7] == [
        str(arrays.pk), "alice-sweep", "vision", "alice", "3", "2", "1",
    ]  # fmt: skip
    assert "bob-secret-sweep" not in result.out
    as_json = json.loads(as_alice("array", "ls", "--json").out)
    assert [a["id"] for a in as_json] == [arrays.pk]


def test_array_get_gives_counts_and_jobs(as_alice, arrays):
    result = as_alice("array", "get", str(arrays.pk), "--jobs")
    assert result.code == 0, result.err
    assert re.search(r"^Pending: +2$", result.out, re.M)
    assert re.search(r"^Running: +1$", result.out, re.M)
    assert "Template workers:" in result.out
    jobs = result.out.split("Jobs:\n")[1].splitlines()
    assert jobs[0].split()[:4] == ["INDEX", "ID", "NAME", "STATE"]
    assert [line.split()[0] for line in jobs[1:]] == ["0", "1", "2"]
    body = json.loads(as_alice("array", "get", str(arrays.pk), "--json").out)
    assert body["counts"]["pending"] == 2 and "jobs" not in body


def test_another_teams_array_is_not_found(as_alice, platform):
    other = server_array(platform["bob"], team="nlp")
    for action in ("get", "cancel"):
        result = as_alice("array", action, str(other.pk))
        assert result.code == 1 and "no such job array" in result.err, result.err
    assert set(Job.objects.filter(array=other).values_list("state", flat=True)) == {"pending"}


def test_array_cancel_cancels_every_live_job(as_alice, arrays):
    result = as_alice("array", "cancel", str(arrays.pk))
    assert result.code == 0, result.err
    assert result.out == f"array {arrays.pk} cancelled (alice-sweep): 3 cancelled\n"
    assert set(Job.objects.filter(array=arrays).values_list("state", flat=True)) == {"cancelled"}
    again = as_alice("array", "cancel", str(arrays.pk))
    assert again.code == 1 and "no job of this array is live" in again.err


def test_viewer_cannot_cancel_an_array(platform, live_server, gpuctl, arrays):
    login = gpuctl(
        "login", "--url", live_server.url, "-u", "charlie", "--password-stdin",
        stdin="pw-charlie\n",
    )  # fmt: skip
    assert login.code == 0, login.err
    assert gpuctl("array", "get", str(arrays.pk)).code == 0
    result = gpuctl("array", "cancel", str(arrays.pk))
    assert result.code == 1 and "viewers cannot cancel" in result.err, result.err
    assert Job.objects.filter(array=arrays, state="cancelled").count() == 0


@pytest.mark.parametrize("text", ["abc", "0", "-3"])
def test_bad_array_id_is_exit_2(gpuctl, text):
    for action in ("get", "cancel"):
        result = gpuctl("array", action, text)
        assert result.code == 2 and result.err.startswith("error: ARRAY_ID: must be a number")


def test_array_without_an_action_is_exit_2(gpuctl):
    result = gpuctl("array")
    assert result.code == 2 and "ACTION" in result.err
