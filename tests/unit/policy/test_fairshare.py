"""Hierarchical fair-share standings and usage decay (scheduler/policy/fairshare.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import decide
from scheduler.policy.fairshare import _flat_standings, _tree_standings, decay_usage, standings

from .helpers import check_invariants, job, node, snap, team


def test_decay_usage_halves_every_half_life():
    assert decay_usage(800.0, 0.0, 100.0) == 800.0
    assert decay_usage(800.0, 100.0, 100.0) == pytest.approx(400.0)
    assert decay_usage(800.0, 300.0, 100.0) == pytest.approx(100.0)


def test_equal_teams_tie_and_idle_teams_rank_first():
    ranks, neutral = standings([team("a", usage=100), team("b", usage=110), team("c")])
    assert ranks["a"] == ranks["b"]
    assert ranks["c"] < ranks["a"]
    assert ranks["c"] <= neutral


def test_band_width_is_a_knob():
    teams = [team("a", usage=100), team("b", usage=180)]
    assert standings(teams, band=2.0)[0]["a"] == standings(teams, band=2.0)[0]["b"]
    ranks, _ = standings(teams, band=1.2)
    assert ranks["a"] < ranks["b"]


@pytest.mark.parametrize("parent", [None, "org"])
def test_a_usage_too_small_to_count_beside_a_sibling_ranks_as_unused(parent):
    # A 60 s half-life (valid) decays an idle team's usage to a subnormal number within a day;
    # beside a busy sibling its part of their usage rounds to 0, which divided by zero.
    tiny = 5e-324
    assert tiny / (1e5 + tiny) == 0
    teams = [team("org"), team("a", parent, usage=tiny), team("b", parent, usage=1e5)]
    teams.append(team("c", parent))
    ranks, _ = standings(teams)
    assert ranks["a"] == ranks["c"] < ranks["b"]


def test_a_snapshot_with_such_a_usage_is_decided():
    s = snap(
        [node("n0", 1)],
        [job("b1", team="b"), job("a1", team="a", submitted=10.0)],
        teams=[team("a", usage=5e-324), team("b", usage=1e5)],
        fair_share_half_life_s=60.0,
    )
    d = decide(s)
    check_invariants(s, d)
    # a counts as having used nothing: its later job goes first
    assert [st.job for st in d.start] == ["a1"]


def test_cycles_and_unknown_parents_do_not_break_ranking():
    ranks, neutral = standings([team("x", "y"), team("y", "x"), team("z", "nowhere")])
    assert "z" in ranks  # an unknown parent makes a root
    assert "x" not in ranks and "y" not in ranks  # unreachable cycle: neutral standing
    assert isinstance(neutral, int)


_USAGE = st.one_of(
    st.just(0.0),
    st.just(-0.0),
    st.floats(min_value=0.0, max_value=1e12, allow_nan=False),
    st.integers(min_value=0, max_value=10**9),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([None, "nowhere", ""]),
            st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]),
            _USAGE,
        ),
        max_size=8,
    ),
    st.sampled_from([1.2, 2.0, 4.0]),
)
def test_flat_teams_rank_as_the_tree_walk_ranks_them(specs, band):
    # the shortcut for teams that all sit at the root must equal the general walk exactly
    teams = [
        team(f"t{k:02d}"[::-1], parent, weight=w, usage=u) for k, (parent, w, u) in enumerate(specs)
    ]
    assert standings(teams, band) == _tree_standings(teams, band) == _flat_standings(teams, band)
