"""A real local Slurm for the Slurm backend tests, shared by the whole session.

``slurm_cluster`` runs ``scripts/slurm-local start`` (idempotent: reuses a running cluster, starts
a missing one, installs Debian's Slurm when absent). Outside CI a machine that cannot run Slurm
skips these tests with the reason; under ``CI=true`` that is a failure, never a skip.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from scheduler.backends.slurm import SlurmBackend

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "slurm-local"
SLURM_DIR = Path(os.environ.get("GPUPLATFORM_SLURM_DIR", "/tmp/gpuplatform-slurm"))


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@dataclass(frozen=True)
class LocalSlurm:
    dir: Path
    conf: Path

    @property
    def jobs_dir(self) -> Path:
        return self.dir / "jobs"

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf), "LC_ALL": "C"}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (for assertions)."""
        return subprocess.run(
            list(argv), env=self.env(), capture_output=True, text=True, check=check, timeout=60
        )

    def script(self, *args: str) -> None:
        subprocess.run(
            [str(SCRIPT), *args, "--dir", str(self.dir)],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )

    def pid(self, daemon: str) -> int:
        return int((self.dir / "run" / f"{daemon}.pid").read_text().strip())

    def backend(self, **overrides) -> SlurmBackend:
        config = {
            "slurm_conf": str(self.conf),
            "partition": "gpu",
            "job_workdir": str(self.jobs_dir),
            "tries": 2,
            "backoff_s": 0.2,
            **overrides,
        }
        return SlurmBackend(config)


@pytest.fixture(scope="session")
def slurm_cluster() -> LocalSlurm:
    proc = subprocess.run(
        [str(SCRIPT), "start", "--dir", str(SLURM_DIR), "--nodes", "4"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        message = (
            f"could not start a local Slurm with scripts/slurm-local (rc={proc.returncode}): "
            f"{proc.stderr.strip()[-800:]}"
        )
        if in_ci():
            pytest.fail("CI=true requires a real Slurm: " + message, pytrace=False)
        pytest.skip("SLURM TESTS SKIPPED (not CI): " + message)
    cluster = LocalSlurm(dir=SLURM_DIR, conf=SLURM_DIR / "slurm.conf")
    # A node Slurm drained by itself ("Kill task failed": an emulated node death that left a
    # step behind) is a leftover of an earlier run, not something these tests asked for.
    listing = cluster.run("sinfo", "-h", "-N", "-o", "%N|%E", check=False).stdout
    for line in listing.splitlines():
        node, _, reason = line.partition("|")
        if reason.strip() == "Kill task failed":
            cluster.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    return cluster


@pytest.fixture()
def backend(slurm_cluster: LocalSlurm) -> SlurmBackend:
    return slurm_cluster.backend()


@pytest.fixture()
def job_id(request) -> str:
    """A fresh platform job id per test, so reruns on a kept cluster never meet old jobs."""
    return f"{request.node.name[:20].replace('_', '-')}-{uuid.uuid4().hex[:6]}"


def wait_for(condition: Callable[[], object], timeout: float, what: str, every: float = 0.5):
    """Poll ``condition`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
