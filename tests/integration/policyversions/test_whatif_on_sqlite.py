"""What-if runs on the embedded demo's SQLite, where the history's export reads its jobs in one
open statement: a write another connection commits meanwhile (the loop's cycle, an admin's
cancel) must not leave the run "running" for ever with its thread dead, as it did when the
export's progress check then wrote on the export's own connection ("database is locked" at once:
SQLite cannot upgrade that read to a write). Each case runs ``sqlite_whatif_cancel.py`` in a
process of its own over a file database (migrated, seeded with the demo's history)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = Path(__file__).with_name("sqlite_whatif_cancel.py")


def _run(tmp_path: Path, **env: str) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    environment.update(
        DJANGO_SETTINGS_MODULE="gpuplatform.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        LOG_LEVEL="CRITICAL",
        **env,
    )
    done = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_cancel_during_the_export_ends_the_run_cancelled(tmp_path):
    run = _run(tmp_path)
    assert run["status"] == "cancelled", run
    assert run["text"].startswith("cancelled; the replay was stopped at"), run


def test_a_deadline_during_the_export_ends_the_run_failed_saying_so(tmp_path):
    # The deadline is passed by the export's first progress check, which raises: the export's
    # statement must be finished before the run's end is written.
    run = _run(tmp_path, WHATIF_MAX_RUNTIME_SECONDS="0.001")
    assert run["status"] == "failed", run
    assert "WHATIF_MAX_RUNTIME_SECONDS" in run["error"], run
    assert "exporting the history" in run["error"], run
