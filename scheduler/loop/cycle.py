"""One scheduling cycle: Observe → Decide → Apply → Enforce, under the single-flight lock.

``run_cycle`` holds the lock (``scheduler.locks``), then

1. observes every enabled cluster's backend (``observe.sync_all``), retires the retiring nodes
   nothing runs on any more (``retirement.retirements_finish``: under the lock, so no start can
   land on one meanwhile) and fails the live jobs whose numbers no engine can read
   (``observe.fail_jobs_out_of_bounds``);
2. builds the snapshot and asks the pure policy engine to decide (``decide``);
3. applies the decisions in ONE transaction (``apply``): every transition is a conditional UPDATE
   and every GPU is guarded by the database's partial unique constraint, so applying the same
   decisions twice changes nothing and a racing cycle cannot double-allocate;
4. after commit, reconciles each backend with the database (``enforce``). Because that step
   reads state rather than remembering what the decide step did, a worker killed between commit
   and backend call is healed by the next cycle.

Isolation: one bad job never fails the cycle for everyone (see each stage); a backend outage is
the cluster's, not the jobs': they keep their state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

from django.dispatch import Signal
from django.utils import timezone

from ..locks import scheduler_lock
from ..retirement import retirements_finish
from .apply import apply_decisions
from .decide import decide_now, remember_cycle
from .enforce import reconcile
from .observe import fail_jobs_out_of_bounds, sync_all

# Sent after every cycle that ran, with its ``CycleResult``: metrics (the telemetry app) listen.
# Infrastructure only; nothing of the domain hangs on it.
cycle_finished = Signal()


@dataclass
class CycleResult:
    ran: bool
    started: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    pending: int = 0
    decide_ms: float = 0.0
    total_ms: float = 0.0


def run_cycle(*, now: datetime | None = None, sync: bool = True) -> CycleResult:
    """Run one cycle unless another is running (then return ``ran=False`` at once)."""
    with scheduler_lock() as acquired:
        if not acquired:
            return CycleResult(ran=False)
        t0 = time.perf_counter()
        if sync:
            sync_all()
        now = now or timezone.now()
        retirements_finish(now=now)
        fail_jobs_out_of_bounds(now=now)
        decided = decide_now(now=now)
        applied = apply_decisions(
            decided.decisions, index=decided.index, now=now, snapshot=decided.snapshot
        )
        remember_cycle(decided)
        reconcile(now=timezone.now())
        result = CycleResult(
            ran=True,
            started=applied.started,
            preempted=applied.preempted,
            pending=applied.pending,
            decide_ms=decided.decide_ms,
            total_ms=(time.perf_counter() - t0) * 1000,
        )
        cycle_finished.send(sender=CycleResult, result=result)
        return result
