"""The codec's fast readers for jobs agree with its field-by-field validators on every input:
the same job when the validators accept it, the same ``field: reason`` when they reject it."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import SnapshotError
from scheduler.policy.codec import (
    _fast_pending,
    _fast_running,
    _pending,
    _read_pending,
    _read_running,
    _running,
)

CLASSES = {"production": 1000, "research": 500}

PENDING = {
    "id": "p-1",
    "team": "vision",
    "priority_class": "research",
    "gpu_model": "h100",
    "workers": 2,
    "gpus_per_worker": 4,
    "submitted_at": 100.0,
    "runtime_estimate_s": 3600,
    "preemptible": True,
    "dataset": "c4",
    "dataset_ready": False,
    "elastic": {"min_workers": 1, "max_workers": 2},
    "attained_service_s": 0.0,
    "requeued": False,
}
RUNNING = {
    "id": "r-1",
    "team": "vision",
    "priority_class": "production",
    "gpu_model": None,
    "workers": 2,
    "gpus_per_worker": 2,
    "placement": {"n2": [3, 1], "n1": [0, 7]},
    "started_at": 50,
    "expected_end": 9000.5,
    "preemptible": False,
    "last_checkpoint_at": None,
    "checkpoint_interval_s": 1800.0,
    "elastic": None,
    "releasing_at": None,
    "attained_service_s": 12.5,
    "submitted_at": 10.0,
}

# JSON values (and a few Python-only ones a caller may pass) that sit on the edges of the rules.
ODD_VALUES = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2,
    2.0,
    2.5,
    -0.0,
    -3.5,
    2**60,
    10**400,
    math.inf,
    -math.inf,
    math.nan,
    "",
    "x",
    "research",
    [],
    [0, 1],
    [1, 1],
    [-1],
    [True],
    [1.0, 2.0],
    (0, 1),
    {},
    {"min_workers": 1, "max_workers": 3},
    {"min_workers": 3, "max_workers": 1},
    {"min_workers": 1.0, "max_workers": 2},
    {"n1": [0]},
    {"n1": [0, 1], "n2": [2, 3]},
    {"": [0, 1, 2, 3]},
    {"n1": (0, 1, 2, 3)},
    {"n1": [0, 0, 1, 2]},
    {1: [0, 1, 2, 3]},
]


def _outcome(read, *args):
    try:
        return ("ok", read(*args))
    except SnapshotError as e:
        return ("error", str(e))
    except Exception as e:  # noqa: BLE001 - the readers must agree even on crashes
        return ("crash", type(e).__name__)


def _changed(base: dict, changes: dict, dropped: list[str]) -> dict:
    out = {k: v for k, v in base.items() if k not in dropped}
    out.update(changes)
    return out


edits = st.tuples(
    st.dictionaries(
        st.sampled_from(sorted(RUNNING.keys() | PENDING.keys())),
        st.sampled_from(ODD_VALUES),
        max_size=3,
    ),
    st.lists(st.sampled_from(sorted(RUNNING.keys() | PENDING.keys())), max_size=2),
)


@settings(max_examples=600, deadline=None)
@given(edits)
def test_pending_fast_reader_agrees_with_validator(edit):
    doc = _changed(PENDING, *edit)
    fast = _outcome(_read_pending, doc, 7, CLASSES)
    assert fast == _outcome(_pending, doc, "pending[7]", CLASSES)


@settings(max_examples=600, deadline=None)
@given(edits)
def test_running_fast_reader_agrees_with_validator(edit):
    doc = _changed(RUNNING, *edit)
    fast = _outcome(_read_running, doc, 3, CLASSES)
    assert fast == _outcome(_running, doc, "running[3]", CLASSES)


def test_the_usual_job_is_read_whole():
    # The fast path takes these documents (it does not fall back) and loses no field.
    job = _fast_running(RUNNING, CLASSES)
    assert job == _running(RUNNING, "running[0]", CLASSES)
    assert job.placement == {"n1": (0, 7), "n2": (1, 3)}
    assert list(job.placement) == ["n1", "n2"]
    assert (job.started_at, type(job.started_at)) == (50.0, float)
    assert (job.attained_service_s, job.submitted_at, job.expected_end) == (12.5, 10.0, 9000.5)
    pending = _fast_pending(PENDING, CLASSES)
    assert pending == _pending(PENDING, "pending[0]", CLASSES)
    assert (pending.runtime_estimate_s, pending.elastic.max_workers) == (3600.0, 2)


def test_an_integer_beyond_the_float_range_is_a_field_error():
    doc = dict(PENDING, submitted_at=10**400)
    assert _outcome(_read_pending, doc, 2, CLASSES) == (
        "error",
        "pending[2].submitted_at: must be finite",
    )
