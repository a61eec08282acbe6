"""The Young/Daly checkpoint interval against hand-computed values, and its invariants."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.checkpoint_interval import (
    advise,
    daly_interval_s,
    expected_waste_fraction,
    young_interval_s,
)

# A 60 s checkpoint on a pool interrupted once per 10 h (M = 36,000 s), by hand:
#   Young: sqrt(2 * 60 * 36000) = sqrt(4,320,000) = 2078.46 s
#   Daly: C/2M = 60/72000 = 0.00083333, sqrt = 0.02886751;
#         2078.46 * (1 + 0.02886751/3 + 0.00083333/9) - 60 = 2078.46 * 1.00971510 - 60 = 2038.65 s
#   waste(2038.65) = (36000/2038.65) * (e^(2098.65/36000) - 1) - 1
#                  = 17.65875 * (e^0.05829583 - 1) - 1 = 17.65875 * 0.06003... - 1 = 0.0600
#   waste(4 h)     = (36000/14400) * (e^(14460/36000) - 1) - 1 = 2.5 * 0.49431 - 1 = 0.2358
#   saving = 1 - 0.0600 / 0.2358 = 0.745: "every 34 min would waste 75 % less than every 4 h"


def test_young_by_hand():
    assert young_interval_s(60, 36_000) == pytest.approx(2078.46, abs=0.01)


def test_daly_by_hand():
    assert daly_interval_s(60, 36_000) == pytest.approx(2038.65, abs=0.01)


def test_waste_by_hand():
    assert expected_waste_fraction(2038.65, 60, 36_000) == pytest.approx(0.0600, abs=1e-4)
    assert expected_waste_fraction(14_400, 60, 36_000) == pytest.approx(0.2358, abs=1e-4)


def test_advice_by_hand():
    advice = advise(interruptions_per_hour=0.1, checkpoint_cost_s=60, user_interval_s=14_400)
    assert advice is not None
    assert advice.mtbi_s == 36_000 and advice.advised_interval_s == pytest.approx(2038.65, abs=0.01)
    assert advice.saving == pytest.approx(0.745, abs=0.001)


def test_checkpoint_dearer_than_two_mtbi_checkpoints_once_per_mtbi():
    assert daly_interval_s(100, 40) == 40


def test_no_interruptions_no_advice():
    assert advise(interruptions_per_hour=0, checkpoint_cost_s=60, user_interval_s=3600) is None


@pytest.mark.parametrize("cost,mtbi", [(0, 10), (10, 0), (-1, 10), (math.nan, 10), (10, math.inf)])
def test_bad_inputs_are_refused(cost, mtbi):
    with pytest.raises(ValueError):
        daly_interval_s(cost, mtbi)


@given(
    cost=st.floats(min_value=1, max_value=3600),
    mtbi_over_cost=st.floats(min_value=10, max_value=100_000),
    factor=st.floats(min_value=0.05, max_value=20),
)
def test_the_advised_interval_wastes_no_more_than_another(cost, mtbi_over_cost, factor):
    # Where checkpoints are cheap next to the time between interruptions (C <= M/10, the case
    # the advice is for), Daly's interval is at least as good as any other.
    mtbi = cost * mtbi_over_cost
    advised = daly_interval_s(cost, mtbi)
    assert 0 < advised <= mtbi
    waste = expected_waste_fraction(advised, cost, mtbi)
    assert waste >= 0
    assert waste <= expected_waste_fraction(advised * factor, cost, mtbi) + 1e-9
