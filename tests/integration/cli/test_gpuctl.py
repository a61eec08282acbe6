"""``gpuctl`` against a live test server: login, submit (YAML and flags), ls, show, why, cancel,
quota, nodes, cost, and the exit-code contract (0 ok, 1 API error, 2 bad usage)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tomllib
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from scheduler.models import Job
from tenants.models import ApiToken

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "job.yaml"

GOOD_SPEC = """\
apiVersion: gpuplatform/v1
kind: TrainingJob
metadata:
  name: bert-pretrain
  team: vision
spec:
  image: registry.example.com/nlp/bert:1.0
  command: [python, train.py, --lr, "3e-4"]
  workers: 2
  gpusPerWorker: 8
  gpuModel: h100-80gb
  priorityClass: research
  preemptible: false
  checkpointIntervalSeconds: 30m
  runtimeLimit: 2h
  env: {NCCL_DEBUG: INFO, SEED: 7}
"""


@pytest.fixture(autouse=True)
def vision_may_opt_out_of_preemption(teams):
    """The specs and forms here ask for preemptible: false in a class whose jobs are
    preemptible, which needs the team's permission (its quota settings)."""
    from tenants.models import TeamEntitlements

    TeamEntitlements.objects.create(team=teams["vision"], may_opt_out_of_preemption=True)


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- login -------------------------------------------------------------------------------------


def test_login_saves_url_and_token_privately_and_never_prints_it(
    platform, live_server, gpuctl, cli_config
):
    result = gpuctl(
        "login", "--url", live_server.url, "-u", "alice", "--password-stdin", stdin="pw-alice\n"
    )
    assert result.code == 0, result.err
    saved = json.loads(cli_config.read_text())
    assert saved["url"] == live_server.url and saved["username"] == "alice"
    assert saved["token"].startswith(ApiToken.PREFIX)
    assert saved["token"] not in result.out + result.err
    assert stat.S_IMODE(cli_config.stat().st_mode) == 0o600
    assert ApiToken.objects.filter(user=platform["alice"], name="gpuctl").count() == 1
    # The saved token is what later commands use.
    assert gpuctl("ls").code == 0


def test_login_show_token_prints_the_token_once(platform, live_server, gpuctl, cli_config):
    result = gpuctl(
        "login",
        "--url",
        live_server.url,
        "-u",
        "alice",
        "--password-stdin",
        "--show-token",
        stdin="pw-alice\n",
    )
    assert result.code == 0, result.err
    token = json.loads(cli_config.read_text())["token"]
    assert result.out.count(token) == 1
    assert token not in gpuctl("ls").out


def test_login_with_a_wrong_password_exits_2_and_saves_nothing(
    platform, live_server, gpuctl, cli_config
):
    result = gpuctl(
        "login", "--url", live_server.url, "-u", "alice", "--password-stdin", stdin="wrong\n"
    )
    assert result.code == 2
    assert result.err.startswith("error:")
    assert not cli_config.exists()
    assert not ApiToken.objects.exists()


def test_commands_without_login_are_usage_errors(gpuctl):
    result = gpuctl("ls")
    assert result.code == 2
    assert "gpuctl login" in result.err


def test_env_token_overrides_the_saved_login(as_alice, live_server, platform, monkeypatch):
    from tenants.services import token_create

    _token, raw = token_create(user=platform["bob"], name="ci")
    monkeypatch.setenv("GPUCTL_TOKEN", raw)
    result = as_alice("submit", "-J", "bobs", "-N", "1", "--gpus-per-worker", "1", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["team"] == "nlp"  # bob's only team, picked automatically


# --- submit ------------------------------------------------------------------------------------


def test_submit_from_yaml_creates_the_job_as_specified(as_alice, tmp_path, platform):
    result = as_alice("submit", "-f", write(tmp_path, GOOD_SPEC))
    assert result.code == 0, result.err
    job = Job.objects.get()
    assert f"job {job.pk} submitted" in result.out and "pending" in result.out
    assert (job.name, job.team.slug, job.submitter) == (
        "bert-pretrain",
        "vision",
        platform["alice"],
    )
    assert (job.workers, job.gpus_per_worker, job.gpu_model.name) == (2, 8, "h100-80gb")
    assert job.priority_class.name == "research" and job.preemptible is False
    assert (job.checkpoint_interval_s, job.runtime_limit_s) == (1800, 7200)
    assert job.command == "python train.py --lr 3e-4"
    assert job.env == {"NCCL_DEBUG": "INFO", "SEED": "7"}


def test_the_documented_example_is_accepted_by_the_server(as_alice):
    result = as_alice("submit", "-f", str(EXAMPLE), "--json")
    assert result.code == 0, result.err
    body = json.loads(result.out)
    assert body["name"] == "resnet50-imagenet" and body["elastic"] == {
        "min_workers": 1,
        "max_workers": 4,
    }
    assert Job.objects.get(pk=body["id"]).dataset == "imagenet-1k"


def test_flags_override_the_file_and_team_defaults_to_the_only_one(as_alice, tmp_path):
    spec = GOOD_SPEC.replace("  team: vision\n", "")
    result = as_alice("submit", "-f", write(tmp_path, spec), "-N", "1", "-t", "90m", "--json")
    assert result.code == 0, result.err
    job = Job.objects.get(pk=json.loads(result.out)["id"])
    assert (job.team.slug, job.workers, job.runtime_limit_s) == ("vision", 1, 5400)


def test_bad_spec_exits_2_naming_every_field_and_sends_nothing(as_alice, tmp_path):
    bad = GOOD_SPEC.replace("workers: 2", "workers: 0").replace(
        "runtimeLimit: 2h", "runtimeLimit: soon"
    )
    result = as_alice("submit", "-f", write(tmp_path, bad))
    assert result.code == 2
    assert "error: spec.workers: must be an integer >= 1" in result.err
    assert "spec.runtimeLimit: 'soon' is not a duration" in result.err
    assert Job.objects.count() == 0


def test_bad_flag_exits_2_naming_the_flag(gpuctl):
    # No login and no server: validation comes first, so the flag is named, not the missing login.
    result = gpuctl("submit", "-J", "x", "--workers", "0", "--gpus-per-worker", "1")
    assert result.code == 2
    assert result.err == "error: --workers: must be an integer >= 1\n"
    assert gpuctl("submit", "-J", "x", "-N", "two", "--gpus-per-worker", "1").err == (
        "error: --workers: must be an integer, not 'two'\n"
    )


def test_a_submission_from_flags_alone_names_the_flags_it_lacks(gpuctl, tmp_path):
    """``gpuctl submit -- python train.py``, as ``sbatch --wrap`` is typed: the answer named
    spec paths of a file never written (``metadata: must be a mapping with at least a name``,
    ``spec.workers: is required``); it names the flags to add. A file's own paths stay."""
    result = gpuctl("submit", "--", "python", "train.py")
    assert result.code == 2
    assert result.err == (
        "error: --name: is required (a non-empty string)\n"
        "error: --workers: is required (an integer >= 1)\n"
        "error: --gpus-per-worker: is required (an integer >= 1)\n"
    )
    from_file = gpuctl("submit", "-f", write(tmp_path, "metadata: {}\nspec: {}\n"), "--dry-run")
    assert "error: metadata.name: is required" in from_file.err
    assert "error: spec.workers: is required" in from_file.err


def test_a_spec_that_is_not_utf8_exits_2_naming_the_file(gpuctl, tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(GOOD_SPEC.replace("vision", "vision\xe9").encode("latin-1"))
    for command in (("submit",), ("array", "submit"), ("estimate",)):
        result = gpuctl(*command, "-f", str(path))
        assert result.code == 2, (command, result.err)
        assert result.err.startswith("error: --file: not UTF-8 text (byte "), result.err
        assert "Traceback" not in result.err


def test_bad_spec_in_json_mode_reports_fields_as_json(gpuctl, tmp_path):
    result = gpuctl("submit", "--json", "-f", write(tmp_path, "apiVersion: v1\nkind: Pod\n"))
    assert result.code == 2
    error = json.loads(result.err)
    assert error["kind"] == "usage"
    assert {"apiVersion", "kind", "metadata", "spec"} <= set(error["fields"])


def test_server_rejection_exits_2_naming_the_spec_field(as_alice, tmp_path):
    spec = GOOD_SPEC.replace("gpuModel: h100-80gb", "gpuModel: tpu-v5")
    result = as_alice("submit", "-f", write(tmp_path, spec))
    assert result.code == 2
    assert "error: spec.gpuModel: unknown GPU model 'tpu-v5'" in result.err
    assert Job.objects.count() == 0


def test_server_rejection_of_a_flag_names_the_flag(as_alice):
    result = as_alice("submit", "-J", "x", "-N", "1", "--gpus-per-worker", "1", "--team", "nlp")
    assert result.code == 2
    assert "error: --team: " in result.err and "not a member" in result.err
    assert Job.objects.count() == 0


# --- ls, show, why -----------------------------------------------------------------------------


@pytest.fixture
def jobs(platform, submit):
    """Two of alice's jobs (vision) and one of bob's (nlp), all pending."""
    made = {}
    for user, name, team in (
        ("alice", "a-one", "vision"),
        ("alice", "a-two", "vision"),
        ("bob", "b-one", "nlp"),
    ):
        response = submit(platform[user], name=name, team=team, workers=1, gpus_per_worker=2)
        assert response.status_code == 201, response.json()
        made[name] = response.json()["id"]
    return made


def test_ls_shows_only_the_callers_teams_jobs(as_alice, jobs):
    result = as_alice("ls")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split()[:5] == ["ID", "NAME", "TEAM", "USER", "STATE"]
    assert [line.split()[1] for line in lines[1:]] == ["a-two", "a-one"]  # newest first
    assert "b-one" not in result.out

    as_json = json.loads(as_alice("ls", "--json").out)
    assert {j["id"] for j in as_json} == {jobs["a-one"], jobs["a-two"]}


def test_ls_and_quota_of_another_or_no_team_say_no_such_team(as_alice, jobs):
    """--team naming a team the caller does not see, or none: the server's 404, exit 1, as
    ``gpuctl cost --team`` (both printed an empty table and exited 0)."""
    for command in ("ls", "quota"):
        answers = []
        for team in ("nlp", "no-such-team"):
            result = as_alice(command, "--team", team)
            assert (result.code, result.out) == (1, ""), (command, team, result)
            assert "no such team" in result.err and "b-one" not in result.err
            answers.append(result.err)
        assert answers[0] == answers[1], answers  # B's team reads as a missing one
    assert as_alice("ls", "--team", "vision").code == 0


def test_ls_and_cancel_user_naming_no_one_you_see_are_bad_usage(as_alice, jobs):
    """``squeue -u nosuch`` says "Invalid user" and fails; ``gpuctl ls --user nosuch`` listed
    nothing and exited 0, as if the user had no jobs. Exit 2 naming the flag now, for ``cancel``'s
    same filter too, and a user of another team (bob, whose b-one alice does not see) reads as no
    user at all."""
    for name in ("nosuch", "bob"):
        for command in (("ls",), ("cancel", "--dry-run"), ("cancel",)):
            result = as_alice(*command, "--user", name)
            assert (result.code, result.out) == (2, ""), (command, name, result)
            assert result.err == f"error: --user: no member of your teams is called '{name}'\n"
    assert Job.objects.filter(state="pending").count() == 3  # nothing cancelled
    alone = json.loads(as_alice("ls", "--user", "alice", "--json").out)
    assert {j["name"] for j in alone} == {"a-one", "a-two"}
    # A team-mate without jobs (charlie) is someone: an empty table, exit 0.
    result = as_alice("ls", "--user", "charlie")
    assert result.code == 0 and result.out.splitlines()[1:] == [], result


def test_ls_user_as_a_platform_admin_takes_every_user(as_admin, jobs):
    listed = json.loads(as_admin("ls", "--user", "bob", "--json").out)
    assert [j["name"] for j in listed] == ["b-one"]
    result = as_admin("ls", "--user", "nosuch", "--json")
    assert result.code == 2 and result.out == ""
    assert json.loads(result.err) == {
        "error": "--user: no user is called 'nosuch'",
        "kind": "api",
        "fields": {"--user": ["no user is called 'nosuch'"]},
        "status": 400,
    }


def test_ls_filters_by_state(as_alice, jobs):
    assert as_alice("cancel", str(jobs["a-one"])).code == 0
    pending = json.loads(as_alice("ls", "--live", "--json").out)
    assert [j["name"] for j in pending] == ["a-two"]
    cancelled = json.loads(as_alice("ls", "--state", "cancelled", "--json").out)
    assert [j["name"] for j in cancelled] == ["a-one"]


def test_why_gives_the_pending_reason_and_estimated_start(as_alice, jobs):
    start = timezone.now() + timedelta(minutes=42)
    # What a scheduling cycle records for a job it cannot start yet.
    Job.objects.filter(pk=jobs["a-one"]).update(
        why_pending="waiting for 2 x h100-80gb (backfill reservation on n1, n2)",
        estimated_start=start,
    )
    result = as_alice("why", str(jobs["a-one"]))
    assert result.code == 0, result.err
    assert f"job {jobs['a-one']} (a-one) is pending: waiting for 2 x h100-80gb" in result.out
    assert f"estimated start: {start:%Y-%m-%d %H:%M} UTC (in 4" in result.out

    summary = json.loads(as_alice("why", str(jobs["a-one"]), "--json").out)
    assert summary["state"] == "pending" and summary["estimated_start"]

    unknown = as_alice("why", str(jobs["a-two"]))
    assert "estimated start: unknown" in unknown.out


def test_why_and_ls_after_a_real_scheduling_cycle(as_alice):
    from scheduler.backends import reset_backends
    from scheduler.loop.cycle import run_cycle

    reset_backends()
    flags = ["-N", "2", "--gpus-per-worker", "8", "--gpu-model", "h100-80gb", "-t", "1h"]
    first = json.loads(as_alice("submit", "-J", "big-1", *flags, "--json").out)["id"]
    second = json.loads(as_alice("submit", "-J", "big-2", *flags, "--json").out)["id"]
    try:
        assert run_cycle().started == [first]  # both H100 nodes go to the first job
    finally:
        reset_backends()

    running = as_alice("why", str(first))
    assert running.code == 0, running.err
    assert f"job {first} (big-1) is running since" in running.out
    assert "on: n1[0-7],n2[0-7]" in running.out

    waiting = as_alice("why", str(second))
    job = Job.objects.get(pk=second)
    assert job.state == "pending" and job.why_pending
    assert f"job {second} (big-2) is pending: {job.why_pending}" in waiting.out
    assert job.estimated_start is not None  # the engine reserves the nodes the first job frees
    assert f"estimated start: {job.estimated_start:%Y-%m-%d %H:%M} UTC" in waiting.out

    rows = {line.split()[1]: line for line in as_alice("ls").out.splitlines()[1:]}
    assert "running" in rows["big-1"] and "n1[0-7],n2[0-7]" in rows["big-1"]
    assert "pending" in rows["big-2"]


def test_show_prints_details_and_the_timeline(as_alice, jobs):
    result = as_alice("show", str(jobs["a-one"]))
    assert result.code == 0, result.err
    assert "Name:" in result.out and "a-one" in result.out
    assert "Events:" in result.out and "submitted" in result.out
    body = json.loads(as_alice("show", str(jobs["a-one"]), "--json").out)
    assert body["id"] == jobs["a-one"] and body["events"][0]["kind"] == "submitted"


def test_another_teams_job_is_not_found_and_untouched(as_alice, jobs):
    for command in ("show", "why", "cancel"):
        result = as_alice(command, str(jobs["b-one"]))
        assert result.code == 1, command
        assert "no such job" in result.err
    assert Job.objects.get(pk=jobs["b-one"]).state == "pending"


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_cancels_and_a_second_cancel_is_an_api_error(as_alice, jobs):
    result = as_alice("cancel", str(jobs["a-one"]))
    assert result.code == 0, result.err
    assert result.out == f"job {jobs['a-one']} cancelled\n"
    assert Job.objects.get(pk=jobs["a-one"]).state == "cancelled"

    again = as_alice("cancel", str(jobs["a-one"]), str(jobs["a-two"]))
    assert again.code == 1
    assert f"job {jobs['a-one']}: state: job is already cancelled" in again.err
    # The failure of the first id does not stop the second.
    assert Job.objects.get(pk=jobs["a-two"]).state == "cancelled"


def test_cancel_with_a_non_numeric_id_is_bad_usage(gpuctl):
    result = gpuctl("cancel", "abc")
    assert result.code == 2 and "JOB_ID: must be a number, not 'abc'" in result.err


@pytest.mark.parametrize("job_id", ["0", "9223372036854775808", "9" * 30])
def test_an_id_no_job_can_have_is_bad_usage_before_any_request(gpuctl, job_id):
    # no login and no server: the id is checked first
    result = gpuctl("show", job_id)
    assert result.code == 2
    assert result.err == "error: JOB_ID: must be between 1 and 9223372036854775807\n"


# --- quota, nodes, cost ------------------------------------------------------------------------


def test_quota_lists_the_teams_quotas(as_alice, platform, gpu_models, teams):
    from tenants.models import Quota

    Quota.objects.create(
        team=teams["vision"], gpu_model=gpu_models["h100"], guaranteed_gpus=16, borrow_limit_gpus=8
    )
    Quota.objects.create(
        team=teams["nlp"], gpu_model=gpu_models["h100"], guaranteed_gpus=4, borrow_limit_gpus=0
    )
    running = as_alice(
        "submit",
        "-J",
        "r",
        "-N",
        "2",
        "--gpus-per-worker",
        "4",
        "--gpu-model",
        "h100-80gb",
        "--json",
    )
    as_alice(
        "submit", "-J", "waiting", "-N", "1", "--gpus-per-worker", "8", "--gpu-model", "h100-80gb"
    )
    # What the loop records when it starts a job (only running jobs count as in use).
    Job.objects.filter(pk=json.loads(running.out)["id"]).update(state="running")
    result = as_alice("quota")
    assert result.code == 0, result.err
    rows = [line.split() for line in result.out.splitlines()[1:]]
    assert rows == [["vision", "h100-80gb", "16", "8", "8"]]
    as_json = json.loads(as_alice("quota", "--json").out)
    assert [(q["guaranteed_gpus"], q["in_use_gpus"]) for q in as_json] == [(16, 8)]


def test_nodes_lists_the_cluster(as_alice):
    result = as_alice("nodes")
    assert result.code == 0, result.err
    names = [line.split()[0] for line in result.out.splitlines()[1:]]
    assert sorted(names) == ["n1", "n2", "n3", "n4"]
    h100 = json.loads(as_alice("nodes", "--gpu-model", "h100-80gb", "--json").out)
    assert sorted(n["name"] for n in h100) == ["n1", "n2"]


def test_nodes_shows_what_a_down_node_comes_back_as(as_alice):
    from scheduler.models import Node

    Node.objects.filter(name="n3").update(
        state="down",
        state_reason="node failure",
        resume_state="draining",
        resume_reason="firmware update",
    )
    result = as_alice("nodes")
    assert result.code == 0, result.err
    (row,) = [line for line in result.out.splitlines() if line.startswith("n3 ")]
    assert "down, then draining" in row
    assert row.rstrip().endswith("node failure; draining: firmware update"), row
    (ready,) = [line for line in result.out.splitlines() if line.startswith("n1 ")]
    assert "then" not in ready


def test_nodes_with_an_unknown_state_names_the_states_and_exits_2(as_alice):
    """``gpuctl nodes --state drained`` (the example its help gave) printed "Select a valid
    choice. drained is not one of the available choices." and no state to use instead."""
    result = as_alice("nodes", "--state", "drained")
    assert result.code == 2 and result.out == ""
    assert result.err == (
        "error: state: unknown state 'drained' (known: ready, draining, quarantined, down, retired)\n"
    )
    ready = as_alice("nodes", "--state", "ready,draining")
    assert ready.code == 0, ready.err
    assert len(ready.out.splitlines()) == 5


def test_nodes_says_why_a_ready_node_gets_no_new_work(as_alice):
    """A node the cluster holds, or avoided after the cluster kept a run pending there, reads
    "ready": only the reason column says why nothing starts on it."""
    from datetime import timedelta

    from scheduler.models import Node

    Node.objects.filter(name="n2").update(cluster_hold="drained on the cluster: bios update")
    Node.objects.filter(name="n3").update(avoid_until=timezone.now() + timedelta(minutes=10))
    Node.objects.filter(name="n4").update(avoid_until=timezone.now() - timedelta(minutes=1))
    lines = {line.split()[0]: line for line in as_alice("nodes").out.splitlines()[1:]}
    assert lines["n2"].rstrip().endswith("no new work: drained on the cluster: bios update")
    assert "no new run until" in lines["n3"] and "(in 9m" in lines["n3"]
    assert "no new" not in lines["n4"] and "no new" not in lines["n1"]


def test_cost_shows_the_newest_months_statement_of_each_team(as_alice, teams, gpu_models):
    from datetime import date

    from billing.models import Statement, StatementEgressLine, StatementLine

    now = timezone.now()
    Statement.objects.create(team=teams["vision"], month=date(2026, 10, 1))  # older, open
    closed = Statement.objects.create(
        team=teams["vision"],
        month=date(2026, 11, 1),
        status="closed",
        mode="chargeback",
        total="1250.50",  # 1234.50 of GPU time + 16.00 of egress
        closed_at=now,
    )
    StatementLine.objects.create(
        statement=closed,
        team=teams["vision"],
        gpu_model=gpu_models["h100"],
        capacity="on_demand",
        gpu_hours="411.5",
        cost="1234.50",
    )
    StatementEgressLine.objects.create(
        statement=closed,
        team=teams["vision"],
        from_cluster="archive",
        to_cluster="cloud",
        charges=1,
        gb="800",
        cost="16.00",
    )
    Statement.objects.create(  # another team's: never shown
        team=teams["nlp"], month=date(2026, 11, 1), status="closed", total="9.00", closed_at=now
    )
    result = as_alice("cost", "--lines")
    assert result.code == 0, result.err
    table, lines = result.out.split("\n\n")
    assert [row.split() for row in table.splitlines()[1:]] == [
        ["vision", "2026-11", "closed", "chargeback", "411.50", "1250.50"]
    ]
    assert lines.splitlines()[1].split() == [
        "vision",
        "vision",
        "h100-80gb",
        "on_demand",
        "411.5000",
        "1234.50",
    ]
    assert lines.splitlines()[2].split() == [
        "vision",
        "vision",
        "egress",
        "archive->cloud",
        "-",
        "16.00",
    ]
    older = json.loads(as_alice("cost", "--month", "2026-10", "--json").out)
    assert [(s["team"], s["month"], s["status"]) for s in older] == [("vision", "2026-10", "open")]
    assert as_alice("cost", "--month", "11-2026").code == 2
    # Another team's costs: not found, as the cost API says (it printed "no statements", exit 0).
    other = as_alice("cost", "--team", "nlp")
    assert (other.code, other.out) == (1, "")
    assert "no such team" in other.err and "9.00" not in other.err


def test_cost_on_a_server_without_billing_says_so(as_alice, settings):
    # A server whose URLs have no billing API (billing not deployed).
    settings.ROOT_URLCONF = "tests.integration.cli.urls_without_billing"
    result = as_alice("cost")
    assert result.code == 1
    assert result.err == "error: cost reporting is not available on this server\n"


# --- the installed command, as a process -------------------------------------------------------


def test_console_script_is_declared_and_runs_as_a_process(as_alice, cli_config, tmp_path, jobs):
    scripts = tomllib.loads((ROOT / "gpuctl" / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["gpuctl"] == "gpuctl.main:main"
    env = {**os.environ, "GPUCTL_CONFIG": str(cli_config)}
    env.pop("DJANGO_SETTINGS_MODULE", None)

    # The installed console script when `make` installed the package, else the same entry point
    # through `python -m gpuctl`.
    script = Path(sys.executable).with_name("gpuctl")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "gpuctl"]

    def run(*args):
        return subprocess.run(
            [*command, *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = run("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {j["name"] for j in json.loads(listed.stdout)} == {"a-one", "a-two"}
    bad = run("submit", "-f", write(tmp_path, GOOD_SPEC.replace("gpusPerWorker", "gpusPerworker")))
    assert bad.returncode == 2
    assert "spec.gpusPerworker: unknown field (did you mean gpusPerWorker?)" in bad.stderr
    usage = run("frobnicate")
    assert usage.returncode == 2 and "invalid choice" in usage.stderr


def test_the_client_does_not_import_django():
    code = "import sys, gpuctl.main; print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))"
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_spec_deadline_is_sent_and_a_bad_one_exits_2(as_alice, tmp_path):
    from datetime import UTC, datetime, timedelta

    due = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    spec = GOOD_SPEC + f"  deadline: {due.isoformat().replace('+00:00', 'Z')}\n"
    result = as_alice("submit", "-f", write(tmp_path, spec), "--json")
    assert result.code == 0, result.err
    assert Job.objects.get(pk=json.loads(result.out)["id"]).deadline == due
    shown = as_alice("show", str(json.loads(result.out)["id"])).out
    assert f"{due:%Y-%m-%d %H:%M} UTC (in 1d" in shown, shown

    # format errors are gpuctl's, "in the future" is the server's (a 400): both exit 2, naming
    # the spec field
    for value, code, message in (
        ("friday", 2, "spec.deadline: 'friday' is not a time"),
        ("2030-01-31T18:00:00", 2, "spec.deadline: must include a time zone"),
        ("2001-01-31T18:00:00Z", 2, "spec.deadline: must be in the future"),
    ):
        result = as_alice("submit", "-f", write(tmp_path, GOOD_SPEC + f"  deadline: '{value}'\n"))
        assert result.code == code and message in result.err, (value, result.err)
    assert Job.objects.count() == 1
