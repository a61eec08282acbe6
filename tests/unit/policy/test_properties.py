"""Property tests over random snapshots: the contract's invariants hold on every decision set.

Invariants (see helpers.check_invariants): no GPU placed twice or placed when not free; gang
completeness (exactly the started workers, gpus_per_worker each, one node per worker, one model);
only ready, healthy nodes; every pending job started or pending with a non-empty why;
non-preemptible jobs never preempted; the checkpoint protection window honoured. Plus
determinism (same snapshot, same decisions, whatever the input order), JSON round trips, and
quotas never exceeded by the starts.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.policy import (
    NODE_STATES,
    QUEUE_ORDERS,
    Config,
    Elastic,
    Las,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Snapshot,
    Team,
    decide,
    decisions_from_dict,
    decisions_to_dict,
    snapshot_from_dict,
    snapshot_to_dict,
)

from .helpers import CLASSES, check_invariants

MODELS = ("h100", "a100")
TEAMS = ("a", "b", "c", "d")
NOW = 10_000.0


@st.composite
def snapshots(draw, crowded: bool = False, easy: bool = False) -> Snapshot:
    """Random snapshots; ``crowded`` ones have full, healthy clusters and no quotas, so that
    most pending jobs are blocked and preemption / shrinking / reservations happen often;
    ``easy`` ones (with ``crowded``) turn preemption off, to exercise EASY backfill alone."""
    config = Config(
        backfill=easy or draw(st.booleans()),
        preemption=not easy and draw(st.booleans()),
        checkpoint_protect_s=draw(st.sampled_from([0.0, 300.0, 3000.0])),
        queue_order=draw(st.sampled_from(QUEUE_ORDERS)),
        las=draw(
            st.sampled_from([None, None, "on"]).flatmap(
                lambda on: (
                    st.none()
                    if on is None
                    else st.builds(
                        Las,
                        thresholds_gpu_s=st.just((3600.0, 36000.0)),
                        fifo_one_node_after_s=st.sampled_from([None, 600.0]),
                        defragment=st.booleans(),
                        reserve_after_s=st.sampled_from([None, 86400.0]),
                        # with (3600, 36000): none, the last queue, the last two, or all three
                        bottom_fifo_queues=st.sampled_from([None, 1, 2, 3]),
                        long_run_s=st.sampled_from([None, None, 3000.0]),
                    )
                )
            )
        ),
    )
    teams = []
    for name, parent in (("a", None), ("b", None), ("c", "a"), ("d", "a")):
        quota = {}
        for m in MODELS:
            if not crowded and draw(st.integers(0, 3)) == 0:
                quota[m] = Quota(draw(st.integers(0, 16)), draw(st.integers(0, 8)))
        teams.append(
            Team(
                name,
                parent,
                weight=draw(st.sampled_from([0.5, 1.0, 2.0])),
                quota=quota,
                usage_gpu_s=draw(st.sampled_from([0.0, 1e3, 1e5])),
            )
        )

    nodes = []
    busy: dict[str, list[int]] = {}
    for i in range(draw(st.integers(1, 8))):
        gpus = draw(st.sampled_from([2, 4, 8]))
        # Mostly busy clusters, so that preemption, backfill and reservations get exercised.
        if easy:
            choices = [0, 1, 2, gpus // 2]
        elif crowded:
            choices = [0, 0, 1]
        else:
            choices = [0, 0, 0, 1, 2, gpus // 2, gpus]
        n_free = draw(st.sampled_from(choices))
        order = draw(st.permutations(range(gpus)))
        taken = [g not in order[:n_free] for g in range(gpus)]
        name = f"n{i}"
        busy[name] = [g for g in range(gpus) if taken[g]]
        nodes.append(
            Node(
                name=name,
                gpu_model=draw(st.sampled_from(MODELS)),
                gpus=gpus,
                free_gpus=tuple(g for g in range(gpus) if not taken[g]),
                rack=draw(st.sampled_from(["r1", "r2", "r3"])),
                nvlink_domain=draw(st.sampled_from(["", "d1", "d2", name])),
                fabric=draw(st.sampled_from(["f1", "f2"])),
                spot=draw(st.booleans()),
                health=1.0 if crowded else draw(st.sampled_from([0.3, 0.6, 1.0])),
                state="ready" if crowded else draw(st.sampled_from(NODE_STATES + ("ready",) * 2)),
                datasets=tuple(draw(st.lists(st.sampled_from(["c4", "imagenet"]), max_size=2))),
            )
        )
    by_name = {n.name: n for n in nodes}

    running = []
    for name, idxs in busy.items():
        while idxs:
            k = draw(st.integers(1, len(idxs)))
            chunk, idxs = idxs[:k], idxs[k:]
            gpw = draw(st.sampled_from([d for d in (1, 2, 4, 8) if k % d == 0]))
            workers = k // gpw
            elastic = None
            if draw(st.booleans()):
                elastic = Elastic(draw(st.integers(1, workers)), workers + draw(st.integers(0, 3)))
            ckpt = draw(st.one_of(st.none(), st.floats(NOW - 5000, NOW)))
            running.append(
                RunningJob(
                    id=f"r{len(running)}",
                    team=draw(st.sampled_from(TEAMS + ("stranger",))),
                    priority_class=draw(st.sampled_from(["low", "low", "normal", "high"])),
                    gpu_model=by_name[name].gpu_model,
                    workers=workers,
                    gpus_per_worker=gpw,
                    placement={name: tuple(chunk)},
                    started_at=draw(st.sampled_from([NOW - 6000, NOW - 6000, NOW - 200])),
                    expected_end=draw(st.one_of(st.none(), st.floats(NOW - 100, NOW + 9000))),
                    preemptible=crowded or draw(st.booleans()),
                    last_checkpoint_at=ckpt,
                    checkpoint_interval_s=draw(st.sampled_from([None, 600.0, 3600.0])),
                    elastic=elastic,
                    releasing_at=draw(st.sampled_from([None, None, None, NOW + 30])),
                    attained_service_s=draw(st.sampled_from([0.0, 0.0, 5000.0])),
                    submitted_at=draw(st.sampled_from([None, 0.0, NOW - 300])),
                )
            )

    pending = []
    for i in range(draw(st.integers(0, 12))):
        workers = draw(st.integers(1, 4))
        elastic = None
        if draw(st.integers(0, 3)) == 0:
            elastic = Elastic(draw(st.integers(1, workers)), workers + draw(st.integers(0, 2)))
        pending.append(
            PendingJob(
                id=f"p{i}",
                team=draw(st.sampled_from(TEAMS + ("stranger",))),
                priority_class=draw(st.sampled_from(["high", "high", "normal", "low"])),
                gpu_model=draw(st.sampled_from(MODELS + (None,))),
                workers=workers,
                gpus_per_worker=draw(st.sampled_from([1, 2, 4, 8])),
                submitted_at=draw(st.floats(0, NOW)),
                runtime_estimate_s=draw(st.one_of(st.none(), st.floats(1, 20_000))),
                preemptible=draw(st.booleans()),
                dataset=draw(st.sampled_from([None, "c4", "imagenet"])),
                dataset_ready=draw(st.integers(0, 4)) > 0,
                elastic=elastic,
                attained_service_s=draw(st.sampled_from([0.0, 100.0, 10_000.0])),
                requeued=draw(st.booleans()),
            )
        )
    return Snapshot(
        now=NOW,
        config=config,
        priority_classes=CLASSES,
        teams=tuple(teams),
        nodes=tuple(nodes),
        running=tuple(running),
        pending=tuple(pending),
    )


# Example counts keep the whole file to a few seconds of CPU (the suite is shared).
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.one_of(snapshots(), snapshots(crowded=True)))
def test_invariants_hold_on_random_snapshots(s):
    d = decide(s)
    check_invariants(s, d)
    check_quotas(s, d)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(snapshots(), snapshots(crowded=True)), st.randoms(use_true_random=False))
def test_decisions_are_deterministic_whatever_the_input_order(s, rnd):
    d = decide(s)
    assert decide(s) == d
    shuffled = Snapshot(
        now=s.now,
        config=s.config,
        priority_classes=s.priority_classes,
        teams=tuple(rnd.sample(s.teams, len(s.teams))),
        nodes=tuple(rnd.sample(s.nodes, len(s.nodes))),
        running=tuple(rnd.sample(s.running, len(s.running))),
        pending=tuple(rnd.sample(s.pending, len(s.pending))),
    )
    assert decide(shuffled) == d


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_json_round_trips_preserve_snapshot_and_decisions(s):
    data = json.loads(json.dumps(snapshot_to_dict(s)))
    assert snapshot_from_dict(data) == s
    d = decide(s)
    assert decisions_from_dict(json.loads(json.dumps(decisions_to_dict(d)))) == d


def check_quotas(s, d):
    """Starts never push a team (or an ancestor) past guaranteed + borrow_limit."""
    teams = {t.name: t for t in s.teams}
    nodes = {n.name: n for n in s.nodes}

    def chain(team):
        out = []
        while team in teams:
            out.append(team)
            team = teams[team].parent
        return out

    used: dict[tuple[str, str], int] = {}
    for r in s.running:
        for t in chain(r.team):
            used[(t, r.gpu_model)] = used.get((t, r.gpu_model), 0) + r.workers * r.gpus_per_worker
    pending = {p.id: p for p in s.pending}
    for st_ in d.start:
        model = nodes[next(iter(st_.placement))].gpu_model
        n = sum(len(v) for v in st_.placement.values())
        for t in chain(pending[st_.job].team):
            used[(t, model)] = used.get((t, model), 0) + n
            q = teams[t].quota.get(model)
            if q is not None:
                # Starts respect guarantee + borrow limit (usage from before may already exceed it).
                before = used[(t, model)] - n
                assert used[(t, model)] <= max(q.guaranteed + q.borrow_limit, before)


@st.composite
def shared_clusters(draw) -> Snapshot:
    """A full cluster shared by teams with guarantees and room to borrow, some over their
    guarantee and some under it with jobs waiting, in two classes: where reclaims happen."""
    teams = tuple(
        Team(t, None, quota={"h100": Quota(draw(st.sampled_from([0, 4, 8, 12])), 32)})
        for t in ("a", "b", "c")
    )
    nodes, running = [], []
    for i in range(draw(st.integers(1, 4))):
        nodes.append(Node(name=f"n{i}", gpu_model="h100", gpus=8, free_gpus=()))
        at = 0
        while at < 8:
            gpus = min(draw(st.sampled_from([1, 2, 4, 8])), 8 - at)
            running.append(
                RunningJob(
                    id=f"r{len(running)}",
                    team=draw(st.sampled_from(("a", "b", "c"))),
                    priority_class=draw(st.sampled_from(("low", "low", "high"))),
                    gpu_model="h100",
                    workers=1,
                    gpus_per_worker=gpus,
                    placement={f"n{i}": tuple(range(at, at + gpus))},
                    started_at=NOW - 6000,
                    preemptible=True,
                    last_checkpoint_at=draw(st.sampled_from([None, NOW - 1000])),
                    checkpoint_interval_s=3600.0,
                    submitted_at=NOW - 7000,
                )
            )
            at += gpus
    pending = tuple(
        PendingJob(
            id=f"p{k}",
            team=draw(st.sampled_from(("a", "b", "c"))),
            priority_class=draw(st.sampled_from(("low", "low", "high"))),
            gpu_model="h100",
            workers=1,
            gpus_per_worker=draw(st.sampled_from([1, 2, 4, 8])),
            submitted_at=float(k),
        )
        for k in range(draw(st.integers(1, 6)))
    )
    config = Config(las=draw(st.sampled_from([None, Las()])))
    return Snapshot(
        now=NOW,
        config=config,
        priority_classes=CLASSES,
        teams=teams,
        nodes=tuple(nodes),
        running=tuple(running),
        pending=pending,
    )


@SETTINGS
@given(shared_clusters())
def test_reclaims_keep_the_quantum_and_never_take_a_higher_class(s):
    d = decide(s)
    check_invariants(s, d)
    check_quotas(s, d)
    running = {r.id: r for r in s.running}
    pending = {p.id: p for p in s.pending}
    for p in d.preempt:
        if p.reason.startswith("reclaim: "):
            victim = running[p.job]
            # "... for mine (low)" within a team, "... for a low job of another team" across
            by = p.reason.rsplit(" for ", 1)[1]
            if by.startswith("a ") and by.endswith(" job of another team"):
                by_class_name = by.removeprefix("a ").removesuffix(" job of another team")
            else:
                by_class_name = pending[by.split(" (")[0]].priority_class
            victim_class, by_class = CLASSES[victim.priority_class], CLASSES[by_class_name]
            assert victim_class <= by_class, p.reason
            if victim_class == by_class:
                # rule 4a: saved in its run, and it runs on to its next checkpoint
                assert victim.last_checkpoint_at is not None
                assert victim.last_checkpoint_at > victim.started_at
                assert p.grace_s > s.config.preemption_grace_s


def named_jobs(text: str) -> set[str]:
    """The job ids (``r3``, ``p12``) a reason or a why names."""
    return set(re.findall(r"\b[rp]\d+\b", text))


@SETTINGS
@given(st.one_of(snapshots(crowded=True), shared_clusters()))
def test_no_reason_names_a_job_of_another_team(s):
    """What a job's team reads (why it waits, why it was preempted) names jobs of that team only:
    the others' are "a job of another team", as cross-team access is a 404."""
    d = decide(s)
    team_of = {j.id: j.team for j in (*s.running, *s.pending)}
    told = [(p.job, p.reason) for p in d.preempt] + [(p.job, p.why) for p in d.pending]
    for job, text in told:
        others = {j for j in named_jobs(text) if team_of[j] != team_of[job]}
        assert not others, (job, text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(crowded=True, easy=True), st.sampled_from([1, 1, 2, 3]))
def test_backfill_never_delays_any_reservation(s, k):
    """With EASY reservations (up to ``k`` per model) and no preemption, every reserved gang
    still fits at its time on its nodes after everything this cycle started (jobs that end by
    then give their GPUs back); and all reservations of a model fit together at the latest of
    their times on the union of their nodes (no GPU is promised twice)."""
    s = replace(s, config=replace(s.config, reservations_per_model=k))
    d = decide(s)
    if not d.reserve or d.preempt or d.resize:
        return
    nodes = {n.name: n for n in s.nodes}
    pending = {p.id: p for p in s.pending}

    def available(names, at):
        avail = {name: len(nodes[name].free_gpus) for name in names}
        for st_ in d.start:
            p = pending[st_.job]
            if p.runtime_estimate_s is None or s.now + p.runtime_estimate_s > at:
                for name, idxs in st_.placement.items():
                    if name in avail:
                        avail[name] -= len(idxs)
        for r in s.running:
            end = r.expected_end
            if r.releasing_at is not None and (end is None or r.releasing_at < end):
                end = r.releasing_at
            if end is not None and max(end, s.now) <= at:
                for name, idxs in r.placement.items():
                    if name in avail:
                        avail[name] += len(idxs)
        return avail

    def need(job):
        w = job.elastic.min_workers if job.elastic else job.workers
        return min(w, job.workers), job.gpus_per_worker

    by_model: dict[str, list] = {}
    for res in d.reserve:
        w, g = need(pending[res.job])
        avail = available(res.nodes, res.at)
        assert sum(max(a, 0) // g for a in avail.values()) >= w
        by_model.setdefault(nodes[res.nodes[0]].gpu_model, []).append(res)
    for group in by_model.values():
        assert len(group) <= k
        names = sorted({n for res in group for n in res.nodes})
        avail = available(names, max(res.at for res in group))
        assert sum(max(a, 0) for a in avail.values()) >= sum(
            w * g for w, g in (need(pending[res.job]) for res in group)
        )


def _fifo_preemptor_fits(by, victim, now, queue) -> bool:
    """A ``submission order`` preemptor: one worker (or an elastic job starting with one), the
    victim's class and queue, submitted before it."""
    if not (by.workers == 1 or (by.elastic is not None and by.elastic.min_workers <= 1)):
        return False
    if by.priority_class != victim.priority_class or victim.submitted_at is None:
        return False
    if (victim.submitted_at, victim.id) <= (by.submitted_at, by.id):
        return False
    served = (victim.attained_service_s + now - victim.started_at) * (
        victim.workers * victim.gpus_per_worker
    )
    return queue(served, victim) == queue(
        by.attained_service_s * by.workers * by.gpus_per_worker, by
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(crowded=True), st.sampled_from([None, 3000.0]))
def test_las_preempts_only_more_served_jobs_of_the_same_class(s, long_run):
    """With LAS queues (and the long-run queue below them, or not), an ``attained service``
    preemption names a preemptor of the victim's class in a strictly lower queue, a
    ``submission order`` one a one-worker preemptor of the victim's class and queue submitted
    before it, a ``defragment`` one a preemptor of the victim's class submitted before it; a
    victim is never non-preemptible."""
    las = replace(s.config.las or Las(), thresholds_gpu_s=(3600.0, 36000.0), long_run_s=long_run)
    s = replace(s, config=replace(s.config, las=las))
    th = las.thresholds_gpu_s
    d = decide(s)
    running = {r.id: r for r in s.running}
    pending = {p.id: p for p in s.pending}

    def queue(gpu_s, job):
        q = sum(gpu_s >= t for t in th)
        served = gpu_s / (job.workers * job.gpus_per_worker)
        return q + 1 if long_run and q == len(th) and served >= long_run else q

    def preemptors(word: str, victim) -> list:
        # A reason names a preemptor of the victim's team; another team's is "a job of another
        # team" or "a <class> job of another team": then any such pending job may be the one.
        if word in pending:
            return [pending[word]]
        return [q for q in pending.values() if q.team != victim.team]

    for p in d.preempt:
        victim = running[p.job]
        assert victim.preemptible and victim.releasing_at is None
        words = p.reason.split()
        if p.reason.startswith("submission order: "):
            assert any(
                _fifo_preemptor_fits(by, victim, s.now, queue)
                for by in preemptors(words[2], victim)
            ), p.reason
            continue
        if p.reason.startswith("defragment: "):
            assert any(
                by.priority_class == victim.priority_class
                and victim.submitted_at is not None
                and (victim.submitted_at, victim.id) > (by.submitted_at, by.id)
                for by in preemptors(words[1], victim)
            ), p.reason
            continue
        if not p.reason.startswith("attained service: "):
            continue
        served = (victim.attained_service_s + s.now - victim.started_at) * (
            victim.workers * victim.gpus_per_worker
        )
        assert any(
            by.priority_class == victim.priority_class
            and queue(served, victim)
            > queue(by.attained_service_s * by.workers * by.gpus_per_worker, by)
            for by in preemptors(words[2], victim)
        ), p.reason
