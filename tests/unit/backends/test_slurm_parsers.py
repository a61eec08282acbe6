"""The Slurm backend's pure parsers and builders, on output captured from a real Slurm 22.05.

Fixtures in ``fixtures/slurm/`` were recorded from the local cluster ``scripts/slurm-local``
starts (4 nodes x 8 h100, racks r1/r2): finished jobs of every kind, a gang, a job requeued after
its node's slurmd was killed, drained / draining / down nodes, and the errors Slurm prints when
slurmctld is stopped.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.backends.base import BackendJobSpec, BackendJobState
from scheduler.backends.slurm_parsers import (
    SQUEUE_LIVE_FORMAT,
    ErrorKind,
    SlurmJob,
    SlurmQueryError,
    build_job_script,
    build_sbatch_argv,
    classify_error,
    decode_wait_status,
    expand_hostlist,
    format_time_limit,
    job_status,
    node_state,
    parse_checkpoint_progress,
    parse_gres_gpus,
    parse_node_features,
    parse_sacct_parsable,
    parse_sbatch_parsable,
    parse_sinfo_json,
    parse_squeue_json,
    parse_squeue_live,
    parse_topology_conf,
    pick_run,
)

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def by_name(jobs: list[SlurmJob]) -> dict[str, SlurmJob]:
    return {j.name: j for j in jobs}


# --- squeue --json ----------------------------------------------------------------------------


def test_squeue_finished_jobs_map_to_our_states():
    jobs = by_name(parse_squeue_json(fixture("squeue_finished_states.json")))
    ok = job_status(jobs["gp-test-a1"], "test", 1)
    assert (ok.state, ok.exit_code, ok.nodes, ok.backend_ref) == (
        BackendJobState.SUCCEEDED,
        0,
        ("node2",),
        "1",
    )
    assert job_status(jobs["other"], "x", 1).state is BackendJobState.CANCELLED
    failed = job_status(jobs["fail"], "x", 1)
    assert (failed.state, failed.exit_code) == (BackendJobState.FAILED, 3)
    killed = job_status(jobs["sig"], "x", 1)
    assert killed.state is BackendJobState.FAILED
    assert killed.exit_code is None and jobs["sig"].signal == 9
    impossible = job_status(jobs["big"], "x", 1)
    assert (impossible.state, impossible.reason, impossible.nodes) == (
        BackendJobState.FAILED,
        "BadConstraints",
        (),
    )
    waiting = job_status(jobs["pend"], "x", 1)
    assert (waiting.state, waiting.reason) == (BackendJobState.PENDING, "BeginTime")


def test_squeue_running_gang_expands_its_node_list():
    gang = by_name(parse_squeue_json(fixture("squeue_gang_running.json")))["gp-gang-a1"]
    status = job_status(gang, "gang", 1)
    assert status.state is BackendJobState.RUNNING
    assert status.nodes == ("node1", "node2")
    assert status.exit_code is None


def test_job_requeued_after_node_failure_is_node_failed():
    before = by_name(parse_squeue_json(fixture("squeue_running.json")))["gp-nodefail-a1"]
    assert job_status(before, "nodefail", 1).state is BackendJobState.RUNNING
    after = by_name(parse_squeue_json(fixture("squeue_after_node_failure.json")))
    requeued = after["gp-nodefail-a1"]
    assert (requeued.state, requeued.restart_count) == ("PENDING", 1)
    status = job_status(requeued, "nodefail", 1)
    assert status.state is BackendJobState.NODE_FAILED
    assert status.nodes == ("node3",)  # the node it was pinned to
    assert "requeued" in status.reason


def test_squeue_live_lists_unfinished_jobs_with_full_names():
    # Captured with `squeue --noheader --format=%i|%j|%T --partition=gpu` while a job that had
    # already completed was left out, as squeue leaves out every finished job by default.
    jobs = parse_squeue_live(fixture("squeue_live.txt"))
    assert [(j.job_id, j.name, j.state) for j in jobs] == [
        ("7", "gp-prod-17-a2", "PENDING"),
        ("6", "gp-prod-17-a1", "RUNNING"),
        ("8", "weird|name with space", "RUNNING"),
        ("9", "gp-prod-18-a3", "RUNNING"),
    ]
    assert SQUEUE_LIVE_FORMAT == "%i|%j|%T"
    assert parse_squeue_live("") == []


def test_squeue_live_refuses_a_line_it_cannot_read():
    with pytest.raises(SlurmQueryError, match="unexpected line"):
        parse_squeue_live("squeue: error: something else\n")


def test_squeue_error_answer_with_exit_zero_is_an_outage_not_an_empty_queue():
    with pytest.raises(SlurmQueryError) as err:
        parse_squeue_json(fixture("squeue_controller_down.json"))
    assert classify_error(str(err.value)) is ErrorKind.UNAVAILABLE
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
        ("PREEMPTED", 0, BackendJobState.CANCELLED),
        ("SOMETHING_NEW", 0, BackendJobState.UNKNOWN),
    ],
)
def test_every_slurm_state_has_a_meaning(state, restarts, expected):
    job = SlurmJob("1", "gp-j-a1", state, restart_count=restarts)
    assert job_status(job, "j", 1).state is expected


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


def test_sacct_jobcomp_records_last_line_wins():
    jobs = {j.job_id: j for j in parse_sacct_parsable(fixture("sacct_jobcomp.txt"))}
    # Job 7 was logged NODE_FAIL when its node died, then CANCELLED when we cancelled it.
    assert jobs["7"].state == "CANCELLED"
    assert (jobs["3"].state, jobs["3"].exit_code) == ("FAILED", 3)
    assert (jobs["4"].exit_code, jobs["4"].signal) == (None, 9)
    assert jobs["5"].nodes == ()  # "(null)"
    assert jobs["10"].nodes == ("node1", "node2")
    assert job_status(jobs["10"], "gang", 1).state is BackendJobState.SUCCEEDED


def test_sacct_skips_steps_and_headers_and_normalises_cancelled_by():
    text = "JobID|JobName|State|ExitCode|NodeList\n42|gp-a-a1|CANCELLED by 0|0:15|n1\n42.batch|batch|CANCELLED|0:15|n1\n"
    (job,) = parse_sacct_parsable(text)
    assert (job.job_id, job.state, job.signal) == ("42", "CANCELLED", 15)


# --- sinfo --json ------------------------------------------------------------------------------


def test_sinfo_inventory_gpus_model_and_topology():
    nodes = {n.name: n for n in parse_sinfo_json(fixture("sinfo_idle.json"))}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    assert {(n.gpus, n.gpu_model, n.state) for n in nodes.values()} == {(8, "h100", "ready")}
    assert [(nodes[n].rack, nodes[n].nvlink_domain) for n in sorted(nodes)] == [
        ("r1", "nvl1"),
        ("r1", "nvl1"),
        ("r2", "nvl2"),
        ("r2", "nvl2"),
    ]


def test_sinfo_drained_draining_and_down_nodes():
    nodes = {n.name: n for n in parse_sinfo_json(fixture("sinfo_drain_states.json"))}
    assert (nodes["node1"].state, nodes["node1"].reason) == (
        "draining",
        "gpuplatform quarantine: xid 79 on gpu 3",
    )
    assert (nodes["node4"].state, nodes["node4"].reason) == (
        "drained",
        "gpuplatform quarantine: ecc",
    )
    assert nodes["node2"].state == "ready"
    down = {n.name: n for n in parse_sinfo_json(fixture("sinfo_node_down.json"))}["node3"]
    assert (down.state, down.reason) == ("down", "Not responding")


def test_sinfo_partition_filter_and_error_answer():
    assert len(parse_sinfo_json(fixture("sinfo_idle.json"), partition="gpu")) == 4
    assert parse_sinfo_json(fixture("sinfo_idle.json"), partition="cpu") == []
    with pytest.raises(SlurmQueryError) as err:
        parse_sinfo_json(fixture("sinfo_controller_down.json"))
    assert classify_error(str(err.value)) is ErrorKind.UNAVAILABLE


def test_topology_file_names_racks_when_features_do_not():
    text = fixture("sinfo_idle.json").replace("rack=r1,", "").replace("rack=r2,", "")
    topology = parse_topology_conf(
        "# leaf switches\nSwitchName=leaf-a Nodes=node[1-3]\nSwitchName=leaf-b Nodes=node4\n"
        "SwitchName=spine Switches=leaf-[a-b]\n"
    )
    assert topology == {"node1": "leaf-a", "node2": "leaf-a", "node3": "leaf-a", "node4": "leaf-b"}
    nodes = {n.name: n for n in parse_sinfo_json(text, topology=topology)}
    assert [nodes[n].rack for n in sorted(nodes)] == ["leaf-a", "leaf-a", "leaf-a", "leaf-b"]
    # A rack feature wins over the topology file.
    with_feature = {
        n.name: n for n in parse_sinfo_json(fixture("sinfo_idle.json"), topology=topology)
    }
    assert with_feature["node3"].rack == "r2"


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


def test_sbatch_parsable_output():
    assert parse_sbatch_parsable(fixture("sbatch_parsable.stdout")) == "10"
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
    ],
)
def test_captured_error_messages_are_classified(name, kind):
    assert classify_error(fixture(name)) is kind


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


def test_container_option_runs_the_image():
    script = build_job_script(
        make_spec(image="nvcr.io/nvidia/pytorch:24.01"),
        checkpoint_request_path="/c",
        container_option="--container-image",
    )
    assert "--container-image=nvcr.io/nvidia/pytorch:24.01" in script
