"""The run-time model: it learns what a user's jobs of one name take, picks up a new experiment
from its first runs, stays within its bounds and its memory, is deterministic, and says nothing
before it has seen enough jobs."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.prediction import JobDescription, RuntimeModel, accuracy, runtime
from scheduler.prediction.runtime import (
    MAX_PREDICTION_S,
    MIN_PREDICTION_S,
    features,
    groups,
    name_stem,
)


def _history(n: int) -> tuple[list[JobDescription], list[float]]:
    """alice's `eval-*` jobs take ~10 minutes, her `pretrain-*` jobs ~10 hours."""
    jobs, runs = [], []
    for i in range(n):
        short = i % 2 == 0
        jobs.append(
            JobDescription(
                team="vision",
                user="alice",
                name=f"{'eval' if short else 'pretrain'}-run{i}",
                image="pytorch:24.05",
                workers=1 if short else 2,
                gpus_per_worker=8,
            )
        )
        runs.append((600.0 if short else 36000.0) * (1 + 0.1 * math.sin(i)))
    return jobs, runs


def test_learns_each_kind_of_job_within_twice_its_run_time():
    model = RuntimeModel()
    jobs, runs = _history(200)
    for k in range(0, 200, 10):
        model.learn(jobs[k : k + 10], runs[k : k + 10])
    short, long = model.predict_s(
        [
            JobDescription(
                team="vision",
                user="alice",
                name="eval-run999",
                image="pytorch:24.05",
                workers=1,
                gpus_per_worker=8,
            ),
            JobDescription(
                team="vision",
                user="alice",
                name="pretrain-run999",
                image="pytorch:24.05",
                workers=2,
                gpus_per_worker=8,
            ),
        ]
    )
    assert 300 <= short <= 1200
    assert 18000 <= long <= 72000


def test_says_nothing_before_min_samples():
    model = RuntimeModel(min_samples=20)
    jobs, runs = _history(19)
    model.learn(jobs, runs)
    assert model.predict_s(jobs[:3]) == [None, None, None]
    model.learn(*_history(1))
    assert all(p is not None for p in model.predict_s(jobs[:3]))


def test_same_jobs_in_same_order_give_same_predictions():
    a, b = RuntimeModel(), RuntimeModel()
    jobs, runs = _history(60)
    for m in (a, b):
        m.learn(jobs[:30], runs[:30])
        m.learn(jobs[30:], runs[30:])
    assert a.predict_s(jobs) == b.predict_s(jobs)


def test_name_stem_drops_numbers():
    assert name_stem("BERT-ft-lr3-run12") == "bert-ft-lr#-run#"
    assert name_stem("bert-ft-lr5-run13") == name_stem("bert-ft-lr3-run12")


def test_accuracy_by_hand():
    # ratios 2, 1, 4 -> median 2, two of three within 2x; abs errors 100, 0, 300 -> median 100
    a = accuracy([200.0, 50.0, 400.0], [100.0, 50.0, 100.0])
    assert a["median_ratio"] == 2.0
    assert a["median_abs_error_s"] == 100.0
    assert a["within_2x"] == 2 / 3


_desc = st.builds(
    JobDescription,
    team=st.sampled_from(["a", "b"]),
    user=st.sampled_from(["", "u1", "u2"]),
    name=st.text(max_size=12),
    image=st.sampled_from(["", "img:1"]),
    workers=st.integers(1, 8),
    gpus_per_worker=st.integers(1, 8),
)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(_desc, st.floats(1.0, 1e8)), min_size=1, max_size=40),
    st.lists(_desc, min_size=1, max_size=5),
)
def test_predictions_stay_within_bounds(history, queries):
    for with_groups in (False, True):
        model = RuntimeModel(min_samples=1, history=with_groups)
        model.learn([d for d, _ in history], [r for _, r in history])
        for p in model.predict_s(queries):
            assert p is not None and MIN_PREDICTION_S <= p <= MAX_PREDICTION_S


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 1e6), st.floats(1.0, 1e6)), min_size=1, max_size=30))
def test_accuracy_is_perfect_only_when_predictions_are(pairs):
    predicted, actual = [p for p, _ in pairs], [a for _, a in pairs]
    a = accuracy(predicted, actual)
    assert 0.0 <= a["within_2x"] <= 1.0 and a["median_ratio"] >= 1.0
    assert accuracy(actual, actual)["median_ratio"] == 1.0


def test_jobs_differing_only_in_name_numbers_get_one_prediction():
    model = RuntimeModel(min_samples=1)
    jobs, runs = _history(40)
    model.learn(jobs, runs)
    sweep = [JobDescription(team="vision", user="alice", name=f"eval-lr{i}") for i in range(50)]
    other = JobDescription(team="vision", user="alice", name="pretrain-x")
    out = model.predict_s([*sweep, other])
    assert len(set(out[:50])) == 1 and out[50] != out[0]
    assert out == [*model.predict_s(sweep), *model.predict_s([other])]


def _alice(name: str) -> JobDescription:
    return JobDescription(team="vision", user="alice", name=name, image="pytorch:24.05")


def test_a_new_experiment_is_predicted_from_its_first_runs():
    # alice's usual jobs take 10 min or 10 h (same shape: only the name tells them apart); then
    # she starts a new experiment whose runs take 20 h. After three of them, the next is
    # predicted from those three (its group's median), not from her other jobs.
    model = RuntimeModel(history=True)
    for k in range(0, 200, 10):
        model.learn(
            [_alice(f"{'eval' if i % 2 == 0 else 'pretrain'}-run{i}") for i in range(k, k + 10)],
            [600.0 if i % 2 == 0 else 36000.0 for i in range(k, k + 10)],
        )
    model.learn([_alice(f"bigsweep-{i}") for i in range(3)], [72000.0] * 3)
    sweep, short, long = model.predict_s(
        [_alice("bigsweep-9"), _alice("eval-run999"), _alice("pretrain-run999")]
    )
    assert 36000 <= sweep <= 144000
    assert 300 <= short <= 1200 and 18000 <= long <= 72000


def test_a_job_is_never_its_own_history():
    # Three jobs of one group learned in one batch: none of them is described by a group median
    # that includes its own run, so the first two (fewer than 3 earlier runs) start from the
    # centre and only the next job of the group gets the group's median as its base.
    model = RuntimeModel(min_samples=1, history=True)
    model.learn([_alice("x-1"), _alice("x-2"), _alice("x-3")], [100.0, 100.0, 100.0])
    level, base = model._base(_alice("x-4"), 0.0)
    assert level == "user+name" and math.isclose(base, math.log(100.0))
    fresh = RuntimeModel(min_samples=1, history=True)
    fresh.learn([_alice("x-1"), _alice("x-2")], [100.0, 100.0])
    assert fresh._base(_alice("x-3"), -1.0) == ("", -1.0)


def test_groups_run_from_most_to_least_specific():
    job = JobDescription(
        team="vision", user="alice", name="bert-ft-3", image="img", workers=2, gpus_per_worker=8
    )
    assert [level for level, _ in groups(job)] == [
        "user+name",
        "team+name",
        "user+image",
        "user+shape",
        "team+shape",
        "user",
        "team",
        "shape",
    ]
    # a trace with neither users, names nor images: only the team and the shape
    bare = JobDescription(team="t", workers=1, gpus_per_worker=4)
    assert [level for level, _ in groups(bare)] == ["team+shape", "team", "shape"]


def test_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(runtime, "MAX_GROUPS", 50)
    model = RuntimeModel(min_samples=1, history=True)
    for k in range(20):
        model.learn(
            [JobDescription(team="t", user=f"u{k}-{i}", name=f"n{k}x{i}") for i in range(10)],
            [600.0] * 10,
        )
    assert len(model._groups) == 50
    # the most recently learned groups are the ones kept
    assert "user=t|u19-9" in model._groups and "user=t|u0-0" not in model._groups


def _learned(other_teams_name: str) -> RuntimeModel:
    """vision's ordinary history, and nlp's 30 two-day runs named ``other_teams_name``-<i>."""
    model = RuntimeModel(min_samples=1)
    mine = [_alice(f"eval-run{i}") for i in range(25)]
    theirs = [
        JobDescription(team="nlp", user="bob", name=f"{other_teams_name}-{i}", image="nlp/secret:1")
        for i in range(30)
    ]
    model.learn(mine, [600.0] * 25)
    model.learn(theirs, [2 * 86400.0] * 30)
    return model


def test_another_teams_names_images_and_users_do_not_reach_a_teams_prediction():
    # The loop plans with this model, and what it plans shows: a job's estimated start behind
    # the team's own job, its deadline warning ("expected to finish 47 h after it"). Pooled by
    # name, vision's "llama-70b-secret-7" was predicted from nlp's runs of that name, so vision
    # could learn that nlp runs such a job and for how long.
    probe = JobDescription(
        team="vision", user="bob", name="llama-70b-secret-7", image="nlp/secret:1"
    )
    (named,) = _learned("llama-70b-secret").predict_s([probe])
    # Another name of as many words: the same history but for the name (a name's word count
    # changes how far each of its runs moves the shared weights, not what it says).
    (unnamed,) = _learned("other-70x-names").predict_s([probe])
    assert math.isclose(named, unnamed, rel_tol=1e-9)
    assert named < 3600


def test_only_the_shape_is_pooled_across_teams():
    job = JobDescription(
        team="vision", user="alice", name="bert-ft-3", image="img", workers=2, gpus_per_worker=8
    )
    for level, key in groups(job):
        assert level == "shape" or key.startswith("vision|") or key == "vision", (level, key)
    shared = {"gpus", "shape", "model", "class"}
    for feature in features(job):
        assert feature.startswith("team=vision") or feature.split("=", 1)[0] in shared, feature
