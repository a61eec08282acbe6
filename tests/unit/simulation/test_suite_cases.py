"""The benchmark suite's held-out cases (``benchmarks/suite.py --held-out``) hold no job of the
cases the engine's rules were measured on, and a later stretch of a trace is that stretch as
recorded, moved to start at 0."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from scheduler.simulation import load_itp

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import suite  # noqa: E402


def test_a_later_stretch_is_the_recorded_jobs_moved_to_start_at_zero(traces_dir):
    stretch = suite._itp_slice("02", 1500, 1500)(traces_dir, 0)
    recorded = load_itp(traces_dir / suite.ITP / "cluster02.csv", max_jobs=3000, seed=0)[1500:]
    assert len(stretch) == 1500
    assert stretch[0].submit == 0.0
    assert [j.id for j in stretch] == [j.id for j in recorded]
    shift = recorded[0].submit
    assert all(s.submit == r.submit - shift for s, r in zip(stretch, recorded, strict=True))
    assert [(j.duration, j.gpus, j.tenant) for j in stretch] == [
        (j.duration, j.gpus, j.tenant) for j in recorded
    ]


def _itp_cluster(case: suite.Case) -> str | None:
    found = re.match(r"cluster\d\d", case.describe)
    return found.group() if found else None


def test_held_out_cases_share_no_job_with_the_suite(traces_dir):
    tuned = set()
    for case in suite.CASES:
        if _itp_cluster(case):
            tuned.update((_itp_cluster(case), j.id) for j in case.trace(traces_dir, 0))
    assert {c for c, _ in tuned} == {f"cluster0{n}" for n in (2, 3, 4, 6, 7, 8)}
    # the defaults' first tuning trace: the whole cluster04 window, not only the suite's part
    window = load_itp(traces_dir / suite.ITP / "cluster04.csv", max_submit=suite.CLUSTER04_WINDOW_S)
    tuned.update(("cluster04", j.id) for j in window)
    names = {c.name for c in suite.CASES}
    for case in suite.HELD_OUT:
        assert case.name not in names
        source = _itp_cluster(case)
        if source is None:
            continue  # another pod list, or another load level of the generator
        jobs = {(source, j.id) for j in case.trace(traces_dir, 0)}
        assert jobs and not jobs & tuned, case.name
