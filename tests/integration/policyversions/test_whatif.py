"""The what-if replay gives the metrics ``python -m scheduler.simulation compare`` gives on the
same exported history (run as its own process), and refuses bad windows and candidates by
field."""

import io
import json
import subprocess
import sys
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from core.errors import FieldErrors
from policyversions.whatif import compare_arguments, whatif_candidates, whatif_compare

pytestmark = pytest.mark.django_db

# Wall-clock costs of the replay itself, and the file names it was given.
TIMING = {"wall_s", "decide_p50_ms", "decide_p99_ms", "params"}


def _comparable(results):
    return {name: {k: v for k, v in m.items() if k not in TIMING} for name, m in results.items()}


def test_the_replay_matches_the_simulation_command_on_the_same_history(settings, tmp_path):
    from demo.seed import seed

    settings.DEBUG = True
    seed(jobs=0, history_days=4)
    now = timezone.now()
    since, until = now - timedelta(days=4), now
    candidates = {"faster_aging": {"queue_aging_s": 3600}}
    ours = whatif_compare(cluster="demo", since=since, until=until, candidates=candidates)
    assert set(ours) == {"gpuplatform", "faster_aging"}
    assert ours["gpuplatform"]["jobs"] > 100

    trace, out = tmp_path / "history.json", tmp_path / "results.json"
    call_command(
        "export_trace", out=str(trace), since=since.isoformat(), until=until.isoformat(),
        cluster="demo", stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    args = compare_arguments(trace, out, whatif_candidates(candidates))
    done = subprocess.run(
        [sys.executable, "-m", "scheduler.simulation", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    theirs = json.loads(out.read_text())["results"]
    assert _comparable(ours) == _comparable(theirs)


@pytest.mark.parametrize(
    ("window_days", "candidates", "field"),
    [
        (120, {"c": {}}, "window"),
        (0, {"c": {}}, "window"),
        (3, {}, "candidates"),
        (3, {"gpuplatform": {}}, "candidates.gpuplatform"),
        (3, {"c": {"queue_aging_s": -1}}, "candidates.c.queue_aging_s"),
        (
            3,
            {"c": {"engine_config": {"queue_aging_s": -1}}},
            "candidates.c.engine_config.queue_aging_s",
        ),
        (3, {"c": {"team_weights": {"ghost": 2}}}, "candidates.c.team_weights.ghost"),
        (3, {"c": {"team_weights": {"nlp": -2}}}, "candidates.c.team_weights.nlp"),
        (3, {"c": {"priority_classes": {"urgent": {}}}}, "candidates.c.priority_classes.urgent"),
        (3, {"c": {"team_weights": {}, "las": None}}, "candidates.c.las"),
    ],
)
def test_bad_windows_and_candidates_name_the_field(db, window_days, candidates, field):
    now = timezone.now()
    with pytest.raises(FieldErrors) as refused:
        whatif_compare(
            cluster="demo",
            since=now - timedelta(days=window_days),
            until=now,
            candidates=candidates,
        )
    assert field in refused.value.errors
