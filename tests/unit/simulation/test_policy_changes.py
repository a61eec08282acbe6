"""A candidate policy is more than an engine configuration: `with_policy` and the CLI's
`--team-weights` / `--priority-classes` replay a history under other team weights and priority
class values (next to `--engine-config`), and refuse a team or class the history does not have.

Invariants (hypothesis): `with_policy` changes exactly the named teams' weights and classes'
values, keeps everything else of the history, and refuses every unknown name by its field."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.simulation.cli import main, replay_policies
from scheduler.simulation.history import PolicyChangeError, load_history, with_policy

from .test_history import HEADER, job, write

# Two sibling teams of equal weight and no quota, so fair share alone orders them.
EVEN = {
    **HEADER,
    "teams": [
        {"name": "org", "parent": None, "weight": 1.0, "quota": {}},
        {"name": "vision", "parent": "org", "weight": 1.0, "quota": {}},
        {"name": "nlp", "parent": "org", "weight": 1.0, "quota": {}},
    ],
    "config": {},
}


def busy_history(tmp_path, **over):
    """80 whole-node jobs, alternating teams (and classes), arriving faster than 32 GPUs
    serve them: a queue builds up, and the policy decides who waits."""
    jobs = [
        job(
            i,
            **{
                "team": "vision" if i % 2 else "nlp",
                "priority_class": "production" if i % 2 else "research",
                "submit_s": 120.0 * i,
                "duration_s": 3600 + 600 * (i % 5),
                "gpus_per_worker": 8,
                "preemptible": False,
                **over,
            },
        )
        for i in range(80)
    ]
    return write(tmp_path, jobs, EVEN)


def team_waits(sim) -> dict[str, float]:
    waits: dict[str, list[float]] = {}
    for j in sim.jobs:
        waits.setdefault(j.tenant, []).append(j.queue_s)
    return {team: sum(w) / len(w) for team, w in waits.items()}


def replay(trace, policies, *options):
    return replay_policies(
        ["compare", "--trace", str(trace), "--quiet", "--policies", policies, *options]
    )


def test_a_heavier_team_waits_less_and_its_peer_more(tmp_path):
    trace = busy_history(tmp_path, priority_class="research")
    results, sims, _ = replay(
        trace,
        "gpuplatform,nlp_first,as_is",
        "--team-weights",
        'nlp_first={"nlp": 10}',
        "--team-weights",
        'as_is={"nlp": 1, "vision": 1.0}',
    )
    base, heavier = team_waits(sims["gpuplatform"]), team_waits(sims["nlp_first"])
    assert heavier["nlp"] < 0.7 * base["nlp"]
    assert heavier["vision"] > 1.2 * base["vision"]
    # The header's own weights, given explicitly, replay the policy in force exactly.
    same = ("avg_queue_s", "p99_jct_s", "preemptions", "decide_calls")
    assert [results["as_is"][k] for k in same] == [results["gpuplatform"][k] for k in same]
    assert team_waits(sims["as_is"]) == base


def test_a_priority_class_raised_above_another_goes_first(tmp_path):
    trace = busy_history(tmp_path)
    _, sims, _ = replay(
        trace, "gpuplatform,research_up", "--priority-classes", 'research_up={"research": 2000}'
    )
    base, raised = team_waits(sims["gpuplatform"]), team_waits(sims["research_up"])
    # nlp's jobs are the research ones: behind production in force, ahead in the candidate.
    assert base["nlp"] > base["vision"]
    assert raised["nlp"] < raised["vision"]


def test_one_variant_may_change_the_engine_the_weights_and_the_classes(tmp_path):
    trace = busy_history(tmp_path)
    results, sims, _ = replay(
        trace,
        "gpuplatform,whole",
        "--engine-config",
        'whole={"reservations_per_model": 1}',
        "--team-weights",
        "whole=" + json.dumps({"vision": 3}),
        "--priority-classes",
        'whole={"research": 1000}',
    )
    policy = sims["whole"].policy
    assert policy.config.reservations_per_model == 1
    assert policy._teams["vision"].weight == 3.0 and policy._teams["nlp"].weight == 1.0
    assert policy.classes == {"production": 1000, "research": 1000}
    assert team_waits(sims["whole"]) != team_waits(sims["gpuplatform"])
    assert results["whole"]["jobs"] == results["gpuplatform"]["jobs"] == 80


def test_the_options_read_files_too(tmp_path):
    trace = busy_history(tmp_path, priority_class="research")
    weights = tmp_path / "w.json"
    weights.write_text('{"nlp": 10}')
    _, sims, _ = replay(trace, "gpuplatform,w", "--team-weights", f"w=@{weights}")
    assert team_waits(sims["w"])["nlp"] < team_waits(sims["gpuplatform"])["nlp"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            ["--team-weights", 'x={"ghost": 2}'],
            "--team-weights x: team_weights.ghost: no such team in the history "
            "(teams: nlp, org, vision)",
        ),
        (["--team-weights", 'x={"nlp": -1}'], "--team-weights x: team_weights.nlp: must be a"),
        (["--team-weights", 'x={"nlp": true}'], "team_weights.nlp: must be a finite number"),
        (["--team-weights", "x=[1]"], "--team-weights x: expected a JSON object of team weights"),
        (["--team-weights", "fifo={}"], "--team-weights fifo: the name is taken"),
        (["--team-weights", "x={oops"], "--team-weights x: not JSON"),
        (
            ["--priority-classes", 'x={"urgent": 5}'],
            "--priority-classes x: priority_classes.urgent: no such priority class in the "
            "history (classes: production, research)",
        ),
        (["--priority-classes", 'x={"research": 1.5}'], "priority_classes.research: must be an"),
        (
            ["--team-weights", 'x={"nlp": 2}', "--team-weights", 'x={"nlp": 3}'],
            "--team-weights x: the name is taken",
        ),
    ],
)
def test_unknown_teams_classes_and_bad_values_exit_2_naming_the_field(
    tmp_path, capsys, options, message
):
    trace = write(tmp_path, [job(1)], EVEN)
    rc = main(
        ["compare", "--trace", str(trace), "--quiet", "--policies", "gpuplatform,x", *options]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_weights_need_a_history_that_names_the_teams(tmp_path, capsys):
    rc = main(
        ["compare", "--trace", "synthetic:20", "--quiet", "--policies", "gpuplatform,x",
         "--team-weights", 'x={"t0": 2}']
    )  # fmt: skip
    assert rc == 2
    assert "--team-weights x: needs a gpuplatform-trace" in capsys.readouterr().err


def test_every_bad_field_is_named_at_once(tmp_path):
    h = load_history(write(tmp_path, [job(1)], EVEN))
    with pytest.raises(PolicyChangeError) as refused:
        with_policy(
            h, team_weights={"ghost": 1, "nlp": float("nan")}, priority_classes={"research": "x"}
        )
    assert set(refused.value.errors) == {
        "team_weights.ghost",
        "team_weights.nlp",
        "priority_classes.research",
    }


NAMES = st.sampled_from(["org", "vision", "nlp", "ghost", "x"])
CLASSES = st.sampled_from(["production", "research", "urgent"])


@given(
    weights=st.dictionaries(NAMES, st.floats(min_value=0, max_value=1e6), max_size=4),
    classes=st.dictionaries(CLASSES, st.integers(-(10**9), 10**9), max_size=3),
)
def test_with_policy_changes_exactly_what_is_named(tmp_path_factory, weights, classes):
    path = tmp_path_factory.mktemp("h") / "h.jsonl"
    if not path.exists():
        path.write_text(json.dumps(EVEN) + "\n" + json.dumps(job(1)) + "\n")
    h = load_history(path)
    unknown = {f"team_weights.{t}" for t in weights if t not in h.teams} | {
        f"priority_classes.{c}" for c in classes if c not in h.priority_classes
    }
    try:
        changed = with_policy(h, team_weights=weights, priority_classes=classes)
    except PolicyChangeError as exc:
        assert unknown and set(exc.errors) == unknown
        return
    assert not unknown
    for name, team in h.teams.items():
        assert changed.teams[name]["weight"] == weights.get(name, team["weight"])
        assert changed.teams[name]["parent"] == team["parent"]
        assert changed.teams[name]["quota"] == team["quota"]
    assert changed.priority_classes == {**h.priority_classes, **classes}
    assert (changed.jobs, changed.cluster, changed.config) == (h.jobs, h.cluster, h.config)
    # The history itself is left as it was.
    assert h.teams["nlp"]["weight"] == 1.0 and h.priority_classes["research"] == 500
