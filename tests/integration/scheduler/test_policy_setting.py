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
        ('{"las": {"long_run_s": 0}}', "SCHEDULER_POLICY.las.long_run_s: must be > 0"),
        (
            '{"las": {"bottom_fifo_queues": 0}}',
            "SCHEDULER_POLICY.las.bottom_fifo_queues: must be >= 1",
        ),
        (
            '{"reservations_per_model": 1e30}',
            "SCHEDULER_POLICY.reservations_per_model: must be <= 100000",
        ),
        ("{oops", "SCHEDULER_POLICY: not JSON"),
        ("[1]", "SCHEDULER_POLICY: must be an object"),
    ],
)
def test_a_bad_policy_setting_stops_the_start_with_the_field(value, message):
    done = _check(value)
    assert done.returncode != 0
    assert message in done.stderr


def test_a_good_policy_setting_reaches_the_engine(settings, db):
    # db: the policy history is read first (none stored here, so the setting is in force).
    from scheduler.snapshot import policy_config

    settings.SCHEDULER_POLICY = {"las": {"long_run_s": 172800, "thresholds_gpu_s": [3600, 36000]}}
    config = policy_config()
    assert (config.las.long_run_s, config.las.thresholds_gpu_s) == (172800.0, (3600.0, 36000.0))
    done = _check('{"las": {"long_run_s": 172800}}')
    assert done.returncode == 0 and "deprecated" not in done.stderr


def test_todays_flat_keys_still_start_and_log_their_replacement(settings, db):
    from scheduler.policy import Las
    from scheduler.snapshot import policy_config

    done = _check('{"las_long_run_s": 172800}')
    assert done.returncode == 0
    assert "SCHEDULER_POLICY.las_long_run_s is deprecated: use las.long_run_s" in done.stderr
    settings.SCHEDULER_POLICY = {"las_long_run_s": 172800}
    assert policy_config().las == Las(long_run_s=172800.0)
