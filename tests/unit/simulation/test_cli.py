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


@pytest.fixture
def preemption_reasons(monkeypatch):
    """The reason of every preemption the test's replays make, recorded on its way through the
    real simulator (which still acts on it)."""
    from scheduler.simulation.simulator import Simulator

    reasons: list[str] = []
    preempt = Simulator.preempt

    def recorded(sim, job, grace_s=0.0, reason=""):
        reasons.append(reason)
        return preempt(sim, job, grace_s, reason)

    monkeypatch.setattr(Simulator, "preempt", recorded)
    return reasons


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


def test_engine_config_half_life_reaches_the_simulators_usage_decay(tmp_path, trace):
    # The engine decays team usage with its own fair_share_half_life_s (as the live loop does);
    # a what-if of that field must change the usage the simulator hands over.
    out = tmp_path / "r.json"
    rc = main(
        [
            "replay",
            "--trace",
            str(trace),
            "--nodes",
            "4",
            "--policy",
            "fast",
            "--engine-config",
            'fast={"fair_share_half_life_s": 3600}',
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    assert json.loads(out.read_text())["params"]["fair_share_half_life_s"] == 3600.0


def test_usage_handed_to_the_engine_decays_with_the_engines_half_life():
    from scheduler.policy import Config
    from scheduler.simulation import SimConfig, Simulator, uniform_cluster
    from scheduler.simulation.gpuplatform_policy import GpuPlatformPolicy
    from scheduler.simulation.traces import TraceJob

    jobs = [TraceJob("a", 0.0, 3600.0, 8, "team-a"), TraceJob("b", 36000.0, 60.0, 1, "team-b")]
    usage = {}
    for half_life in (3600.0, 604800.0):
        policy = GpuPlatformPolicy(Config(fair_share_half_life_s=half_life))
        sim = Simulator(jobs, uniform_cluster(1, 8), policy, SimConfig()).run()
        assert sim.fair_share_half_life_s == half_life
        usage[half_life] = sim.tenant_usage["team-a"]
    # 8 GPU-h used, then about nine one-hour half-lives: well under 1 % left; a week: nearly all
    assert usage[3600.0] < 0.01 * 8 * 3600 < usage[604800.0]


def test_a_half_life_that_dwarfs_the_replay_counts_usage_without_decay():
    # Any half-life > 0 is valid ("never decay" in practice); 1 - exp(-dt ln2 / 1e20) rounds to
    # 0, and the replay handed the engine no usage at all while the live loop counts it.
    from scheduler.policy import Config
    from scheduler.simulation import SimConfig, Simulator, uniform_cluster
    from scheduler.simulation.gpuplatform_policy import GpuPlatformPolicy
    from scheduler.simulation.traces import TraceJob

    jobs = [TraceJob("a", 0.0, 3600.0, 8, "team-a"), TraceJob("b", 36000.0, 60.0, 1, "team-b")]
    for half_life in (1e12, 1e20, 1e300):
        policy = GpuPlatformPolicy(Config(fair_share_half_life_s=half_life))
        sim = Simulator(jobs, uniform_cluster(1, 8), policy, SimConfig()).run()
        assert sim.tenant_usage == pytest.approx({"team-a": 8 * 3600.0, "team-b": 60.0}), half_life


def test_checkpoint_on_request_is_validated_and_reaches_the_replay(tmp_path, capsys):
    def replay(value: str) -> int:
        out = tmp_path / f"{value}.json"
        argv = ["replay", "--trace", "synthetic:300", "--nodes", "4", "--policy", "gpuplatform"]
        return main([*argv, "--out", str(out), "--quiet", "--checkpoint-on-request", value])

    with pytest.raises(SystemExit) as exc:
        replay("-3")
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--checkpoint-on-request: '-3': must be >= 0 seconds" in err
    assert not (tmp_path / "-3.json").exists()
    assert replay("none") == 0 and replay("30") == 0
    periodic = json.loads((tmp_path / "none.json").read_text())
    on_request = json.loads((tmp_path / "30.json").read_text())
    # victims now stop 30 s after they are asked, not at their periodic checkpoint or grace end
    assert on_request["preemptions"] != periodic["preemptions"]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--nodes", "0", "'0': must be >= 1"),
        ("--max-jobs", "-1", "'-1': must be >= 1"),
        ("--checkpoint-interval", "-5", "'-5': must be > 0 seconds, or none"),
        ("--checkpoint-interval", "nan", "'nan': must be a finite number"),
        ("--mtbf", "-5", "'-5': must be > 0 seconds, or none"),  # replayed forever before
        ("--spot-mtbi", "inf", "'inf': must be a finite number"),
        ("--restart-overhead", "-5", "'-5': must be >= 0 seconds"),
        ("--repair", "nan", "'nan': must be a finite number"),
        ("--arrival-scale", "nan", "'nan': must be a finite number"),  # replayed forever before
        ("--max-submit", "soon", "'soon' is not a number"),
        ("--checkpoint-on-request", "inf", "'inf': must be >= 0 seconds"),
        ("--spot-fraction", "1.5", "'1.5': must be a fraction from 0 to 1"),
        ("--spot-fraction", "nan", "'nan': must be a finite number"),
        # each of these never finished (or ran out of memory) before
        ("--mtbf", "0.001", "'0.001': must be >= 60 seconds, or none"),
        ("--spot-mtbi", "1e-9", "'1e-9': must be >= 60 seconds, or none"),
        ("--repair", "1e300", "'1e300': must be <= 3.16224e+07 seconds"),
        ("--nodes", "100000000", "'100000000': must be <= 100000"),
        ("--gpus-per-node", "1000000000", "'1000000000': must be <= 4096"),
    ],
)
def test_numbers_out_of_range_exit_2_naming_the_flag(tmp_path, capsys, flag, value, message):
    out = tmp_path / "out.json"
    argv = ["replay", "--trace", "synthetic:20", "--policy", "fifo", "--out", str(out), "--quiet"]
    if flag != "--nodes":
        argv += ["--nodes", "2"]
    with pytest.raises(SystemExit) as exc:
        main([*argv, flag, value])
    assert exc.value.code == 2
    assert f"argument {flag}: {message}" in capsys.readouterr().err
    assert not out.exists()


def test_the_suite_takes_the_checkpoint_interval_with_the_same_rule(capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import suite

    with pytest.raises(SystemExit) as exc:
        suite.main(["--checkpoint-interval", "-3"])
    assert exc.value.code == 2
    assert "argument --checkpoint-interval: '-3': must be > 0 seconds, or none" in (
        capsys.readouterr().err
    )


def test_a_suite_variant_is_the_engine_with_its_fields_and_a_bad_one_is_refused(capsys):
    import sys
    from pathlib import Path

    from scheduler.simulation import SimConfig, simulate

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import suite

    for spec, said in (
        ('x={"las": {"nope": 1}}', "--variant x: config.las.nope: unknown config field"),
        ("x=[1]", "--variant x: config: must be an object"),
        ("x={", "--variant x: Expecting property name"),
        ('tiresias={"las": null}', "needs a NAME=JSON with a name of its own"),
    ):
        with pytest.raises(SystemExit) as exc:
            suite.main(["--policies", "tiresias", "--variant", spec])
        assert exc.value.code == 2
        assert said in capsys.readouterr().err

    trace = suite._synthetic(200, 4, 3.0)(None, 0)
    cluster = suite._nodes(4)(None)

    def replay(policy):
        return simulate(trace, cluster, policy, SimConfig(seed=0))[0]

    variant = replay(suite._policy("my-nolas", {"las": None}))
    assert variant["policy"] == "my-nolas"
    same = replay("gpuplatform-nolas")
    assert {k: v for k, v in variant.items() if k not in ("policy", "wall_s")} == {
        k: v for k, v in same.items() if k not in ("policy", "wall_s")
    }
    assert variant["preemptions"] != replay("gpuplatform")["preemptions"]


def test_a_production_share_puts_the_same_jobs_in_a_higher_class_and_the_engine_preempts_for_them(
    capsys, preemption_reasons
):
    # The suite's cases have one priority class; --production-share exercises class preemption.
    import sys
    from pathlib import Path

    from scheduler.simulation import SimConfig, simulate

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import suite

    for bad, said in (("1.5", "must be a fraction from 0 to 1"), ("nan", "a finite number")):
        with pytest.raises(SystemExit) as exc:
            suite.main(["--production-share", bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --production-share: '{bad}'" in err
        assert said in err

    trace = suite._synthetic(200, 4, 3.0)(None, 0)
    mixed = suite.with_production_share(trace, 0.3)
    production = {j.id for j in mixed if j.priority_class == suite.PRODUCTION}
    assert 40 <= len(production) <= 80  # about 60 of 200
    assert [j.id for j in mixed] == [j.id for j in trace]
    # chosen by id alone (not by position), and none at a share of 0
    reordered = suite.with_production_share(tuple(reversed(trace)), 0.3)
    assert production == {j.id for j in reordered if j.priority_class == suite.PRODUCTION}
    assert suite.with_production_share(trace, 0.0) == trace

    cluster = suite._nodes(4)(None)
    one_class, _ = simulate(trace, cluster, "gpuplatform", SimConfig(seed=0))
    preemption_reasons.clear()
    two_classes, replay = simulate(mixed, cluster, "gpuplatform", SimConfig(seed=0))
    assert any(
        r.startswith("priority: ") and f"({suite.PRODUCTION})" in r for r in preemption_reasons
    )
    # production jobs wait less than research ones, and the classes change what is preempted
    waits: dict[str, list[float]] = {suite.PRODUCTION: [], "research": []}
    for job in replay.jobs:
        waits[job.priority_class].append(job.queue_s)
    production_wait = sum(waits[suite.PRODUCTION]) / len(waits[suite.PRODUCTION])
    assert production_wait < sum(waits["research"]) / len(waits["research"])
    assert two_classes["preemptions"] != one_class["preemptions"]
    # no storm and little lost work with two classes either (the suite's goals)
    assert two_classes["preemptions"] <= 2 * two_classes["jobs"]
    assert two_classes["lost_gpu_hours"] <= 0.02 * two_classes["work_gpu_hours"]


def test_a_guaranteed_share_gives_every_tenant_a_quota_and_the_engine_reclaims(
    capsys, preemption_reasons
):
    # No case of the suite has quotas; --guaranteed-share replays reclaiming borrowed GPUs.
    import sys
    from pathlib import Path

    from scheduler.simulation import SimConfig, simulate

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import suite

    for bad in ("-0.1", "inf"):
        with pytest.raises(SystemExit) as exc:
            suite.main(["--guaranteed-share", bad])
        assert exc.value.code == 2
        assert f"argument --guaranteed-share: '{bad}'" in capsys.readouterr().err

    trace = suite._synthetic(200, 4, 3.0)(None, 0)
    cluster = suite._nodes(4)(None)
    teams = suite.equal_guarantees(trace, cluster, 0.3)
    assert sorted(teams) == sorted({j.tenant for j in trace}) and len(teams) == 4
    # 30 % of 32 GPUs, rounded down, and the rest of the cluster to borrow
    assert {t["quota"]["gpu"] for t in teams.values()} == {(9, 23)}
    assert suite.equal_guarantees(trace, cluster, 0.0) is None
    # a tree: the tenants dealt to two organisations, each guaranteed its two tenants' 9 + 9
    tree = suite.equal_guarantees(trace, cluster, 0.3, organisations=2)
    assert {t: v["parent"] for t, v in tree.items()} == {
        "org0": None,
        "org1": None,
        **{t: f"org{i % 2}" for i, t in enumerate(sorted(teams))},
    }
    assert tree["org0"]["quota"]["gpu"] == (18, 14)
    # the engine is handed the tree (each tenant under its organisation) and reclaims with it
    tree_policy = suite._policy("gpuplatform", None, tree)
    parents: dict[str, str | None] = {}
    snapshot = tree_policy.snapshot

    def recording(sim, now):
        snap = snapshot(sim, now)
        parents.update((t.name, t.parent) for t in snap.teams)
        return snap

    tree_policy.snapshot = recording
    simulate(trace, cluster, tree_policy, SimConfig(seed=0))
    assert parents == {t: v["parent"] for t, v in tree.items()}
    assert any(r.startswith("reclaim: another team ") for r in preemption_reasons)
    preemption_reasons.clear()
    # guarantees never above the cluster, whatever the share
    assert suite.equal_guarantees(trace, cluster, 0.5, organisations=1)["org0"]["quota"] == {
        "gpu": (32, 0)
    }
    with pytest.raises(SystemExit) as exc:
        suite.main(["--organisations", "2"])
    assert exc.value.code == 2
    assert "--organisations needs --guaranteed-share" in capsys.readouterr().err
    # the baselines ignore quotas; the engine takes them
    assert suite._policy("tiresias", None, teams).name == "tiresias"

    simulate(trace, cluster, suite._policy("gpuplatform", None, teams), SimConfig(seed=0))
    assert any(r.startswith("reclaim: another team ") for r in preemption_reasons)
    preemption_reasons.clear()
    simulate(trace, cluster, suite._policy("gpuplatform", None), SimConfig(seed=0))
    assert preemption_reasons and not any(r.startswith("reclaim: ") for r in preemption_reasons)
    # With two classes as well: no reclaim takes a higher class, so no storm (a research job
    # reclaiming a production job's GPUs, which it took back by priority, and so on)
    mixed = suite.with_production_share(trace, 0.3)
    two_classes, _ = simulate(
        mixed, cluster, suite._policy("gpuplatform", None, teams), SimConfig(seed=0)
    )
    assert two_classes["preemptions"] <= 2 * two_classes["jobs"]
    assert two_classes["lost_gpu_hours"] <= 0.02 * two_classes["work_gpu_hours"]


def test_the_suite_replays_node_failures_and_spot_nodes_for_every_policy_alike(capsys):
    # The traces have no failures; --mtbf and --spot-fraction/--spot-mtbi add them.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import suite

    for args, said in (
        (["--mtbf", "-5"], "argument --mtbf: '-5': must be > 0 seconds, or none"),
        (["--spot-fraction", "2"], "argument --spot-fraction: '2': must be a fraction from 0 to 1"),
        (["--spot-mtbi", "3600"], "--spot-mtbi needs --spot-fraction"),
    ):
        with pytest.raises(SystemExit) as exc:
            suite.main(args)
        assert exc.value.code == 2
        assert said in capsys.readouterr().err

    conditions = suite.Conditions(mtbf_s=86400.0, spot_fraction=0.5, spot_mtbi_s=3600.0)
    case = next(c for c in suite.CASES if c.name == "synthetic-3x")
    # the same spot nodes for every policy of a seed, half of them
    spot = [n.spot for n in conditions.cluster(case, Path(), 1).nodes]
    assert spot == [n.spot for n in conditions.cluster(case, Path(), 1).nodes]
    assert sum(spot) == len(spot) // 2
    assert not any(n.spot for n in suite.Conditions().cluster(case, Path(), 1).nodes)

    task = ("synthetic-3x", "fifo-backfill", None, 0, "", conditions)
    _, _, _, row = suite._replay(task)
    plain = suite._replay(task[:-1] + (suite.Conditions(),))[3]
    assert row["avg_wait_s"] != plain["avg_wait_s"]
    # nodes fail and spot nodes are taken away; the jobs on them lose their work since their
    # last checkpoint, and the engine does not answer with a storm of its own
    metrics, _ = suite.simulate(
        case.trace(Path(), 0),
        conditions.cluster(case, Path(), 0),
        "gpuplatform",
        conditions.sim_config(0),
    )
    assert metrics["node_failures"] > 0 and metrics["spot_interruptions"] > 0
    assert metrics["lost_gpu_hours"] > 0
    assert metrics["preemptions"] <= 2 * metrics["jobs"]


def test_the_suite_gives_jobs_the_runtime_limits_users_would_have_asked_for(capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import suite

    for bad in ("over:0.5", "max:0", "max:x", "exact:2", "some"):
        with pytest.raises(SystemExit) as exc:
            suite.main(["--runtime-limits", bad])
        assert exc.value.code == 2
        assert f"argument --runtime-limits: '{bad}': expected none, exact, over:F" in (
            capsys.readouterr().err
        )

    trace = suite._synthetic(200, 4, 3.0)(None, 0)
    assert suite.with_runtime_limits(trace, ("none", 0.0)) == trace
    assert [j.runtime_limit_s for j in suite.with_runtime_limits(trace, ("exact", 0.0))] == [
        j.duration for j in trace
    ]
    over = suite.with_runtime_limits(trace, suite.runtime_limits("over:4"))
    ratios = [j.runtime_limit_s / j.duration for j in over]
    assert all(1 <= r <= 4 for r in ratios) and min(ratios) < 1.5 and max(ratios) > 3
    # chosen by id: the same limit for a job whatever its position
    again = suite.with_runtime_limits(tuple(reversed(trace)), ("over", 4.0))
    assert {j.id: j.runtime_limit_s for j in again} == {j.id: j.runtime_limit_s for j in over}
    most = suite.with_runtime_limits(trace, ("max", 3600.0))
    assert [j.runtime_limit_s for j in most] == [max(3600.0, j.duration) for j in trace]

    # the engine plans with them: every waiting job's estimate is its limit
    from scheduler.simulation import SimConfig, simulate
    from scheduler.simulation.runner import make_policy

    policy = make_policy("gpuplatform")
    snapshot = policy.snapshot
    estimates: dict[str, float | None] = {}

    def recording(sim, now):
        snap = snapshot(sim, now)
        estimates.update((p.id, p.runtime_estimate_s) for p in snap.pending)
        return snap

    policy.snapshot = recording
    simulate(most, suite._nodes(4)(None), policy, SimConfig(seed=0))
    assert len(estimates) > 100
    assert estimates == {j.id: j.runtime_limit_s for j in most if j.id in estimates}


def test_a_cadence_changes_nothing_for_a_policy_that_decides_only_on_events(tmp_path, capsys):
    # benchmarks/replay_cadence.py: fifo-backfill decides the same whenever it is called, so a
    # call every 600 s of simulated time changes none of its numbers, only how often it is called
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import replay_cadence

    out = tmp_path / "cadence.json"
    args = ["--cases", "synthetic-3x", "--policy", "fifo-backfill", "--every", "600"]
    assert replay_cadence.main([*args, "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["deviation"] == 0.0
    assert row["events"]["p99_jct_s"] == row["cadence"]["p99_jct_s"]
    assert row["cadence"]["calls"] > row["events"]["calls"]
    assert "| synthetic-3x | 0 |" in capsys.readouterr().out
    for every in ("0", "nan", "inf"):
        with pytest.raises(SystemExit) as exc:
            replay_cadence.main(["--every", every])
        assert exc.value.code == 2


@pytest.mark.parametrize("script", ["suite", "replay_cadence"])
def test_bad_seeds_exit_2_naming_the_flag(script, capsys):
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    main = importlib.import_module(script).main
    for seeds in ("x", "-1", "0,,1"):
        with pytest.raises(SystemExit) as exc:
            main(["--seeds", seeds])
        assert exc.value.code == 2
        assert f"argument --seeds: '{seeds}': expected seeds like 0,1,2" in capsys.readouterr().err


def _suite_result(path, cases: dict) -> None:
    """A suite.py --out file with these medians (case -> policy -> the columns that matter)."""
    base = {"p95_wait_s": 0.0, "useful_util": 0.5, "wall_s": 1.0}
    medians = {c: {p: {**base, **row} for p, row in ps.items()} for c, ps in cases.items()}
    path.write_text(json.dumps({"seeds": [0], "runs": {}, "medians": medians}))


def _row(wait, preempt=0.1, lost=0.1, p99=100.0):
    return {
        "avg_wait_s": wait,
        "preemptions_per_job": preempt,
        "lost_work_pct": lost,
        "p99_jct_s": p99,
    }


def test_suite_diff_counts_what_a_rule_is_judged_by_and_the_goals_that_moved(tmp_path, capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    import suite_diff

    baselines = {"tiresias": _row(1000, preempt=1.0), "fifo-backfill": _row(2000, p99=100.0)}
    run = tmp_path / "run.json"
    _suite_result(
        run,
        {
            # the variant waits 10 % less and so passes tiresias: a wait goal gained
            "a": {**baselines, "gpuplatform": _row(1050), "v": _row(945, preempt=0.05)},
            # 0.5 % more is "the same"; its p99 passes 1.05 x fifo-backfill's: a goal lost
            "b": {**baselines, "gpuplatform": _row(500), "v": _row(502.5, lost=0.2, p99=106.0)},
            # 20 % more, still below both baselines
            "c": {**baselines, "gpuplatform": _row(500), "v": _row(600, preempt=0.3)},
        },
    )
    assert suite_diff.main([str(run), "--variant", "v"]) == 0
    out = capsys.readouterr().out
    assert "| a | 1,050 -> 945 (-10.0 %) (1,000 / 2,000) | 0.10 -> 0.05 (1.00) |" in out
    assert "| b | 500 -> 502 (+0.5 %)" in out and "| 100 -> 106 (100) | 5 -> 4 |" in out
    assert "Average wait higher by more than 1 % on 1 (c), lower on 1 (a)." in out
    assert "Preemptions per job fewer on 1, more on 1; lost work less on 0, more on 1." in out
    assert "Goals gained: a: wait<tiresias. Goals lost: b: p99<=1.05fifo-bf." in out

    # --before: the base from an earlier run (here the same file: nothing moved)
    assert suite_diff.main([str(run), "--before", str(run)]) == 0
    assert "Goals gained: none. Goals lost: none." in capsys.readouterr().out

    alone = tmp_path / "alone.json"
    _suite_result(alone, {"x": {"gpuplatform": _row(1), "v": _row(2)}})
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"medians": [1, 2]}))
    short = tmp_path / "short.json"
    _suite_result(short, {"x": {"v": {"avg_wait_s": 1.0}}})
    for argv, said in (
        ([str(run), "--variant", "w"], "--variant w: no such policy in the results (they have"),
        ([str(run)], "--variant: name the policy to compare"),
        ([str(tmp_path / "none.json"), "--variant", "v"], "none.json: No such file"),
        ([str(run), str(run), "--variant", "v"], "case a is also in another file"),
        ([str(alone), "--variant", "v"], "x: the goals compare with tiresias and fifo-backfill"),
        ([str(odd), "--variant", "v"], "odd.json: not a suite result (medians are not case"),
        (
            [str(short), "--variant", "v"],
            "short.json: x v: no number for lost_work_pct, p99_jct_s, preemptions_per_job",
        ),
    ):
        with pytest.raises(SystemExit) as exc:
            suite_diff.main(argv)
        assert exc.value.code == 2
        assert said in capsys.readouterr().err


def _replay(*extra):
    return main(["replay", "--policy", "fifo", "--quiet", *extra])


@pytest.mark.parametrize("where", ["dir", "nodir/x.json", ""])
def test_an_unwritable_out_exits_2_before_the_replay(tmp_path, capsys, trace, where):
    out = {"dir": str(tmp_path), "nodir/x.json": str(tmp_path / "nodir" / "x.json")}.get(where, "")
    html = tmp_path / "r.html"
    assert _replay("--trace", str(trace), "--out", out, "--html", str(html)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out") and err.count("\n") == 1
    assert not html.exists()  # nothing replayed, nothing written


def test_an_unwritable_html_leaves_no_half_result(tmp_path, capsys, trace):
    out = tmp_path / "o.json"
    html = tmp_path / "nodir" / "r.html"
    assert _replay("--trace", str(trace), "--out", str(out), "--html", str(html)) == 2
    assert capsys.readouterr().err == f"error: --html {html}: no such directory {html.parent}\n"
    assert not out.exists()


def test_outputs_are_written_whole_and_nothing_else_is_left_beside_them(tmp_path, trace):
    out, html = tmp_path / "o.json", tmp_path / "r.html"
    assert _replay("--trace", str(trace), "--out", str(out), "--html", str(html)) == 0
    assert json.loads(out.read_text())["policy"] == "fifo"
    assert html.read_text().endswith("</html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.json", "r.html", "t.csv"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "job_id,submission_time,duration,num_gpu\nj1,0,100\n",
            "t.csv:2: column 'num_gpu' is missing",
        ),
        ("a,b,c\n1,2,3\n", "unknown trace format"),
        (
            "job_id,submission_time,duration,num_gpu\nj1,0,100,x\n",
            "t.csv:2: num_gpu 'x': must be a whole number",
        ),
        (
            "job_id,submission_time,duration,num_gpu\nj1,nan,100,1\n",
            "t.csv:2: submission_time 'nan': must be a finite number of seconds, at most 10 years",
        ),
        (
            "job_id,submission_time,duration,num_gpu\nj1,0,inf,1\n",
            "t.csv:2: duration 'inf': must be a finite number of seconds, at most 10 years",
        ),
        (
            "name,num_gpu,creation_time,scheduled_time,deletion_time\np1,1\n",
            "t.csv:2: column 'scheduled_time' is missing",
        ),
        (
            "name,num_gpu,creation_time,scheduled_time,deletion_time\np1,1,0,0,nan\n",
            "t.csv:2: deletion_time 'nan': must be a finite number of seconds, at most 10 years",
        ),
    ],
)
def test_bad_trace_rows_exit_2_naming_file_line_and_column(tmp_path, capsys, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    out = tmp_path / "o.json"
    assert _replay("--trace", str(path), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_a_trace_read_in_the_wrong_format_names_the_missing_column(tmp_path, capsys):
    openb = tmp_path / "p.csv"
    openb.write_text("name,num_gpu,creation_time,scheduled_time,deletion_time\np1,1,0,0,9\n")
    out = tmp_path / "o.json"
    assert _replay("--trace", str(openb), "--format", "itp", "--out", str(out)) == 2
    assert capsys.readouterr().err == f"error: {openb}:2: column 'submission_time' is missing\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sn,gpu,model\nn1,8\n", "nodes.csv:2: column 'model' is missing"),
        ("sn,gpus,model\nn1,8,a100\n", "nodes.csv:2: column 'gpu' is missing"),
        ("sn,gpu,model\nn1,eight,a100\n", "nodes.csv:2: gpu 'eight': must be 0 to 4096"),
        ("sn,gpu,model\nn1,1000000000,a100\n", "nodes.csv:2: gpu '1000000000': must be 0 to 4096"),
    ],
)
def test_bad_node_lists_exit_2_naming_file_line_and_column(tmp_path, capsys, trace, text, message):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(text)
    out = tmp_path / "o.json"
    assert _replay("--trace", str(trace), "--cluster", str(nodes), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--trace", "synthetic:-5"), "--trace 'synthetic:-5': synthetic:N needs N from 1 to"),
        (("--trace", "synthetic:1000000000"), "synthetic:N needs N from 1 to 10000000"),
        (
            ("--trace", "synthetic:5", "--cluster", "100000000x8"),
            "cluster spec '100000000x8': N must be 1 to 100000 nodes, G 1 to 4096 GPUs",
        ),
        (
            ("--trace", "synthetic:5", "--cluster", "2x1000000000"),
            "cluster spec '2x1000000000': N must be 1 to 100000 nodes, G 1 to 4096 GPUs",
        ),
    ],
)
def test_sizes_out_of_range_exit_2(tmp_path, capsys, args, message):
    out = tmp_path / "o.json"
    assert _replay(*args, "--out", str(out)) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
