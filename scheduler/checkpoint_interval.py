"""The checkpoint interval that wastes least, from the interruption rate and the checkpoint cost.

Pure maths (no Django, no clock). Interruptions (node failures, spot reclaims, preemptions) are
taken as a Poisson process with mean time between interruptions ``M`` seconds; writing one
checkpoint costs ``C`` seconds of the run's time. Between checkpoints every ``tau`` seconds of
work, a run loses on average half an interval per interruption and pays ``C`` per checkpoint.

- Young (1974): ``tau = sqrt(2 C M)``, the first-order optimum.
- Daly (2006): ``tau = sqrt(2 C M) * (1 + sqrt(C / 2M) / 3 + (C / 2M) / 9) - C`` for
  ``C < 2M``, else ``tau = M``: the higher-order optimum the advice uses.
- :func:`expected_waste_fraction` is Daly's expected wall time per unit of work minus one,
  ``(M / tau) * (exp((tau + C) / M) - 1) - 1`` (restart time left out: it is the same whatever
  the interval): checkpoint time plus lost work, as a fraction of the useful work. It compares a
  user's interval with the advised one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def young_interval_s(checkpoint_cost_s: float, mtbi_s: float) -> float:
    """Young's first-order optimum ``sqrt(2 C M)``."""
    _check(checkpoint_cost_s, mtbi_s)
    return math.sqrt(2.0 * checkpoint_cost_s * mtbi_s)


def daly_interval_s(checkpoint_cost_s: float, mtbi_s: float) -> float:
    """Daly's higher-order optimum (seconds of work between checkpoints)."""
    _check(checkpoint_cost_s, mtbi_s)
    c, m = checkpoint_cost_s, mtbi_s
    if c >= 2.0 * m:
        return m
    ratio = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - c


def expected_waste_fraction(interval_s: float, checkpoint_cost_s: float, mtbi_s: float) -> float:
    """Checkpoint time plus lost work per unit of useful work, checkpointing every
    ``interval_s`` seconds of work (Daly's exponential model, restart time left out)."""
    _check(checkpoint_cost_s, mtbi_s)
    if not interval_s > 0:
        raise ValueError("interval_s must be > 0")
    exponent = (interval_s + checkpoint_cost_s) / mtbi_s
    if exponent > 700:  # beyond float range: effectively never finishes
        return math.inf
    return (mtbi_s / interval_s) * math.expm1(exponent) - 1.0


@dataclass(frozen=True)
class CheckpointAdvice:
    """The advised interval for one pool and cost, and how it compares with the user's."""

    advised_interval_s: float
    mtbi_s: float
    checkpoint_cost_s: float
    advised_waste: float
    user_interval_s: float | None = None
    user_waste: float | None = None

    @property
    def saving(self) -> float | None:
        """The share of the user's waste the advised interval avoids (0.7: 70 % less)."""
        if self.user_waste is None or not self.user_waste > 0 or math.isinf(self.user_waste):
            return (
                None if self.user_waste is None else (1.0 if math.isinf(self.user_waste) else 0.0)
            )
        return max(0.0, 1.0 - self.advised_waste / self.user_waste)


def advise(
    *, interruptions_per_hour: float, checkpoint_cost_s: float, user_interval_s: float | None
) -> CheckpointAdvice | None:
    """Advice for a run interrupted ``interruptions_per_hour`` times per hour of running whose
    checkpoint costs ``checkpoint_cost_s``; None when nothing interrupts it (no optimum: any
    interval only costs checkpoint time)."""
    if not interruptions_per_hour > 0:
        return None
    mtbi_s = 3600.0 / interruptions_per_hour
    advised = daly_interval_s(checkpoint_cost_s, mtbi_s)
    user_waste = None
    if user_interval_s:
        user_waste = expected_waste_fraction(user_interval_s, checkpoint_cost_s, mtbi_s)
    return CheckpointAdvice(
        advised_interval_s=advised,
        mtbi_s=mtbi_s,
        checkpoint_cost_s=checkpoint_cost_s,
        advised_waste=expected_waste_fraction(advised, checkpoint_cost_s, mtbi_s),
        user_interval_s=user_interval_s,
        user_waste=user_waste,
    )


def _check(checkpoint_cost_s: float, mtbi_s: float) -> None:
    if not (checkpoint_cost_s > 0 and math.isfinite(checkpoint_cost_s)):
        raise ValueError("checkpoint_cost_s must be a finite number > 0")
    if not (mtbi_s > 0 and math.isfinite(mtbi_s)):
        raise ValueError("mtbi_s must be a finite number > 0")
