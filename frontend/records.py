"""Portal side of reproducibility records: the record on the job page, its JSON export, and
"resubmit exactly this" (``scheduler.reproducibility``). Another team's job is a 404."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST

from core.errors import DomainError, NotFound
from core.ids import parse_id
from scheduler import reproducibility
from scheduler import selectors as scheduler_selectors
from scheduler.models import Job
from tenants.permissions import can_submit_to, signed_in


def record_context(request: HttpRequest, job: Job) -> dict[str, Any]:
    """What the job page's record section shows: the latest attempt's record, links to the
    earlier ones, and whether the caller may resubmit (may submit to the job's team)."""
    records = reproducibility.attempt_records(user=request.user, job_id=job.pk)
    latest = records[-1] if records else None
    return {
        "record": latest,
        "record_shown": (
            reproducibility.record_shown(user=request.user, record=latest) if latest else None
        ),
        "other_records": records[:-1],
        "can_resubmit": bool(records) and can_submit_to(request.user, job.team),
    }


@login_required
@require_GET
def job_record_json(request: HttpRequest, job_id: int, attempt: int) -> HttpResponse:
    """One attempt's record as a JSON download (``job-<id>-attempt-<n>.json``)."""
    try:
        record = reproducibility.attempt_record_get(
            user=request.user, job_id=job_id, attempt=attempt
        )
    except NotFound:
        raise Http404("no such record") from None
    response = HttpResponse(
        json.dumps(
            reproducibility.record_shown(user=request.user, record=record),
            indent=2,
            sort_keys=True,
        ),
        content_type="application/json",
    )
    response["Content-Disposition"] = f'attachment; filename="job-{job_id}-attempt-{attempt}.json"'
    return response


@login_required
@require_POST
def job_resubmit(request: HttpRequest, job_id: int) -> HttpResponseRedirect:
    """Submit a job that runs exactly what the posted attempt ran; go to the new job's page.
    A job the caller cannot see is a 404 whatever was posted; refusals (a bad attempt, a
    viewer, a budget stop, a pending cap) come back as a message on this job."""
    # The job before the form: a bad attempt on a missing (or another team's) job was answered
    # with a redirect and "attempt is not a number", not the 404 any other request about it gets.
    try:
        scheduler_selectors.job_get(user=request.user, job_id=job_id)
    except NotFound:
        raise Http404("no such job") from None
    posted = request.POST.get("attempt") or ""
    attempt = parse_id(posted)
    if posted and attempt is None:
        # Not "the latest attempt": that would run something the user did not pick.
        messages.error(request, f"Not resubmitted: attempt {posted[:20]!r} is not a number.")
        return redirect("job-detail", job_id=job_id)
    try:
        resubmission = reproducibility.job_resubmit(
            user=signed_in(request), job_id=job_id, attempt=attempt
        )
    except NotFound:
        raise Http404("no such job") from None
    except DomainError as exc:
        messages.error(request, f"Not resubmitted: {exc.message}")
        return redirect("job-detail", job_id=job_id)
    new_job = resubmission.job
    notes = "".join(f" Note: {note}." for note in resubmission.notes)
    messages.success(request, f"Resubmitted as job #{new_job.pk}.{notes}")
    return redirect("job-detail", job_id=new_job.pk)
