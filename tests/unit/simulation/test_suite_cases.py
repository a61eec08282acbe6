"""The benchmark suite's case sets: the held-out cases (``benchmarks/suite.py --held-out``) hold
no job of the cases the engine's rules were measured on, a later stretch of a trace is that
stretch as recorded, moved to start at 0, the other shapes (``--shapes``) differ from a suite case
only in the cluster, and ``--issue-table`` is the issue's own table."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

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


def test_every_case_has_a_name_of_its_own():
    names = [c.name for c in suite.ALL_CASES]
    assert len(names) == len(set(names))
    assert set(suite.ALL_CASES) == {c for cases in suite.CASE_SETS.values() for c in cases}


def test_a_shape_case_is_a_suite_case_s_jobs_on_other_nodes(traces_dir):
    """Each of ``--shapes``' ITP cases replays a suite case's jobs, on the same GPUs in nodes of
    another size or on fewer nodes of the same size: only the cluster differs."""
    suite_by_cluster = {_itp_cluster(c): c for c in suite.CASES if c.name.startswith("itp0")}
    for case in suite.SHAPES:
        source = _itp_cluster(case)
        if source is None:
            continue  # the other openb pod list
        sibling = suite_by_cluster[source]
        assert [j.id for j in case.trace(traces_dir, 0)] == [
            j.id for j in sibling.trace(traces_dir, 0)
        ]
        shape, usual = case.cluster(traces_dir), sibling.cluster(traces_dir)
        per_node = {n.gpus for n in shape.nodes}
        if per_node == {8}:
            assert shape.total_gpus < usual.total_gpus, case.name
        else:
            assert per_node in ({4}, {16}) and shape.total_gpus == usual.total_gpus, case.name


def test_the_issue_table_is_the_issue_s_whole_traces_and_clusters(traces_dir):
    """Issue 21's table: cluster06 all 2,396 jobs on 12 x 8, cluster03 all 3,011 on 20 x 8,
    cluster08 and cluster07 their first 10,000 on 10 x 8 and 36 x 8."""
    got = {
        _itp_cluster(c): (len(c.trace(traces_dir, 0)), c.cluster(traces_dir).total_gpus)
        for c in suite.ISSUE_TABLE
    }
    assert got == {
        "cluster06": (2396, 96),
        "cluster03": (3011, 160),
        "cluster08": (10000, 80),
        "cluster07": (10000, 288),
    }


def test_one_case_set_at_a_time(capsys):
    with pytest.raises(SystemExit) as exit_:
        suite.main(["--held-out", "--shapes", "--loads"])
    assert exit_.value.code == 2
    assert "not allowed with" in capsys.readouterr().err
