"""Replaying the platform's own history: the `gpuplatform-trace` loader, the job model it feeds
(shapes, checkpoints, preemptibility, runtime limits, teams with quotas, priority classes) and the
CLI's `--engine-config` variants."""

from __future__ import annotations

import json

import pytest

from scheduler.simulation import SimConfig, Simulator
from scheduler.simulation.cli import main
from scheduler.simulation.gpuplatform_policy import GpuPlatformPolicy
from scheduler.simulation.history import load_history
from scheduler.simulation.traces import detect_format

HEADER = {
    "format": "gpuplatform-trace",
    "version": 1,
    "exported_at": "2026-12-01T00:00:00+00:00",
    "origin": "2026-11-01T00:00:00+00:00",
    "priority_classes": {"production": 1000, "research": 500},
    "teams": [
        {"name": "org", "parent": None, "weight": 1.0, "quota": {}},
        {"name": "vision", "parent": "org", "weight": 2.0, "quota": {"h100": [8, 0]}},
        {"name": "nlp", "parent": "org", "weight": 1.0, "quota": {}},
    ],
    "nodes": [
        {"name": f"n{i}", "gpu_model": "h100", "gpus": 8, "zone": "z", "rack": f"r{i // 2}"}
        for i in range(4)
    ],
    "config": {"reservations_per_model": 2},
    "skipped": {"never_ran": 3, "unfinished": 1},
}


def job(i: int, **over) -> dict:
    base = {
        "id": f"{i}",
        "submit_s": 10.0 * i,
        "duration_s": 3600.0,
        "workers": 1,
        "gpus_per_worker": 4,
        "team": "nlp",
        "gpu_model": "h100",
        "priority_class": "research",
        "preemptible": True,
        "checkpoint_interval_s": 600,
        "runtime_limit_s": None,
    }
    return {**base, **over}


def write(tmp_path, jobs, header=HEADER, name="h.jsonl"):
    path = tmp_path / name
    lines = [json.dumps(header)] + [json.dumps(j) for j in jobs]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_header_and_jobs_load_as_written(tmp_path):
    jobs = [
        job(2, workers=2, gpus_per_worker=8, team="vision", runtime_limit_s=7200),
        job(1, gpu_model=None, checkpoint_interval_s=None, preemptible=False),
    ]
    path = write(tmp_path, jobs)
    assert detect_format(path) == "gpuplatform"
    h = load_history(path)
    assert [j.id for j in h.jobs] == ["1", "2"]  # sorted by submission
    second = h.jobs[1]
    assert (second.gpus, second.gpus_per_worker, second.tenant) == (16, 8, "vision")
    assert (second.models, second.runtime_limit_s, second.checkpoint_interval_s) == (
        ("h100",),
        7200.0,
        600.0,
    )
    first = h.jobs[0]
    assert (first.models, first.preemptible, first.checkpoint_interval_s) == (None, False, None)
    assert [n.name for n in h.cluster.nodes] == ["n0", "n1", "n2", "n3"]
    assert h.cluster.nodes[3].rack == "r1" and h.cluster.total_gpus == 32
    assert h.teams["vision"] == {"parent": "org", "weight": 2.0, "quota": {"h100": (8, 0)}}
    assert h.priority_classes == {"production": 1000, "research": 500}
    assert h.config == {"reservations_per_model": 2}
    assert h.skipped == {"never_ran": 3, "unfinished": 1}
    assert [j.id for j in load_history(path, max_submit=15).jobs] == ["1"]
    assert [j.id for j in load_history(path, max_jobs=1).jobs] == ["1"]


def test_who_asked_and_what_it_is_load_when_exported(tmp_path):
    # user, name and image are what the run-time model learns from; files exported before they
    # were written have none, and load with empty strings.
    jobs = [job(1, user="alice", name="bert-ft-3", image="pytorch:24.05"), job(2)]
    first, second = load_history(write(tmp_path, jobs)).jobs
    assert (first.user, first.name, first.image) == ("alice", "bert-ft-3", "pytorch:24.05")
    assert (second.user, second.name, second.image) == ("", "", "")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda h, js: js[0].update(duration_s=0), r":2: duration_s: must be > 0"),
        (lambda h, js: js.append({**js[0]}), r":3: id: job '1' listed twice"),
        (lambda h, js: js[0].update(workers=True), r":2: workers: expected an integer"),
        (lambda h, js: js[0].update(user=7), r":2: user: expected a string"),
        (lambda h, js: js[0].pop("team"), r":2: team: missing"),
        (lambda h, js: js[0].update(priority_class="vip"), r":2: priority_class: 'vip' is not"),
        (lambda h, js: js[0].update(submit_s=-1), r":2: submit_s: must be a finite number >= 0"),
        (lambda h, js: h.update(version=2), r":1: version: this simulator reads version 1"),
        (lambda h, js: h.update(format="csv"), r":1: format: expected 'gpuplatform-trace'"),
        (lambda h, js: h.update(nodes=[]), r":1: nodes: the history has no nodes"),
        (
            lambda h, js: h.update(nodes=HEADER["nodes"] + HEADER["nodes"][:1]),
            r"nodes\[4\]: name: node 'n0' listed twice",
        ),
        (
            lambda h, js: h.update(teams=[{"name": "a", "parent": "ghost"}]),
            r"teams: team 'a' has an unknown parent 'ghost'",
        ),
        (
            lambda h, js: h.update(teams=[{"name": "a", "quota": {"h100": [1]}}]),
            r"teams\[0\]: quota.h100: expected \[guaranteed, borrow_limit\]",
        ),
        # each of these replayed for hours, or ran out of memory
        (lambda h, js: h["nodes"][0].update(gpus=10**9), r":1: nodes\[0\]: gpus: must be <= 4096"),
        (lambda h, js: js[0].update(submit_s=1e300), r":2: submit_s: must be <= 3.16224e\+08"),
        (lambda h, js: js[0].update(duration_s=1e300), r":2: duration_s: must be <= 3.16224e\+08"),
    ],
)
def test_malformed_histories_are_refused_with_the_line_and_the_key(tmp_path, mutate, message):
    header = json.loads(json.dumps(HEADER))
    jobs = [job(1)]
    mutate(header, jobs)
    with pytest.raises(ValueError, match=message):
        load_history(write(tmp_path, jobs, header))


def test_not_json_and_empty_files_are_refused(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(HEADER) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not JSON"):
        load_history(bad)
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ValueError, match=r"deep.jsonl:1: not JSON \(nested too deeply\)"):
        load_history(deep)
    digits = tmp_path / "digits.jsonl"
    digits.write_text('{"version": ' + "9" * 5000 + "}\n")
    with pytest.raises(ValueError, match=r"digits.jsonl:1: not JSON \(an integer is too long\)"):
        load_history(digits)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match=r"empty file"):
        load_history(empty)


def _replay(h, policy, **sim):
    return Simulator(h.jobs, h.cluster, policy, SimConfig(**sim)).run()


def _engine(h, **config):
    from scheduler.policy import config_from_dict

    return GpuPlatformPolicy(
        config_from_dict({**h.config, **config}),
        priority_classes=h.priority_classes,
        teams=h.teams,
    )


def test_jobs_keep_their_shape_and_their_own_checkpoints(tmp_path):
    gang = job(2, workers=4, gpus_per_worker=8, priority_class="production", submit_s=2000)
    jobs = [job(1, workers=2, gpus_per_worker=4, checkpoint_interval_s=None, duration_s=5000), gang]
    h = load_history(write(tmp_path, jobs))
    sim = _replay(h, _engine(h), checkpoint_interval_s=60.0)
    by_id = {j.id: j for j in sim.jobs}
    assert (by_id["1"].workers, by_id["1"].gpus_per_worker) == (2, 4)  # not one 8-GPU worker
    # The production gang needs the whole cluster at t=2000 and preempts job 1, which never
    # checkpoints: its ~2,000 s are lost whatever the simulation's own interval (60 s).
    assert by_id["1"].preemptions == 1
    assert sim.lost_gpu_s >= 8 * 1990


def test_a_job_that_is_not_preemptible_is_waited_for(tmp_path):
    gang = job(2, workers=4, gpus_per_worker=8, priority_class="production", submit_s=2000)
    h = load_history(write(tmp_path, [job(1, preemptible=False, duration_s=9000), gang]))
    sim = _replay(h, _engine(h))
    by_id = {j.id: j for j in sim.jobs}
    assert by_id["1"].preemptions == 0
    assert by_id["2"].first_start >= by_id["1"].first_start + 9000


def test_quotas_from_the_header_bound_a_teams_gpus(tmp_path):
    # vision may hold 8 H100s (8 guaranteed, 0 to borrow) although 32 are idle
    jobs = [job(i, team="vision", submit_s=0.0) for i in range(1, 7)]
    h = load_history(write(tmp_path, jobs))
    policy = _engine(h)
    most = []
    schedule = policy.schedule

    def watched(sim, now):
        schedule(sim, now)
        most.append(sim.tenant_used["vision"])

    policy.schedule = watched
    sim = _replay(h, policy)
    assert max(most) == 8 and sim.done == 6
    # without the header's teams the same jobs all run at once
    sim = _replay(h, GpuPlatformPolicy(priority_classes=h.priority_classes))
    assert max(j.first_start for j in sim.jobs) == 0.0


def test_runtime_limits_are_the_engines_estimates(tmp_path):
    # job 3 arrives while the others run, so a snapshot shows them running
    jobs = [job(1, runtime_limit_s=5400), job(2, submit_s=0.0), job(3, submit_s=100.0)]
    h = load_history(write(tmp_path, jobs))
    policy = _engine(h)
    sim = Simulator(h.jobs, h.cluster, policy, SimConfig())
    estimates, ends = {}, {}
    snapshot = policy.snapshot

    def watched(s, now):
        snap = snapshot(s, now)
        estimates.update({p.id: p.runtime_estimate_s for p in snap.pending})
        ends.update({r.id: r.expected_end for r in snap.running})
        return snap

    policy.snapshot = watched
    sim.run()
    # job 1 is estimated at its limit and expected to end at start + limit; job 2 has no limit
    # and nothing has finished before it starts: no estimate, no expected end
    assert estimates == {"1": 5400.0, "2": None, "3": None}
    assert ends["1"] == sim.by_id["1"].first_start + 5400.0 and ends["2"] is None


def _compare(tmp_path, trace, *extra):
    out = tmp_path / "all.json"
    rc = main(["compare", "--trace", str(trace), "--quiet", "--out", str(out), *extra])
    return rc, (json.loads(out.read_text())["results"] if rc == 0 else None)


def test_an_engine_config_variant_is_the_engine_with_those_fields_changed(tmp_path, capsys):
    jobs = [job(i, submit_s=60.0 * i, duration_s=900 + 300 * (i % 7)) for i in range(40)]
    trace = write(tmp_path, jobs)
    # onequeue is written in today's flat keys: still accepted for one release, with a warning
    with pytest.warns(DeprecationWarning, match=r"^onequeue.las_thresholds_gpu_s is deprecated"):
        rc, results = _compare(
            tmp_path,
            trace,
            "--policies",
            "gpuplatform,gpuplatform-nolas,nolas,onequeue",
            "--engine-config",
            'nolas={"las": null}',
            "--engine-config",
            'onequeue={"las_thresholds_gpu_s": [1e12]}',
        )
    assert rc == 0
    out = capsys.readouterr()
    table = out.out
    assert "nolas" in table and "onequeue" in table
    assert (
        out.err.count(
            "warning: --engine-config onequeue.las_thresholds_gpu_s is deprecated: use "
            "las.thresholds_gpu_s"
        )
        == 1
    )
    same = ("avg_queue_s", "p99_jct_s", "preemptions", "decide_calls")
    assert [results["nolas"][k] for k in same] == [results["gpuplatform-nolas"][k] for k in same]
    # the changes took effect: the engine with its LAS queues preempts on this trace, the
    # variants without them (no thresholds, or one no job reaches) never do
    assert results["gpuplatform"]["preemptions"] > 0
    assert results["nolas"]["preemptions"] == results["onequeue"]["preemptions"] == 0
    assert results["nolas"]["cluster"] == "h.jsonl"  # the history's own nodes by default


def test_the_header_config_is_what_gpuplatform_runs_with(tmp_path):
    from scheduler.simulation.cli import _policy

    h = load_history(write(tmp_path, [job(1)]))
    assert _policy("gpuplatform", {}, h).config.reservations_per_model == 2
    assert _policy("gpuplatform-nolas", {}, h).config.las is None
    assert _policy("gpuplatform-nolas", {}, h).config.reservations_per_model == 2
    variant = _policy("x", {"x": {"max_preemption_attempts": 1}}, h)
    assert (variant.config.max_preemption_attempts, variant.config.reservations_per_model) == (1, 2)
    assert set(variant._teams) == {"org", "vision", "nlp"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("x", "--engine-config 'x': expected NAME=JSON"),
        ("fifo={}", "--engine-config fifo: the name is taken"),
        ("x={oops", "--engine-config x: not JSON"),
        ("x=[1]", "--engine-config x: expected a JSON object of Config fields"),
        ("x=" + "[" * 100_000 + "]" * 100_000, "--engine-config x: not JSON (nested too deeply)"),
        ('x={"las_treshold": 1}', "--engine-config x.las_treshold: unknown config field"),
        ('x={"reservations_per_model": 0}', "--engine-config x.reservations_per_model: must be"),
    ],
)
def test_bad_engine_configs_exit_2_with_the_field(tmp_path, capsys, spec, message):
    trace = write(tmp_path, [job(1)])
    rc, _ = _compare(tmp_path, trace, "--policies", "gpuplatform,x", "--engine-config", spec)
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_bad_header_config_exits_2(tmp_path, capsys):
    header = {**HEADER, "config": {"min_health": 7}}
    rc, _ = _compare(tmp_path, write(tmp_path, [job(1)], header), "--policies", "gpuplatform")
    assert rc == 2
    assert "h.jsonl: header config.min_health: must be <= 1" in capsys.readouterr().err
