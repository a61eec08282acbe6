"""``scripts/slurm-root bind``: host directories shown read-only inside a Debian root (13 for
Slurm 24.11, 14 for 26.05), the way the PyTorch job there reaches the checkout's virtualenv
(``host_python``)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from .conftest import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_versions("24.11", "26.05")]

SCRIPT = REPO / "scripts" / "slurm-root"


def slurm_root(*args: str, root: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args, "--root", root], capture_output=True, text=True, timeout=120
    )


def test_bind_is_read_only_idempotent_and_follows_a_directory_made_again(slurm_cluster):
    root = slurm_cluster.root
    host = Path("/tmp") / f"gp-bind-{uuid.uuid4().hex[:8]}"
    inside = Path(root + str(host))
    host.mkdir()
    (host / "first").write_text("1")
    try:
        assert slurm_root("bind", str(host), root=root).returncode == 0
        assert slurm_root("bind", str(host), root=root).returncode == 0  # already bound: kept
        assert (inside / "first").read_text() == "1"
        with pytest.raises(OSError, match="Read-only"):
            (inside / "written-through").write_text("x")
        # A clone deleted and made again at the same path must not keep showing the old files.
        shutil.rmtree(host)
        host.mkdir()
        (host / "second").write_text("2")
        assert slurm_root("bind", str(host), root=root).returncode == 0
        assert sorted(p.name for p in inside.iterdir()) == ["second"]
    finally:
        subprocess.run(["umount", str(inside)], capture_output=True, check=False)
        shutil.rmtree(host, ignore_errors=True)
        if inside.is_dir() and not any(inside.iterdir()):
            inside.rmdir()


@pytest.mark.parametrize(
    ("directory", "reason"),
    [
        ("/", "refusing to bind /"),
        ("/var", "the root is inside it"),
        ("/nonexistent-gp-dir", "not a directory"),
        ("/usr", "the root has files of its own at that path"),
    ],
)
def test_bind_refuses_what_would_expose_the_root_or_nothing(slurm_cluster, directory, reason):
    if directory == "/var" and not slurm_cluster.root.startswith("/var/"):
        pytest.skip(f"the root is not under /var: {slurm_cluster.root}")
    proc = slurm_root("bind", directory, root=slurm_cluster.root)
    assert proc.returncode == 1 and reason in proc.stderr, proc.stderr


def test_bind_needs_a_directory(slurm_cluster):
    proc = slurm_root("bind", root=slurm_cluster.root)
    assert proc.returncode == 1 and "at least one host directory" in proc.stderr
