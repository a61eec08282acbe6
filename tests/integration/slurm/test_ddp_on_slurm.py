"""The last link, for real: a PyTorch DDP job (examples/ddp/train.py under torchrun, CPU and gloo)
submitted through the REST API as a 2-worker gang, placed by our engine on two nodes of the real
local Slurm, where both ranks rendezvous and train; a higher-priority job preempts it; it
checkpoints within the grace, is stopped and requeued as soon as the platform sees that checkpoint,
resumes on other nodes from it and trains to the end. The loss curve continues from the
checkpointed step (the same losses as the first attempt computed after it), the work the platform
records as lost is at most the time since that checkpoint, and the API and the job page show both
attempts.

Runs on Slurm 24.11 (and 26.05 when that runs), the generations sites run, like every Slurm
test; its jobs run this checkout's virtualenv, where ``make test`` installed torch, bound
read-only into the cluster's Debian root (``host_python``). A virtualenv of the system Python cannot be shown there (its
base is /usr, which the root has of its own): the test then runs on the host's 22.05. Slurm 22.05 is covered for the same path by the smoke tests of
the checkpoint signal and the launcher's variables (test_slurm_backend.py); this test on both
took 38 s more. About 40 s, most of it torch starting four times.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from django.test import Client

from scheduler.loop.cycle import run_cycle
from scheduler.models import Job, Node

from .conftest import host_python_versions, wait_for

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.slurm_versions(*host_python_versions()),
    pytest.mark.django_db,
]

REPO = Path(__file__).resolve().parents[3]
GRACE_S = 12
STEPS = 400
STEP_S = 0.05


def read_all(client, job_id: int, attempt: int) -> str:
    chunk = client.get(
        f"/api/v1/jobs/{job_id}/logs/", {"attempt": attempt, "cursor": "0", "limit_bytes": 1 << 20}
    ).json()
    return chunk["text"]


def losses(log: str) -> dict[int, str]:
    return {int(m[1]): m[2] for m in re.finditer(r"^step (\d+) loss (\S+)$", log, re.M)}


def cycle_until(condition, timeout: float, what: str):
    def step():
        run_cycle()
        return condition()

    return wait_for(step, timeout, what, every=1.0)


def test_ddp_job_preempted_checkpoints_resumes_elsewhere_and_finishes(
    slurm_platform, host_python, submit, alice, bob, api_as, settings
):
    settings.SCHEDULER_POLICY = {"preemption_grace_s": GRACE_S}
    slurm = slurm_platform["slurm"]
    tag = uuid.uuid4().hex[:8]
    checkpoints = slurm.file(f"ddp-{tag}")
    release = slurm.file(f"ddp-{tag}.release-filler")
    command = (
        f"exec {host_python}/torchrun --nproc-per-node=1 {REPO}/examples/ddp/train.py "
        f"--steps {STEPS} --step-seconds {STEP_S} --checkpoint-dir {checkpoints}"
    )
    gpu_model = Node.objects.filter(cluster=slurm_platform["cluster"]).first().gpu_model.name
    api = api_as(alice)
    ddp_id = submit(
        alice,
        name="ddp",
        workers=2,
        gpus_per_worker=8,
        gpu_model=gpu_model,
        priority_class="research",
        command=command,
    ).json()["id"]
    run_cycle()
    ddp = Job.objects.get(pk=ddp_id)
    first_nodes = sorted({a.node.name for a in ddp.allocations.all()})
    assert ddp.state == "running" and len(first_nodes) == 2  # one whole node per worker
    # Production work on the two other nodes that ends when the test says so.
    filler_id = submit(
        bob,
        team="nlp",
        name="filler",
        workers=2,
        gpus_per_worker=8,
        gpu_model=gpu_model,
        priority_class="production",
        command=f"while [ ! -e {release} ]; do sleep 0.2; done",
    ).json()["id"]
    run_cycle()
    filler_nodes = sorted({a.node.name for a in Job.objects.get(pk=filler_id).allocations.all()})
    assert len(filler_nodes) == 2 and not set(filler_nodes) & set(first_nodes)

    # Both ranks rendezvous at worker 0's NodeAddr and train.
    def trained():
        return "step 40 loss" in read_all(api, ddp_id, 1)

    cycle_until(trained, 150, "the DDP job to rendezvous and train 40 steps")
    assert "rank 0 of 2: MASTER_ADDR=127.0.0.1 " in read_all(api, ddp_id, 1)

    urgent_id = submit(
        bob,
        team="nlp",
        name="urgent",
        workers=2,
        gpus_per_worker=8,
        gpu_model=gpu_model,
        priority_class="production",
        command="sleep 600",
    ).json()["id"]
    run_cycle()
    ddp.refresh_from_db()
    assert ddp.state == "preempted"
    preempted_at = ddp.events.get(kind="preempted").time.timestamp()

    cycle_until(lambda: Job.objects.get(pk=ddp_id).state == "pending", GRACE_S + 30, "the requeue")
    ddp.refresh_from_db()
    requeued = ddp.events.get(kind="requeued")
    assert ddp.attempts == 1 and ddp.checkpointed_progress_s > 0
    # Stopped as soon as the platform saw the checkpoint it asked for, not when the grace ended.
    seen = ddp.events.get(kind="checkpoint").time.timestamp()
    assert preempted_at < seen <= requeued.time.timestamp() < preempted_at + GRACE_S
    urgent = cycle_until(
        lambda: (j := Job.objects.get(pk=urgent_id)).state == "running" and j, 30, "urgent"
    )
    assert sorted({a.node.name for a in urgent.allocations.all()}) == first_nodes

    release.host.write_text("")  # the filler ends; its nodes are free for the DDP job
    cycle_until(lambda: Job.objects.get(pk=ddp_id).attempts == 2, 60, "attempt 2 to start")
    cycle_until(
        lambda: Job.objects.get(pk=ddp_id).state == "succeeded", 240, "the DDP job to finish"
    )

    first, second = read_all(api, ddp_id, 1), read_all(api, ddp_id, 2)
    # Checkpointed once (asked every cycle of the grace, signalled once), within the grace.
    (saved,) = re.findall(r"^checkpoint step (\d+) work_s (\S+) at (\S+)$", first, re.M)
    step, work_s, saved_at = int(saved[0]), float(saved[1]), float(saved[2])
    assert 0 < saved_at - preempted_at < GRACE_S
    # Attempt 2 resumed from that checkpoint file, as the platform recorded it, and continued
    # the loss curve: every step both attempts computed has the same loss.
    resumed = re.search(
        r"^resumed from step (\d+) \((\S+) s of work; .*RESUME_FROM_S=(\S+)\)$", second, re.M
    )
    assert resumed and int(resumed[1]) == step
    assert float(resumed[3]) == pytest.approx(work_s, abs=0.01)
    before, after = losses(first), losses(second)
    assert min(after) == step + 1 and max(after) == STEPS
    # How many steps attempt 1 ran past its checkpoint depends on how soon a cycle saw the
    # checkpoint and stopped it (a few steps on a quiet machine): at least one to compare.
    overlap = sorted(set(before) & set(after))
    assert overlap, (step, max(before))
    assert all(before[s] == after[s] for s in overlap)
    assert re.search(rf"^done: {STEPS} steps, ", second, re.M)
    # Lost work: GPUs x (requeue - last checkpoint the platform saw), at most the true time
    # since the checkpoint: what it trained between the checkpoint and the stop.
    assert 0 < ddp.lost_gpu_seconds <= 16 * (requeued.time.timestamp() - saved_at) + 1e-6

    print(  # the numbers behind the assertions, for the record (pytest -s)
        f"\nddp: checkpoint at step {step} {saved_at - preempted_at:.2f} s after the preemption "
        f"(grace {GRACE_S} s), stopped {requeued.time.timestamp() - preempted_at:.2f} s after it; "
        f"attempt 1 ran to step {max(before)}; attempt 2 resumed at step "
        f"{min(after)} with {len(overlap)} steps' losses identical; lost "
        f"{ddp.lost_gpu_seconds:.1f} GPU-s <= {16 * (requeued.time.timestamp() - saved_at):.1f}"
    )
    attempts = api.get(f"/api/v1/jobs/{ddp_id}/attempts/").json()
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "requeued"), (2, "succeeded")]
    assert attempts[0]["nodes"] == first_nodes and attempts[1]["nodes"] == filler_nodes
    assert attempts[0]["lost_gpu_s"] == pytest.approx(ddp.lost_gpu_seconds)
    assert attempts[1]["resumed_from_s"] == pytest.approx(work_s, abs=0.01)
    page = Client()
    page.force_login(alice)
    html = page.get(f"/jobs/{ddp_id}/").content.decode()
    for attempt in attempts:
        row = re.search(rf'<tr data-attempt="{attempt["attempt"]}">(.*?)</tr>', html, re.S)
        assert row and all(node in row[1] for node in attempt["nodes"]), html[-3000:]
        assert attempt["outcome"] in row[1]
