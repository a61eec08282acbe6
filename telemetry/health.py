"""Node health scoring: pure rules over the evidence gathered for one node.

No Django import, no clock, no I/O: ``evaluate(evidence, rules)`` is deterministic, so the rules
are unit-tested on their own and the services only gather evidence and act on the verdict.

The score starts at 1.0 and each rule subtracts a penalty (clamped to 0..1). A rule may also ask
for quarantine; so does a score below ``quarantine_below``. Guarantees (tested):
- the score is always within 0..1;
- more evidence of trouble never raises the score (every penalty is monotonic in its evidence);
- an ECC double-bit error or a critical XID always asks for quarantine with the default rules.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

DEFAULT_RULES: dict[str, Any] = {
    # Errors and job failures older than this no longer count.
    "window_seconds": 3600,
    # Uncorrectable memory errors: the GPU returned bad data. One is enough.
    "ecc_dbe": {"penalty": 1.0, "quarantine_at": 1},
    # Corrected errors are harmless alone; a storm often precedes a double-bit error.
    "ecc_sbe": {"penalty_per_error": 0.001, "max_penalty": 0.3, "quarantine_at": None},
    "xid": {
        "penalty_per_event": 0.2,
        "quarantine_at": 3,  # "repeated XIDs"
        # 48 double-bit ECC, 79 fallen off the bus, 95 uncontained ECC: quarantine at once.
        "critical": [48, 79, 95],
        # Application faults (13 graphics engine exception, 31 MMU fault, 43 reset channel,
        # 45 preemptive cleanup) are the job's doing, not the GPU's.
        "ignore": [13, 31, 43, 45],
    },
    "thermal": {
        "window_seconds": 900,
        "temperature_c": 87,  # a reading at or above counts as throttled even without the flag
        "penalty_at_full": 0.5,  # penalty when every sample in the window throttled
        "quarantine_fraction": 0.5,
        "min_samples": 60,
    },
    # Jobs that ended FAILED on the node, counted by distinct submitter: one user's broken code
    # failing everywhere must not drag a node down; several users failing on it does.
    "job_failures": {"penalty_per_submitter": 0.1, "max_penalty": 0.3, "quarantine_at": None},
    "quarantine_below": 0.25,
}


def merge_rules(overrides: dict[str, Any] | None) -> dict[str, Any]:
    """``DEFAULT_RULES`` with ``overrides`` merged in (nested dicts merged key by key)."""
    rules = copy.deepcopy(DEFAULT_RULES)
    for key, value in (overrides or {}).items():
        if isinstance(value, dict) and isinstance(rules.get(key), dict):
            rules[key].update(value)
        else:
            rules[key] = value
    return rules


@dataclass(frozen=True, slots=True)
class NodeEvidence:
    """What the platform knows of one node over the rule windows."""

    ecc_sbe: int = 0
    ecc_dbe: int = 0
    xid_codes: tuple[int, ...] = ()  # one entry per XID event (repeats included)
    samples: int = 0  # samples in the thermal window
    throttled: int = 0  # of which throttled (flag or temperature at/above the limit)
    failed_job_submitters: int = 0


@dataclass(frozen=True, slots=True)
class Verdict:
    score: float
    reasons: tuple[str, ...] = ()
    quarantine: str | None = None  # the reason to quarantine, when a rule asks for it
    details: dict[str, float] = field(default_factory=dict)


def evaluate(evidence: NodeEvidence, rules: dict[str, Any]) -> Verdict:
    """Score ``evidence`` under ``rules`` (as returned by :func:`merge_rules`)."""
    penalty = 0.0
    reasons: list[str] = []
    quarantine: list[str] = []
    details: dict[str, float] = {}

    dbe = rules["ecc_dbe"]
    if evidence.ecc_dbe > 0:
        penalty += dbe["penalty"]
        details["ecc_dbe"] = dbe["penalty"]
        reasons.append(f"{evidence.ecc_dbe} ECC double-bit error(s)")
        if dbe.get("quarantine_at") and evidence.ecc_dbe >= dbe["quarantine_at"]:
            quarantine.append(f"{evidence.ecc_dbe} ECC double-bit error(s)")

    sbe = rules["ecc_sbe"]
    if evidence.ecc_sbe > 0:
        p = min(sbe["max_penalty"], sbe["penalty_per_error"] * evidence.ecc_sbe)
        penalty += p
        details["ecc_sbe"] = p
        reasons.append(f"{evidence.ecc_sbe} ECC single-bit error(s)")
        if sbe.get("quarantine_at") and evidence.ecc_sbe >= sbe["quarantine_at"]:
            quarantine.append(f"{evidence.ecc_sbe} ECC single-bit errors")

    xid = rules["xid"]
    ignored = set(xid.get("ignore") or ())
    counted = [c for c in evidence.xid_codes if c not in ignored]
    if counted:
        p = xid["penalty_per_event"] * len(counted)
        penalty += p
        details["xid"] = p
        codes = ", ".join(str(c) for c in sorted(set(counted)))
        reasons.append(f"{len(counted)} XID error(s) ({codes})")
        critical = sorted(set(counted) & set(xid.get("critical") or ()))
        if critical:
            quarantine.append(f"critical XID {', '.join(str(c) for c in critical)}")
        elif xid.get("quarantine_at") and len(counted) >= xid["quarantine_at"]:
            quarantine.append(f"{len(counted)} XID errors ({codes})")

    thermal = rules["thermal"]
    if evidence.samples >= max(1, thermal.get("min_samples") or 1) and evidence.throttled:
        fraction = min(1.0, evidence.throttled / evidence.samples)
        p = thermal["penalty_at_full"] * fraction
        penalty += p
        details["thermal"] = p
        reasons.append(f"thermal throttling in {fraction:.0%} of samples")
        limit = thermal.get("quarantine_fraction")
        if limit is not None and fraction >= limit:
            quarantine.append(f"thermal throttling in {fraction:.0%} of samples")

    failures = rules["job_failures"]
    if evidence.failed_job_submitters > 0:
        p = min(
            failures["max_penalty"],
            failures["penalty_per_submitter"] * evidence.failed_job_submitters,
        )
        penalty += p
        details["job_failures"] = p
        reasons.append(f"failed jobs of {evidence.failed_job_submitters} user(s)")
        at = failures.get("quarantine_at")
        if at and evidence.failed_job_submitters >= at:
            quarantine.append(f"failed jobs of {evidence.failed_job_submitters} users")

    score = round(min(1.0, max(0.0, 1.0 - penalty)), 4)
    if not quarantine and score < rules["quarantine_below"]:
        quarantine.append(f"health {score:.2f} below {rules['quarantine_below']:.2f}")
    return Verdict(
        score=score,
        reasons=tuple(reasons),
        quarantine="; ".join(quarantine) or None,
        details=details,
    )
