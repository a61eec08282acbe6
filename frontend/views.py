"""Portal pages. Views call selectors and services only."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from scheduler import selectors
from scheduler.states import JobState


@login_required
def home(request):
    jobs = selectors.job_list(
        user=request.user, filters={"state": ",".join([JobState.RUNNING, JobState.PENDING])}
    )[:50]
    return render(request, "frontend/home.html", {"jobs": jobs})
