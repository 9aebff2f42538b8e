"""``GET /api/runs/<id>/table/``: the run's candidate table (:mod:`swarm.web.candidate_table`)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from swarm.models import Run
from swarm.web import candidate_table

_PARAMS = [
    OpenApiParameter("columns", str, description="comma-separated column names (fields, parameters, metrics)"),
    OpenApiParameter("sort", str, description="comma-separated column names, '-' in front for descending (default id)"),
    OpenApiParameter("status", str, description="comma-separated statuses"),
    OpenApiParameter("agent", str, description="comma-separated agent names"),
    OpenApiParameter("range.<column>", str, description="lo..hi on a numeric column, inclusive; either side may be empty"),
    OpenApiParameter("limit", int, description=f"rows per page, 1 to {candidate_table.MAX_LIMIT} "
                                               f"(default {candidate_table.DEFAULT_LIMIT})"),
    OpenApiParameter("offset", int, description="rows skipped (default 0)"),
]


class RunCandidateTable(APIView):
    """Every candidate of a run, sorted, filtered and paginated by the database. A bad query
    parameter is refused with 400 ``{"<parameter>": ["why"]}``."""

    @extend_schema(parameters=_PARAMS, responses=OpenApiTypes.OBJECT, operation_id="runs_table")
    def get(self, request, pk: int):
        run = get_object_or_404(Run.objects.select_related("goal"), pk=pk)
        params = {k: request.query_params.getlist(k) for k in request.query_params}
        try:
            q = candidate_table.parse(run, params)
        except candidate_table.TableError as exc:
            raise ValidationError({exc.param: [str(exc)]}) from None
        return Response(candidate_table.page(run, q))
