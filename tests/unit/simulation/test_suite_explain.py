"""``benchmarks/suite_explain.py``: its three tables account for every second of waiting and every
preemption of the replays they come from, and one rule's reasons fold into one row."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scheduler.simulation import uniform_cluster

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import suite  # noqa: E402
import suite_explain  # noqa: E402


@pytest.fixture(scope="module")
def overloaded():
    """An overloaded two-node case (twice its capacity), so that jobs wait and are preempted."""
    trace = suite._synthetic(160, 2, 2.0)(Path("."), 0)
    return suite_explain.explain(trace, uniform_cluster(2, 8), 0, "tiresias")


def test_the_sizes_add_up_to_the_difference_in_average_wait(overloaded):
    rows = overloaded["by_size"]
    assert sum(r["jobs"] for r in rows) == 160
    difference = overloaded["avg_wait_s"] - overloaded["against_avg_wait_s"]
    assert difference != 0
    # the replay's metric is rounded to the millisecond
    assert sum(r["adds_s"] for r in rows) == pytest.approx(difference, abs=2e-3)
    for r in rows:
        assert r["avg_wait_s"] >= 0 and r["against_avg_wait_s"] >= 0


def test_every_job_second_of_waiting_is_charged_to_a_reason(overloaded):
    charged = sum(overloaded["waiting_s"].values())
    assert charged == pytest.approx(160 * overloaded["avg_wait_s"], rel=1e-6, abs=1.0)
    rows = suite_explain.reason_rows(overloaded["waiting_s"], None, top=3)
    assert len(rows) <= 4
    assert sum(r["job_s"] for r in rows) == pytest.approx(charged)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)


def test_the_preemptions_by_rule_are_the_replays_preemptions(overloaded):
    assert overloaded["preemptions"] > 0
    assert sum(overloaded["preempted"].values()) == overloaded["preemptions"]
    assert "attained service" in overloaded["preempted"]


def test_one_rules_reasons_fold_into_one_row():
    a = (
        "needs 1 free gpu GPUs on one node; the largest free block is 0; estimated start "
        "t=12345.6; no GPUs held for it before it has waited 86,400 s"
    )
    b = (
        "needs 4 free gpu GPUs on one node; the largest free block is 2; estimated start "
        "t=99.0; no GPUs held for it before it has waited 3,600 s"
    )
    assert suite_explain.fold_reason(a) == suite_explain.fold_reason(b)
    job = "defragment: 3f2504e0-4f89-11d3-9a0c-0305e82c3301 needs 2x8 gpu GPUs"
    other = "defragment: syn-000042 needs 4x8 gpu GPUs"
    assert suite_explain.fold_reason(job) == suite_explain.fold_reason(other)
    assert suite_explain.preemption_rule(job) == "defragment"
    assert suite_explain.preemption_rule("") == "(no reason)"


def test_the_command_refuses_an_unknown_case_and_prints_the_tables(capsys, tmp_path):
    with pytest.raises(SystemExit) as refused:
        suite_explain.main(["no-such-case"])
    assert refused.value.code == 2
    assert "unknown case" in capsys.readouterr().err
    out = tmp_path / "explain.json"
    assert (
        suite_explain.main(["itp10", "--against", "fifo-backfill", "--top", "2", "--out", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "| GPUs per job |" in printed and "preempted for" in printed
    assert out.read_text().startswith("{")
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert suite_explain.main(["itp10", "--out", str(blocked / "explain.json")]) == 2
    assert "cannot write" in capsys.readouterr().err
