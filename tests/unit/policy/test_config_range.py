"""Every engine configuration validation accepts decides a contended cycle.

An admin may put in force any configuration ``config_from_dict`` accepts (``policy_apply`` and
the what-if check it with nothing more), so ``decide`` must return, with the contract's
invariants, for every one of them, not only the documented defaults: a grace or half-life at
its upper bound (a century), a band just above 1, a count at its upper bound, ``null`` wherever a field may be
null, every queue order. Configurations are drawn from ``fields.FIELDS`` and built through the
codec, so a field added there is covered here and an out-of-range draw fails loudly instead of
testing nothing. Snapshots are the contended ones of ``test_properties``, with deadlines and
runtime estimates (read with ``deadline_slack_s`` and ``default_runtime_s``) and team usages as
a short half-life leaves them (down to the smallest positive float).
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.policy import QUEUE_ORDERS, Snapshot, config_from_dict, decide
from scheduler.policy.fields import FIELDS, Field

from .helpers import check_invariants
from .test_properties import NOW, snapshots

BIGGEST = sys.float_info.max
SMALLEST = 5e-324  # the smallest positive float
# Ordinary values, then the edges: tiny and subnormal, huge and the largest float.
NUMBERS = (1.0, 60.0, 3600.0, 1e-9, 1e-300, SMALLEST, 1e12, 1e18, 1e300, BIGGEST)
INTEGERS = (2, 3, 100, 10**9, 10**18, 10**400)


def _accepted(f: Field, x: float) -> bool:
    if f.low is not None and (x <= f.low if f.above else x < f.low):
        return False
    return f.high is None or x <= f.high


def _number(f: Field) -> st.SearchStrategy[float]:
    edges = [x for x in NUMBERS if _accepted(f, x)]
    if f.low is not None:
        # the bound itself, or the float just past it when the field must exceed it
        edges.append(math.nextafter(f.low, math.inf) if f.above else f.low)
    if f.high is not None:
        edges.append(f.high)
    return st.sampled_from(edges)


def _value(f: Field) -> st.SearchStrategy[Any]:
    if f.kind == "bool":
        s: st.SearchStrategy[Any] = st.booleans()
    elif f.kind == "number":
        s = _number(f)
    elif f.kind == "integer":
        low = int(f.low or 0)
        high = math.inf if f.high is None else int(f.high)
        edges = [low, *(n for n in INTEGERS if low < n <= high)]
        s = st.sampled_from(edges if f.high is None else [*edges, int(f.high)])
    elif f.kind == "choice":
        s = st.sampled_from(QUEUE_ORDERS)
    elif f.kind == "thresholds":
        items = [SMALLEST, 1.0, 3600.0, 36000.0, 1e12, 1e300, BIGGEST]
        top = math.inf if f.item_high is None else f.item_high
        s = st.lists(
            st.sampled_from([x for x in items if x <= top] + ([top] if top < math.inf else [])),
            min_size=1,
            max_size=5,
            unique=True,
        ).map(sorted)
    else:
        raise AssertionError(f"no strategy for {f.kind} ({f.key})")
    return st.one_of(st.none(), s) if f.nullable else s


@st.composite
def engine_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A configuration as an admin submits it: some fields set, at ordinary values or at the
    edges of what validation accepts; ``las`` off about a quarter of the time."""
    top: dict[str, Any] = {}
    las: dict[str, Any] = {}
    for f in FIELDS:
        if f.kind != "section" and draw(st.booleans()):
            (las if f.section else top)[f.name] = draw(_value(f))
    top["las"] = None if draw(st.integers(0, 3)) == 0 else las
    return top


@st.composite
def contended(draw: st.DrawFn) -> Snapshot:
    s = draw(st.one_of(snapshots(crowded=True), snapshots()))
    times = st.sampled_from([NOW - 100, NOW + 10, NOW + 5000, NOW + 1e6, 1e300, BIGGEST])
    pending = tuple(
        replace(
            p,
            deadline=draw(st.one_of(st.none(), times)),
            runtime_estimate_s=draw(st.sampled_from([p.runtime_estimate_s, None, 1e300])),
        )
        for p in s.pending
    )
    usages = st.sampled_from([0.0, SMALLEST, 1e-300, 1.0, 1e5])
    teams = tuple(replace(t, usage_gpu_s=draw(usages)) for t in s.teams)
    return replace(s, pending=pending, teams=teams)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine_configs(), contended())
def test_every_accepted_configuration_decides_a_contended_cycle(data, s):
    s = replace(s, config=config_from_dict(data, path="engine_config"))
    d = decide(s)
    check_invariants(s, d)
