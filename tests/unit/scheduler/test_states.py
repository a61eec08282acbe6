"""The job state machine: allowed moves pass, every other move raises."""

import pytest

from scheduler.states import (
    FINAL_STATES,
    TRANSITIONS,
    IllegalTransition,
    JobState,
    check_transition,
    sources_for,
)


@pytest.mark.parametrize(
    "current,target",
    [
        ("pending", "running"),
        ("pending", "cancelled"),
        ("running", "succeeded"),
        ("running", "failed"),
        ("running", "preempted"),
        ("running", "pending"),
        ("preempted", "pending"),
        ("preempted", "cancelled"),
    ],
)
def test_allowed_transitions(current, target):
    check_transition(current, target)


@pytest.mark.parametrize(
    "current,target",
    [
        ("pending", "succeeded"),
        ("pending", "preempted"),
        ("succeeded", "running"),
        ("cancelled", "pending"),
        ("failed", "running"),
        ("preempted", "running"),
    ],
)
def test_illegal_transitions_raise(current, target):
    with pytest.raises(IllegalTransition, match=f"cannot move a {current} job to {target}"):
        check_transition(current, target)


def test_final_states_have_no_way_out():
    for state in FINAL_STATES:
        assert TRANSITIONS[state] == frozenset()


def test_sources_for_is_the_inverse_of_transitions():
    for target in JobState:
        for source in sources_for(target):
            assert target in TRANSITIONS[source]
    assert sources_for(JobState.RUNNING) == {JobState.PENDING}
