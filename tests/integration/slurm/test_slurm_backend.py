"""SlurmBackend against a real local Slurm (slurmctld + 4 slurmd, 8 fake GPUs each, 2 racks):
Slurm 24.11 driven through ``command_prefix`` (a chroot), and Slurm 22.05 for the tests marked
``slurm_smoke`` (see conftest.py).

Every test drives the backend exactly as the scheduling loop will, and checks the effect with
Slurm's own tools (squeue, sinfo) or the job's own output. The slow ones (a killed slurmd, a
stopped slurmctld) run last and put the cluster back as they found it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from scheduler.backends.base import (
    DEFAULT_MASTER_PORT,
    Backend,
    BackendJobSpec,
    BackendJobState,
    BackendRejected,
    BackendUnavailable,
    LiveRun,
    backend_job_name,
    log_tail,
    worker_envs,
)
from scheduler.backends.slurm import SlurmBackend
from tests.integration.slurm.conftest import LocalSlurm, run_ref, spec, wait_for

pytestmark = pytest.mark.slurm


def state_of(backend: SlurmBackend, job_id: str, attempt: int = 1):
    return backend.poll_jobs([run_ref(job_id, attempt)])[0]


def wait_state(backend, job_id, states, timeout=30.0, attempt=1):
    states = set(states)
    seen: list[BackendJobState] = []  # each state the run passed through, for a timeout's message

    def reached():
        status = state_of(backend, job_id, attempt)
        if not seen or seen[-1] is not status.state:
            seen.append(status.state)
        return status.state in states and status

    try:
        return wait_for(reached, timeout, f"{job_id} to reach {sorted(states)}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; states seen: {[s.value for s in seen]}") from None


def squeue_ids(cluster: LocalSlurm, name: str) -> list[str]:
    out = cluster.run("squeue", "-h", "-t", "all", "-n", name, "-o", "%i").stdout
    return out.split()


def test_backend_satisfies_protocol(backend):
    assert isinstance(backend, Backend)
    assert backend.kind == "slurm"


@pytest.mark.slurm_smoke
def test_submitted_job_runs_on_chosen_node_and_succeeds(backend, slurm_cluster, job_id):
    command = (
        'echo "worker=$GPUPLATFORM_WORKER node=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES '
        'job=$GPUPLATFORM_JOB_ID attempt=$GPUPLATFORM_ATTEMPT greeting=$GREETING"'
    )
    s = spec(job_id, command, {"node2": (0, 1)}, env={"GREETING": 'it\'s a "quoted" $HOME'})
    ref = backend.submit(s)
    assert ref.isdigit()
    # Idempotent: the same (job id, attempt) finds the existing Slurm job.
    assert backend.submit(s) == ref
    assert squeue_ids(slurm_cluster, s.backend_name) == [ref]

    final = wait_state(backend, job_id, {BackendJobState.SUCCEEDED, BackendJobState.FAILED})
    assert final.state is BackendJobState.SUCCEEDED, final
    assert final.backend_ref == ref
    assert final.nodes == ("node2",)
    assert final.exit_code == 0
    log = log_tail(backend, run_ref(job_id))
    assert (
        f"worker=0 node=node2 gpus=0,1 job={job_id} attempt=1 "
        'greeting=it\'s a "quoted" $HOME' in log
    )
    # Finished and still idempotent: no second copy is started.
    assert backend.submit(s) == ref
    assert squeue_ids(slurm_cluster, s.backend_name) == [ref]


@pytest.mark.slurm_smoke
def test_two_worker_gang_runs_on_both_chosen_nodes_at_once(backend, job_id):
    command = (
        'echo "start $GPUPLATFORM_WORKER $SLURMD_NODENAME $(date +%s.%N)"; sleep 2; '
        'echo "end $GPUPLATFORM_WORKER $SLURMD_NODENAME $(date +%s.%N)"'
    )
    s = spec(job_id, command, {"node1": (0, 1, 2, 3), "node3": (0, 1, 2, 3)})
    backend.submit(s)
    running = wait_state(backend, job_id, {BackendJobState.RUNNING, BackendJobState.SUCCEEDED})
    assert running.nodes == ("node1", "node3")
    final = wait_state(backend, job_id, {BackendJobState.SUCCEEDED, BackendJobState.FAILED})
    assert final.state is BackendJobState.SUCCEEDED, final

    events = [line.split() for line in log_tail(backend, run_ref(job_id)).splitlines()]
    starts = {(w, node): float(t) for kind, w, node, t in events if kind == "start"}
    ends = {(w, node): float(t) for kind, w, node, t in events if kind == "end"}
    assert set(starts) == {("0", "node1"), ("1", "node3")}
    # Gang: both workers were running at the same moment.
    assert max(starts.values()) < min(ends.values())


def test_two_workers_packed_on_one_node_get_their_own_gpus(backend, job_id):
    command = 'echo "w=$GPUPLATFORM_WORKER node=$SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES"'
    packed = BackendJobSpec(
        job_id=job_id,
        attempt=1,
        name="packed",
        team="alice-team",
        image="",
        command=command,
        workers=2,
        gpus_per_worker=2,
        placement={"node2": (0, 1, 2, 3)},
    )
    backend.submit(packed)
    final = wait_state(backend, job_id, {BackendJobState.SUCCEEDED, BackendJobState.FAILED})
    assert final.state is BackendJobState.SUCCEEDED, final
    lines = sorted(log_tail(backend, run_ref(job_id)).splitlines())
    assert lines == ["w=0 node=node2 gpus=0,1", "w=1 node=node2 gpus=2,3"]


@pytest.mark.slurm_smoke
def test_every_worker_gets_the_launcher_variables_with_a_reachable_master(
    backend, slurm_cluster, job_id
):
    command = (
        "env | grep -E '^(MASTER_|WORLD_SIZE|RANK|NODE_RANK|LOCAL_|PET_|GPUPLATFORM_(WORKER|"
        'LOCAL_WORKER|WORKERS|WORKERS_ON_NODE|MASTER_))\' | sed "s/^/$GPUPLATFORM_WORKER /"'
    )
    s = spec(job_id, command, {"node1": (0,), "node3": (0,)})
    ref = backend.submit(s)
    final = wait_state(backend, job_id, {BackendJobState.SUCCEEDED, BackendJobState.FAILED})
    assert final.state is BackendJobState.SUCCEEDED, final
    seen: dict[int, dict[str, str]] = {}
    for line in log_tail(backend, run_ref(job_id), lines=200).splitlines():
        worker, _, pair = line.partition(" ")
        name, _, value = pair.partition("=")
        seen.setdefault(int(worker), {})[name] = value
    # The master is worker 0's node by its NodeAddr (the test nodes' names do not resolve),
    # on a port derived from the Slurm job id; the rest is what every backend gives.
    port = DEFAULT_MASTER_PORT + int(ref) % 10000
    expected = worker_envs(s, master_addr="127.0.0.1", master_port=port)
    assert [seen[w] for w in sorted(seen)] == expected


@pytest.mark.slurm_smoke
def test_output_is_followed_by_cursor_through_the_prefix(backend, slurm_cluster, job_id):
    go = slurm_cluster.file(f"{job_id}.go")
    command = (
        "for i in $(seq 1 5); do echo early $i; done\n"
        f"while [ ! -e {go} ]; do sleep 0.2; done\n"
        "for i in $(seq 1 300); do echo late $i $(printf '%080d' $i); done"
    )
    backend.submit(spec(job_id, command, {"node2": (0,)}))
    first = wait_for(
        lambda: (c := backend.read_log(run_ref(job_id))).text.count("early") == 5 and c,
        30,
        "the first lines",
    )
    assert first.text == "".join(f"early {i}\n" for i in range(1, 6))
    assert backend.read_log(run_ref(job_id), cursor=first.cursor).text == ""
    go.host.write_text("")
    wait_state(backend, job_id, {BackendJobState.SUCCEEDED})
    text, cursor = "", first.cursor
    while (chunk := backend.read_log(run_ref(job_id), cursor=cursor, limit_bytes=4096)).text:
        assert chunk.text.endswith("\n")  # chunks end on line boundaries
        text += chunk.text
        cursor = chunk.cursor
    assert [line.split()[1] for line in text.splitlines()] == [str(i) for i in range(1, 301)]
    tail = backend.read_log(run_ref(job_id), limit_bytes=1000)
    assert tail.truncated and tail.text.startswith("late ") and tail.text.endswith("0300\n")
    assert backend.read_log(run_ref("never-submitted")).text == ""


def test_failing_command_reports_failed_with_exit_code(backend, job_id):
    backend.submit(spec(job_id, "echo boom >&2; exit 3", {"node2": (0,)}))
    final = wait_state(backend, job_id, {BackendJobState.SUCCEEDED, BackendJobState.FAILED})
    assert final.state is BackendJobState.FAILED
    assert final.exit_code == 3
    assert "boom" in log_tail(backend, run_ref(job_id))


def test_request_slurm_cannot_place_is_rejected(backend, slurm_cluster, job_id):
    too_big = spec(job_id, "true", {"node1": tuple(range(9))})
    with pytest.raises(BackendRejected, match="node configuration is not available"):
        backend.submit(too_big)
    with pytest.raises(BackendRejected, match="Invalid node name"):
        backend.submit(spec(job_id, "true", {"node99": (0,)}, attempt=2))


def test_cancel_stops_the_run_and_is_idempotent(backend, slurm_cluster, job_id):
    backend.submit(spec(job_id, "sleep 60", {"node2": (0,)}))
    wait_state(backend, job_id, {BackendJobState.RUNNING})
    backend.cancel(run_ref(job_id))
    final = wait_state(backend, job_id, {BackendJobState.CANCELLED}, timeout=15)
    assert final.state is BackendJobState.CANCELLED
    backend.cancel(run_ref(job_id))  # already cancelled: quiet
    backend.cancel(run_ref("never-submitted"))  # unknown: quiet
    assert state_of(backend, "never-submitted").state is BackendJobState.UNKNOWN


@pytest.mark.slurm_smoke
def test_checkpoint_signal_reaches_the_job_script(backend, slurm_cluster, job_id):
    ready = slurm_cluster.file(f"{job_id}.ready")
    marker = slurm_cluster.file(f"{job_id}.checkpointed")
    command = (
        f"trap 'echo checkpoint >> {marker}; echo 42.5 > $GPUPLATFORM_CHECKPOINT_PROGRESS' USR1\n"
        f"touch {ready}\n"
        "for i in $(seq 1 60); do sleep 0.5; done"
    )
    backend.submit(spec(job_id, command, {"node2": (0,)}))
    wait_for(ready.exists, 30, "the job to start its command")
    backend.checkpoint(run_ref(job_id))
    wait_for(marker.exists, 10, "the USR1 trap to write its marker")
    assert marker.read_text() == "checkpoint\n"
    # The batch script recorded the request too, and the run keeps going.
    request_file = slurm_cluster.file(f"{backend_job_name(job_id, 1)}.checkpoint-request")
    assert request_file.exists()
    running = wait_for(
        lambda: (s := state_of(backend, job_id)).checkpointed_progress_s and s, 10, "progress"
    )
    assert running.state is BackendJobState.RUNNING
    assert running.checkpointed_progress_s == 42.5
    # Asked again within checkpoint_min_interval_s (a loop repeating it during a preemption
    # grace): the job is not signalled again; with no minimum it is.
    backend.checkpoint(run_ref(job_id))
    time.sleep(2)
    assert marker.read_text() == "checkpoint\n"
    slurm_cluster.backend(checkpoint_min_interval_s=0).checkpoint(run_ref(job_id))
    wait_for(lambda: marker.read_text().count("checkpoint") == 2, 10, "a second checkpoint")
    backend.checkpoint(run_ref("never-submitted"))  # nothing to signal: quiet
    backend.cancel(run_ref(job_id))
    wait_state(backend, job_id, {BackendJobState.CANCELLED}, timeout=15)


def test_submitted_run_is_not_requeueable(backend, slurm_cluster, job_id):
    # The local cluster makes batch jobs requeueable by default, like many sites; the backend's
    # --no-requeue must win, or Slurm restarts an attempt the platform has already resumed
    # elsewhere once a failed node comes back.
    assert "JobRequeue=1" in (slurm_cluster.host_dir / "slurm.conf").read_text().split()
    ref = backend.submit(spec(job_id, "sleep 60", {"node1": (0,)}))
    wait_state(backend, job_id, {BackendJobState.RUNNING})
    shown = slurm_cluster.run("scontrol", "show", "job", ref).stdout.split()
    assert "Requeue=0" in shown, shown
    refused = slurm_cluster.run("scontrol", "requeue", ref, check=False)
    assert refused.returncode != 0 and "disabled" in refused.stderr
    assert state_of(backend, job_id).state is BackendJobState.RUNNING
    backend.cancel(run_ref(job_id))
    wait_state(backend, job_id, {BackendJobState.CANCELLED}, timeout=15)


def test_live_runs_lists_our_unfinished_runs_by_prefix(backend, slurm_cluster, job_id):
    prefix = f"{job_id}-"
    backend.submit(spec(f"{prefix}1", "sleep 60", {"node2": (0,)}))
    backend.submit(spec(f"{prefix}1", "sleep 60", {"node2": (1,)}, attempt=2))
    backend.submit(spec(f"{prefix}2", "true", {"node2": (2,)}))
    backend.submit(spec(f"other-{job_id}", "sleep 60", {"node2": (3,)}))
    try:
        wait_state(backend, f"{prefix}2", {BackendJobState.SUCCEEDED})
        wait_state(backend, f"{prefix}1", {BackendJobState.RUNNING}, attempt=2)
        # Finished runs and other prefixes are left out; pending and running ones are listed.
        assert backend.live_runs(prefix) == [LiveRun(f"{prefix}1", 1), LiveRun(f"{prefix}1", 2)]
        backend.cancel(run_ref(f"{prefix}1"))
        wait_for(
            lambda: backend.live_runs(prefix) == [LiveRun(f"{prefix}1", 2)],
            15,
            "attempt 1 to be gone",
        )
        assert LiveRun(f"other-{job_id}", 1) in backend.live_runs("")
    finally:
        for run in [(f"{prefix}1", 1), (f"{prefix}1", 2), (f"other-{job_id}", 1)]:
            backend.cancel(run_ref(*run))
    wait_for(lambda: backend.live_runs(prefix) == [], 15, "every run to be gone")


def sinfo_state(cluster: LocalSlurm, node: str) -> tuple[str, str]:
    out = cluster.run("sinfo", "-h", "-n", node, "-o", "%t|%E").stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def node_flags(cluster: LocalSlurm, node: str) -> set[str]:
    """The node's state words as slurmctld holds them (``IDLE+DRAIN`` -> {"IDLE", "DRAIN"}).
    sinfo 24.11 may show a drained node as "drng" until slurmctld refreshes its node data."""
    words = cluster.run("scontrol", "show", "node", node).stdout.split()
    state = next(w for w in words if w.startswith("State="))
    return set(state.removeprefix("State=").rstrip("*").split("+"))


@pytest.mark.slurm_smoke
def test_drain_on_quarantine_and_resume_on_release(backend, slurm_cluster):
    reason = "gpuplatform quarantine: XID 79 on GPU 3"
    try:
        backend.drain_node("node4", reason)
        backend.drain_node("node4", reason)  # already drained: quiet
        assert sinfo_state(slurm_cluster, "node4") == ("drain", reason)
        node4 = {n.name: n for n in backend.list_nodes()}["node4"]
        assert (node4.state, node4.reason) == ("drained", reason)
    finally:
        backend.undrain_node("node4")
    backend.undrain_node("node4")  # already in service: quiet
    # Slurm shows a resumed node as idle* until its next ping.
    wait_for(lambda: sinfo_state(slurm_cluster, "node4")[0] == "idle", 10, "node4 idle")
    assert {n.name: n for n in backend.list_nodes()}["node4"].state == "ready"
    with pytest.raises(BackendRejected, match="Invalid node name"):
        backend.drain_node("node99", "nope")


def test_drain_of_busy_node_lets_its_job_finish(backend, slurm_cluster, job_id):
    backend.submit(spec(job_id, "sleep 2", {"node3": (0,)}))
    wait_state(backend, job_id, {BackendJobState.RUNNING})
    try:
        backend.drain_node("node3", "gpuplatform quarantine: ECC")
        node3 = {n.name: n for n in backend.list_nodes()}["node3"]
        assert node3.state == "draining"
        final = wait_state(backend, job_id, {BackendJobState.SUCCEEDED, BackendJobState.FAILED})
        assert final.state is BackendJobState.SUCCEEDED
        wait_for(
            lambda: node_flags(slurm_cluster, "node3") == {"IDLE", "DRAIN"}, 10, "node3 drained"
        )
    finally:
        backend.undrain_node("node3")
    # Back in service; Slurm may still show the finished job's CPUs as "mix" for a while.
    wait_for(
        lambda: (
            node_flags(slurm_cluster, "node3") & {"IDLE", "MIXED"}
            and "DRAIN" not in node_flags(slurm_cluster, "node3")
        ),
        10,
        "node3 back in service",
    )
    assert {n.name: n for n in backend.list_nodes()}["node3"].state == "ready"


@pytest.mark.slurm_smoke
def test_node_inventory_reports_gpus_and_topology(backend):
    nodes = {n.name: n for n in backend.list_nodes()}
    assert sorted(nodes) == ["node1", "node2", "node3", "node4"]
    for node in nodes.values():
        assert (node.gpus, node.gpu_model) == (8, "h100")
        assert node.state == "ready"
    assert [nodes[n].rack for n in sorted(nodes)] == ["r1", "r1", "r2", "r2"]
    assert [nodes[n].nvlink_domain for n in sorted(nodes)] == ["nvl1", "nvl1", "nvl2", "nvl2"]


def test_killed_slurmd_marks_node_down_and_run_node_failed(backend, slurm_cluster, job_id):
    started = slurm_cluster.file(f"{job_id}.started")
    starts = slurm_cluster.file(f"{job_id}.starts")
    command = (
        f"echo start >> {starts}; "
        f"echo $$ $PPID > {started}.tmp; mv {started}.tmp {started}; exec sleep 120"
    )
    backend.submit(spec(job_id, command, {"node4": (0, 1)}))
    # Kill the node once the worker runs (killed during the launch, the job just fails).
    wait_for(started.exists, 30, "the worker to start")
    _, stepd = (int(p) for p in started.read_text().split())
    assert Path(f"/proc/{stepd}/comm").read_text().strip() == "slurmstepd"
    slurm_cluster.kill_node("node4", state_of(backend, job_id).backend_ref)
    try:
        failed = wait_state(backend, job_id, {BackendJobState.NODE_FAILED}, timeout=60)
        assert failed.nodes == ("node4",)
        node4 = {n.name: n for n in backend.list_nodes()}["node4"]
        assert node4.state == "down"
        # The run is over (NODE_FAIL, not requeued); the loop's cancel of it is a quiet no-op
        # and the next attempt starts elsewhere.
        backend.cancel(run_ref(job_id))
        assert backend.live_runs(job_id) == []
    finally:
        # As after a machine restart, the dead slurmd's pid file names a live process that is
        # not a slurmd (this test's own); start must see through it and start the slurmd.
        pid_file = slurm_cluster.host_dir / "run" / "slurmd-node4.pid"
        pid_file.write_text(f"{os.getpid()}\n")
        assert slurm_cluster.script("start").returncode == 0  # restarts the missing slurmd
    assert Path(f"/proc/{slurm_cluster.pid('slurmd-node4')}/comm").read_text().strip() == "slurmd"
    assert {n.name: n for n in backend.list_nodes()}["node4"].state == "ready"
    # Back in service, the node does not get the old attempt again.
    time.sleep(3)
    assert state_of(backend, job_id).state is BackendJobState.NODE_FAILED
    assert squeue_ids(slurm_cluster, backend_job_name(job_id, 1)) == [failed.backend_ref]
    assert starts.read_text() == "start\n" and backend.live_runs(job_id) == []


@pytest.mark.slurm_smoke
def test_release_of_a_down_drained_node_lifts_the_drain_and_leaves_it_down(backend, slurm_cluster):
    """The platform releases a node it drained while the node is down (DOWN+DRAIN). Resume, the
    release's command, makes a dead node IDLE+NOT_RESPONDING until SlurmdTimeout, which
    list_nodes reads as ready (the idle* after every resume): the loop would take the dead node
    back into service, then see it fail a second time. Undrain lifts the drain only: the node
    stays down, and returns to service by itself when its slurmd is back."""

    def node4_state() -> str:
        return {n.name: n for n in backend.list_nodes()}["node4"].state

    os.kill(slurm_cluster.pid("slurmd-node4"), signal.SIGKILL)
    try:
        wait_for(lambda: node4_state() == "down", 60, "node4 down")
        backend.drain_node("node4", "gpuplatform drain: firmware update")
        assert {"DOWN", "DRAIN"} <= node_flags(slurm_cluster, "node4")
        backend.undrain_node("node4")
        backend.undrain_node("node4")  # nothing to lift: quiet
        flags = node_flags(slurm_cluster, "node4")
        assert "DOWN" in flags and "DRAIN" not in flags
        assert node4_state() == "down"
    finally:
        assert slurm_cluster.script("start").returncode == 0  # restarts the killed slurmd
    wait_for(lambda: node_flags(slurm_cluster, "node4") == {"IDLE"}, 30, "node4 in service")
    assert node4_state() == "ready"


def test_controller_outage_is_unavailable_and_loses_no_job(backend, slurm_cluster, job_id):
    started = slurm_cluster.file(f"{job_id}.started")
    marker = slurm_cluster.file(f"{job_id}.done")
    command = f"touch {started}; sleep 4; touch {marker}"
    backend.submit(spec(job_id, command, {"node1": (0,)}))
    # Wait for the worker itself: the step launch (srun) needs slurmctld, a running step not.
    wait_for(started.exists, 30, "the worker to start")

    ctld = slurm_cluster.pid("slurmctld")
    os.kill(ctld, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{ctld}").exists(), 15, "slurmctld to stop")
    try:
        # Short timeouts so the outage is noticed in seconds (Slurm's client retries ~4 s).
        down = slurm_cluster.backend(tries=1, command_timeout_s=10)
        t0 = time.monotonic()
        with pytest.raises(BackendUnavailable):
            down.submit(spec(f"{job_id}-b", "true", {"node2": (0,)}))
        with pytest.raises(BackendUnavailable):
            down.poll_jobs([run_ref(job_id)])
        with pytest.raises(BackendUnavailable):
            down.list_nodes()
        assert time.monotonic() - t0 < 30
        wait_for(marker.exists, 20, "the job to finish its work while slurmctld is down")
    finally:
        assert slurm_cluster.script("start").returncode == 0

    # Back: the run that finished during the outage is reconciled, nothing was lost. Its step
    # retries telling slurmctld it ended: within seconds on 22.05 and 24.11, once a minute on
    # 26.05 (slurmd's log: "failed sending step completion message ... retrying", then 60 s).
    final = wait_state(backend, job_id, {BackendJobState.SUCCEEDED}, timeout=90)
    assert final.exit_code == 0
    backend.submit(spec(f"{job_id}-b", "true", {"node2": (0,)}))
    done = wait_state(backend, f"{job_id}-b", {BackendJobState.SUCCEEDED, BackendJobState.FAILED})
    assert done.state is BackendJobState.SUCCEEDED
