"""Engine pages: production engines (with the forms to register one and to benchmark one), one
engine (operator graph with bound kernels and their evidence, end-to-end benchmark history,
per-operator time breakdown), comparison of two plans, and the guard's override form."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from swarm.engine_registry.bench_requests import DEFAULT_REPS, FAILED, QUEUED, RUNNING, request_benchmark
from swarm.engine_registry.forms import RegisterEngineForm
from swarm.engine_registry.guard import GuardOverrideRefused, override
from swarm.engine_registry.models import EngineBenchmark, GuardCheck, ProductionEngine
from swarm.models import Promotion


def _history(pe: ProductionEngine) -> list[dict]:
    rows = []
    for b in pe.benchmarks.order_by("created_at", "id"):
        rows.append({"id": b.pk, "at": b.created_at.isoformat(), "trigger": b.trigger, "label": b.label,
                     "status": b.status, "metrics": b.metrics})
    return rows


@login_required
def engine_list(request):
    return render(request, "engines/engine_list.html", _list_context(request, RegisterEngineForm()))


def _list_context(request, form: RegisterEngineForm) -> dict:
    engines = list(ProductionEngine.objects.all())
    live = False
    for e in engines:
        e.latest_bench = e.latest()
        e.tuning = e.latest_tuning()
        e.kernels = _kernel_rows(e)
        e.bench_live = e.latest_bench is not None and e.latest_bench.status in (QUEUED, RUNNING)
        live = live or e.bench_live or (e.tuning is not None and e.tuning.status in ("queued", "running"))
    checks = GuardCheck.objects.select_related("candidate", "overridden_by")[:20]
    return {"engines": engines, "checks": checks, "tuning_live": live, "form": form, "default_reps": DEFAULT_REPS,
            "failed": FAILED, "can_register": request.user.has_perm("engines_web.add_productionengine"),
            "can_bench": request.user.has_perm("engines_web.add_enginebenchmark")}


@login_required
@require_POST
@permission_required("engines_web.add_productionengine", raise_exception=True)
def engine_register(request):
    """Register (or update) a production engine from the page's form; bad input re-renders
    the page with the errors and everything typed (status 400)."""
    from swarm.engine_registry.services import register_engine  # noqa: PLC0415
    from swarm.engine_registry.tuning import start_tuning  # noqa: PLC0415

    form = RegisterEngineForm(request.POST)
    if form.is_valid():
        d = form.cleaned_data
        try:
            pe, created = register_engine(d["engine"], config=d["config"], target=d["target"], plan=d["plan"],
                                          name=d["name"] or None, user=request.user)
        except (KeyError, ValueError) as exc:
            form.add_error(None, str(exc).strip("\"'"))
        else:
            note = f"{'Registered' if created else 'Updated'} production engine {pe.name} (id {pe.pk})."
            if d["tune"]:
                t = start_tuning(pe)
                note += f" Plan tuning {t.pk} queued on {pe.target}'s worker."
            messages.success(request, note)
            return HttpResponseRedirect(reverse("engine-list") + f"#kernels-{pe.pk}")
    return render(request, "engines/engine_list.html", _list_context(request, form), status=400)


@login_required
@require_POST
@permission_required("engines_web.add_enginebenchmark", raise_exception=True)
def engine_benchmark(request, pk: int):
    """Queue a validation + benchmark of the engine on its target's worker (a request already
    queued or running is kept); the engines page shows its status, then its result."""
    pe = get_object_or_404(ProductionEngine, pk=pk)
    raw = (request.POST.get("reps") or "").strip() or str(DEFAULT_REPS)
    try:
        row = request_benchmark(pe, reps=int(raw), user=request.user)
    except ValueError as exc:
        why = exc if raw.lstrip("-").isdigit() else f"repetitions must be a whole number (got {raw!r})"
        messages.error(request, f"Benchmark of {pe.name} not queued: {why}")
    else:
        messages.success(request, f"Benchmark #{row.pk} of {pe.name} {row.status} on {pe.target}'s worker.")
    return HttpResponseRedirect(request.POST.get("next") or (reverse("engine-list") + f"#engine-{pe.pk}"))


def _kernel_rows(pe: ProductionEngine) -> list[dict]:
    """:meth:`ProductionEngine.kernel_rows` with the operators of each workload (from the
    last tuning's shapes, else none)."""
    t = pe.latest_tuning()
    shapes = (t.state.get("shapes") if t else None) or {}
    rows = pe.kernel_rows()
    for r in rows:
        r["operators"] = (shapes.get(r["workload"]) or {}).get("operators", [])
        if not r["measured"] and r["kind"] == "production" and not Promotion.objects.filter(
                workload=r["workload"], target=pe.target, active=True).exists():
            r["kind"] = "baseline"  # what the binding falls back to
            r["why"] = (f"no production kernel for {r['workload']} on {pe.target}: NumPy baseline "
                        "(not measured at the engine's shapes yet)")
    return rows


@login_required
def engine_detail(request, pk: int):
    pe = get_object_or_404(ProductionEngine, pk=pk)
    graphed = pe.benchmarks.exclude(graph={}).order_by("-created_at", "-id").first()
    latest = pe.latest()
    production = {w: Promotion.objects.filter(workload=w, target=pe.target, active=True)
                  .select_related("candidate__evidence").order_by("-created_at") for w in pe.workloads()}
    checks = GuardCheck.objects.filter(workload__in=pe.workloads(), target=pe.target).select_related(
        "candidate", "overridden_by")[:10]
    benches = list(pe.benchmarks.all()[:50])
    tuning = pe.latest_tuning()
    options = []
    if tuning is not None:
        chosen = tuning.state.get("choices", {})
        for w, opts in tuning.state.get("options", {}).items():
            best = chosen.get(w) or {}
            rows = [{**o, "chosen": bool(best) and o["kind"] == best.get("kind") and o["params"] == best.get("params")}
                    for o in opts]
            options.append((w, rows))
    ctx = {
        "pe": pe, "graph": graphed.graph if graphed else {}, "graphed": graphed, "latest": latest,
        "production": [(w, list(rows)) for w, rows in production.items()], "checks": checks, "benches": benches,
        "history": _history(pe), "breakdown": (graphed.breakdown if graphed else {}),
        "can_approve": request.user.has_perm("swarm.approve_promotion"),
        "kernels": _kernel_rows(pe), "tuning": tuning, "options": options,
        "tuning_live": tuning is not None and tuning.status in ("queued", "running"),
    }
    return render(request, "engines/engine_detail.html", ctx)


@login_required
def engine_compare(request, pk: int):
    pe = get_object_or_404(ProductionEngine, pk=pk)
    try:
        a = pe.benchmarks.get(pk=int(request.GET.get("a", "")))
        b = pe.benchmarks.get(pk=int(request.GET.get("b", "")))
    except (ValueError, EngineBenchmark.DoesNotExist):
        raise Http404("choose two benchmarks of this engine (?a=ID&b=ID)") from None
    keys = sorted(set(a.plan) | set(b.plan))
    plan_rows = [{"key": k, "a": a.plan.get(k), "b": b.plan.get(k), "differs": a.plan.get(k) != b.plan.get(k)} for k in keys]
    mkeys = sorted(set(a.metrics) | set(b.metrics))
    metric_rows = []
    for k in mkeys:
        va, vb = a.metrics.get(k), b.metrics.get(k)
        ratio = (va / vb) if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and vb else None
        metric_rows.append({"key": k, "a": va, "b": vb, "ratio": ratio})
    wl = sorted(set(a.kernels) | set(b.kernels))
    kernel_rows = [{"workload": w, "a": a.kernels.get(w), "b": b.kernels.get(w)} for w in wl]
    return render(request, "engines/engine_compare.html", {
        "pe": pe, "a": a, "b": b, "plan_rows": plan_rows, "metric_rows": metric_rows, "kernel_rows": kernel_rows,
        "breakdowns": {"a": a.breakdown, "b": b.breakdown}})


@login_required
@require_POST
def guard_override(request, pk: int):
    check = get_object_or_404(GuardCheck, pk=pk)
    try:
        override(check, request.user, request.POST.get("reason", ""))
        messages.success(request, f"Guard check {check.pk} overridden; the reason is in the audit log.")
    except GuardOverrideRefused as exc:
        messages.error(request, str(exc))
    return HttpResponseRedirect(request.POST.get("next") or reverse("engine-list"))
