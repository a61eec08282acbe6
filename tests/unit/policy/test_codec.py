"""Rule 1: snapshot and decision dataclasses, JSON load/dump with field-level validation, and
the `python -m scheduler.policy decide` command line."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.policy import (
    Decisions,
    Pending,
    Preempt,
    Reserve,
    Resize,
    SnapshotError,
    Start,
    decide,
    decisions_from_dict,
    decisions_to_dict,
    snapshot_from_dict,
    snapshot_to_dict,
)
from scheduler.policy.__main__ import main

ROOT = Path(__file__).resolve().parents[3]

CONTRACT_EXAMPLE = {
    "now": 7200.0,
    "config": {
        "backfill": True,
        "preemption": True,
        "checkpoint_protect_s": 300,
        "preemption_grace_s": 120,
        "fair_share_half_life_s": 604800,
        "min_health": 0.5,
    },
    "priority_classes": {"production": 1000, "research": 500, "best-effort": 100},
    "teams": [
        {"name": "research", "parent": None, "weight": 1.0, "quota": {}, "usage_gpu_s": 0.0},
        {
            "name": "vision",
            "parent": "research",
            "weight": 2.0,
            "quota": {"h100": {"guaranteed": 16, "borrow_limit": 16}},
            "usage_gpu_s": 86400.0,
        },
    ],
    "nodes": [
        {
            "name": "r1-n01",
            "gpu_model": "h100",
            "gpus": 8,
            "free_gpus": [0, 1, 2, 3, 4, 5, 6, 7],
            "zone": "z1",
            "rack": "r1",
            "nvlink_domain": "r1-n01",
            "fabric": "ib1",
            "spot": False,
            "health": 1.0,
            "state": "ready",
            "datasets": ["c4"],
        },
        {"name": "r1-n02", "gpu_model": "h100", "gpus": 8, "free_gpus": [4, 5, 6, 7]},
    ],
    "running": [
        {
            "id": "job-41",
            "team": "vision",
            "priority_class": "research",
            "gpu_model": "h100",
            "workers": 1,
            "gpus_per_worker": 4,
            "placement": {"r1-n02": [0, 1, 2, 3]},
            "started_at": 3600.0,
            "expected_end": 10800.0,
            "preemptible": True,
            "last_checkpoint_at": 6000.0,
            "checkpoint_interval_s": 1800,
            "elastic": None,
        }
    ],
    "pending": [
        {
            "id": "job-57",
            "team": "vision",
            "priority_class": "production",
            "gpu_model": "h100",
            "workers": 2,
            "gpus_per_worker": 8,
            "submitted_at": 7000.0,
            "runtime_estimate_s": 3600,
            "preemptible": False,
            "dataset": "c4",
            "dataset_ready": True,
            "elastic": {"min_workers": 1, "max_workers": 4},
        }
    ],
}


def test_rule_1_contract_example_loads_and_round_trips():
    s = snapshot_from_dict(CONTRACT_EXAMPLE)
    assert s.teams[1].quota["h100"].borrow_limit == 16
    assert s.nodes[1].rack == "" and s.nodes[1].state == "ready"
    assert s.running[0].placement == {"r1-n02": (0, 1, 2, 3)}
    assert snapshot_from_dict(snapshot_to_dict(s)) == s
    assert json.loads(json.dumps(snapshot_to_dict(s))) == snapshot_to_dict(s)


def test_rule_1_config_keys_are_optional_with_documented_defaults():
    data = copy.deepcopy(CONTRACT_EXAMPLE)
    del data["config"]
    c = snapshot_from_dict(data).config
    assert (c.backfill, c.preemption, c.checkpoint_protect_s, c.preemption_grace_s) == (
        True,
        True,
        300.0,
        120.0,
    )
    assert (c.fair_share_half_life_s, c.min_health, c.queue_order) == (604800.0, 0.5, "fair")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["pending"][0].update(workers=0), "pending[0].workers: must be >= 1"),
        (lambda d: d["pending"][0].update(workers=1.5), "pending[0].workers: must be an integer"),
        (lambda d: d["pending"][0].pop("id"), "pending[0].id: is required"),
        (
            lambda d: d["pending"][0].update(priority_class="vip"),
            "pending[0].priority_class: unknown priority class 'vip'",
        ),
        (
            lambda d: d["nodes"][0].update(free_gpus=[0, 8]),
            "nodes[0].free_gpus[1]: GPU index 8 out of range for 8 GPUs",
        ),
        (
            lambda d: d["nodes"][0].update(state="broken"),
            "nodes[0].state: must be one of ready, draining, quarantined, down",
        ),
        (lambda d: d["nodes"][1].update(health=1.5), "nodes[1].health: must be <= 1"),
        (lambda d: d["teams"][1].update(parent="nobody"), "teams[1].parent: unknown team 'nobody'"),
        (lambda d: d["teams"][0].update(parent="vision"), "teams[0].parent: team tree has a cycle"),
        (
            lambda d: d["running"][0]["placement"].update({"r1-n02": [4]}),
            "running[0].placement: holds 1 GPUs, expected workers x gpus_per_worker = 4",
        ),
        (
            lambda d: d["running"][0].update(placement={"r1-n01": [0, 1, 2, 3]}),
            "running[0].placement.r1-n01: GPU 0 is free or held by another running job",
        ),
        (
            lambda d: d["config"].update(queue_order="random"),
            "config.queue_order: must be one of fair, fifo, las, sjf",
        ),
        (
            lambda d: d["pending"][0]["elastic"].update(max_workers=0),
            "pending[0].elastic.max_workers: must be >= 1",
        ),
        (
            lambda d: d["config"].update(las_thresholds_gpu_s=[3600, 3600]),
            "config.las_thresholds_gpu_s[1]: must be greater than the previous threshold",
        ),
        (
            lambda d: d["config"].update(las_thresholds_gpu_s=[0]),
            "config.las_thresholds_gpu_s[0]: must be > 0",
        ),
        (
            lambda d: d["running"][0].update(attained_service_s=-1),
            "running[0].attained_service_s: must be >= 0",
        ),
        (lambda d: d.update(now="soon"), "now: must be a number"),
        (lambda d: d.update(pending={}), "pending: must be a list"),
        (lambda d: d["pending"].append(d["pending"][0]), "pending[1].id: duplicate job 'job-57'"),
    ],
)
def test_rule_1_bad_fields_are_named(mutate, message):
    data = copy.deepcopy(CONTRACT_EXAMPLE)
    mutate(data)
    with pytest.raises(SnapshotError) as e:
        snapshot_from_dict(data)
    assert str(e.value) == message


def test_rule_1_non_object_snapshot_is_rejected_cleanly():
    for bad in (None, [], "x", 3, True):
        with pytest.raises(SnapshotError):
            snapshot_from_dict(bad)


def test_rule_1_decisions_json_shape_and_round_trip():
    d = Decisions(
        start=(Start("a", {"n2": (1,), "n1": (0, 1)}, 2),),
        preempt=(Preempt("b", "priority", 120.0),),
        reserve=(Reserve("c", 10800.0, ("n1",)),),
        resize=(Resize("e", 2, {"n1": (0, 1)}),),
        pending=(Pending("c", "waiting", 10800.0), Pending("f", "quota")),
    )
    out = decisions_to_dict(d)
    assert out["start"] == [{"job": "a", "placement": {"n1": [0, 1], "n2": [1]}, "workers": 2}]
    assert out["pending"] == [
        {"job": "c", "why": "waiting", "estimated_start": 10800.0},
        {"job": "f", "why": "quota"},
    ]
    assert decisions_from_dict(json.loads(json.dumps(out))) == Decisions(
        start=(Start("a", {"n1": (0, 1), "n2": (1,)}, 2),),
        preempt=d.preempt,
        reserve=d.reserve,
        resize=d.resize,
        pending=d.pending,
    )


def test_rule_1_cli_decides_from_file_and_stdin(tmp_path, capsys):
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(CONTRACT_EXAMPLE))
    assert main(["decide", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == decisions_to_dict(decide(snapshot_from_dict(CONTRACT_EXAMPLE)))
    proc = subprocess.run(
        [sys.executable, "-m", "scheduler.policy", "decide", "-"],
        input=json.dumps(CONTRACT_EXAMPLE),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == out


def test_rule_1_cli_exits_2_with_field_reason_never_a_traceback(tmp_path, capsys):
    data = copy.deepcopy(CONTRACT_EXAMPLE)
    data["pending"] = [dict(data["pending"][0], id=f"j{i}") for i in range(4)]
    data["pending"][3]["workers"] = 0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert main(["decide", str(path)]) == 2
    assert capsys.readouterr().err.strip() == "pending[3].workers: must be >= 1"
    path.write_text("{not json")
    assert main(["decide", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: invalid JSON") and "Traceback" not in err
    assert main(["decide", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_cli_exits_2_for_an_integer_longer_than_the_interpreter_reads(tmp_path, capsys):
    path = tmp_path / "digits.json"
    path.write_text('{"now": ' + "9" * 5000 + "}")
    assert main(["decide", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"{path}: invalid JSON: an integer has more than 4300 digits\n"


@pytest.mark.parametrize(
    ("where", "key", "value", "message"),
    [
        ("nodes", "gpus", 10**9, "nodes[0].gpus: must be <= 4096"),
        ("pending", "workers", 10**9, "pending[0].workers: must be <= 65536"),
        (
            "pending",
            "elastic",
            {"min_workers": 1, "max_workers": 10**9},
            "pending[0].elastic.max_workers: must be <= 65536",
        ),
    ],
)
def test_counts_that_size_the_engines_work_are_bounded(
    tmp_path, capsys, where, key, value, message
):
    data = copy.deepcopy(CONTRACT_EXAMPLE)
    data[where][0][key] = value
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(data))
    assert main(["decide", str(path)]) == 2
    assert capsys.readouterr().err == message + "\n"


def test_cli_is_quiet_when_the_reader_closes_the_pipe(tmp_path):
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(CONTRACT_EXAMPLE))
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `decide ... | head` after head has exited
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "scheduler.policy", "decide", str(path)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            check=False,
        )
    finally:
        os.close(write_end)
    assert proc.stderr == ""
    assert proc.returncode == 1


def test_cli_reports_a_deprecated_key_once(tmp_path):
    data = copy.deepcopy(CONTRACT_EXAMPLE)
    data["config"]["las_long_run_s"] = 7200
    path = tmp_path / "flat.json"
    path.write_text(json.dumps(data))
    proc = subprocess.run(
        [sys.executable, "-m", "scheduler.policy", "decide", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0
    assert proc.stderr == (
        "warning: config.las_long_run_s is deprecated: use las.long_run_s (0 is null)\n"
    )
