"""An option given before the action it belongs to (``gpuctl whatif --cluster x run``): argparse
took ``x`` for the action and said "argument ACTION: invalid choice: 'x'", which sent people
looking for an action named x. gpuctl says where the option goes instead, exit 2, and sends
nothing."""

from __future__ import annotations

import pytest

from policyversions.models import WhatIfRun

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_option_before_its_action_is_named_with_where_it_goes(as_admin, tmp_path):
    candidate = tmp_path / "c.yaml"
    candidate.write_text("team_weights: {vision: 3}\n")
    result = as_admin("whatif", "--cluster", "test", "run", "--candidate", str(candidate))
    assert result.code == 2, (result.out, result.err)
    assert "invalid choice" not in result.err
    assert "--cluster is an option of `gpuctl whatif run`" in result.err
    assert "gpuctl whatif run --cluster" in result.err
    assert not WhatIfRun.objects.exists()
    # Where it belongs, it works as before.
    placed = as_admin("whatif", "run", "--cluster", "test", "--no-wait", "--candidate",
                      str(candidate))  # fmt: skip
    assert placed.code == 0, placed.err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["whatif", "--cluster=test", "run"], "--cluster is an option of `gpuctl whatif run`"),
        (["--cluster", "test", "nodes"], "--cluster is an option of `gpuctl nodes`"),
        (["policy", "--reason", "r", "apply"], "an option of `gpuctl policy"),
    ],
)
def test_other_misplaced_options(as_admin, argv, expected):
    result = as_admin(*argv)
    assert result.code == 2
    assert expected in result.err, result.err


def test_a_wrong_action_is_still_called_so(as_admin):
    result = as_admin("whatif", "rnu")
    assert result.code == 2 and "invalid choice: 'rnu'" in result.err
