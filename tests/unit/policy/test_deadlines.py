"""Rule 1b, deadlines: a waiting job whose slack (deadline - now - estimated remaining run) is in
[0, deadline_slack_s] goes first within its rank, least slack first; a job that cannot make its
deadline gets no boost and says it will miss it."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import decide, queue_order
from scheduler.policy.codec import snapshot_from_dict, snapshot_to_dict
from scheduler.policy.ranking import deadline_slack_s

from .helpers import check_invariants, job, node, run, snap, started, why

NOW = 1000.0
H = 3600.0


def test_job_near_its_deadline_starts_before_an_earlier_job():
    s = snap(
        [node("n1", free=1)],
        [
            job("early", submitted=0.0, est=H),
            job("due", submitted=500.0, est=H, deadline=NOW + 2 * H),  # slack 1 h
        ],
    )
    assert set(started(decide(s))) == {"due"}


def test_a_distant_deadline_changes_nothing():
    s = snap(
        [node("n1", free=1)],
        [
            job("early", submitted=0.0, est=H),
            job("later", submitted=500.0, est=H, deadline=NOW + 30 * H),  # slack 29 h > 6 h
        ],
    )
    assert set(started(decide(s))) == {"early"}


def test_least_slack_goes_first():
    s = snap(
        [node("n1", free=1)],
        [
            job("slack3h", submitted=0.0, est=H, deadline=NOW + 4 * H),
            job("slack1h", submitted=10.0, est=H, deadline=NOW + 2 * H),
        ],
    )
    assert [p.id for p in queue_order(s)] == ["slack1h", "slack3h"]
    assert set(started(decide(s))) == {"slack1h"}


def test_a_job_that_cannot_make_it_gets_no_boost_and_says_so():
    s = snap(
        [node("n1", free=1)],
        [
            job("early", submitted=0.0, est=H),
            job("hopeless", submitted=500.0, est=4 * H, deadline=NOW + H),
        ],
    )
    d = decide(s)
    assert set(started(d)) == {"early"}
    # 3 h short even if it started now, and it starts after "early"'s hour
    assert why(d, "hopeless").startswith("will miss its deadline: expected to finish 4 h after it")


def test_class_still_comes_first():
    s = snap(
        [node("n1", free=1)],
        [
            job("urgent-normal", pc="normal", est=H, deadline=NOW + 2 * H),
            job("high", pc="high", submitted=500.0, est=H),
        ],
    )
    assert set(started(decide(s))) == {"high"}


def test_a_job_whose_estimated_start_is_too_late_says_so_early():
    # The only GPU is busy for 5 more hours; the job needs 1 h and is due in 3 h.
    s = snap(
        [node("n1", free=0, gpus=1)],
        [job("due", est=H, deadline=NOW + 3 * H)],
        [run("busy", {"n1": [0]}, end=NOW + 5 * H, preemptible=False)],
    )
    d = decide(s)
    assert why(d, "due").startswith("will miss its deadline: expected to finish 3 h after it")
    # with room before its deadline it says nothing of the kind
    s2 = snap(
        [node("n1", free=0, gpus=1)],
        [job("due", est=H, deadline=NOW + 7 * H)],
        [run("busy", {"n1": [0]}, end=NOW + 5 * H, preemptible=False)],
    )
    assert "deadline" not in why(decide(s2), "due")


def test_slack_counts_the_work_already_done():
    p = job("r", est=4 * H, attained=3 * H, deadline=NOW + 2 * H)
    assert deadline_slack_s(p, NOW, 3600.0) == H
    assert deadline_slack_s(job("x"), NOW, 3600.0) is None


def test_deadline_survives_the_snapshot_json():
    s = snap([node("n1")], [job("a", est=H, deadline=NOW + 5 * H), job("b")])
    back = snapshot_from_dict(snapshot_to_dict(s))
    assert [p.deadline for p in back.pending] == [NOW + 5 * H, None]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["high", "normal", "low"]),
            st.floats(0, 900),
            st.one_of(st.none(), st.floats(600, 20 * H)),
            st.one_of(st.none(), st.floats(0, 30 * H)),
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 4),
)
def test_order_is_by_class_then_urgency_then_slack(specs, free):
    pending = [
        job(f"j{i}", pc=pc, submitted=sub, est=est, deadline=None if dl is None else NOW + dl)
        for i, (pc, sub, est, dl) in enumerate(specs)
    ]
    s = snap([node("n1", free=free, gpus=4)], pending)
    order = queue_order(s)
    assert sorted(p.id for p in order) == sorted(p.id for p in pending)
    window = s.config.deadline_slack_s

    def urgency(p):
        slack = deadline_slack_s(p, NOW, s.config.default_runtime_s)
        urgent = slack is not None and 0 <= slack <= window
        return (-s.priority_classes[p.priority_class], 0 if urgent else 1, slack if urgent else 0)

    keys = [urgency(p) for p in order]
    assert keys == sorted(keys)
    check_invariants(s, decide(s))
