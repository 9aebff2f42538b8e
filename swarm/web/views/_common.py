"""Helpers shared by the page views."""

from __future__ import annotations

from django.db.models import FloatField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.http import HttpRequest, JsonResponse
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CLexer, CudaLexer

from kernels.backends import capabilities
from swarm.models import Candidate, CandidateStatus, Goal

SOURCE_CSS_CLASS = "source"


def highlighted(source: str, backend: str = "cpu", *, linenos: bool = True) -> str:
    """Source as highlighted HTML (Pygments; C for cpu, CUDA for cuda)."""
    lexer = CudaLexer() if capabilities(backend).language == "cuda" else CLexer()
    formatter = HtmlFormatter(linenos="table" if linenos else False, cssclass=SOURCE_CSS_CLASS)
    return highlight(source, lexer, formatter)


def source_css() -> str:
    return HtmlFormatter(cssclass=SOURCE_CSS_CLASS).get_style_defs(f".{SOURCE_CSS_CLASS}")


def wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def json_refusal(request: HttpRequest, perm: str) -> JsonResponse | None:
    """For a JSON request (the page's fetch): a ``{"ok": false, "error"}`` answer when the
    user is not signed in (401) or lacks ``perm`` (403); None when the view may go on. Page
    requests keep Django's redirect to the login page and its 403 page."""
    if not wants_json(request):
        return None
    if not request.user.is_authenticated:
        return JsonResponse({"ok": False, "error": "sign in first"}, status=401)
    if not request.user.has_perm(perm):
        return JsonResponse({"ok": False, "error": f"{request.user.get_username()} lacks the {perm} permission"},
                            status=403)
    return None


def metric_value(metric: str):
    """A whole-run metric of a candidate's evidence as a float expression (SQLite and PostgreSQL)."""
    return Cast(KeyTextTransform(metric, "evidence__metrics"), FloatField())


def feasible_ok(goal: Goal, constraints: list[dict] | None = None):
    """The goal's ``ok`` candidates that meet ``constraints`` (default the goal's), in the DB."""
    qs = Candidate.objects.filter(goal=goal, status=CandidateStatus.OK)
    for i, c in enumerate(constraints if constraints is not None else goal.constraints):
        name = f"_c{i}"
        qs = qs.annotate(**{name: metric_value(c["metric"])}).filter(
            **{f"{name}__isnull": False, f"{name}__{'lte' if c['op'] == '<=' else 'gte'}": c["value"]})
    return qs


def best_candidate(goal: Goal) -> Candidate | None:
    """The goal's feasible ``ok`` candidate with the best primary objective, found in the DB
    (no candidate list is loaded, so it stays fast with 50,000 candidates)."""
    primary = goal.primary
    qs = feasible_ok(goal).annotate(_p=metric_value(primary["metric"])).filter(_p__isnull=False)
    qs = qs.order_by("_p" if primary["direction"] == "minimize" else "-_p", "id")
    return qs.select_related("evidence").first()
