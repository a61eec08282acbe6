"""``gpuctl whatif`` against a live server: an admin runs a what-if over the demo's history with
a candidate file, waits while it replays (in the server's background thread, as in the embedded
demo), and gets the policies side by side; show / list / cancel act on kept runs; bad input is
exit 2 naming the field (found locally or by the API), and a member gets the API's 404."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model

from policyversions.models import WhatIfRun

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def demo_admin(settings, live_server, gpuctl):
    from demo.seed import seed

    settings.DEBUG = True
    # No broker: the server replays in a thread of its own, as the embedded demo does.
    settings.REDIS_URL = ""
    seed(jobs=0, history_days=2)
    users = get_user_model().objects
    for name in ("admin", "alice"):
        user = users.get(username=name)
        user.set_password(f"pw-{name}")
        user.save()

    def login(name: str):
        result = gpuctl(
            "login", "--url", live_server.url, "--username", name, "--password-stdin",
            stdin=f"pw-{name}\n",
        )  # fmt: skip
        assert result.code == 0, result.err
        return gpuctl

    return login


def test_an_admin_runs_a_whatif_and_sees_it_side_by_side(demo_admin, tmp_path):
    gpuctl = demo_admin("admin")
    candidate = tmp_path / "patient.yaml"
    candidate.write_text("queue_aging_s: 86400\n")
    done = gpuctl("whatif", "run", "--window", "2d", "--candidate", str(candidate))
    assert done.code == 0, done.err
    run = WhatIfRun.objects.get()
    assert run.status == "succeeded" and set(run.candidates) == {"patient"}
    lines = done.out.splitlines()
    header = next(line for line in lines if line.startswith("METRIC"))
    assert header.split() == ["METRIC", "gpuplatform", "patient"]
    wait_row = next(line for line in lines if line.startswith("avg wait s"))
    assert wait_row.split()[-2:] == [
        f"{run.results['gpuplatform']['avg_queue_s']:.0f}",
        f"{run.results['patient']['avg_queue_s']:.0f}",
    ]
    assert any(line.startswith("TEAM") for line in lines)
    assert f"run {run.pk}: " in done.err  # progress on stderr

    shown = gpuctl("whatif", "show", str(run.pk), "--json")
    assert shown.code == 0 and json.loads(shown.out)["results"] == run.results
    listed = gpuctl("whatif", "list")
    assert listed.code == 0 and "patient" in listed.out and "succeeded" in listed.out
    again = gpuctl("whatif", "cancel", str(run.pk))
    assert again.code == 1 and "already succeeded" in again.err


def test_a_candidate_file_holds_a_whole_policy(demo_admin, tmp_path):
    """The same three parts as ``gpuctl policy apply FILE``: the engine configuration, team
    weights and priority classes; the tables show each policy's fair share."""
    gpuctl = demo_admin("admin")
    candidate = tmp_path / "whole.yaml"
    candidate.write_text(
        "engine_config:\n  queue_aging_s: 86400\n"
        "team_weights:\n  nlp: 4\n"
        "priority_classes:\n"
        "  research: {value: 600, preemptible_by_default: true, restricted: false}\n"
    )
    done = gpuctl("whatif", "run", "--window", "2d", "--candidate", str(candidate))
    assert done.code == 0, done.err
    run = WhatIfRun.objects.get()
    assert run.status == "succeeded"
    assert run.candidates["whole"] == {
        "engine_config": {"queue_aging_s": 86400},
        "team_weights": {"nlp": 4.0},
        "priority_classes": {
            "research": {"value": 600, "preemptible_by_default": True, "restricted": False}
        },
    }
    lines = done.out.splitlines()
    header = next(line for line in lines if line.startswith("TEAM"))
    assert "gpuplatform FAIR SHARE" in header and "whole FAIR SHARE" in header
    nlp = next(line for line in lines if line.startswith("nlp ")).split()
    fair_now, fair_whole = float(nlp[3]), float(nlp[6])
    assert fair_whole > fair_now


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--window", "soon"], "--window: expected a length like 30d"),
        (["--window", "120d"], "window_days: must be more than 0 and at most 90 days"),
        ([], "give at least one --candidate FILE or --version N"),
        (["--candidate", "BAD"], "No such file"),
        (["--candidate", "BADCONFIG"], "candidates.bad.queue_aging_s"),
        (["--version", "x"], "--version: must be a version number"),
        (["--candidate", "GHOSTTEAM"], "candidates.ghost.team_weights.nobody: no such team"),
        (["--candidate", "STRAYKEY"], "stray.json.queue_aging_s: unknown key"),
        (["--candidate", "HUGE"], "candidates.huge.las.long_run_s: must be <="),
    ],
)
def test_bad_input_is_exit_2_naming_the_field(demo_admin, tmp_path, args, message):
    gpuctl = demo_admin("admin")
    bad = tmp_path / "bad.json"
    bad.write_text('{"queue_aging_s": -3}')
    (tmp_path / "ghost.json").write_text('{"team_weights": {"nobody": 2}}')
    (tmp_path / "stray.json").write_text('{"team_weights": {}, "queue_aging_s": 5}')
    (tmp_path / "huge.yaml").write_text("las:\n  long_run_s: 1.0e+300\n")
    files = {
        "BADCONFIG": str(bad),
        "BAD": str(tmp_path / "missing"),
        "GHOSTTEAM": str(tmp_path / "ghost.json"),
        "STRAYKEY": str(tmp_path / "stray.json"),
        "HUGE": str(tmp_path / "huge.yaml"),
    }
    args = [files.get(a, a) for a in args]
    if "--candidate" not in args and args != []:
        args += ["--candidate", str(bad).replace("bad.json", "ok.json")]
        (tmp_path / "ok.json").write_text("{}")
    result = gpuctl("whatif", "run", *args)
    assert result.code == 2, (result.out, result.err)
    assert message in result.err
    assert not WhatIfRun.objects.exists()


def test_a_member_gets_not_found(demo_admin, tmp_path):
    gpuctl = demo_admin("alice")
    candidate = tmp_path / "mine.json"
    candidate.write_text("{}")
    result = gpuctl("whatif", "run", "--candidate", str(candidate))
    assert result.code == 1 and "not found" in result.err.lower()
    assert gpuctl("whatif", "list").code == 1
    assert not WhatIfRun.objects.exists()


def test_a_window_over_the_job_cap_is_exit_2_naming_the_window_and_the_count(
    demo_admin, tmp_path, settings
):
    settings.WHATIF_MAX_JOBS = 3
    gpuctl = demo_admin("admin")
    candidate = tmp_path / "c.json"
    candidate.write_text('{"queue_aging_s": 600}')
    result = gpuctl("whatif", "run", "--window", "2d", "--candidate", str(candidate))
    assert result.code == 2, (result.out, result.err)
    assert "window_days: the 2 days from " in result.err
    assert "finished jobs of cluster demo, more than a replay takes (WHATIF_MAX_JOBS: 3)" in (
        result.err
    )
    assert not WhatIfRun.objects.exists()
