"""Verdicts from paired comparisons: noise floors in the database, "Measure paired" on the
compare page, promotion decided paired (alternating evaluation rounds on CUDA), ties with the
best on the run page, and no credit for gains inside the floor.

Real paired comparisons run the rmsnorm kernels on "test-small" with few, short rounds
(``PAIRED_SETTINGS``); where the floor measurement is not what is tested, the floor is given.
"""

import dataclasses
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import kernels
from kernels.comparison.paired import Kernel, PairSettings, compare_paired
from swarm.learning.credit import frontier_improvements
from swarm.models import Candidate, Evidence, Goal, NoiseFloor, PairedComparisonRun, Promotion, Run
from swarm.production import paired_runs, promotion
from swarm.runs import noise_floors, orchestrator, summaries
from swarm.web import snapshot
from tests.kernels.test_paired import FORGE
from tests.swarm.synthetic import drive, synthetic_goal
from tests.swarm.test_views import timed

PAIRED_SETTINGS = {"rounds": 4, "min_calls": 5, "round_ms": 20}
TEMPLATE = kernels.load_template("rmsnorm", "cpu")
# The promotion test's kernels run on one thread: at test-small a call is microseconds, and with
# a thread team most of it is waking the team, whose cost on a loaded 2-core host depends on
# where each round's children land; with that, even 9x the work lost rounds to it.
TEAM = "#pragma omp parallel for schedule(static, ROWS_PER_CHUNK) if (rows > 1)\n"
SERIAL = TEMPLATE.replace(TEAM, "")
# Every row computed 64 times more before the full pass: 65x the work, the same result.
SLOWER = SERIAL.replace("""             int rows, int hidden, float eps)
{""", """             int rows, int hidden, float eps)
{
    for (int rep = 0; rep < 64; ++rep) {
        for (int r = 0; r < rows; ++r) {
            const float *restrict xr = x + (long)r * hidden;
            float *restrict yr = y + (long)r * hidden;
            float inv = row_inv_rms(xr, hidden, eps);
            for (int i = 0; i < hidden; ++i)
                yr[i] = xr[i] * inv * w[i];
        }
        __asm__ volatile("" ::: "memory");
    }
""")
assert TEAM in TEMPLATE and SLOWER != SERIAL


def make_candidate(goal: Goal, params: dict, source: str | None = None, latency_ms: float = 1.0,
                   content_hash: str | None = None) -> Candidate:
    run = goal.runs.first() or Run.objects.create(goal=goal, budget=10, seed=1, space=goal.space,
                                                  constraints=goal.constraints)
    source = goal.source if source is None else source
    c = Candidate.objects.create(goal=goal, run=run, generation=0, agent="test", params=params, source=source,
                                 content_hash=content_hash or kernels.candidate_hash(source, params, {}), status="ok")
    Evidence.objects.create(candidate=c, status="ok", metrics={"latency_ms": latency_ms, "max_rel_error": 1e-7},
                            samples_ms={"rows=8,hidden=256": [latency_ms] * 5})
    return c


@pytest.fixture
def paired_settings(settings):
    settings.PAIRED_COMPARISON = {**PAIRED_SETTINGS, "noise_floor": 0.5}
    return settings


# --- the floor store ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_database_keeps_floors_and_the_web_host_reads_the_newest_of_a_key():
    store = noise_floors.DbFloorStore()
    assert store.get("cpu-x86_64@abc/rmsnorm/test-small") is None
    assert noise_floors.floor_for("cpu-x86_64", "rmsnorm", "test-small").source == "default"
    assert noise_floors.floor_for("cpu-x86_64", "rmsnorm", "test-small").floor == noise_floors.DEFAULT_FLOOR
    store.put("cpu-x86_64@aaa/rmsnorm/test-small", {"floor": 0.03, "aa_ratios": [1.0, 1.01], "rounds": 2,
                                                   "measured_at": 1_000_000.0, "fingerprint": {"cpu": "old"}})
    store.put("cpu-x86_64@bbb/rmsnorm/test-small", {"floor": 0.012, "aa_ratios": [1.0, 1.0], "rounds": 2,
                                                   "measured_at": 2_000_000.0, "fingerprint": {"cpu": "new"}})
    assert store.get("cpu-x86_64@aaa/rmsnorm/test-small")["floor"] == 0.03
    row = NoiseFloor.objects.get(key="cpu-x86_64@bbb/rmsnorm/test-small")
    assert (row.target, row.workload, row.shape_set, row.fingerprint) == ("cpu-x86_64", "rmsnorm", "test-small", {"cpu": "new"})
    info = noise_floors.floor_for("cpu-x86_64", "rmsnorm", "test-small")
    assert info.source == "stored" and info.floor == 0.012 and info.key.endswith("@bbb/rmsnorm/test-small")
    store.put("cpu-x86_64@aaa/rmsnorm/test-small", {"floor": 0.04, "measured_at": 3_000_000.0})  # replaced, now newest
    assert NoiseFloor.objects.count() == 2 and noise_floors.floor_for("cpu-x86_64", "rmsnorm", "test-small").floor == 0.04
    with pytest.raises(ValueError, match="floor"):
        store.put("cpu-x86_64@ccc/rmsnorm/test-small", {"floor": -1})


@pytest.mark.django_db
def test_a_worker_measures_the_floor_once_into_the_database_and_then_reads_it():
    store = noise_floors.DbFloorStore()
    settings = PairSettings(**PAIRED_SETTINGS)
    first = compare_paired("rmsnorm", Kernel(TEMPLATE), Kernel(TEMPLATE), shape_set="test-small", target="cpu-x86_64",
                           settings=settings, floor_store=store)
    assert first.floor_source == "measured" and first.identical
    row = NoiseFloor.objects.get()
    assert row.target == "cpu-x86_64" and row.workload == "rmsnorm" and row.shape_set == "test-small"
    assert row.floor == pytest.approx(first.noise_floor) and row.floor >= 0.005 and len(row.entry["aa_ratios"]) >= 12
    second = compare_paired("rmsnorm", Kernel(TEMPLATE), Kernel(TEMPLATE), shape_set="test-small", target="cpu-x86_64",
                            settings=settings, floor_store=store)
    assert second.floor_source == "stored" and second.noise_floor == pytest.approx(row.floor)
    assert NoiseFloor.objects.count() == 1


# --- the compare page --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_identical_kernels_measured_paired_are_a_tie_on_the_compare_page(client, owner, small_goal, paired_settings,
                                                                       django_capture_on_commit_callbacks):
    a = make_candidate(small_goal, {}, latency_ms=1.0)
    b = make_candidate(small_goal, {"UNUSED_FLAG": 1}, latency_ms=1.2)  # a #define the template never reads
    client.force_login(owner)
    ids = f"{a.pk},{b.pk}"
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("compare-paired"), {"a": a.pk, "b": b.pk, "ids": ids})
    assert response.status_code == 302 and response["Location"].startswith(reverse("compare"))
    run = PairedComparisonRun.objects.get()
    assert run.state == "queued" and run.requested_by == owner and len(callbacks) == 1
    assert "measuring on cpu-x86_64" in client.get(reverse("compare"), {"ids": ids}).content.decode()
    run = paired_runs.measure(run.pk)  # what the worker on target.cpu-x86_64 runs
    assert run.state == "done", run.error
    assert run.result["verdict"] == "tie" and run.result["identical"] is True
    assert run.result["rounds"] == 4 and run.result["noise_floor"] == 0.5
    html = client.get(reverse("compare"), {"ids": ids}).content.decode()
    assert "tie: within the noise floor of this host" in html and "both compile to the same library" in html
    assert "50.0%" in html and "significantly faster" not in html
    # the stored samples (1.0 vs 1.2 ms, separate processes) draw no verdict
    assert "faster 1.2" not in html and 'id="stored-medians"' in html


@pytest.mark.django_db
def test_measure_paired_needs_sign_in_and_csrf(client, owner, small_goal):
    a, b = make_candidate(small_goal, {}), make_candidate(small_goal, {"VEC": 4})
    url = reverse("compare-paired")
    assert client.post(url, {"a": a.pk, "b": b.pk}).status_code == 302 and not PairedComparisonRun.objects.exists()
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(owner)
    assert strict.post(url, {"a": a.pk, "b": b.pk}).status_code == 403
    assert not PairedComparisonRun.objects.exists()


@pytest.mark.django_db
def test_replay_candidates_have_no_kernel_to_measure(client, owner, small_goal):
    goal = Goal.objects.create(name="replay", workload="gemm", target="replay:recorded", shape_set="x",
                               objectives=small_goal.objectives, space=small_goal.space)
    a, b = make_candidate(goal, {"X": 1}, source=""), make_candidate(goal, {"X": 2}, source="")
    client.force_login(owner)
    html = client.get(reverse("compare"), {"ids": f"{a.pk},{b.pk}"}).content.decode()
    assert "there is no kernel to measure" in html and "Measure paired</button>" not in html
    page = client.post(reverse("compare-paired"), {"a": a.pk, "b": b.pk}, follow=True).content.decode()
    assert "Not measured" in page and "there is no kernel to measure" in page
    assert not PairedComparisonRun.objects.exists()


@pytest.mark.django_db
def test_the_compare_page_shows_a_results_notes(client, owner, small_goal):
    a, b = make_candidate(small_goal, {"VEC": 1}), make_candidate(small_goal, {"VEC": 4})
    note = "B claims calls 0.04 ms shorter, twice as fast or more, which the parent's clock could not check"
    PairedComparisonRun.objects.create(candidate_a=a, candidate_b=b, workload="rmsnorm", target="cpu-x86_64",
                                       shape_set="test-small", state="done", requested_by=owner,
                                       result={"verdict": "b_faster", "ratio": 0.3, "ci": [0.2, 0.4], "rounds": 4,
                                               "noise_floor": 0.05, "why": "B is faster", "notes": [note]})
    client.force_login(owner)
    html = client.get(reverse("compare"), {"ids": f"{a.pk},{b.pk}"}).content.decode()
    assert "B is faster" in html and "the parent&#x27;s clock could not check" in html


@pytest.mark.django_db
def test_a_paired_comparison_on_a_cuda_target_fails_with_the_librarys_reason(client, owner, small_goal):
    goal = Goal.objects.create(name="cuda", workload="rmsnorm", target="cuda-sm90", shape_set="test-small",
                               objectives=small_goal.objectives, space=small_goal.space, source="__global__ void k() {}")
    a, b = make_candidate(goal, {"VEC": 1}), make_candidate(goal, {"VEC": 4})
    run = paired_runs.measure(paired_runs.request_paired(a, b, owner).pk)
    assert run.state == "failed" and "turn-taking child" in run.error and "cuda" in run.error
    client.force_login(owner)
    assert "turn-taking child" in client.get(reverse("compare"), {"ids": f"{a.pk},{b.pk}"}).content.decode()


# --- promotion ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_candidate_doing_more_work_is_refused_promotion_with_the_ratio(owner, small_goal, settings):
    settings.PAIRED_COMPARISON = {**PAIRED_SETTINGS, "rounds": 6, "noise_floor": 0.05}
    incumbent = make_candidate(small_goal, {}, source=SERIAL)
    slower = make_candidate(small_goal, {}, source=SLOWER)
    promotion.promote(incumbent, owner, evaluate=timed({incumbent.pk: 1.0}))
    req = promotion.request_promotion(slower, owner, dispatch=False)
    # the re-validation is the real evaluator; speed is the real paired comparison
    req = promotion.validate_request(req.pk, bench=kernels.BenchSettings(warmup_ms=1, rep_ms=5, min_reps=5, max_reps=20))
    assert req.state == "refused", req.reason
    c = req.evidence["comparison"]
    # test-small calls are microseconds, part of them timing and flushing: the work shows, diluted
    assert c["protocol"] == "paired" and c["verdict"] in ("a_faster", "tie") and c["ratio"] > 1.05, c["why"]
    assert req.reason.startswith("not faster than the incumbent beyond the noise floor: ")
    assert f"ratio {c['ratio']:.3f} (CI {c['ci'][0]:.3f}-{c['ci'][1]:.3f}), floor 5.0%, 6 rounds" in req.reason
    assert Promotion.objects.get(active=True).candidate == incumbent


@pytest.mark.django_db
def test_a_speedup_the_parents_clock_could_not_check_is_refused_promotion(owner, small_goal, paired_settings):
    incumbent = make_candidate(small_goal, {}, source=SERIAL)
    faster = make_candidate(small_goal, {}, source=SLOWER)
    note = "B claims calls 0.04 ms shorter, twice as fast or more, which the parent's clock could not check"

    def unchecked(workload, a, b, **kwargs):  # real rounds (A against itself), then what a forger within the clock's error gets
        real = compare_paired(workload, a, a, **kwargs)
        return dataclasses.replace(real, verdict="b_faster", ratio=0.3, ci=(0.2, 0.4), identical=False,
                                   clock_unchecked=True, notes=[note])

    promotion.promote(incumbent, owner, evaluate=timed({incumbent.pk: 1.0}))
    req = promotion.request_promotion(faster, owner, dispatch=False)
    req = promotion.validate_request(req.pk, evaluate=timed({incumbent.pk: 1.0, faster.pk: 0.3}), compare=unchecked)
    assert req.state == "refused", req.reason
    assert req.reason.startswith("its speed-up could not be checked against the parent's clock on this host") and note in req.reason
    assert req.evidence["comparison"]["clock_unchecked"] is True and req.evidence["comparison"]["faster"] is True
    assert Promotion.objects.get(active=True).candidate == incumbent


@pytest.mark.django_db
def test_a_candidate_that_reports_zero_call_times_is_refused_by_name(owner, small_goal, paired_settings):
    incumbent = make_candidate(small_goal, {}, source=SERIAL)
    entry = "             int rows, int hidden, float eps)\n{"
    # the child's timing samples rewritten to 0 ns through the interpreter it runs in
    zero_times = '#define FORGED_NS "0"\n' + FORGE
    forger = make_candidate(small_goal, {}, source=zero_times + SERIAL.replace(entry, entry + "\n    forge();"))
    promotion.promote(incumbent, owner, evaluate=timed({incumbent.pk: 1.0}))
    req = promotion.request_promotion(forger, owner, dispatch=False)
    req = promotion.validate_request(req.pk, evaluate=timed({incumbent.pk: 1.0, forger.pk: 0.5}))
    assert req.state == "refused", req.reason
    assert req.reason.startswith("the paired comparison with the incumbent could not measure the candidate: reports ")
    assert "not a positive, finite time" in req.reason
    assert Promotion.objects.get(active=True).candidate == incumbent


@pytest.mark.django_db
def test_a_kernel_that_compiles_to_the_incumbents_library_is_refused(owner, small_goal, paired_settings):
    incumbent = make_candidate(small_goal, {})
    same = make_candidate(small_goal, {"UNUSED_FLAG": 1})
    promotion.promote(incumbent, owner, evaluate=timed({incumbent.pk: 1.0}))
    req = promotion.request_promotion(same, owner, dispatch=False)
    req = promotion.validate_request(req.pk, evaluate=timed({incumbent.pk: 1.0, same.pk: 0.8}))
    assert req.state == "refused" and req.reason.startswith("compiles to the same library as the incumbent"), req.reason
    assert req.evidence["comparison"]["identical"] is True and req.evidence["comparison"]["faster"] is False


@pytest.mark.django_db
def test_a_candidate_with_the_incumbents_content_hash_is_refused_at_request_time(owner, small_goal):
    twin_goal = Goal.objects.create(name="same key", workload=small_goal.workload, target=small_goal.target,
                                    shape_set=small_goal.shape_set, objectives=small_goal.objectives,
                                    constraints=small_goal.constraints, space=small_goal.space, source=small_goal.source)
    incumbent = make_candidate(small_goal, {"VEC": 4}, content_hash="h" * 64)
    twin = make_candidate(twin_goal, {"VEC": 4}, content_hash="h" * 64)
    promotion.promote(incumbent, owner, evaluate=timed({incumbent.pk: 1.0}))
    with pytest.raises(promotion.PromotionRefused, match="same content hash as the production kernel"):
        promotion.request_promotion(twin, owner, dispatch=False)
    assert Promotion.objects.get(active=True).candidate == incumbent


def cuda_evaluator(latency_by_candidate: dict[int, float], calls: list):
    """A fake CUDA evaluator: ``latency_ms`` per candidate, the order of calls recorded."""
    base = timed(latency_by_candidate)

    def evaluate(workload, source, params, **kwargs):
        e = base(workload, source, params, **kwargs)
        calls.append(next(cid for cid in latency_by_candidate if Candidate.objects.get(pk=cid).params == params))
        return e
    return evaluate


@pytest.mark.django_db
def test_cuda_promotions_judge_alternating_evaluation_rounds_against_the_floor(owner, small_goal, settings):
    settings.PROMOTION_CUDA_ROUNDS = 4
    goal = Goal.objects.create(name="cuda", workload="rmsnorm", target="cuda-sm90", shape_set="test-small",
                               objectives=small_goal.objectives, constraints=small_goal.constraints,
                               space=small_goal.space, source="__global__ void k() {}")
    inc, same, fast = (make_candidate(goal, {"VEC": v}) for v in (1, 4, 8))
    promotion.promote(inc, owner, evaluate=timed({inc.pk: 1.0}))
    noise_floors.DbFloorStore().put("cuda-sm90@x/rmsnorm/test-small", {"floor": 0.03, "fingerprint": {}})
    calls: list = []
    req = promotion.request_promotion(same, owner, dispatch=False)
    req = promotion.validate_request(req.pk, evaluate=cuda_evaluator({inc.pk: 1.0, same.pk: 1.01}, calls))
    assert calls == [same.pk, inc.pk, inc.pk, same.pk, same.pk, inc.pk, inc.pk, same.pk]  # C I I C C I I C
    c = req.evidence["comparison"]
    assert req.state == "refused" and c["protocol"] == "alternating evaluations" and c["rounds"] == 4
    assert c["floor_source"] == "stored" and c["noise_floor"] == 0.03 and c["verdict"] == "tie"
    assert "ratio 1.010 (CI 1.010-1.010), floor 3.0%, 4 rounds" in req.reason
    req = promotion.request_promotion(fast, owner, dispatch=False)
    req = promotion.validate_request(req.pk, evaluate=cuda_evaluator({inc.pk: 1.0, fast.pk: 0.8}, []))
    assert req.state == "promoted", req.reason
    assert Promotion.objects.get(active=True).to_dict()["comparison"]["verdict"] == "b_faster"


# --- the run page and credit --------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_run_page_marks_candidates_tied_with_the_best(owner, small_goal):
    fast = make_candidate(small_goal, {"VEC": 1}, latency_ms=1.0)
    near = make_candidate(small_goal, {"VEC": 4}, latency_ms=1.02)
    far = make_candidate(small_goal, {"VEC": 8}, latency_ms=1.2)
    wrong = make_candidate(small_goal, {"VEC": 16}, latency_ms=0.5)
    # infeasible (a queryset update writes the stored columns itself)
    Evidence.objects.filter(candidate=wrong).update(metrics={"latency_ms": 0.5, "max_rel_error": 1.0}, max_rel_error=1.0)
    run = fast.run
    data = json.loads(snapshot.columnar_snapshot_json(run))["meta"]["ties"]
    assert data["noise_floor"]["source"] == "default" and data["noise_floor"]["floor"] == noise_floors.DEFAULT_FLOOR
    assert data["best_latency_ms"] == 1.0 and data["tied_with_best"] == [fast.pk, near.pk]
    noise_floors.DbFloorStore().put("cpu-x86_64@h/rmsnorm/test-small", {"floor": 0.25, "fingerprint": {}})
    data = snapshot.run_meta(run)["ties"]
    assert data["noise_floor"]["source"] == "stored" and data["tied_with_best"] == [fast.pk, near.pk, far.pk]
    summary = summaries.run_summary(run)
    assert summary["tied_with_best"] == [fast.pk, near.pk, far.pk] and summary["noise_floor"]["floor"] == 0.25
    assert summary["best"]["id"] == fast.pk and summary["best"]["tied_with_best"] is True



@pytest.mark.django_db
def test_the_summary_reads_stored_metric_columns_not_the_metrics_json(owner, small_goal):
    """The run summary's ties, frontier and best come from the evidence's stored columns: no
    query extracts a value from the ``metrics`` JSON of every candidate (that extraction made
    the summary of a 50,000-candidate run slow)."""
    fast = make_candidate(small_goal, {"VEC": 1}, latency_ms=1.0)
    make_candidate(small_goal, {"VEC": 4}, latency_ms=1.2)
    with CaptureQueriesContext(connection) as ctx:
        summary = summaries.run_summary(fast.run)
    assert summary["best"]["id"] == fast.pk and summary["tied_with_best"] == [fast.pk]
    extracting = [q["sql"] for q in ctx.captured_queries if "json_extract" in q["sql"].lower() or "->>" in q["sql"]]
    assert not extracting, extracting

def test_a_gain_inside_the_floor_is_no_frontier_improvement():
    before = [[1.0]]
    new = [("noise", [0.99]), ("real", [0.9]), ("noise2", [0.89])]
    assert frontier_improvements(before, new) == {"noise": 1, "real": 1, "noise2": 1}
    assert frontier_improvements(before, new, [0.02]) == {"real": 1}
    # another objective improved: still an improvement there
    assert frontier_improvements([[1.0, 5.0]], [("other", [0.99, 4.0])], [0.02, 0.0]) == {"other": 1}


@pytest.mark.django_db
def test_agents_are_not_credited_for_gains_inside_the_stored_floor():
    def credited(floor: float | None) -> int:
        goal = synthetic_goal(name=f"floor {floor}", shape_set=f"synthetic-{floor}")
        if floor is not None:
            noise_floors.DbFloorStore().put(f"cpu-x86_64@h/rmsnorm/synthetic-{floor}", {"floor": floor, "fingerprint": {}})
        run, pending = orchestrator.start_run(goal, budget=36, seed=4, batch_size=6)
        drive(run, pending)
        return sum(a.improvements for a in run.agents.all())

    exact, huge = credited(0.0), credited(100.0)
    assert exact > 1  # the synthetic landscape improves several times at a zero floor
    assert huge == 1  # within a 100x floor only the first feasible point is news
    assert 1 <= credited(None) <= exact  # the default floor credits no more than a zero one
