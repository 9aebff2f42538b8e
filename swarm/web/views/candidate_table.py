"""The candidate table page of a run: the browser side of ``/api/runs/<id>/table/``."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from swarm.models import Run


@login_required
def run_candidates(request: HttpRequest, pk: int) -> HttpResponse:
    """Every candidate of run ``pk`` in a table the page sorts, filters and pages through the
    API; the query string is the API's (``?sort=-latency_ms&status=ok&range.BLOCK=4..16``)."""
    run = get_object_or_404(Run.objects.select_related("goal"), pk=pk)
    config = {
        "run": run.pk,
        "apiUrl": reverse("api-run-table", args=[run.pk]),
        "candidateUrl": reverse("candidate-detail", args=[0]),
        "compareUrl": reverse("compare"),
    }
    return render(request, "swarm/run_candidates.html", {"run": run, "goal": run.goal, "page_config": config})
