"""The run-time predictor stays pure: importing and using it loads no Django/Celery/Channels and
nothing of the platform, and it reads no clock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import scheduler.prediction as pkg

FORBIDDEN = ("django", "celery", "channels", "rest_framework", "core", "tenants", "catalogue")


def test_predicting_imports_nothing_forbidden():
    code = (
        "import sys\n"
        "from scheduler.prediction import JobDescription, RuntimeModel\n"
        "m = RuntimeModel(min_samples=1)\n"
        "m.learn([JobDescription(team='a')], [60.0])\n"
        "m.predict_s([JobDescription(team='a')])\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}]\n"
        "bad += [m for m in sys.modules if m.startswith('scheduler.')"
        " and not m.startswith('scheduler.prediction')]\n"
        "print(','.join(bad))\n"
    )
    root = Path(pkg.__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_reads_no_clock():
    for path in Path(pkg.__file__).parent.glob("*.py"):
        text = path.read_text()
        for clock in ("time.time(", "perf_counter", "datetime.now", "monotonic(", "import time"):
            assert clock not in text, f"{path.name} reads the clock ({clock})"
