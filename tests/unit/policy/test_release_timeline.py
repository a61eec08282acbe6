"""The release timeline of a one-model cluster resolves each job's nodes only when a walk reaches
it (``backfill.release_order``); every walk must be the one the eagerly resolved timeline gives,
overdue releases and jobs on no eligible node included."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import decide
from scheduler.policy.backfill import _release_nodes
from scheduler.policy.engine import _Cycle
from scheduler.policy.memo import clear

from .helpers import node, run, snap

NOW = 10_000.0


def _eager(cycle: _Cycle) -> dict[str, list]:
    """The timeline as the eager build makes it: every job's nodes resolved, jobs that release
    none of the model's nodes left out."""
    topo = cycle.topo
    by_model: dict[str, list] = {}
    for k, r in enumerate(cycle.snap.running):
        end = r.expected_end
        if r.releasing_at is not None and (end is None or r.releasing_at < end):
            end = r.releasing_at
        if end is None:
            continue
        for m, pairs in _release_nodes(r.placement, topo.id_of, topo.node_model).items():
            by_model.setdefault(m, []).append((max(end, cycle.now), k, r.id, pairs))
    for lst in by_model.values():
        lst.sort()
    return by_model


@st.composite
def one_model(draw):
    """Up to four 8-GPU nodes of one model, some drained (not eligible), filled by jobs whose
    ends are unknown, overdue, now, or ahead (several at the same time)."""
    n_nodes = draw(st.integers(1, 4))
    nodes, running = [], []
    for n in range(n_nodes):
        first = 0
        while first < 8:
            size = min(draw(st.sampled_from([1, 2, 4, 8])), 8 - first)
            running.append(
                run(
                    f"r{n}-{first}",
                    {f"n{n}": range(first, first + size)},
                    end=draw(st.sampled_from([None, NOW - 100.0, NOW, NOW + 30.0, NOW + 600.0])),
                    releasing_at=draw(st.sampled_from([None, None, NOW + 10.0])),
                )
            )
            first += size
        nodes.append(node(f"n{n}", 0, state=draw(st.sampled_from(["ready", "ready", "down"]))))
    return snap(nodes, [], running, now=NOW, las=None)


@settings(max_examples=200, deadline=None)
@given(one_model(), st.booleans())
def test_lazy_walks_equal_the_eager_timelines_walks(s, warm):
    clear()
    if warm:
        decide(s)  # the next cycle starts from this one's carried release nodes
    lazy = _Cycle(s)
    if not lazy.models:
        return
    eager = _Cycle(s)
    eager._release_order = _eager(eager)
    eager._unknown_runs = []
    (ms_lazy,) = lazy.models.values()
    (ms_eager,) = eager.models.values()
    for w in (1, 2, 3, 8):
        for g in (1, 4, 8):
            for overdue in (True, False):
                for until in (NOW, NOW + 60.0, math.inf):
                    assert lazy.release_walk(ms_lazy, w, g, overdue, until) == (
                        eager.release_walk(ms_eager, w, g, overdue, until)
                    ), (w, g, overdue, until)
