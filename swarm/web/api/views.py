"""The JSON API: goals, runs, candidates, evidence, insights, directions, promotions and
production kernels, with exports (CSV, JSON, Kernel Tuner cache). Session or token auth;
roles as on the pages (:mod:`swarm.web.api.permissions`)."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from swarm.goals import lifecycle
from swarm.learning import store as insight_store
from swarm.models import AuditEvent, Candidate, Direction, Goal, Insight, Promotion, PromotionRequest, Run
from swarm.production.promotion import PromotionRefused, approve_request, earlier_refusals, reject_request, request_promotion, rollback
from swarm.runs import baselines, cancelling, directions, events, orchestrator, summaries
from swarm.runs.dispatch import dispatch
from swarm.web import goal_editor
from swarm.web.api import exports
from swarm.web.api.serializers import (
    CandidateSerializer,
    DirectionCreateSerializer,
    GoalArchiveSerializer,
    GoalSerializer,
    PromotionCreateSerializer,
    RollbackSerializer,
    RunCreateSerializer,
    RunSerializer,
)
from swarm.web.api.streaming import streamed
from swarm.web.cuda_static import candidate_static

EVENTS_PAGE = 5000  # events per page of /api/runs/<id>/events/


def _int_param(request, name: str, default: int, minimum: int) -> int:
    """Query parameter ``name`` as an integer >= ``minimum``; 400 with the reason otherwise."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: f"expected an integer, got {raw!r}"}) from None
    if value < minimum:
        raise ValidationError({name: f"expected an integer >= {minimum}, got {value}"})
    return value


class GoalViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Goals. Engineers create (``add_goal``), change, archive (``change_goal``) and duplicate
    (``add_goal``) them. ``?archived=true|false`` lists only the archived or the active ones."""

    queryset = Goal.objects.select_related("created_by").order_by("-created_at")
    serializer_class = GoalSerializer
    required_perms = {"create": ["swarm.add_goal"], "update": ["swarm.change_goal"],
                      "partial_update": ["swarm.change_goal"], "archive": ["swarm.change_goal"],
                      "duplicate": ["swarm.add_goal"], "check_space": []}

    def get_queryset(self):
        qs = super().get_queryset()
        archived = self.request.query_params.get("archived", "").lower()
        if archived in ("true", "1", "false", "0"):
            qs = qs.filter(archived_at__isnull=archived in ("false", "0"))
        return qs

    @extend_schema(parameters=[OpenApiParameter("archived", OpenApiTypes.BOOL,
                                                description="only the archived (true) or the active (false) goals")])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(parameters=[OpenApiParameter("workload", str, required=True),
                               OpenApiParameter("target", str, required=True),
                               OpenApiParameter("shape_set", str, description="default: the workload's first")],
                   responses=OpenApiTypes.OBJECT)
    @action(detail=False, methods=["get"])
    def defaults(self, request):
        """The default ``name``, ``shape_set``, design space (``parameters`` and ``restrictions``
        as the goal form's text) and template ``source`` of a goal of a workload on a target;
        400 with ``detail`` for an unknown workload, target or shape set."""
        q = request.query_params
        try:
            return Response(goal_editor.defaults(q.get("workload", ""), q.get("target", ""), q.get("shape_set", "")))
        except (KeyError, ValueError) as exc:
            raise ValidationError({"detail": str(exc).strip("'\"")}) from None

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    @action(detail=False, methods=["post"], url_path="check-space")
    def check_space(self, request):
        """Check a design space as the goal editor is edited (nothing is saved): ``{"parameters",
        "restrictions", "source", "workload", "target"}`` as the form's text fields, answered with
        ``{"ok", "errors", "size", "point", "preview"}`` (:func:`swarm.web.goal_editor.check`)."""
        fields = {}
        for name in goal_editor.FIELDS:
            value = request.data.get(name, "")
            if not isinstance(value, str):
                raise ValidationError({name: "must be text (the goal form's field)"})
            fields[name] = value
        return Response(goal_editor.check(fields))

    @extend_schema(request=GoalArchiveSerializer, responses={200: GoalSerializer})
    @action(detail=True, methods=["post"])
    def archive(self, request, pk=None):
        """Archive the goal (``{"archived": false}``: unarchive it). Its runs are kept; an
        archived goal starts no runs."""
        s = GoalArchiveSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        goal = lifecycle.set_archived(self.get_object(), s.validated_data["archived"], request.user, via="api")
        return Response(GoalSerializer(goal).data)

    @extend_schema(request=None, responses={201: GoalSerializer})
    @action(detail=True, methods=["post"])
    def duplicate(self, request, pk=None):
        """A copy of the goal named ``"<name> (copy)"`` (no runs)."""
        copy = lifecycle.duplicate(self.get_object(), request.user, via="api")
        return Response(GoalSerializer(copy).data, status=status.HTTP_201_CREATED)

    def perform_create(self, serializer) -> None:
        with transaction.atomic():
            goal = serializer.save(created_by=self.request.user)
            AuditEvent.objects.create(actor=self.request.user, verb="goal.create", subject=f"goal {goal.pk}",
                                      data={"name": goal.name, "via": "api"})
            baselines.ensure(goal)

    def perform_update(self, serializer) -> None:
        with transaction.atomic():
            goal = serializer.save()
            AuditEvent.objects.create(actor=self.request.user, verb="goal.change", subject=f"goal {goal.pk}",
                                      data={"changed": sorted(serializer.validated_data), "via": "api"})


class RunViewSet(viewsets.ReadOnlyModelViewSet):
    """Runs: start one (``add_run``), follow it, stop or steer it (``change_run``), export it."""

    queryset = Run.objects.select_related("goal").order_by("-started_at")
    serializer_class = RunSerializer
    required_perms = {"create": ["swarm.add_run"], "stop": ["swarm.change_run"], "directions": ["swarm.change_run"]}

    def get_queryset(self):
        qs = super().get_queryset()
        goal = self.request.query_params.get("goal")
        return qs.filter(goal_id=goal) if goal and goal.isdigit() else qs

    @extend_schema(request=RunCreateSerializer, responses={201: RunSerializer})
    def create(self, request):
        s = RunCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        try:
            run, first = orchestrator.start_run(d["goal"], budget=d["budget"], seed=d.get("seed"),
                                                batch_size=d["batch_size"], user=request.user,
                                                agents=d.get("agents"), max_wall_s=d.get("max_wall_s"))
        except ValueError as exc:
            raise ValidationError({"detail": str(exc)}) from None
        AuditEvent.objects.create(actor=request.user, verb="run.start", subject=f"run {run.pk}",
                                  data={"goal": d["goal"].pk, "budget": d["budget"], "via": "api"})
        dispatch(first)
        return Response(RunSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=RunSerializer)
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        """Stop now: queued candidates are cancelled; a running evaluation finishes and is kept."""
        run = self.get_object()
        orchestrator.stop_run(run, request.user, via="the API")
        run.refresh_from_db()
        return Response(RunSerializer(run).data)

    @extend_schema(responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["get"])
    def summary(self, request, pk=None):
        """The ``factory run --json`` summary: best candidate, Pareto frontier, agents."""
        return Response(summaries.run_summary(self.get_object()))

    @extend_schema(parameters=[OpenApiParameter("status", str, description="only candidates with this status")],
                   responses=CandidateSerializer(many=True))
    @action(detail=True, methods=["get"])
    def candidates(self, request, pk=None):
        """The run's candidates, paginated (``limit``, ``offset``)."""
        run = self.get_object()
        qs = run.candidates.select_related("evidence", "goal").prefetch_related("parents").order_by("id")
        if request.query_params.get("status"):
            qs = qs.filter(status=request.query_params["status"])
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(CandidateSerializer(page, many=True).data)

    @extend_schema(parameters=[OpenApiParameter("after", int, description="sequence number of the last event seen (default 0)"),
                               OpenApiParameter("limit", int, description=f"at most this many events (default and maximum {EVENTS_PAGE})")],
                   responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["get"])
    def events(self, request, pk=None):
        """The run's websocket events after sequence number ``after``, in order:
        ``{"events": [{"event", "seq", "data", "at"}], "last_seq": int, "more": bool}`` (``at``:
        when it was published, ISO 8601). ``last_seq`` is the run's last event when the page was
        read; ``more`` says to ask again from the last ``seq`` returned. The run page fills gaps
        in its live stream from here, and its event log's first lines."""
        run = self.get_object()
        after, limit = _int_param(request, "after", 0, 0), _int_param(request, "limit", EVENTS_PAGE, 1)
        limit = min(limit, EVENTS_PAGE)
        last = events.last_seq(run.pk)
        rows = list(run.events.filter(seq__gt=after, seq__lte=last).order_by("seq")[:limit])
        return Response({"events": [{**e.to_dict(), "at": e.at.isoformat()} for e in rows], "last_seq": last,
                         "more": bool(rows) and rows[-1].seq < last})

    @extend_schema(responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["get"])
    def insights(self, request, pk=None):
        """Insights learned so far for the run's (workload, target)."""
        goal = self.get_object().goal
        return Response({"insights": insight_store.latest_insights(goal.workload, goal.target)})

    @extend_schema(request=DirectionCreateSerializer, responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["get", "post"])
    def directions(self, request, pk=None):
        """``GET``: the run's directions. ``POST {"kind", "payload"}``: steer the run (applied at the
        next generation); a direction that cannot apply is refused with the reason (400)."""
        run = self.get_object()
        if request.method == "GET":
            return Response({"directions": [d.to_dict() for d in run.directions.select_related("author")]})
        s = DirectionCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        try:
            d = directions.submit(run, s.validated_data["kind"], s.validated_data["payload"], author=request.user)
        except directions.DirectionError as exc:
            raise ValidationError({"detail": str(exc)}) from None
        return Response(d.to_dict(), status=status.HTTP_201_CREATED)

    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.STR})
    def export_csv(self, request, pk=None):
        """All candidates as CSV (streamed)."""
        run = self.get_object()
        return streamed(request._request, exports.csv_lines(run), "text/csv", f"run-{run.pk}-candidates.csv")

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def export_json(self, request, pk=None):
        """All candidates as JSON (streamed)."""
        run = self.get_object()
        return streamed(request._request, exports.json_chunks(run), "application/json", f"run-{run.pk}-candidates.json")

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def export_kernel_tuner(self, request, pk=None):
        """The candidates as a Kernel Tuner cache file (``tune_params_keys``, ``tune_params``,
        ``cache`` with ``time``/``times`` or Kernel Tuner's failure strings)."""
        run = self.get_object()
        return streamed(request._request, iter([json.dumps(exports.kernel_tuner_cache(run), indent=1)]),
                        "application/json", f"run-{run.pk}-kernel_tuner_cache.json")


class CandidateViewSet(viewsets.ReadOnlyModelViewSet):
    """Candidates (``?run=``, ``?goal=``, ``?status=`` filter the list) and their evidence."""

    queryset = Candidate.objects.select_related("evidence", "goal").prefetch_related("parents").order_by("id")
    serializer_class = CandidateSerializer
    required_perms = {"cancel": ["swarm.change_run"]}

    @extend_schema(request=None, responses=CandidateSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel a queued or running candidate (its sandbox child is stopped); 409 when it is
        already evaluated or its run has ended."""
        try:
            done = cancelling.cancel(self.get_object(), request.user, via="the API")
        except cancelling.CancelError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(CandidateSerializer(done).data)

    def get_queryset(self):
        qs = super().get_queryset()
        for f in ("run", "goal"):
            v = self.request.query_params.get(f)
            if v and v.isdigit():
                qs = qs.filter(**{f"{f}_id": int(v)})
        if self.request.query_params.get("status"):
            qs = qs.filter(status=self.request.query_params["status"])
        return qs

    @extend_schema(responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["get"])
    def static(self, request, pk=None):
        """A CUDA candidate's static evidence: nvcc's resources, occupancy of every launch at the
        timed shapes and the PTX (``{"available": false, "reason"}`` where it cannot be had)."""
        return Response(candidate_static(self.get_object()))

    @extend_schema(responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["get"])
    def evidence(self, request, pk=None):
        """Everything measured: metrics, raw samples (ms) per shape, validation cases, log,
        environment fingerprint."""
        c = self.get_object()
        e = getattr(c, "evidence", None)
        if e is None:
            raise Http404(f"candidate {c.pk} is {c.status}: no evidence yet")
        return Response(e.to_dict())


class InsightViewSet(viewsets.ReadOnlyModelViewSet):
    """Insights (``?workload=``, ``?target=``, ``?kind=``)."""

    queryset = Insight.objects.order_by("-created_at")

    def get_queryset(self):
        qs = super().get_queryset()
        for f in ("workload", "target", "kind"):
            if self.request.query_params.get(f):
                qs = qs.filter(**{f: self.request.query_params[f]})
        return qs

    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="insights_list")
    def list(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([i.to_dict() for i in page])

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def retrieve(self, request, pk=None):
        return Response(get_object_or_404(Insight, pk=pk).to_dict())


class DirectionViewSet(viewsets.ReadOnlyModelViewSet):
    """Every direction (``?run=``); submit new ones at ``/api/runs/<id>/directions/``."""

    queryset = Direction.objects.select_related("author").order_by("-created_at")

    def get_queryset(self):
        qs = super().get_queryset()
        run = self.request.query_params.get("run")
        return qs.filter(run_id=run) if run and run.isdigit() else qs

    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="directions_list")
    def list(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([{**d.to_dict(), "run": d.run_id} for d in page])

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def retrieve(self, request, pk=None):
        d = get_object_or_404(Direction, pk=pk)
        return Response({**d.to_dict(), "run": d.run_id})


class PromotionViewSet(viewsets.ReadOnlyModelViewSet):
    """Production history (every promotion and roll-back); ``POST {"candidate", "note"}`` asks
    for a promotion (``approve_promotion``): 202 with the request, decided by the extended
    validation on the target's worker (follow it at ``/api/promotion-requests/<id>/``)."""

    queryset = Promotion.objects.select_related("candidate__evidence", "candidate__goal", "promoted_by")
    required_perms = {"create": ["swarm.approve_promotion"]}

    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="promotions_list")
    def list(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([p.to_dict() for p in page])

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def retrieve(self, request, pk=None):
        return Response(get_object_or_404(self.get_queryset(), pk=pk).to_dict())

    @extend_schema(request=PromotionCreateSerializer, responses={202: OpenApiTypes.OBJECT})
    def create(self, request):
        s = PromotionCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        try:
            req = request_promotion(s.validated_data["candidate"], request.user, s.validated_data["note"])
        except PromotionRefused as exc:
            raise ValidationError({"detail": str(exc)}) from None
        return Response({**req.to_dict(), "earlier_refusals": earlier_refusals(req.candidate, before=req)},
                        status=status.HTTP_202_ACCEPTED)


class PromotionRequestViewSet(viewsets.ReadOnlyModelViewSet):
    """Promotion requests with their state, reason and evidence. Under four eyes
    (``PROMOTION_FOUR_EYES``) a request ``awaiting`` approval is approved
    (``POST .../approve/``) or rejected (``POST .../reject/ {"reason"}``) by another approver
    (``approve_promotion``); approving one's own request is refused (400, the reason)."""

    queryset = PromotionRequest.objects.select_related("requested_by", "decided_by")
    required_perms = {"approve": ["swarm.approve_promotion"], "reject": ["swarm.approve_promotion"]}

    @extend_schema(request=None, responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        req = get_object_or_404(self.get_queryset(), pk=pk)
        try:
            req = approve_request(req, request.user)
        except PromotionRefused as exc:
            raise ValidationError({"detail": str(exc)}) from None
        return Response(req.to_dict(), status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        req = get_object_or_404(self.get_queryset(), pk=pk)
        try:
            req = reject_request(req, request.user, str(request.data.get("reason") or "")[:2000])
        except PromotionRefused as exc:
            raise ValidationError({"detail": str(exc)}) from None
        return Response(req.to_dict())

    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="promotion_requests_list")
    def list(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([r.to_dict() for r in page])

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def retrieve(self, request, pk=None):
        return Response(get_object_or_404(self.get_queryset(), pk=pk).to_dict())


def _active():
    return Promotion.objects.filter(active=True).select_related("candidate__evidence", "candidate__goal", "promoted_by")


class ProductionList(APIView):
    """``GET /api/production/``: every active production kernel with its evidence."""

    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="production_list")
    def get(self, request):
        return Response({"kernels": [p.to_dict() for p in _active()]})


class ProductionKernel(APIView):
    """``GET /api/production/<workload>/<target>/<shape_set>/``: the production kernel ready for
    an inference engine (source, parameters, launch plan, evidence), or 404."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, workload: str, target: str, shape_set: str):
        p = _active().filter(workload=workload, target=target, shape_set=shape_set).first()
        if p is None:
            raise Http404(f"no production kernel for {workload}/{target}/{shape_set}")
        return Response(p.to_dict())


class ProductionRollback(APIView):
    """``POST /api/production/<workload>/<target>/<shape_set>/rollback/``: restore the kernel the
    current one replaced, or promotion ``to`` (``approve_promotion``)."""

    required_perms = {"post": ["swarm.approve_promotion"]}

    @extend_schema(request=RollbackSerializer, responses=OpenApiTypes.OBJECT)
    def post(self, request, workload: str, target: str, shape_set: str):
        s = RollbackSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        to = None
        if s.validated_data.get("to"):
            to = get_object_or_404(Promotion, pk=s.validated_data["to"])
        try:
            p = rollback(workload, target, shape_set, request.user, to=to, note=s.validated_data["note"])
        except PromotionRefused as exc:
            raise ValidationError({"detail": str(exc)}) from None
        return Response(p.to_dict())
