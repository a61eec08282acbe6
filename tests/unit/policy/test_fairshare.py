"""Hierarchical fair-share standings and usage decay (scheduler/policy/fairshare.py)."""

import pytest

from scheduler.policy.fairshare import decay_usage, standings

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
