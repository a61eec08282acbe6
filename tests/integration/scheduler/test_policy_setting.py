"""SCHEDULER_POLICY: the engine Config fields the live loop changes, checked when the platform
starts, so a typo stops the start with the field and the reason instead of failing a cycle."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _check(value: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SCHEDULER_POLICY": value}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"las_treshold": 1}', "SCHEDULER_POLICY.las_treshold: unknown config field"),
        ('{"las_long_run_s": -1}', "SCHEDULER_POLICY.las_long_run_s: must be >= 0"),
        ("{oops", "SCHEDULER_POLICY: not JSON"),
        ("[1]", "SCHEDULER_POLICY: must be an object"),
    ],
)
def test_a_bad_policy_setting_stops_the_start_with_the_field(value, message):
    done = _check(value)
    assert done.returncode != 0
    assert message in done.stderr


def test_a_good_policy_setting_reaches_the_engine(settings):
    from scheduler.snapshot import policy_config

    settings.SCHEDULER_POLICY = {"las_long_run_s": 172800, "las_thresholds_gpu_s": [3600, 36000]}
    config = policy_config()
    assert (config.las_long_run_s, config.las_thresholds_gpu_s) == (172800.0, (3600.0, 36000.0))
    assert _check('{"las_long_run_s": 172800}').returncode == 0
