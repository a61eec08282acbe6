"""Reproducibility records: what exactly ran in each attempt of a job, and "resubmit exactly this".

A record is written once per attempt, when the backend has accepted the run (``reconcile``),
and never changed after: it is what the platform knew when the attempt started. It holds

- the image reference and its digest: a digest pinned in the reference (``name@sha256:...``) is
  the digest; otherwise the backend says what it resolved or, when it resolves nothing (Slurm
  without a container plugin runs the command on the nodes' own software), what it records
  instead (Slurm: the sha256 of the exact batch script submitted and the Slurm version);
- the command and the environment the run got, with secrets redacted (values of variables whose
  name says password, secret, token, key, credential or authorization; passwords in URLs;
  ``--token=...`` style arguments; platform API tokens anywhere);
- the code reference (``code_ref``, e.g. a git commit) and the dataset name and version, as the
  submitter declared them;
- the cluster, nodes, GPU indices and GPU models the attempt was placed on, and the backend
  account the run was submitted as (``backend_account``: a Slurm cluster's team account, as
  ``Job.backend_accounts`` holds it; "" when the backend runs everything as itself);
- the scheduling policy in force (the engine's configuration and its sha256), until policies
  are versioned.

The stored record never holds a secret, so exporting it is safe; resubmitting takes the secret
values from the job itself (readable only by those who may submit to its team).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from core.errors import Conflict, NotFound
from tenants.audit import REDACTED, redact
from tenants.permissions import Caller

from .backends.base import Backend, BackendJobSpec
from .env_visibility import may_see_env_values, redact_text, shown_record
from .models import AttemptRecord, Job, Node
from .services import JobRequest, job_submit
from .transitions import event_record

log = logging.getLogger(__name__)

RECORD_FORMAT = "gpuplatform.attempt-record/v1"
_DIGEST_IN_REFERENCE = re.compile(r"@(?P<digest>sha256:[0-9a-f]{64})$")


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """The environment with the values of secret-named variables redacted and every other
    value passed through :func:`redact_text`."""
    named = redact({str(k): str(v) for k, v in env.items()})
    return {k: v if v == REDACTED else redact_text(v) for k, v in named.items()}


def image_digest_in(reference: str) -> str | None:
    """The digest pinned in an image reference (``repo/name@sha256:<64 hex>``), else None."""
    match = _DIGEST_IN_REFERENCE.search(reference or "")
    return match["digest"] if match else None


def policy_in_force() -> dict[str, Any]:
    """The policy version in force (``settings.SCHEDULER_POLICY_VERSION_SOURCE``, a dotted path
    to a callable; None without versions), the engine configuration the loop schedules with, and
    the sha256 of its canonical JSON (equal hashes: the same engine configuration)."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    from .snapshot import policy_config

    source = getattr(settings, "SCHEDULER_POLICY_VERSION_SOURCE", "")
    config = dataclasses.asdict(policy_config())
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return {
        "version": import_string(source)() if source else None,
        "sha256": hashlib.sha256(canonical.encode()).hexdigest(),
        "config": json.loads(canonical),
    }


def _placement(
    job: Job, spec: BackendJobSpec, node_models: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    # (a job without a cluster has no nodes to name: the filter on a null cluster_id found none)
    if node_models is None:
        node_models = (
            dict(
                Node.objects.filter(
                    cluster_id=job.cluster_id, name__in=list(spec.placement)
                ).values_list("name", "gpu_model__name")
            )
            if job.cluster_id is not None
            else {}
        )
    return [
        {"node": name, "gpu_indices": list(gpus), "gpu_model": node_models.get(name, "")}
        for name, gpus in sorted(spec.placement.items())
    ]


def record_build(
    *,
    job: Job,
    spec: BackendJobSpec,
    provenance: dict[str, Any],
    now: datetime,
    account: str = "",
    policy: dict[str, Any] | None = None,
    node_models: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The record of ``job``'s attempt ``spec.attempt`` (JSON-safe, secrets redacted);
    ``account`` is the backend account the run was submitted as ("" for the backend's own);
    ``policy``, ``policy_in_force()`` when a caller recording many attempts has read it once;
    ``node_models``, the GPU model of each of the placement's nodes found in the job's cluster,
    when such a caller has read them (else they are read here)."""
    placement = _placement(job, spec, node_models)
    gpu_models = sorted({p["gpu_model"] for p in placement if p["gpu_model"]})
    pinned = image_digest_in(spec.image)
    resolved = provenance.get("image_digest")
    image = {
        "reference": spec.image,
        "digest": pinned or resolved,
        "resolved_by": "reference" if pinned else (provenance.get("kind") if resolved else None),
        "note": "" if (pinned or resolved) else provenance.get("image_note", ""),
    }
    elastic = job.elastic
    gpu_model = job.gpu_model if job.gpu_model_id else None
    resubmit = {
        "name": job.name,
        "team": job.team.slug,
        "image": spec.image if pinned or not resolved else f"{_repository(spec.image)}@{resolved}",
        "command": redact_text(spec.command),
        "env": redact_env(dict(job.env or {})),
        "workers": spec.workers,
        "gpus_per_worker": spec.gpus_per_worker,
        # The model the attempt ran on, so the resubmission gets the same hardware.
        "gpu_model": gpu_model.name
        if gpu_model is not None
        else (gpu_models[0] if len(gpu_models) == 1 else None),
        "priority_class": job.priority_class.name,
        "preemptible": job.preemptible,
        "checkpoint_interval_s": job.checkpoint_interval_s,
        "checkpoint_on_advice": job.checkpoint_on_advice,
        "runtime_limit_s": job.runtime_limit_s,
        "deadline": job.deadline.isoformat() if job.deadline else None,
        "dataset": job.dataset,
        "dataset_version": job.dataset_version,
        "code_ref": job.code_ref,
        "elastic": elastic,
        # Where it may and would rather run: a resubmission keeps the same constraints.
        "routing": job.routing,
        "simulated_duration_s": job.simulated_duration_s,
    }
    return {
        "format": RECORD_FORMAT,
        "job": job.pk,
        "attempt": spec.attempt,
        "recorded_at": now.isoformat(),
        "team": job.team.slug,
        "submitter": job.submitter.get_username(),
        "image": image,
        "command": redact_text(spec.command),
        "env": redact_env(dict(spec.env)),
        "code_ref": job.code_ref,
        "dataset": {"name": job.dataset, "version": job.dataset_version},
        "cluster": {
            "name": job.cluster.name if job.cluster else "",
            "backend": provenance.get("kind", ""),
        },
        "backend_ref": provenance.get("backend_ref", ""),
        # Whose share and limits the run counted against on the cluster: a team remapped to
        # another account later does not change what this run was.
        "backend_account": account,
        "runtime": provenance.get("runtime", {}),
        "workers": spec.workers,
        "gpus_per_worker": spec.gpus_per_worker,
        "placement": placement,
        "gpu_models": gpu_models,
        "policy": policy if policy is not None else policy_in_force(),
        "resubmit": resubmit,
    }


def _repository(reference: str) -> str:
    """The image reference without its tag or digest (``reg:5000/a/b:1.2`` -> ``reg:5000/a/b``)."""
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def attempt_provenance(
    job: Job, spec: BackendJobSpec, backend: Backend, ref: str
) -> dict[str, Any]:
    """What the record says of the run's origin: the backend's kind, what its optional
    ``run_provenance(spec)`` can say about the run, and the backend's reference. A backend that
    cannot answer leaves the image digest unresolved, never the record unwritten."""
    provenance: dict[str, Any] = {"kind": getattr(backend, "kind", "")}
    describe = getattr(backend, "run_provenance", None)
    if describe is not None:
        try:
            provenance.update(describe(spec))
        except Exception as exc:  # the record matters more than the backend's extra details
            log.warning("job %s: run provenance failed: %s", job.pk, exc)
            provenance["image_note"] = f"the cluster could not describe the run: {exc}"
    provenance["backend_ref"] = ref
    return provenance


@dataclass(frozen=True)
class AcceptedRun:
    """A run a backend accepted: the job, what was submitted, to which backend, the backend's
    reference and the account it was submitted as ("" for the backend's own)."""

    job: Job
    spec: BackendJobSpec
    backend: Backend
    ref: str
    account: str


def attempt_records_write(
    *,
    runs: Sequence[AcceptedRun],
    now: datetime,
    policy: dict[str, Any],
    node_models: Mapping[int, Mapping[str, str]],
) -> None:
    """Write the records of the attempts the backends just accepted (``run.account``: what
    ``Job.backend_accounts`` keeps for the attempt; "" for none). ``policy`` is
    ``policy_in_force()``, ``node_models[job.pk]`` the GPU model of each node of the job's
    placement in its cluster. Idempotent: an attempt that already has a record keeps it (a
    record is what was known when the attempt started). The existing records are read in one
    query and the new ones inserted in one. Each record stays independent of
    the others: one that cannot be built is logged and left out, and when the database refuses
    the batch, each record is inserted alone, so only the one it refuses is missing (logged)."""
    existing = set(
        AttemptRecord.objects.filter(job__in=[run.job for run in runs])
        .order_by()
        .values_list("job_id", "attempt")
    )
    rows: list[AttemptRecord] = []
    for run in runs:
        job, spec = run.job, run.spec
        if (job.pk, spec.attempt) in existing:
            continue
        try:
            record = record_build(
                job=job,
                spec=spec,
                provenance=attempt_provenance(job, spec, run.backend, run.ref),
                now=now,
                account=run.account,
                policy=policy,
                node_models=node_models.get(job.pk, {}),
            )
        except Exception:
            log.exception("job %s: the reproducibility record was not written", job.pk)
            continue
        rows.append(AttemptRecord(job=job, attempt=spec.attempt, recorded_at=now, record=record))
    try:
        with transaction.atomic():
            # A conflict is a racing cycle's record of the same attempt: that one stays.
            AttemptRecord.objects.bulk_create(rows, ignore_conflicts=True)
        return
    except Exception:
        log.warning("%d reproducibility records refused together: written one by one", len(rows))
    for row in rows:
        try:
            with transaction.atomic():
                row.save(force_insert=True)
        except Exception:
            written = AttemptRecord.objects.filter(job_id=row.job_id, attempt=row.attempt)
            if not written.exists():  # else a racing cycle wrote it first
                log.exception("job %s: the reproducibility record was not written", row.job_id)


# --- reads -------------------------------------------------------------------------------------


def attempt_records(*, user: Caller, job_id: int) -> list[AttemptRecord]:
    """The records of a job of the caller's teams, first attempt first (NotFound otherwise)."""
    from .selectors import job_get

    job = job_get(user=user, job_id=job_id)
    records = list(AttemptRecord.objects.filter(job=job).order_by("attempt"))
    for record in records:
        record.job = job  # the caller's copy, with its team: no query per record
    return records


def record_shown(*, user: Caller, record: AttemptRecord) -> dict[str, Any]:
    """A record as ``user`` may see it: env values hidden from those who may not submit to the
    job's team (``scheduler.env_visibility``)."""

    return shown_record(record.record, visible=may_see_env_values(user, record.job.team))


def attempt_record_get(*, user: Caller, job_id: int, attempt: int | None = None) -> AttemptRecord:
    """One attempt's record (the latest when ``attempt`` is None); NotFound when the job is not
    the caller's or the attempt has no record."""
    records = attempt_records(user=user, job_id=job_id)
    chosen = [r for r in records if attempt is None or r.attempt == attempt]
    if not chosen:
        raise NotFound("no record of that attempt", field="attempt")
    return chosen[-1]


# --- "resubmit exactly this" -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Resubmission:
    """The new job, and what of the original's submission it does not carry and why (one
    sentence each), for the caller to show."""

    job: Job
    notes: tuple[str, ...] = ()


def job_resubmit(*, user: User, job_id: int, attempt: int | None = None) -> Resubmission:
    """Submit a new job that runs exactly what the given attempt ran: its record's submission
    (image pinned to the digest when one was known, the GPU model it ran on, the code reference
    and dataset version), with the secret env values taken from the original job. Every other
    field of the original's submission carries over (an elastic job asks for the workers it
    asked for, not the count its run started with), except a deadline that has passed: the new
    job has none, and a note says so. Checked like any submission (the caller must be able to
    submit to the team). The job and its "resubmitted" event are written in one transaction: all
    or nothing. Raises NotFound for a job outside the caller's teams or an attempt without a
    record, Conflict for a record without its submission."""
    from django.utils import timezone

    from .services import deadline_error

    chosen = attempt_record_get(user=user, job_id=job_id, attempt=attempt)
    original = chosen.job
    submission = chosen.record.get("resubmit")
    if not isinstance(submission, dict) or not submission:
        # Every record the platform writes carries it; one edited by hand or restored from
        # elsewhere may not, and guessing the submission would not be "exactly what ran".
        raise Conflict(
            f"attempt {chosen.attempt} of job {original.pk} has a record without its "
            "submission, so it cannot be resubmitted exactly; submit the job again by hand"
        )
    body = dict(submission)
    # The record's command and env are redacted; the job's own values are the ones that ran.
    body["command"] = original.command
    body["env"] = {str(k): str(v) for k, v in (original.env or {}).items()}
    # Records written before jobs had routing lack the key: the job's own routing is what held.
    body.setdefault("routing", original.routing)
    # Records written before these were recorded lack them; they are the submission's, and no
    # attempt changes them, so the job's own values are the record's.
    body["checkpoint_on_advice"] = original.checkpoint_on_advice
    body["deadline"] = original.deadline
    if original.requested_workers:
        # An elastic run starts with the workers that fit; the request is what the user asked.
        body["workers"] = original.requested_workers
    notes: list[str] = []
    if original.deadline is not None and deadline_error(original.deadline, now=timezone.now()):
        # Refusing would leave no way to rerun an old job; keeping it would make the new job
        # late at birth. Dropped, and said.
        body["deadline"] = None
        notes.append(
            f"job {original.pk}'s deadline ({original.deadline:%Y-%m-%d %H:%M} UTC) has passed: "
            "the new job has none"
        )
    known = {f.name for f in dataclasses.fields(JobRequest)}
    request = JobRequest(**{k: v for k, v in body.items() if k in known})
    # One transaction: a job without its "resubmitted" event would not say where it came from.
    with transaction.atomic():
        new_job = job_submit(user=user, request=request)
        event_record(
            job=new_job,
            kind="resubmitted",
            message="; ".join(
                [f"resubmission of job {original.pk} attempt {chosen.attempt}", *notes]
            ),
            data={"job": original.pk, "attempt": chosen.attempt},
        )
    return Resubmission(job=new_job, notes=tuple(notes))
