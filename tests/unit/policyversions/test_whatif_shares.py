"""The what-if result's pure pieces: fair shares down the team tree and wait quantiles.

Invariants (hypothesis, random trees and values): the roots' shares sum to the whole cluster;
a parent's children share exactly the parent's share, in proportion to their weights (evenly
when every weight is zero); every share is within [0, 1]. Quantiles are sorted, start at the
minimum, end at the maximum and are values of the data."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from policyversions.whatif import _fair_shares, _quantiles


@st.composite
def trees(draw):
    n = draw(st.integers(min_value=1, max_value=12))
    teams = {}
    for i in range(n):
        parent = draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None
        teams[f"t{i}"] = {
            "parent": None if parent is None else f"t{parent}",
            "weight": draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 10.0])),
        }
    return teams


@given(trees())
def test_fair_shares_split_each_parent_by_weight(teams):
    shares = _fair_shares(teams)
    assert set(shares) == set(teams)
    assert all(0.0 <= s <= 1.0 + 1e-9 for s in shares.values())
    roots = [t for t, v in teams.items() if v["parent"] is None]
    assert math.isclose(sum(shares[r] for r in roots), 1.0)
    for parent in teams:
        kids = [t for t, v in teams.items() if v["parent"] == parent]
        if not kids:
            continue
        assert math.isclose(sum(shares[k] for k in kids), shares[parent], abs_tol=1e-12)
        total = sum(teams[k]["weight"] for k in kids)
        for kid in kids:
            expected = teams[kid]["weight"] / total if total else 1 / len(kids)
            assert math.isclose(shares[kid], shares[parent] * expected, abs_tol=1e-12)


def test_a_tree_by_hand():
    teams = {
        "research": {"parent": None, "weight": 1.0},
        "prod": {"parent": None, "weight": 1.0},
        "vision": {"parent": "research", "weight": 2.0},
        "nlp": {"parent": "research", "weight": 1.0},
    }
    assert _fair_shares(teams) == {
        "research": 0.5,
        "prod": 0.5,
        "vision": 0.5 * 2 / 3,
        "nlp": 0.5 / 3,
    }


@given(st.lists(st.floats(0, 1e7), min_size=1, max_size=300), st.integers(1, 60))
def test_quantiles_are_sorted_values_of_the_data_from_min_to_max(values, count):
    values.sort()
    q = _quantiles(values, count)
    assert len(q) == count + 1
    assert q == sorted(q) and q[0] == values[0] and q[-1] == values[-1]
    assert set(q) <= set(values)


def test_no_values_no_quantiles():
    assert _quantiles([], 10) == []
