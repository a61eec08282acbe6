"""The last cycle's snapshot is dumped as contract JSON and replays offline to the same
decisions."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from scheduler.loop.cycle import run_cycle

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[3]


def test_dump_snapshot_replays_with_the_policy_cli(platform, submit, tmp_path, api_as):
    submit(platform["alice"], name="fits", gpus_per_worker=4)
    submit(platform["alice"], name="too-big", workers=5, gpus_per_worker=8)
    run_cycle()
    out = tmp_path / "snapshot.json"
    call_command("dump_snapshot", "--out", str(out))
    snapshot = json.loads(out.read_text())
    assert {"now", "nodes", "running", "pending", "teams"} <= set(snapshot)
    assert len(snapshot["nodes"]) == 4
    replay = subprocess.run(
        [sys.executable, "-m", "scheduler.policy", "decide", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert replay.returncode == 0, replay.stderr
    decisions = json.loads(replay.stdout)
    assert [p["job"] for p in decisions["pending"]] == [
        str(j["id"])
        for j in api_as(platform["alice"]).get("/api/v1/jobs/?state=pending").json()["results"]
    ]
    # The admin endpoint serves the same remembered cycle; other users get 403.
    assert api_as(platform["alice"]).get("/api/v1/admin/last-cycle").status_code == 403
    body = api_as(platform["admin"]).get("/api/v1/admin/last-cycle").json()
    assert body["snapshot"]["pending"] == snapshot["pending"]
