"""The free-capacity index and topology placement (scheduler/policy/capacity.py)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy.capacity import Index, Pool


def make(counts, racks, fabrics=None, domains=None, gpus=8):
    n = len(counts)
    pool = Pool(
        list(range(n)),
        [gpus] * n,
        domains or [""] * n,
        racks,
        fabrics or ["f"] * n,
    )
    return Index(pool, dict(enumerate(counts)))


def test_slots_and_largest_block_follow_updates():
    idx = make([8, 3, 0], ["r1", "r1", "r2"])
    assert idx.slots(1) == 11 and idx.slots(2) == 5 and idx.slots(4) == 2 and idx.slots(8) == 1
    assert idx.max_block() == 8
    idx.set(0, 1)
    assert idx.slots(4) == 0 and idx.max_block() == 3
    assert idx.version == 1


def test_place_returns_none_exactly_when_slots_are_short():
    idx = make([4, 4, 2], ["r1", "r1", "r2"])
    assert idx.place(3, 4) is None
    assert idx.place(2, 4) == [(0, 1), (1, 1)]


def test_best_fit_single_node_and_dataset_preference():
    idx = make([8, 4, 2], ["r1", "r1", "r1"])
    assert idx.place(1, 2) == [(2, 1)]
    assert idx.place(1, 2, prefer=frozenset({0})) == [(0, 1)]


def test_rack_tier_prefers_the_tightest_rack_that_fits():
    idx = make([8, 8, 8, 8, 8], ["big", "big", "big", "small", "small"])
    plan = idx.place(2, 8)
    assert sorted(n for n, _ in plan) == [3, 4]


def test_clone_is_independent():
    idx = make([8, 8], ["r", "r"])
    copy = idx.clone()
    copy.set(0, 0)
    assert idx.cnt[0] == 8 and idx.slots(8) == 2 and copy.slots(8) == 1


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(0, 8), min_size=1, max_size=10),
    st.dictionaries(st.integers(0, 9), st.integers(0, 12), max_size=6),
    st.integers(1, 8),
    st.one_of(st.none(), st.frozensets(st.integers(0, 9), max_size=4)),
    st.randoms(use_true_random=False),
)
def test_pick_node_after_is_place_on_a_changed_copy(counts, changes, need, prefer, rnd):
    racks = [rnd.choice(["r1", "r2", "r3"]) for _ in counts]
    idx = make(counts, racks)
    changes = {n: c for n, c in changes.items() if n < len(counts)}
    got = idx.pick_node_after(changes, need, prefer)
    if idx.slots(need) != 0:
        assert got is None  # it only answers when no node holds `need` already
        return
    hyp = idx.clone()
    for n, c in changes.items():
        hyp.set(n, min(c, 8))
    plan = hyp.place(1, need, prefer)
    assert (None if plan is None else plan[0][0]) == got
