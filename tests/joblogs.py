"""A job whose output the test writes: the job moves to a Slurm cluster whose output files are
read on this host (``log_dir``), so every read of its output goes through the Slurm backend's
own read of ``<log_dir>/<run>.out``, and the test appends to that file as the job would write
it, a piece at a time where it must (a line the job has not finished yet)."""

from __future__ import annotations

from pathlib import Path

from scheduler.backends import backend_run_id
from scheduler.backends.base import backend_job_name
from scheduler.models import Cluster, Job

# What the job was given (its env and command) and what it prints of it.
SECRET = "wk-0123456789abcdef"
PRIVATE_DIR = "/mnt/private/vision"
ENV = {"WANDB_API_KEY": SECRET, "DATA_DIR": PRIVATE_DIR, "DEBUG": "1"}
COMMAND = "python train.py --hf-token=hf_TheSecondSecret"
PRINTED = (
    f"WANDB_API_KEY={SECRET}\nDATA_DIR={PRIVATE_DIR}\nDEBUG=1\n"
    "argv: --hf-token=hf_TheSecondSecret --lr 0.1\n"
)
MASKED = (
    "WANDB_API_KEY=[redacted]\nDATA_DIR=[redacted]\nDEBUG=1\nargv: --hf-token=[redacted] --lr 0.1\n"
)


class OutputFile:
    """The output file of a started job's latest attempt, written by the test."""

    def __init__(self, job: Job, directory: Path) -> None:
        assert job.attempts >= 1, "start the job first"
        cluster = Cluster.objects.create(
            name=f"logs-{job.pk}",
            backend_kind="slurm",
            backend_config={"log_dir": str(directory), "job_workdir": str(directory)},
        )
        Job.objects.filter(pk=job.pk).update(cluster=cluster)
        job.refresh_from_db()
        self.path = directory / f"{backend_job_name(backend_run_id(job), job.attempts)}.out"
        self.path.write_bytes(b"")

    def write(self, text: str) -> None:
        with self.path.open("ab") as fh:
            fh.write(text.encode())
