"""A small PyTorch DDP training program that behaves as gpuplatform expects (CPU, gloo).

Runs unchanged on every gpuplatform backend, started by torchrun or directly (one process per
worker): it reads the standard launcher variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE;
torchrun sets them for the processes it starts from the platform's PET_* variables). It

- trains a small regression MLP on synthetic data that is a function of the step, so a run
  resumed from a checkpoint computes exactly the losses an uninterrupted run would;
- checkpoints when the platform asks: SIGUSR1 (Slurm: ``scancel --signal=USR1``, forwarded to
  every worker), a new ``gpuplatform.io/checkpoint-request`` value in
  ``$GPUPLATFORM_PODINFO_DIR/annotations`` (Kubernetes), and every ``$CHECKPOINT_INTERVAL_S``
  seconds of training; all ranks agree on the step through an all-reduce, so the checkpoint is
  one consistent state, and one request is one checkpoint even when the signal reaches the
  ranks in different steps;
- stops on SIGTERM, with a final checkpoint in a Kubernetes pod, whose contract that is (a pod
  deletion's SIGTERM is the only warning). On Slurm the platform asks with USR1 before it stops
  a run (preemption, the time-limit warning), so SIGTERM only stops it: the work done since that
  checkpoint is what the platform records as lost;
- writes the checkpoint atomically (rank 0: model, optimizer, step, seconds of work) and tells
  the platform how much work it holds: ``{"checkpointed_progress_s": N}`` into
  ``$GPUPLATFORM_CHECKPOINT_PROGRESS`` (Slurm) or ``/dev/termination-log`` on exit (Kubernetes);
- resumes from its checkpoint file when one exists (the platform's ``GPUPLATFORM_RESUME_FROM_S``
  says how much work the platform recorded, and is logged beside it).

Rank 0 prints one line per step (``step 57 loss 0.123456``) and one per checkpoint.

    torchrun --nproc-per-node=1 examples/ddp/train.py --steps 400 --checkpoint-dir /shared/ckpt
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

CHECKPOINT_ANNOTATION = "gpuplatform.io/checkpoint-request"


class Requests:
    """What signals asked for (set by the handlers, read by the loop)."""

    def __init__(self) -> None:
        # A count, not a flag: a signal arriving at any moment (during the all-reduce, between
        # two bytecodes) is never lost, and the ranks compare counts, not "asked since my last
        # step": Slurm signals each worker on its own, so one request can reach rank 0 in one
        # step and rank 1 in the next, which as flags would be two checkpoints.
        self.checkpoints = 0
        self.stop = False
        signal.signal(signal.SIGUSR1, self._checkpoint)
        signal.signal(signal.SIGTERM, self._stop)

    def _checkpoint(self, _signum, _frame) -> None:
        self.checkpoints += 1

    def _stop(self, _signum, _frame) -> None:
        self.stop = True


class AnnotationWatch:
    """Kubernetes: the platform changes a pod annotation, the kubelet rewrites this file."""

    def __init__(self) -> None:
        podinfo = os.environ.get("GPUPLATFORM_PODINFO_DIR")
        self.path = Path(podinfo) / "annotations" if podinfo else None
        self.last = self._read()

    def _read(self) -> str | None:
        if self.path is None:
            return None
        try:
            for line in self.path.read_text().splitlines():
                key, _, value = line.partition("=")
                if key == CHECKPOINT_ANNOTATION:
                    return value
        except OSError:
            return None
        return None

    def changed(self) -> bool:
        value = self._read()
        if value is not None and value != self.last:
            self.last = value
            return True
        return False


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))


def batch(step: int, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of this step: the same numbers whenever the step is (re)computed."""
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(size, 16, generator=g)
    weights = torch.linspace(-1.0, 1.0, 16)
    y = (x @ weights).unsqueeze(1) + 0.1 * torch.randn(size, 1, generator=g)
    return x, y


def save(path: Path, net: nn.Module, opt: torch.optim.Optimizer, step: int, work_s: float):
    tmp = path.with_suffix(".tmp")
    state = {"model": net.state_dict(), "optim": opt.state_dict(), "step": step, "work_s": work_s}
    torch.save(state, tmp)
    os.replace(tmp, path)  # a reader never sees half a checkpoint
    progress = os.environ.get("GPUPLATFORM_CHECKPOINT_PROGRESS")
    if progress:
        Path(progress).write_text(json.dumps({"checkpointed_progress_s": round(work_s, 3)}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--step-seconds", type=float, default=0.05, help="pace of the steps")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("GPUPLATFORM_CHECKPOINT_DIR", "checkpoints"),
        help="shared by every worker and every attempt",
    )
    args = parser.parse_args()

    torch.set_num_threads(1)  # deterministic sums, and small on a shared CPU
    requests = Requests()
    watch = AnnotationWatch()
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    say = print if rank == 0 else (lambda *a, **k: None)
    say(
        f"rank 0 of {world}: MASTER_ADDR={os.environ.get('MASTER_ADDR')} "
        f"MASTER_PORT={os.environ.get('MASTER_PORT')} "
        f"attempt {os.environ.get('GPUPLATFORM_ATTEMPT', '?')}",
        flush=True,
    )

    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr)
    path = Path(args.checkpoint_dir) / "ckpt.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    start, work_s = 1, 0.0
    if path.exists():
        state = torch.load(path, map_location="cpu")
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start, work_s = state["step"] + 1, float(state["work_s"])
        say(
            f"resumed from step {state['step']} ({work_s:.1f} s of work; the platform says "
            f"GPUPLATFORM_RESUME_FROM_S={os.environ.get('GPUPLATFORM_RESUME_FROM_S', '')})",
            flush=True,
        )
    ddp = DistributedDataParallel(net)
    interval = float(os.environ.get("CHECKPOINT_INTERVAL_S") or 0)
    checkpoint_on_stop = bool(os.environ.get("GPUPLATFORM_PODINFO_DIR"))  # Kubernetes
    last_checkpoint_work = work_s
    handled_requests = 0  # the highest request count any rank had when we last checkpointed
    annotation_requests = 0
    loss_fn = nn.MSELoss()

    for step in range(start, args.steps + 1):
        began = time.monotonic()
        x, y = batch(step, rank, args.batch_size)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        if rank == 0 and step % 20 == 0 and watch.changed():
            annotation_requests += 1  # its own count: a signal handler never races with it
        due = rank == 0 and interval > 0 and work_s - last_checkpoint_work >= interval
        mean_loss = torch.tensor([loss.item()])
        dist.all_reduce(mean_loss)  # a sum
        # The most requests any rank has heard of, whether one is due, whether one must stop.
        heard = requests.checkpoints + annotation_requests
        agreed = torch.tensor([float(heard), float(due), float(requests.stop)])
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        time.sleep(max(0.0, args.step_seconds - (time.monotonic() - began)))
        work_s += time.monotonic() - began
        say(f"step {step} loss {mean_loss[0].item() / world:.6f}", flush=True)
        asked, stop = agreed[0].item() > handled_requests, agreed[2] > 0
        handled_requests = max(handled_requests, int(agreed[0].item()))
        if asked or agreed[1] > 0 or (stop and checkpoint_on_stop):
            if rank == 0:
                save(path, net, opt, step, work_s)
                say(f"checkpoint step {step} work_s {work_s:.2f} at {time.time():.3f}", flush=True)
            last_checkpoint_work = work_s
        if stop:
            if checkpoint_on_stop:
                _termination_message(work_s if rank == 0 else None)
            say(f"stopping after step {step}", flush=True)
            dist.destroy_process_group()
            return 143
    say(f"done: {args.steps} steps, {work_s:.1f} s of work", flush=True)
    dist.destroy_process_group()
    return 0


def _termination_message(work_s: float | None) -> None:
    """Kubernetes copies this file into the pod's status: the platform reads the work saved."""
    if work_s is None or not os.path.exists("/dev/termination-log"):
        return  # not in a Kubernetes pod (and never create a file under /dev)
    try:
        with open("/dev/termination-log", "w") as fh:
            fh.write(json.dumps({"checkpointed_progress_s": round(work_s, 3)}))
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
