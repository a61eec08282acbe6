"""The Slurm backend's pure parsers and builders, on output captured from real Slurm 22.05, 24.11
and 26.05.

Fixtures in ``fixtures/slurm/<version>/`` were recorded by ``scripts/capture-slurm-fixtures`` from
the local clusters ``scripts/slurm-local`` starts (4 nodes x 8 h100, racks r1/r2; 24.11 inside the
Debian 13 root of ``scripts/slurm-root``, 26.05 inside its Debian 14 "forky" root): finished jobs
of every kind, a gang, a job Slurm requeued after its node's slurmd was killed, drained / draining
/ down nodes, refusals, and what Slurm prints when slurmctld is stopped. Every version ran the same
scenario, so every fixture test runs on each and expects the same answers.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.backends.base import BackendJobSpec, BackendJobState, worker_envs
from scheduler.backends.slurm_nodes import (
    node_state,
    parse_active_reservations,
    parse_gres_gpus,
    parse_node_features,
    parse_scontrol_node_flags,
    parse_sinfo_json,
    parse_topology_conf,
)
from scheduler.backends.slurm_parsers import (
    SQUEUE_LIVE_FORMAT,
    SQUEUE_OWNED_FORMAT,
    SQUEUE_OWNER_NAME_FORMAT,
    ErrorKind,
    SlurmFormatError,
    SlurmJob,
    SlurmQueryError,
    build_job_script,
    build_sbatch_argv,
    classify_error,
    decode_wait_status,
    expand_hostlist,
    format_time_limit,
    is_known_state,
    job_state_word,
    job_status,
    parse_checkpoint_progress,
    parse_sacct_parsable,
    parse_sbatch_parsable,
    parse_squeue_json,
    parse_squeue_live,
    parse_squeue_owners,
    pick_run,
)
from scheduler.outcomes import failure_cause, loss_cause

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
VERSIONS = ["22.05", "24.11", "26.05"]


def fixture(name: str, version: str = "22.05") -> str:
    return (FIXTURES / version / name).read_text()


def by_name(jobs: list[SlurmJob]) -> dict[str, SlurmJob]:
    return {j.name: j for j in jobs}


@pytest.fixture(params=VERSIONS)
def version(request) -> str:
    return request.param


def test_fixtures_come_from_the_versions_they_claim():
    for version in VERSIONS:
        meta = json.loads(fixture("sinfo_idle.json", version))["meta"]
        release = (meta.get("slurm") or meta.get("Slurm"))["release"]
        assert release.startswith(version)
    # The two generations really differ in shape: the adapter is needed.
    old = json.loads(fixture("squeue_finished_states.json", "22.05"))["jobs"][0]
    new = json.loads(fixture("squeue_finished_states.json", "24.11"))["jobs"][0]
    assert isinstance(old["job_state"], str) and isinstance(new["job_state"], list)
    assert isinstance(old["exit_code"], int) and isinstance(new["exit_code"], dict)
    assert "nodes" in json.loads(fixture("sinfo_idle.json", "22.05"))
    assert "sinfo" in json.loads(fixture("sinfo_idle.json", "24.11"))
    # 26.05 prints the newest data_parser (24.11: v0.0.42); the fields read are alike.
    plugins = {
        v: json.loads(fixture("squeue_running.json", v))["meta"]["plugin"] for v in VERSIONS[1:]
    }
    assert [p["data_parser"] for p in plugins.values()] == [
        "data_parser/v0.0.42",
        "data_parser/v0.0.45",
    ]


# --- squeue --json ----------------------------------------------------------------------------


def test_squeue_finished_jobs_map_to_our_states(version):
    jobs = by_name(parse_squeue_json(fixture("squeue_finished_states.json", version)))
    ok = job_status(jobs["gp-test-a1"], "test", 1)
    assert (ok.state, ok.exit_code, ok.nodes, ok.backend_ref) == (
        BackendJobState.SUCCEEDED,
        0,
        ("node2",),
        "1",
    )
    cancelled = job_status(jobs["other"], "x", 1)
    assert cancelled.state is BackendJobState.CANCELLED and jobs["other"].signal == 15
    failed = job_status(jobs["fail"], "x", 1)
    assert (failed.state, failed.exit_code) == (BackendJobState.FAILED, 3)
    killed = job_status(jobs["sig"], "x", 1)
    assert killed.state is BackendJobState.FAILED
    assert killed.exit_code is None and jobs["sig"].signal == 9
    waiting = job_status(jobs["pend"], "x", 1)
    assert (waiting.state, waiting.reason, waiting.nodes) == (
        BackendJobState.PENDING,
        "BeginTime",
        ("node1",),  # the node it is pinned to (required_nodes)
    )


def test_squeue_refused_request_is_failed_without_nodes(version):
    # sbatch --gres=gpu:9 on 8-GPU nodes: refused, and left in squeue as FAILED.
    refused = by_name(parse_squeue_json(fixture("squeue_after_node_failure.json", version)))["wrap"]
    status = job_status(refused, "x", 1)
    assert (status.state, status.reason, status.nodes) == (
        BackendJobState.FAILED,
        "BadConstraints",
        (),
    )


def test_squeue_running_gang_expands_its_node_list(version):
    gang = by_name(parse_squeue_json(fixture("squeue_gang_running.json", version)))["gp-gang-a1"]
    status = job_status(gang, "gang", 1)
    assert status.state is BackendJobState.RUNNING
    assert status.nodes == ("node1", "node2")
    assert status.exit_code is None


def test_site_admin_actions_map_to_our_states(version):
    # Captured by hand on the local clusters (the capture script purges a cluster, and these ran
    # beside other tests): a site admin's `scancel <id>`, `scontrol suspend`, `scontrol hold` of
    # a running job, and `scontrol update timelimit=1` that made Slurm end the job TIMEOUT.
    jobs = by_name(parse_squeue_json(fixture("squeue_admin_actions.json", version)))
    cancelled = job_status(jobs["gp-auditcancel-17732-a1"], "x", 1)
    assert (cancelled.state, cancelled.reason) == (BackendJobState.CANCELLED, "killed by signal 15")
    # Slurm keeps a suspended job's GPUs allocated (only its CPUs are released), and a hold only
    # matters to a pending job: both still run as far as the platform is concerned.
    assert job_status(jobs["gp-auditsusp-17732-a1"], "x", 1).state is BackendJobState.RUNNING
    held = jobs["gp-audithold-17732-a1"]
    assert (held.state, held.reason) == ("RUNNING", "JobHeldAdmin")
    assert job_status(held, "x", 1).state is BackendJobState.RUNNING
    timeout = jobs["gp-audittl-17732-a1"]
    assert (timeout.state, timeout.reason) == ("TIMEOUT", "TimeLimit")  # Slurm's reason code
    status = job_status(timeout, "x", 1)
    assert (status.state, status.reason) == (BackendJobState.FAILED, "time limit reached")
    # The failure's message is what the outcomes page reads its cause from.
    assert failure_cause(status.reason) == "timeout"


def test_job_requeued_after_node_failure_is_node_failed(version):
    before = by_name(parse_squeue_json(fixture("squeue_running.json", version)))["gp-nodefail-a1"]
    assert job_status(before, "nodefail", 1).state is BackendJobState.RUNNING
    after = by_name(parse_squeue_json(fixture("squeue_after_node_failure.json", version)))
    requeued = after["gp-nodefail-a1"]
    assert (requeued.state, requeued.restart_count) == ("PENDING", 1)
    status = job_status(requeued, "nodefail", 1)
    assert status.state is BackendJobState.NODE_FAILED
    assert status.nodes == ("node3",)  # the node it was pinned to
    assert "requeued" in status.reason


def test_both_generations_read_the_same(version):
    # The same scenario on both versions: the same jobs in the same states, whatever the shape.
    def summary(v):
        return [
            (j.job_id, j.name, j.state, j.exit_code, j.signal, j.nodes, j.restart_count)
            for j in parse_squeue_json(fixture("squeue_after_node_failure.json", v))
        ]

    assert summary(version) == summary("22.05")
    nodes = parse_sinfo_json(fixture("sinfo_drain_states.json", version))
    assert nodes == parse_sinfo_json(fixture("sinfo_drain_states.json", "22.05"))


def test_squeue_live_lists_unfinished_jobs_with_full_names(version):
    # `squeue --noheader --format=%i|%j|%T --partition=gpu`: finished jobs are left out, as
    # squeue leaves out every finished job by default; the text format is the same on both.
    jobs = parse_squeue_live(fixture("squeue_live.txt", version))
    assert sorted((j.job_id, j.name, j.state) for j in jobs) == [
        ("5", "pend", "PENDING"),
        ("6", "gp-gang-a1", "RUNNING"),
        ("7", "weird|name with space", "RUNNING"),
    ]
    assert SQUEUE_LIVE_FORMAT == "%i|%j|%T"
    assert parse_squeue_live("") == []


@pytest.mark.parametrize("captured_on", ["22.05", "24.11"])
def test_squeue_owned_reads_each_jobs_owner_uid(captured_on):
    # `squeue --noheader --format=%i|%j|%T|%U`, one job of root and one of a team account
    # whose name holds the separator (captured by hand: the text format is the same on both).
    jobs = parse_squeue_live(fixture("squeue_owned.txt", captured_on), with_user_id=True)
    assert sorted((j.name, j.state, j.user_id) for j in jobs) == [
        ("gp-owned-a1", "PENDING", 0),
        ("weird|name with space", "PENDING", 999),
    ]
    assert all(j.job_id.isdigit() for j in jobs)
    assert SQUEUE_OWNED_FORMAT == "%i|%j|%T|%U"
    with pytest.raises(SlurmQueryError, match="unexpected line"):
        parse_squeue_live("6|gp-x-a1|RUNNING\n", with_user_id=True)


@pytest.mark.parametrize("captured_on", ["22.05", "24.11"])
def test_squeue_owners_reads_each_jobs_owner_uid_and_name(captured_on):
    # `squeue --noheader --states=all --name=... --format=%i|%U|%u|%T|%j`: a job of root, and
    # two of a team account, one cancelled (--states=all keeps it while Slurm does), one whose
    # name holds the separator (captured by hand: the text format is the same on both).
    jobs = parse_squeue_owners(fixture("squeue_owners.txt", captured_on))
    assert sorted((j.job_id, j.name, j.state, j.user_id, user) for j, user in jobs) == [
        ("10", "weird|name with space", "PENDING", 999, "gp-ci-team-a"),
        ("11", "gp-owners-a2", "CANCELLED", 999, "gp-ci-team-a"),
        ("9", "gp-owners-a1", "PENDING", 0, "root"),
    ]
    assert SQUEUE_OWNER_NAME_FORMAT == "%i|%U|%u|%T|%j"
    assert parse_squeue_owners("") == []
    for line in ("6|gp-x-a1|RUNNING|0\n", "6|root|0|RUNNING|gp-x-a1\n", "squeue: error: x\n"):
        with pytest.raises(SlurmQueryError, match="unexpected line"):
            parse_squeue_owners(line)


def test_squeue_live_refuses_a_line_it_cannot_read():
    with pytest.raises(SlurmQueryError, match="unexpected line"):
        parse_squeue_live("squeue: error: something else\n")


def test_squeue_error_answer_with_exit_zero_is_an_outage_not_an_empty_queue():
    # 22.05 exits 0 with an errors list; 24.11 exits 1 with the same message on stderr.
    with pytest.raises(SlurmQueryError) as err:
        parse_squeue_json(fixture("squeue_controller_down.json", "22.05"))
    assert classify_error(str(err.value)) is ErrorKind.UNAVAILABLE
    assert classify_error(fixture("squeue_controller_down.stderr", "24.11")) is (
        ErrorKind.UNAVAILABLE
    )
    with pytest.raises(SlurmQueryError):
        parse_squeue_json("squeue: error: something that is not JSON")


def test_pick_run_prefers_a_live_duplicate_then_the_newest():
    done = SlurmJob("7", "gp-x-a1", "CANCELLED")
    live = SlurmJob("5", "gp-x-a1", "RUNNING")
    newer = SlurmJob("9", "gp-x-a1", "FAILED")
    assert pick_run([done, live, newer]) is live
    assert pick_run([done, newer]) is newer
    assert pick_run([]) is None


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["RUNNING"], "RUNNING"),
        (["RUNNING", "COMPLETING"], "COMPLETING"),
        (["PENDING", "REQUEUED"], "REQUEUED"),
        (["FAILED", "REQUEUE_HOLD"], "REQUEUE_HOLD"),
        (["RUNNING", "CONFIGURING"], "CONFIGURING"),
        (["COMPLETED"], "COMPLETED"),
    ],
)
def test_state_flag_lists_read_as_slurms_own_state_word(words, expected):
    assert job_state_word(words) == expected


# --- unknown shapes: a named error, never an empty answer ---------------------------------------


def mutated(name: str, version: str, change) -> str:
    data = json.loads(fixture(name, version))
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("name", "change", "field"),
    [
        (
            "squeue_gang_running.json",
            lambda d: d["jobs"][1].update(job_state=7),
            "jobs[1].job_state",
        ),
        (
            "squeue_gang_running.json",
            lambda d: d["jobs"][0].update(exit_code="0:0"),
            "jobs[0].exit_code",
        ),
        (
            "squeue_gang_running.json",
            lambda d: d["jobs"][2].update(restart_cnt={"value": 1}),
            "jobs[2].restart_cnt",
        ),
        ("squeue_gang_running.json", lambda d: d["jobs"][0].pop("name"), "jobs[0].name"),
        ("squeue_gang_running.json", lambda d: d.update(jobs={"1": {}}), "jobs"),
        ("squeue_gang_running.json", lambda d: d.pop("jobs"), "jobs"),
        ("sinfo_idle.json", lambda d: d.pop("sinfo", None) or d.pop("nodes"), "sinfo"),
    ],
)
def test_unknown_shape_is_a_named_format_error(version, name, change, field):
    text = mutated(name, version, change)
    parse = parse_squeue_json if name.startswith("squeue") else parse_sinfo_json
    with pytest.raises(SlurmFormatError) as err:
        parse(text)
    message = str(err.value)
    assert f"{field}:" in message and f"Slurm {version}" in message, message
    # Retrying will not help: the backend refuses rather than waiting for Slurm to "come back".
    assert classify_error(message) is ErrorKind.REJECTED


def test_unknown_node_shape_in_either_generation_names_the_field():
    def new_state(d):
        d["sinfo"][2]["node"]["state"] = {"base": "IDLE"}

    with pytest.raises(SlurmFormatError, match=r"sinfo\[2\]\.node\.state"):
        parse_sinfo_json(mutated("sinfo_idle.json", "24.11", new_state))

    def old_flags(d):
        d["nodes"][0]["state_flags"] = "DRAIN"

    with pytest.raises(SlurmFormatError, match=r"nodes\[0\]\.state_flags"):
        parse_sinfo_json(mutated("sinfo_idle.json", "22.05", old_flags))
    # An unset number (data_parser's {"set": false}) is "no value", not an error.
    data = json.loads(fixture("squeue_gang_running.json", "24.11"))
    job = copy.deepcopy(data["jobs"][0])
    job["restart_cnt"] = {"set": False, "infinite": False, "number": 0}
    data["jobs"] = [job]
    (parsed,) = parse_squeue_json(json.dumps(data))
    assert parsed.restart_count == 0


@pytest.mark.parametrize(
    ("state", "restarts", "expected"),
    [
        ("RUNNING", 0, BackendJobState.RUNNING),
        ("COMPLETING", 0, BackendJobState.RUNNING),
        ("PENDING", 0, BackendJobState.PENDING),
        ("REQUEUED", 0, BackendJobState.PENDING),
        ("PENDING", 2, BackendJobState.NODE_FAILED),
        ("COMPLETED", 0, BackendJobState.SUCCEEDED),
        ("NODE_FAIL", 0, BackendJobState.NODE_FAILED),
        ("TIMEOUT", 0, BackendJobState.FAILED),
        ("OUT_OF_MEMORY", 0, BackendJobState.FAILED),
        ("DEADLINE", 0, BackendJobState.FAILED),
        ("CANCELLED", 0, BackendJobState.CANCELLED),
        # Slurm's own preemption (a site's other partitions; our runs are not requeueable, so
        # Slurm ends them) and a node that never booted are interruptions, not the job's end:
        # the platform requeues the job from its checkpoint.
        ("PREEMPTED", 0, BackendJobState.INTERRUPTED),
        ("BOOT_FAIL", 0, BackendJobState.NODE_FAILED),
        ("REVOKED", 0, BackendJobState.CANCELLED),
        ("SPECIAL_EXIT", 0, BackendJobState.CANCELLED),
        ("SUSPENDED", 0, BackendJobState.RUNNING),
        ("STOPPED", 0, BackendJobState.RUNNING),
        ("SIGNALING", 0, BackendJobState.RUNNING),
        ("STAGE_OUT", 0, BackendJobState.RUNNING),
        ("RESIZING", 0, BackendJobState.RUNNING),
        ("CONFIGURING", 0, BackendJobState.RUNNING),
        ("REQUEUE_HOLD", 0, BackendJobState.PENDING),
        ("REQUEUE_FED", 0, BackendJobState.PENDING),
        ("RESV_DEL_HOLD", 0, BackendJobState.PENDING),
    ],
)
def test_every_slurm_state_has_a_meaning(state, restarts, expected):
    job = SlurmJob("1", "gp-j-a1", state, restart_count=restarts)
    assert is_known_state(state)
    assert job_status(job, "j", 1).state is expected


def test_interruptions_by_slurm_say_what_happened():
    preempted = job_status(SlurmJob("1", "gp-j-a1", "PREEMPTED"), "j", 1)
    # "preempt..." is what the outcomes page counts as work lost to preemption.
    assert loss_cause(preempted.reason) == "preemption"
    boot = job_status(SlurmJob("1", "gp-j-a1", "BOOT_FAIL"), "j", 1)
    assert "boot" in boot.reason


def test_a_state_word_no_supported_slurm_prints_is_not_known():
    # The backend reports no news for such a run rather than a run Slurm has no record of
    # (which the loop would requeue, cancelling the run that still goes on).
    assert not is_known_state("SOMETHING_NEW")
    assert not is_known_state("")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3600\n", 3600.0),
        ('{"checkpointed_progress_s": 12.5}', 12.5),
        ("", None),
        ("-1", None),
        ("true", None),
        ("NaN", None),
        ("half done", None),
        ('{"other": 1}', None),
    ],
)
def test_checkpoint_progress_file(text, expected):
    assert parse_checkpoint_progress(text) == expected


def test_wait_status_decoding():
    assert decode_wait_status(0) == (0, None)
    assert decode_wait_status(3 << 8) == (3, None)
    assert decode_wait_status(9) == (None, 9)
    assert decode_wait_status(15) == (None, 15)
    assert decode_wait_status(None) == (None, None)


# --- sacct (jobcomp) ---------------------------------------------------------------------------


def test_sacct_jobcomp_records_last_line_wins(version):
    jobs = {j.job_id: j for j in parse_sacct_parsable(fixture("sacct_jobcomp.txt", version))}
    # Job 9 was logged NODE_FAIL when its node died, then CANCELLED when it was cancelled.
    assert jobs["9"].state == "CANCELLED"
    assert (jobs["3"].state, jobs["3"].exit_code) == ("FAILED", 3)
    assert (jobs["4"].exit_code, jobs["4"].signal) == (None, 9)
    assert jobs["5"].nodes == ()  # "(null)"
    assert jobs["6"].nodes == ("node1", "node2")
    assert job_status(jobs["1"], "test", 1).state is BackendJobState.SUCCEEDED


def test_sacct_skips_steps_and_headers_and_normalises_cancelled_by():
    text = "JobID|JobName|State|ExitCode|NodeList\n42|gp-a-a1|CANCELLED by 0|0:15|n1\n42.batch|batch|CANCELLED|0:15|n1\n"
    (job,) = parse_sacct_parsable(text)
    assert (job.job_id, job.state, job.signal) == ("42", "CANCELLED", 15)


def test_sacct_reads_the_owner_uid_when_asked_for_it():
    text = "7|gp-a-a1|COMPLETED|0:0|n1|65534\n8|x|y|RUNNING|0:0|n2|0\n9|gp-b-a1|FAILED|1:0|n1\n"
    jobs = {j.job_id: j for j in parse_sacct_parsable(text)}
    assert jobs["7"].user_id == 65534
    assert jobs["8"].user_id == 0  # a name holding "|" does not move the owner
    assert jobs["9"].user_id is None  # the five columns of before: not said


def test_squeue_json_says_who_owns_each_job(version):
    jobs = parse_squeue_json(fixture("squeue_gang_running.json", version))
    assert jobs and {j.user_id for j in jobs} == {0}


# --- sinfo --json ------------------------------------------------------------------------------


def test_sinfo_inventory_gpus_model_and_topology(version):
    nodes = {n.name: n for n in parse_sinfo_json(fixture("sinfo_idle.json", version))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert {(n.gpus, n.gpu_model, n.state, n.reason) for n in nodes.values()} == {
        (8, "h100", "ready", "")
    }
    assert [(nodes[n].rack, nodes[n].nvlink_domain) for n in sorted(nodes)] == [
        ("r1", "nvl1"),
        ("r1", "nvl1"),
        ("r2", "nvl2"),
        ("r2", "nvl2"),
    ]


def test_sinfo_drained_draining_and_down_nodes(version):
    nodes = {n.name: n for n in parse_sinfo_json(fixture("sinfo_drain_states.json", version))}
    assert (nodes["node1"].state, nodes["node1"].reason) == (
        "draining",
        "gpuplatform quarantine: xid 79 on gpu 3",
    )
    assert (nodes["node4"].state, nodes["node4"].reason) == (
        "drained",
        "gpuplatform quarantine: ecc",
    )
    assert nodes["node2"].state == "ready"
    after = {n.name: n for n in parse_sinfo_json(fixture("sinfo_node_down.json", version))}
    assert (after["node3"].state, after["node3"].reason) == ("down", "Not responding")
    # node1 and node4 were resumed: 24.11 still shows their old reason, which means nothing now.
    assert (after["node1"].state, after["node1"].reason) == ("ready", "")


def test_sinfo_partition_filter_and_error_answers(version):
    assert len(parse_sinfo_json(fixture("sinfo_idle.json", version), partition="gpu")) == 4
    assert parse_sinfo_json(fixture("sinfo_idle.json", version), partition="cpu") == []
    with pytest.raises(SlurmQueryError) as err:
        parse_sinfo_json(fixture("sinfo_controller_down.json", "22.05"))
    assert classify_error(str(err.value)) is ErrorKind.UNAVAILABLE
    assert classify_error(fixture("sinfo_controller_down.stderr", "24.11")) is (
        ErrorKind.UNAVAILABLE
    )


def test_topology_file_names_racks_when_features_do_not(version):
    text = fixture("sinfo_idle.json", version).replace("rack=r1,", "").replace("rack=r2,", "")
    topology = parse_topology_conf(
        "# leaf switches\nSwitchName=leaf-a Nodes=node[1-3]\nSwitchName=leaf-b Nodes=node4\n"
        "SwitchName=spine Switches=leaf-[a-b]\n"
    )
    assert topology == {"node1": "leaf-a", "node2": "leaf-a", "node3": "leaf-a", "node4": "leaf-b"}
    nodes = {n.name: n for n in parse_sinfo_json(text, topology=topology)}
    assert [nodes[n].rack for n in sorted(nodes)] == ["leaf-a", "leaf-a", "leaf-a", "leaf-b"]
    # A rack feature wins over the topology file.
    with_feature = {
        n.name: n for n in parse_sinfo_json(fixture("sinfo_idle.json", version), topology=topology)
    }
    assert with_feature["node3"].rack == "r2"


def test_grouped_sinfo_entries_give_one_node_each():
    # Without -N, 24.11 groups nodes sharing a state into one entry (and shows one node's
    # features for all: why the backend asks for -N). Each name still becomes one node.
    data = json.loads(fixture("sinfo_idle.json", "24.11"))
    first = copy.deepcopy(data["sinfo"][0])
    first["nodes"]["nodes"] = ["node1", "node2", "node3", "node4"]
    data["sinfo"] = [first]
    assert [n.name for n in parse_sinfo_json(json.dumps(data))] == [
        "node1",
        "node2",
        "node3",
        "node4",
    ]


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("gpu:h100:8", (8, "h100")),
        ("gpu:h100:8(S:0-1)", (8, "h100")),
        ("gpu:8", (8, "")),
        ("gpu:a100:4(S:0),gpu:a100:4(S:1),shard:16", (8, "a100")),
        ("shard:4", (0, "")),
        ("", (0, "")),
        ("(null)", (0, "")),
    ],
)
def test_gres_gpu_count_and_model(gres, expected):
    assert parse_gres_gpus(gres) == expected


def test_node_features_topology_words():
    assert parse_node_features("h100,rack=r7,nvl:nvl-3,zone=eu1,fabric=ib0,spot,gpu=h200") == {
        "rack": "r7",
        "nvlink_domain": "nvl-3",
        "zone": "eu1",
        "fabric": "ib0",
        "spot": True,
        "gpu_model": "h200",
    }
    assert parse_node_features("") == {}


@pytest.mark.parametrize(
    ("state", "flags", "expected"),
    [
        ("idle", [], "ready"),
        ("mixed", [], "ready"),
        ("idle", ["NOT_RESPONDING"], "ready"),  # a moment after resume; Slurm decides later
        ("down", ["NOT_RESPONDING"], "down"),
        ("idle", ["DRAIN"], "drained"),
        ("mixed", ["DRAIN"], "draining"),
        ("allocated", ["DRAIN"], "draining"),
        ("down", ["DRAIN"], "down"),
        ("idle", ["FAIL"], "down"),
    ],
)
def test_node_state_mapping(state, flags, expected):
    assert node_state(state, flags) == expected


# --- hostlists ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("node[1-3,7]", ("node1", "node2", "node3", "node7")),
        ("n[08-10]", ("n08", "n09", "n10")),
        ("a,b[1-2],c", ("a", "b1", "b2", "c")),
        ("r[1-2]n[1-2]", ("r1n1", "r1n2", "r2n1", "r2n2")),
        ("", ()),
        ("(null)", ()),
    ],
)
def test_expand_hostlist(expr, names):
    assert expand_hostlist(expr) == names


@given(st.sets(st.integers(min_value=0, max_value=300), min_size=1, max_size=40))
def test_expand_hostlist_inverts_slurm_style_compression(numbers):
    ordered = sorted(numbers)
    ranges, start = [], ordered[0]
    for prev, cur in zip(ordered, [*ordered[1:], None], strict=True):
        if cur != prev + 1:
            ranges.append(f"{start:03d}" if start == prev else f"{start:03d}-{prev:03d}")
            start = cur
    assert expand_hostlist(f"gpu[{','.join(ranges)}]") == tuple(f"gpu{n:03d}" for n in ordered)


# --- sbatch / error messages -------------------------------------------------------------------


def test_sbatch_parsable_output(version):
    assert parse_sbatch_parsable(fixture("sbatch_parsable.stdout", version)) == "1"
    assert parse_sbatch_parsable("42;cluster-a\n") == "42"
    with pytest.raises(SlurmQueryError):
        parse_sbatch_parsable("sbatch: warning: something\n")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("sbatch_controller_down.stderr", ErrorKind.UNAVAILABLE),
        ("scancel_controller_down.stderr", ErrorKind.UNAVAILABLE),
        ("scontrol_controller_down.stderr", ErrorKind.UNAVAILABLE),
        ("squeue_text_controller_down.stderr", ErrorKind.UNAVAILABLE),
        ("sbatch_node_config_unavailable.stderr", ErrorKind.REJECTED),
        ("sbatch_invalid_node.stderr", ErrorKind.REJECTED),
        ("scontrol_invalid_node.stderr", ErrorKind.REJECTED),
        ("sacct_accounting_disabled.stderr", ErrorKind.REJECTED),
        ("scontrol_resume_not_drained.stderr", ErrorKind.ALREADY_DONE),
        ("scontrol_requeue_invalid_job.stderr", ErrorKind.ALREADY_DONE),
        # A refusal to a user below Slurm's Admin level: no retry will change it.
        ("scontrol_update_not_admin.stderr", ErrorKind.REJECTED),
        ("scontrol_show_node_invalid.stdout", ErrorKind.REJECTED),
    ],
)
def test_captured_error_messages_are_classified(version, name, kind):
    assert classify_error(fixture(name, version)) is kind


@pytest.mark.parametrize(
    ("name", "flags"),
    [
        ("scontrol_node_idle.txt", {"IDLE"}),
        ("scontrol_node_drained.txt", {"IDLE", "DRAIN"}),
        ("scontrol_node_down_drained.txt", {"DOWN", "DRAIN", "NOT_RESPONDING"}),
    ],
)
def test_scontrol_node_flags(version, name, flags):
    assert parse_scontrol_node_flags(fixture(name, version)) == flags


def test_active_reservations_hold_their_nodes(version):
    held = parse_active_reservations(fixture("scontrol_reservations.txt", version))
    # "upgrade" (node[1-2]) starts in an hour: not yet a hold.
    assert list(held) == ["node2"]
    assert re.fullmatch(r"maint until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", held["node2"])
    assert parse_active_reservations(fixture("scontrol_reservations_none.txt", version)) == {}


def test_scontrol_node_flags_come_from_the_state_not_the_reason():
    line = "NodeName=n1 State=IDLE+DRAIN Weight=1 Reason=was State=DOWN [root@2026-12-05T12:00:00]"
    assert parse_scontrol_node_flags(line) == {"IDLE", "DRAIN"}
    with pytest.raises(SlurmQueryError):
        parse_scontrol_node_flags("Node nodeX not found\n")


# --- what we hand to sbatch --------------------------------------------------------------------


def make_spec(**kw) -> BackendJobSpec:
    base = dict(
        job_id="j42",
        attempt=2,
        name="train",
        team="alice",
        image="",
        command="python train.py",
        workers=2,
        gpus_per_worker=4,
        placement={"node1": (0, 1, 2, 3), "node3": (4, 5, 6, 7)},
        runtime_limit_s=600,
        checkpoint_grace_s=90,
    )
    base.update(kw)
    return BackendJobSpec(**base)


def test_sbatch_argv_pins_nodes_gpus_and_identity():
    argv = build_sbatch_argv(
        make_spec(), log_path="/l/gp-j42-a2.out", workdir="/w", partition="gpu"
    )
    assert argv[0] == "sbatch"
    for arg in [
        "--parsable",
        "--job-name=gp-j42-a2",
        "--nodelist=node1,node3",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gres=gpu:4",
        "--time=10:00",
        "--no-requeue",
        "--signal=B:USR1@90",
        "--partition=gpu",
        "--output=/l/gp-j42-a2.out",
        "--chdir=/w",
        "--export=NONE",
    ]:
        assert arg in argv
    # The platform owns requeueing: Slurm must never restart an attempt by itself.
    assert "--requeue" not in argv
    assert "--gres=gpu:0" not in build_sbatch_argv(
        make_spec(gpus_per_worker=0), log_path="/l", workdir="/w"
    )


def test_sbatch_argv_refuses_what_slurm_cannot_do_as_asked():
    with pytest.raises(ValueError, match="same number of workers on every"):
        build_sbatch_argv(make_spec(workers=3), log_path="/l", workdir="/w")
    with pytest.raises(ValueError, match="same number of workers on every"):
        build_sbatch_argv(make_spec(workers=1), log_path="/l", workdir="/w")
    uneven = make_spec(workers=4, gpus_per_worker=2, placement={"n1": (0, 1, 2, 3), "n2": (0, 1)})
    with pytest.raises(ValueError, match="n2 differ"):
        build_sbatch_argv(uneven, log_path="/l", workdir="/w")
    with pytest.raises(ValueError, match="not a Slurm node name"):
        build_sbatch_argv(
            make_spec(placement={"node1;reboot": (0,)}, workers=1), log_path="/l", workdir="/w"
        )
    with pytest.raises(ValueError, match="no node"):
        build_sbatch_argv(make_spec(placement={}, workers=0), log_path="/l", workdir="/w")


def test_several_workers_per_node_share_the_node_gpus():
    packed = make_spec(workers=4, gpus_per_worker=2)  # 2 nodes x 4 GPUs -> 2 workers per node
    argv = build_sbatch_argv(packed, log_path="/l", workdir="/w")
    assert "--ntasks-per-node=2" in argv and "--gres=gpu:4" in argv and "--nodes=2" in argv
    script = build_job_script(packed, checkpoint_request_path="/c")
    assert "--ntasks=4 --ntasks-per-node=2" in script


def test_time_limit_format():
    assert format_time_limit(90) == "1:30"
    assert format_time_limit(5) == "1:00"
    assert format_time_limit(7200) == "120:00"


HOSTILE = "echo \"it's\" $GPUPLATFORM_WORKER '$(touch PWNED)'; touch RAN; echo done"


def run_script_with_fake_srun(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run a generated batch script for real, with an ``srun`` that runs its command once."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "srun"
    fake.write_text(
        '#!/bin/bash\nwhile [ "${1#--}" != "$1" ]; do shift; done\nSLURM_PROCID=0 exec "$@"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    job = tmp_path / "job.sh"
    job.write_text(script)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    return subprocess.run(
        ["/bin/bash", str(job)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=20
    )


def test_job_script_runs_the_command_as_data(tmp_path):
    spec = make_spec(
        command=HOSTILE + '\necho "$GREETING|$GPUPLATFORM_JOB_ID|$GPUPLATFORM_ATTEMPT"; exit 7',
        env={"GREETING": "a'b\"c $(touch PWNED3) d"},
    )
    script = build_job_script(spec, checkpoint_request_path=str(tmp_path / "ckpt"))
    proc = run_script_with_fake_srun(tmp_path, script)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout.splitlines() == [
        "it's 0 $(touch PWNED)",
        "done",
        "a'b\"c $(touch PWNED3) d|j42|2",
    ]
    # The user's command ran as written; nothing leaked out of the quoting.
    assert (tmp_path / "RAN").exists()
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "PWNED3").exists()


def test_job_script_forwards_usr1_and_records_the_request(tmp_path):
    marker, request = tmp_path / "worker-got-usr1", tmp_path / "ckpt-request"
    command = (
        f"trap 'touch {marker}' USR1\n"
        # The fake srun is exec'd, so $PPID is the batch shell; give it a moment to note our pid.
        "sleep 0.3; kill -USR1 $PPID\n"
        "for i in $(seq 1 100); do [ -e " + str(marker) + " ] && break; sleep 0.05; done\n"
        "echo finished"
    )
    spec = make_spec(command=command, workers=1, placement={"node1": (0,)})
    proc = run_script_with_fake_srun(
        tmp_path, build_job_script(spec, checkpoint_request_path=str(request))
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "finished"
    assert request.exists() and marker.exists()


def test_job_script_rejects_bad_env_names():
    with pytest.raises(ValueError, match="environment variable name"):
        build_job_script(make_spec(env={"A=B; rm": "x"}), checkpoint_request_path="/c")
    # A container plugin's runtime hook would read it to choose the node's GPUs the job gets.
    with pytest.raises(ValueError, match="NVIDIA_VISIBLE_DEVICES may not be set"):
        build_job_script(
            make_spec(env={"NVIDIA_VISIBLE_DEVICES": "all"}), checkpoint_request_path="/c"
        )


def test_container_option_runs_the_image():
    script = build_job_script(
        make_spec(image="nvcr.io/nvidia/pytorch:24.01"),
        checkpoint_request_path="/c",
        container_option="--container-image",
    )
    assert "--container-image=nvcr.io/nvidia/pytorch:24.01" in script


# srun as it behaves for a step of N tasks, K per node (block distribution): one process per
# task with its SLURM_PROCID and SLURM_LOCALID; scontrol answers as for a node at 10.1.2.3.
FAKE_SRUN = r"""#!/bin/bash
ntasks=1; per=1
while [ "${1#--}" != "$1" ]; do
    case $1 in --ntasks=*) ntasks=${1#--ntasks=} ;; --ntasks-per-node=*) per=${1#*=} ;; esac
    shift
done
for ((i = 0; i < ntasks; i++)); do SLURM_PROCID=$i SLURM_LOCALID=$((i % per)) "$@"; done
"""
FAKE_SCONTROL = """#!/bin/bash
printf '   NodeAddr=10.1.2.3 NodeHostName=gpu-a Version=24.11.5\\n'
"""


@pytest.mark.parametrize(
    ("workers", "gpus", "placement"),
    [
        (2, 4, {"node1": (0, 1, 2, 3), "node3": (0, 1, 2, 3)}),  # one worker per node
        (4, 1, {"node1": (0, 1), "node3": (4, 5)}),  # two one-GPU workers per node
    ],
)
def test_job_script_gives_every_worker_the_launcher_variables(tmp_path, workers, gpus, placement):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    names = "MASTER_|WORLD_SIZE|RANK|NODE_RANK|LOCAL_|PET_|GPUPLATFORM_(WORKER|LOCAL_WORKER|MASTER)"
    spec = make_spec(
        workers=workers,
        gpus_per_worker=gpus,
        placement=placement,
        env={"RANK": "7", "GPUPLATFORM_JOB_ID": "not-mine", "MY_FLAG": "1"},
        command=f"env | grep -E '^({names})' | sed \"s/^/$SLURM_PROCID /\"; "
        'echo "$SLURM_PROCID id=$GPUPLATFORM_JOB_ID flag=$MY_FLAG"',
    )
    job = tmp_path / "job.sh"
    job.write_text(build_job_script(spec, checkpoint_request_path=str(tmp_path / "c")))
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "12345",
        "SLURMD_NODENAME": "node1",
    }
    proc = subprocess.run(
        ["/bin/bash", str(job)], env=env, capture_output=True, text=True, timeout=20, check=True
    )
    seen: dict[int, dict[str, str]] = {}
    for line in proc.stdout.splitlines():
        worker, _, pair = line.partition(" ")
        if pair.startswith("id="):
            # The job's own variables arrive, except where they clash with the platform's.
            assert pair == "id=j42 flag=1"
            continue
        name, _, value = pair.partition("=")
        seen.setdefault(int(worker), {})[name] = value
    expected = worker_envs(spec, master_addr="10.1.2.3", master_port=29500 + 12345 % 10000)
    assert [seen[w] for w in sorted(seen)] == expected
    assert ("LOCAL_RANK" in expected[0]) is (gpus == 1)


@pytest.mark.parametrize(
    ("code", "description", "shown", "on_nodes"),
    [
        (
            "ReqNodeNotAvail",
            "ReqNodeNotAvail, May be reserved for other job",
            "ReqNodeNotAvail, May be reserved for other job",
            True,
        ),
        (
            "ReqNodeNotAvail",
            "Reserved for maintenance",
            "ReqNodeNotAvail, Reserved for maintenance",
            True,
        ),
        ("Resources", "", "Resources", True),
        ("QOSMaxGRESPerUser", "", "QOSMaxGRESPerUser", False),
        ("", "", "", False),
    ],
)
def test_a_pending_run_carries_slurms_reason_and_whether_it_is_about_its_nodes(
    code, description, shown, on_nodes
):
    job = SlurmJob("9", "gp-1-a1", "PENDING", reason=description or code, reason_code=code)
    status = job_status(job, "1", 1)
    assert (status.state, status.reason, status.pending_on_nodes, status.held_by_cluster) == (
        BackendJobState.PENDING,
        shown,
        on_nodes,
        True,
    )
    assert status.started_at is None


@pytest.mark.parametrize("version", VERSIONS)
def test_a_running_run_carries_its_slurm_start_time(version):
    text = (FIXTURES / version / "squeue_running.json").read_text()
    jobs = [j for j in parse_squeue_json(text) if j.state == "RUNNING"]
    assert jobs and all(j.start_time for j in jobs)
    status = job_status(jobs[0], "1", 1)
    assert status.started_at == float(jobs[0].start_time)
