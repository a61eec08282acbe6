"""Migrate and seed the e2e database (run as a script by tests/e2e/conftest.py, in its own process).

The demo organisation and 32-node simulated cluster (``seed_demo``), plus:
- alice's ``vision-secret-bigrun``: 12 x 8 H100 GPUs, vision's whole quota ceiling (64
  guaranteed + 32 borrowed), running for a long time. While it runs, any other vision job on
  H100 waits for quota; cancelling it lets the next one start. That makes "pending, then running"
  observable on a page without racing the scheduler.
- bob's ``nlp-bob-run`` on A100s, so bob has a job of his own.
- bob's ``HOSTILE_NAME`` job (one A100): a name with an HTML link, which the cost charts must
  show as text (the admin overview lists every team's top jobs).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from demo.seed import seed  # noqa: E402
from scheduler.services import JobRequest, job_submit  # noqa: E402

LONG = 10_000_000.0  # simulated seconds: runs for the whole test session
HOSTILE_NAME = 'nlp <a href="https://evil.example/">click</a>'


def main() -> None:
    # Migrating here rather than in a separate manage.py run saves one Django start-up.
    call_command("migrate", interactive=False, verbosity=0)
    # E2E_HISTORY_DAYS: days of finished demo history (the what-if and demo-screenshot tests).
    seed(jobs=0, history_days=int(os.environ.get("E2E_HISTORY_DAYS", "0")))
    users = {u.username: u for u in get_user_model().objects.all()}
    job_submit(
        user=users["alice"],
        request=JobRequest(
            name="vision-secret-bigrun",
            team="vision",
            workers=12,
            gpus_per_worker=8,
            gpu_model="h100-80gb",
            priority_class="research",
            simulated_duration_s=LONG,
        ),
    )
    job_submit(
        user=users["bob"],
        request=JobRequest(
            name="nlp-bob-run",
            team="nlp",
            workers=1,
            gpus_per_worker=4,
            gpu_model="a100-40gb",
            simulated_duration_s=LONG,
        ),
    )
    job_submit(
        user=users["bob"],
        request=JobRequest(
            name=HOSTILE_NAME,
            team="nlp",
            workers=1,
            gpus_per_worker=1,
            gpu_model="a100-40gb",
            simulated_duration_s=LONG,
        ),
    )


if __name__ == "__main__":
    main()
