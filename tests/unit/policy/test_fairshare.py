"""Hierarchical fair-share standings and usage decay (scheduler/policy/fairshare.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy.fairshare import _flat_standings, _tree_standings, decay_usage, standings

from .helpers import team


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

    def outcome(rank):
        try:
            return rank(teams, band)
        except ZeroDivisionError:  # usage so small that a share underflows: both raise
            return ZeroDivisionError

    assert outcome(standings) == outcome(_tree_standings) == outcome(_flat_standings)
