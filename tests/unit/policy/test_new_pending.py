"""``state.new_pending`` builds the engine's Pending results without the frozen dataclass's
``__init__``: the object must be the one ``Pending(...)`` makes, and as frozen."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.policy import Pending
from scheduler.policy.state import new_pending


@given(st.text(), st.text(), st.none() | st.floats(allow_nan=False))
def test_new_pending_is_the_dataclass_built_by_its_constructor(job, why, at):
    p = new_pending(job, why, at)
    q = Pending(job, why, at)
    assert type(p) is Pending
    assert p == q and hash(p) == hash(q) and repr(p) == repr(q)
    assert dataclasses.astuple(p) == (job, why, at)


def test_new_pending_defaults_to_no_estimate_and_stays_frozen():
    p = new_pending("j", "waits")
    assert p == Pending("j", "waits")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.why = "other"  # type: ignore[misc]
