"""Terse builders for policy snapshots and the contract's invariants, shared by the policy tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from scheduler.policy import (
    Config,
    Decisions,
    Elastic,
    Las,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Snapshot,
    Team,
)

CLASSES = {"high": 1000, "normal": 500, "low": 100}


def node(
    name: str,
    free: int | Iterable[int] | None = None,
    *,
    gpus: int = 8,
    model: str = "h100",
    rack: str = "r1",
    domain: str = "",
    fabric: str = "f1",
    spot: bool = False,
    health: float = 1.0,
    state: str = "ready",
    datasets: Iterable[str] = (),
) -> Node:
    """A node; ``free`` is a count (the lowest indices) or explicit indices; default all free."""
    if free is None:
        idx = tuple(range(gpus))
    elif isinstance(free, int):
        idx = tuple(range(free))
    else:
        idx = tuple(sorted(free))
    return Node(
        name=name,
        gpu_model=model,
        gpus=gpus,
        free_gpus=idx,
        rack=rack,
        nvlink_domain=domain or name,
        fabric=fabric,
        spot=spot,
        health=health,
        state=state,
        datasets=tuple(datasets),
    )


def job(
    id: str,
    workers: int = 1,
    gpw: int = 1,
    *,
    team: str = "t",
    pc: str = "normal",
    model: str | None = "h100",
    submitted: float = 0.0,
    est: float | None = None,
    preemptible: bool = False,
    dataset: str | None = None,
    dataset_ready: bool = True,
    elastic: tuple[int, int] | None = None,
    attained: float = 0.0,
    requeued: bool = False,
    deadline: float | None = None,
) -> PendingJob:
    """A pending job of ``workers`` x ``gpw`` GPUs."""
    return PendingJob(
        id=id,
        team=team,
        priority_class=pc,
        gpu_model=model,
        workers=workers,
        gpus_per_worker=gpw,
        submitted_at=submitted,
        runtime_estimate_s=est,
        preemptible=preemptible,
        dataset=dataset,
        dataset_ready=dataset_ready,
        elastic=None if elastic is None else Elastic(*elastic),
        attained_service_s=attained,
        requeued=requeued,
        deadline=deadline,
    )


def run(
    id: str,
    placement: Mapping[str, Iterable[int]],
    *,
    gpw: int | None = None,
    team: str = "t",
    pc: str = "low",
    model: str = "h100",
    started: float = 0.0,
    end: float | None = None,
    preemptible: bool = True,
    ckpt: float | None = None,
    interval: float | None = None,
    elastic: tuple[int, int] | None = None,
    releasing_at: float | None = None,
    attained: float = 0.0,
    submitted: float | None = None,
) -> RunningJob:
    """A running job; by default one worker holding all the listed GPUs."""
    pl = {n: tuple(sorted(g)) for n, g in placement.items()}
    total = sum(len(g) for g in pl.values())
    gpw = gpw or total
    return RunningJob(
        id=id,
        team=team,
        priority_class=pc,
        gpu_model=model,
        workers=total // gpw,
        gpus_per_worker=gpw,
        placement=pl,
        started_at=started,
        expected_end=end,
        preemptible=preemptible,
        last_checkpoint_at=ckpt,
        checkpoint_interval_s=interval,
        elastic=None if elastic is None else Elastic(*elastic),
        releasing_at=releasing_at,
        attained_service_s=attained,
        submitted_at=submitted,
    )


def team(
    name: str,
    parent: str | None = None,
    *,
    weight: float = 1.0,
    usage: float = 0.0,
    quota: Mapping[str, tuple[int, int]] | None = None,
) -> Team:
    """A team; ``quota`` maps model to (guaranteed, borrow_limit)."""
    return Team(
        name=name,
        parent=parent,
        weight=weight,
        quota={m: Quota(g, b) for m, (g, b) in (quota or {}).items()},
        usage_gpu_s=usage,
    )


def make_config(**fields: object) -> Config:
    """A :class:`Config`: ``las_<name>=`` sets the field ``name`` of the attained-service
    section (from its defaults), ``las=None`` turns it off, anything else is a ``Config``
    field."""
    las_fields = {k[4:]: v for k, v in fields.items() if k.startswith("las_")}
    top = {k: v for k, v in fields.items() if not k.startswith("las_")}
    if las_fields and top.get("las", Las()) is not None:
        top["las"] = replace(top.get("las") or Las(), **las_fields)
    return Config(**top)


def snap(
    nodes: Iterable[Node],
    pending: Iterable[PendingJob] = (),
    running: Iterable[RunningJob] = (),
    teams: Iterable[Team] = (),
    *,
    now: float = 1000.0,
    classes: Mapping[str, int] = CLASSES,
    **config: object,
) -> Snapshot:
    """A snapshot; keyword arguments beyond these are :func:`config` fields."""
    return Snapshot(
        now=now,
        config=make_config(**config),
        priority_classes=dict(classes),
        teams=tuple(teams),
        nodes=tuple(nodes),
        running=tuple(running),
        pending=tuple(pending),
    )


def started(decisions: Decisions) -> dict[str, dict[str, tuple[int, ...]]]:
    """Job id -> placement of every start."""
    return {s.job: dict(s.placement) for s in decisions.start}


def why(decisions: Decisions, job_id: str) -> str:
    """The ``why`` of a pending job (AssertionError if it was not left pending)."""
    for p in decisions.pending:
        if p.job == job_id:
            return p.why
    raise AssertionError(f"{job_id} is not pending: {decisions}")


def check_invariants(s: Snapshot, d: Decisions) -> None:
    """Assert every invariant of the contract on one (snapshot, decisions) pair."""
    nodes = {n.name: n for n in s.nodes}
    free = {(n.name, g) for n in s.nodes for g in n.free_gpus}
    pending = {p.id: p for p in s.pending}
    running = {r.id: r for r in s.running}
    used: set[tuple[str, int]] = set()

    def claim(placement: Mapping[str, tuple[int, ...]], model: str | None, what: str) -> None:
        for name, idxs in placement.items():
            n = nodes[name]
            assert n.state == "ready", f"{what} on {name} in state {n.state}"
            assert n.health >= s.config.min_health, f"{what} on unhealthy {name}"
            assert model is None or n.gpu_model == model, f"{what} on {n.gpu_model} node"
            for g in idxs:
                assert (name, g) in free, f"{what}: GPU {name}/{g} was not free"
                assert (name, g) not in used, f"{what}: GPU {name}/{g} placed twice"
                used.add((name, g))

    seen = set()
    for st in d.start:
        p = pending[st.job]
        assert st.job not in seen
        seen.add(st.job)
        lo = p.elastic.min_workers if p.elastic else p.workers
        workers = st.workers if st.workers is not None else p.workers
        assert min(lo, p.workers) <= workers <= p.workers, f"{st.job}: {workers} workers"
        claim(st.placement, p.gpu_model, st.job)
        # Gang completeness: exactly `workers` workers of gpus_per_worker, each on one node.
        assert sum(len(v) for v in st.placement.values()) == workers * p.gpus_per_worker
        for idxs in st.placement.values():
            assert len(idxs) % p.gpus_per_worker == 0 and idxs
        models = {nodes[n].gpu_model for n in st.placement}
        assert len(models) == 1
    for rz in d.resize:
        r = running[rz.job]
        assert r.elastic is not None
        assert r.elastic.min_workers <= rz.workers <= r.elastic.max_workers
        if rz.placement is not None and rz.workers > r.workers:
            new = {
                n: tuple(g for g in idxs if g not in r.placement.get(n, ()))
                for n, idxs in rz.placement.items()
            }
            claim({n: v for n, v in new.items() if v}, r.gpu_model, f"grow {rz.job}")
    for pe in d.pending:
        assert pe.job in pending and pe.job not in seen, pe.job
        assert pe.why.strip(), f"{pe.job} has an empty why"
        seen.add(pe.job)
    assert seen == set(pending), "every pending job is started or pending exactly once"
    assert len(d.pending) + len(d.start) == len(pending)
    for pr in d.preempt:
        r = running[pr.job]
        assert r.preemptible, f"non-preemptible {pr.job} preempted"
        assert r.releasing_at is None
        if r.checkpoint_interval_s is not None:
            base = r.last_checkpoint_at if r.last_checkpoint_at is not None else r.started_at
            due = base + r.checkpoint_interval_s
            assert not (s.now <= due <= s.now + s.config.checkpoint_protect_s), (
                f"{pr.job} preempted inside its protection window"
            )
        # Minimum quantum: a job that has not saved a checkpoint since it (re)started is only
        # preempted for a higher class or a quota reclaim by another class, never by a job of
        # its own class. The preemptor of a reclaim is named at the end of its reason: reclaims
        # are checked by test_reclaims_keep_the_quantum_and_never_take_a_higher_class.
        saved = r.last_checkpoint_at is not None and r.last_checkpoint_at > r.started_at
        assert saved or pr.reason.startswith(("priority:", "reclaim:")), (
            f"{pr.job} preempted by its own class before its first checkpoint: {pr.reason}"
        )
        assert pr.grace_s >= s.config.preemption_grace_s
        if pr.grace_s > s.config.preemption_grace_s:
            # a longer grace only to let the victim pass its next checkpoint
            assert r.checkpoint_interval_s and r.last_checkpoint_at is not None, pr
            assert s.now + pr.grace_s > r.last_checkpoint_at + r.checkpoint_interval_s, pr
            assert pr.grace_s <= r.checkpoint_interval_s + 60.0, pr
    assert len({p.job for p in d.preempt}) == len(d.preempt)
