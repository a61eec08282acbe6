"""The command line's indented output is exactly ``json.dumps(..., indent=...)``'s text."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy.__main__ import dumps

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.sampled_from([0.0, -0.0, 1e300, 5e-324, math.inf, -math.inf, math.nan])
    | st.text()
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(), inner, max_size=4)
        | st.dictionaries(st.integers(), inner, min_size=1, max_size=2)
    ),  # json turns keys to text
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(values, st.sampled_from([None, 0, 1, 2, 4]))
def test_same_text_as_json_dumps(value, indent):
    assert dumps(value, indent) == json.dumps(value, indent=indent)


def test_the_decision_document_shape():
    doc = {
        "start": [{"job": "a", "placement": {"n1": [0, 1], "n\u00e9": [7]}, "workers": 2}],
        "preempt": [{"job": "b", "reason": 'room for "a"\n', "grace_s": 120.0}],
        "reserve": [],
        "resize": [{"job": "c", "workers": 1}],
        "pending": [{"job": "d", "why": "quota", "estimated_start": 1.5e9}],
    }
    assert dumps(doc, 2) == json.dumps(doc, indent=2)
