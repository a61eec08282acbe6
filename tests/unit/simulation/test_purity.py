"""The simulator core stays pure: no Django/Celery/Channels/plotly imports, no clock reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import scheduler.simulation as pkg

CORE = ["traces", "cluster", "simulator", "baselines", "metrics", "runner", "gpuplatform_policy"]
FORBIDDEN = ("django", "celery", "channels", "plotly")


def test_core_imports_nothing_forbidden():
    code = (
        "import sys\n"
        + "".join(f"import scheduler.simulation.{m}\n" for m in CORE)
        + f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}]\n"
        + "print(','.join(bad))\n"
    )
    root = Path(pkg.__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_core_reads_no_clock():
    here = Path(pkg.__file__).parent
    for name in CORE:
        text = (here / f"{name}.py").read_text()
        for clock in ("time.time(", "perf_counter", "datetime.now", "monotonic(", "import time"):
            assert clock not in text, f"{name}.py reads the clock ({clock})"
