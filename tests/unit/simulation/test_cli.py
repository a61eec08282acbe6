"""The command line: replay and compare on tiny traces, the offline HTML report, errors."""

from __future__ import annotations

import json

import pytest

from scheduler.simulation.cli import main
from scheduler.simulation.metrics import METRIC_KEYS


@pytest.fixture
def trace(tmp_path):
    rows = ["job_id,submission_time,duration,num_gpu"]
    rows += [f"j{i},{i * 100},{600 + (i * 37) % 900},{[1, 1, 2, 8, 16][i % 5]}" for i in range(40)]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_replay_writes_every_metric(tmp_path, trace, capsys):
    out = tmp_path / "r.json"
    rc = main(
        [
            "replay",
            "--trace",
            str(trace),
            "--nodes",
            "4",
            "--policy",
            "fifo-backfill",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    result = json.loads(out.read_text())
    assert all(k in result for k in METRIC_KEYS)
    assert result["jobs"] == 40 and result["decide_calls"] > 0 and result["wall_s"] > 0
    assert "100%" in capsys.readouterr().err  # the progress bar reached the end


def test_compare_prints_a_table_and_writes_an_offline_html_report(tmp_path, trace, capsys):
    html = tmp_path / "r.html"
    out = tmp_path / "all.json"
    rc = main(
        [
            "compare",
            "--trace",
            str(trace),
            "--cluster",
            "3x8",
            "--quiet",
            "--policies",
            "fifo,sjf,tiresias,gpuplatform",
            "--html",
            str(html),
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    table = capsys.readouterr().out
    for name in ("fifo", "sjf", "tiresias", "gpuplatform"):
        assert f"\n{name.rjust(11)}" in table
    assert set(json.loads(out.read_text())["results"]) == {"fifo", "sjf", "tiresias", "gpuplatform"}
    page = html.read_text()
    assert "<script src=" not in page  # plotly.js is inlined, no CDN
    assert "Plotly" in page and "Waiting time CDF" in page


def test_fidelity_mode_refuses_other_policies(trace, capsys):
    rc = main(
        ["compare", "--trace", str(trace), "--fidelity", "--policies", "fifo,tiresias", "--quiet"]
    )
    assert rc == 2 and "fidelity" in capsys.readouterr().err


def test_missing_trace_is_a_clean_error(tmp_path, capsys):
    rc = main(
        [
            "replay",
            "--trace",
            str(tmp_path / "nope.csv"),
            "--policy",
            "fifo",
            "--out",
            str(tmp_path / "o.json"),
        ]
    )
    assert rc == 2 and "error:" in capsys.readouterr().err


def test_synthetic_trace_replays(tmp_path):
    out = tmp_path / "s.json"
    assert (
        main(
            [
                "replay",
                "--trace",
                "synthetic:30",
                "--nodes",
                "4",
                "--policy",
                "sjf",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["jobs"] == 30
