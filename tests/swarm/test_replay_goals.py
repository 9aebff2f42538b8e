"""Replay goals on real GPU data: import a Kernel Tuner cache, run the swarm on it headless."""

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from swarm.models import Candidate, Goal

CACHES = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "tuning-cache"
GEMM = CACHES / "gemm-clblast-xgemm_RTX-3090.json.gz"
ENERGY = CACHES / "gemm-xgemm-energy_A100-PCIE-40GB_partial.json.gz"
CONV = CACHES / "convolution_A100-PCIE-40GB.json.gz"
PNPOLY = CACHES / "pnpoly_RTX-2080-Ti.json.gz"

pytestmark = pytest.mark.skipif(not GEMM.exists(), reason="shared tuning-cache data set not present")


def factory(*args) -> dict:
    out = StringIO()
    call_command("factory", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.mark.django_db
def test_import_cache_creates_a_replay_goal_with_the_recorded_space():
    result = factory("import-cache", str(GEMM))
    goal = Goal.objects.get(pk=result["goal"])
    assert goal.target == "replay:gemm-clblast-xgemm_RTX-3090" and goal.backend == "replay"
    assert result["entries"] == 17956 and result["space_size"] == 82944
    assert [p["name"] for p in goal.space["parameters"]][:3] == ["MWG", "NWG", "KWG"]
    assert result["optimum_ms"] == pytest.approx(5.657844)


@pytest.mark.django_db
def test_the_energy_file_gives_a_time_energy_goal(tmp_path):
    result = factory("import-cache", str(ENERGY))
    assert result["objectives"] == ["latency_ms", "energy_j"]
    run = factory("run", "--goal", str(result["goal"]), "--budget", "60", "--batch-size", "10", "--seed", "1")
    assert run["evaluated"] == 60
    assert run["frontier"] and all("energy_j" in c["metrics"] for c in run["frontier"])
    # The table shows the recorded time and energy, not the columns of a compiled kernel.
    out = StringIO()
    call_command("factory", "run", "--goal", str(result["goal"]), "--budget", "20", "--seed", "2", stdout=out)
    text = out.getvalue()
    assert "energy_j" in text and "latency_ms" in text and "nan" not in text and "GB/s" not in text and "max_rel_error" not in text
    # the run's Kernel Tuner cache records the energy too, and reads back as a time-energy goal
    from swarm.models import Run
    from swarm.web.api.exports import kernel_tuner_cache

    exported = kernel_tuner_cache(Run.objects.filter(goal_id=result["goal"]).latest("id"))
    assert all("nvml_energy" in e for e in exported["cache"].values() if not isinstance(e["time"], str))
    again = tmp_path / "exported_energy.json"
    again.write_text(json.dumps(exported))
    assert factory("import-cache", str(again))["objectives"] == ["latency_ms", "energy_j"]


@pytest.mark.django_db
def test_a_replay_run_is_reproducible_for_a_seed_and_never_repeats_a_configuration(monkeypatch):
    from swarm.learning import store

    goal = factory("import-cache", str(CONV))["goal"]
    first = factory("run", "--goal", str(goal), "--budget", "80", "--batch-size", "8", "--seed", "7")
    assert first["evaluated"] == 80 and sum(first["status_counts"].values()) == 80
    assert first["best"]["metrics"]["latency_ms"] >= 0.5536  # never better than the recorded optimum
    params = [json.dumps(c, sort_keys=True) for c in Candidate.objects.filter(goal_id=goal).values_list("params", flat=True)]
    assert len(params) == len(set(params)) == 80
    # same seed, fresh goal and no warm start from the first run: the same proposals
    monkeypatch.setattr(store, "warm_start", lambda goal: {})
    monkeypatch.setattr(store, "related_evidence", lambda goal, before=None: [])  # nor does its model transfer from it
    goal2 = Goal.objects.get(pk=goal)
    goal2.pk = None
    goal2.save()
    second = factory("run", "--goal", str(goal2.pk), "--budget", "80", "--batch-size", "8", "--seed", "7")
    p1 = list(Candidate.objects.filter(goal_id=goal).order_by("id").values_list("params", flat=True))
    p2 = list(Candidate.objects.filter(goal_id=goal2.pk).order_by("id").values_list("params", flat=True))
    assert p1 == p2 and second["best"]["metrics"] == first["best"]["metrics"]


@pytest.mark.django_db
def test_a_file_whose_values_are_names_is_searched_as_its_numbered_twin(tmp_path, monkeypatch):
    """pnpoly with ``between_method`` recorded as names instead of 0-3 (in the same order): the
    swarm's run on it, by the values' positions, is the run on the original, proposal for proposal."""
    import gzip

    from swarm.learning import store

    monkeypatch.setattr(store, "warm_start", lambda goal: {})  # the runs do not learn from each other
    monkeypatch.setattr(store, "related_evidence", lambda goal, before=None: [])
    data = json.loads(gzip.decompress(PNPOLY.read_bytes()))
    names = ["none", "fast", "exact", "approx"]
    assert data["tune_params"]["between_method"] == [0, 1, 2, 3]
    data["tune_params"]["between_method"] = names
    keys = data["tune_params_keys"]
    renamed = {}
    for rec in data["cache"].values():
        rec["between_method"] = names[rec["between_method"]]
        renamed[",".join(str(rec[k]) for k in keys)] = rec
    data["cache"] = renamed
    (tmp_path / "pnpoly-names.json").write_text(json.dumps(data))

    named = factory("import-cache", str(tmp_path / "pnpoly-names.json"))
    assert named["labels"] == {"between_method": names}
    assert any("'between_method'" in w and '0 = "none"' in w for w in named["warnings"])
    original = factory("import-cache", str(PNPOLY))
    assert named["optimum_params"] == original["optimum_params"] and named["optimum_ms"] == original["optimum_ms"]
    runs = [factory("run", "--goal", str(g["goal"]), "--budget", "40", "--seed", "3") for g in (named, original)]
    assert runs[0]["evaluated"] == 40 and runs[0]["best"]["metrics"] == runs[1]["best"]["metrics"]
    by_goal = [list(Candidate.objects.filter(goal_id=g["goal"]).order_by("id").values_list("params", "evidence__metrics"))
               for g in (named, original)]
    assert by_goal[0] == by_goal[1]
    # exported as a Kernel Tuner cache, the run records the names again
    from swarm.models import Run
    from swarm.web.api.exports import kernel_tuner_cache

    exported = kernel_tuner_cache(Run.objects.filter(goal_id=named["goal"]).latest("id"))
    assert exported["tune_params"]["between_method"] == names
    assert {e["between_method"] for e in exported["cache"].values()} <= set(names)
    timed = [(k, e) for k, e in exported["cache"].items() if "time" in e]
    assert timed and all(data["cache"][k]["time"] == e["time"] for k, e in timed)


@pytest.mark.django_db
def test_a_file_whose_names_change_order_is_a_new_goal_not_the_old_one_reused(tmp_path):
    path = tmp_path / "named.json"

    def write(order):
        path.write_text(json.dumps({"tune_params_keys": ["a", "b"], "tune_params": {"a": order, "b": [0, 1]}, "cache": {
            f"{a},{b}": {"a": a, "b": b, "time": {"p": 1.0, "q": 7.0}[a] + b} for a in order for b in (0, 1)}}))

    write(["p", "q"])
    first = factory("import-cache", str(path))
    write(["q", "p"])  # position 0 is now "q": the first goal's candidates would mean other configurations
    second = factory("import-cache", str(path))
    assert not second["reused"] and second["goal"] != first["goal"]
    assert any(f"goal {first['goal']}" in w and "space or objective differs" in w for w in second["warnings"])
    assert second["optimum_params"] == {"a": 1, "b": 0} and second["labels"] == {"a": ["q", "p"]}


@pytest.mark.django_db
def test_a_run_on_named_values_shows_the_names_wherever_a_point_is_shown(tmp_path, client, owner):
    """The search works on positions; the summary, ``factory run``'s table, the candidate page,
    the compare page and the run's candidate table show the recorded names."""
    from swarm.models import Run
    from swarm.runs import summaries

    path = tmp_path / "hyper-named.json"
    path.write_text(json.dumps({"tune_params_keys": ["method", "unroll"],
                                "tune_params": {"method": ["best1bin", "rand-to-best"], "unroll": [1, 2]}, "cache": {
        f"{m},{u}": {"method": m, "unroll": u, "time": {"best1bin": 7.0, "rand-to-best": 1.0}[m] + u}
        for m in ("best1bin", "rand-to-best") for u in (1, 2)}}))
    goal = factory("import-cache", str(path))["goal"]
    table = StringIO()
    call_command("factory", "run", "--goal", str(goal), "--budget", "4", "--seed", "1", stdout=table)
    assert "method=rand-to-best unroll=1" in table.getvalue()
    summary = summaries.run_summary(Run.objects.get(goal_id=goal))
    assert summary["best"]["params"] == {"method": 1, "unroll": 1}
    assert summary["best"]["labelled_params"] == {"method": "rand-to-best", "unroll": 1}
    assert all(c["labelled_params"]["method"] in ("best1bin", "rand-to-best") for c in summary["frontier"])

    best = Candidate.objects.get(pk=summary["best"]["id"])
    other = Candidate.objects.filter(run=best.run, params__method=0).first()
    client.force_login(owner)
    page = client.get(f"/candidates/{best.pk}/").content.decode()
    assert "<code>method=rand-to-best</code>" in page
    compared = client.get("/compare/", {"ids": f"{best.pk},{other.pk}"})
    rows = {r["name"]: r["values"] for r in compared.context["params"]}
    assert rows["method"] == ["rand-to-best", "best1bin"]
    table = client.get(f"/api/runs/{best.run_id}/table/", {"columns": "id,method,unroll", "sort": "method,unroll"}).json()
    assert [r["values"]["method"] for r in table["rows"]] == [0, 0, 1, 1]  # sorted by position
    assert [r["text"]["method"] for r in table["rows"]] == ["best1bin", "best1bin", "rand-to-best", "rand-to-best"]


@pytest.mark.django_db
def test_a_label_that_a_terminal_or_page_would_act_on_reads_as_json(tmp_path, client, owner):
    from swarm.models import Run

    path = tmp_path / "hostile-labels.json"
    names = ["\x1b[2J\x1b[31mred", None, True]
    path.write_text(json.dumps({"tune_params_keys": ["mode"], "tune_params": {"mode": names}, "cache": {
        str(m): {"mode": m, "time": 1.0 + i} for i, m in enumerate(names)}}))
    goal = factory("import-cache", str(path))["goal"]
    table = StringIO()
    call_command("factory", "run", "--goal", str(goal), "--budget", "3", "--seed", "1", stdout=table)
    assert "\x1b" not in table.getvalue() and 'mode="\\u001b[2J\\u001b[31mred"' in table.getvalue()
    run = Run.objects.get(goal_id=goal)
    client.force_login(owner)
    rows = client.get(f"/api/runs/{run.pk}/table/", {"columns": "id,mode", "sort": "mode"}).json()["rows"]
    assert [r["text"]["mode"] for r in rows] == ['"\\u001b[2J\\u001b[31mred"', "null", "true"]
    assert [r["values"]["mode"] for r in rows] == [0, 1, 2]
    page = client.get(f"/goals/{goal}/").content.decode()
    assert '&quot;\\u001b[2J\\u001b[31mred&quot;, null, true (searched as 0, 1, 2)' in page


@pytest.mark.django_db
def test_a_labelled_parameter_is_narrowed_by_name_or_value_and_keeps_its_labels(tmp_path, owner, client):
    from swarm.runs import directions, orchestrator
    from swarm.runs.directions import DirectionError

    path = tmp_path / "steered.json"
    methods = ["best1bin", "rand1bin", "best2exp", "currenttobest1bin"]
    path.write_text(json.dumps({"tune_params_keys": ["method", "popsize"],
                                "tune_params": {"method": methods, "popsize": [10, 20, 30, 40, 50]}, "cache": {
        f"{m},{n}": {"method": m, "popsize": n, "time": 1.0 + i + n / 100} for i, m in enumerate(methods)
        for n in (10, 20, 30, 40, 50)}}))
    goal = Goal.objects.get(pk=factory("import-cache", str(path))["goal"])
    run, pending = orchestrator.start_run(goal, budget=16, seed=3, batch_size=4)
    orchestrator.evaluate_batch([c.pk for c in pending])
    narrowed = directions.submit(run, "narrow", {"param": "method", "values": ["rand1bin", 2, "currenttobest1bin"]}, owner)
    assert narrowed.payload["values"] == [1, 2, 3]  # resolved when given: what was meant then
    directions.submit(run, "exclude", {"param": "method", "values": ["currenttobest1bin"]}, owner)
    with pytest.raises(DirectionError, match=r"no value\(s\) \['nelder-mead'\].*labels: \['best1bin'"):
        directions.submit(run, "narrow", {"param": "method", "values": ["nelder-mead"]}, owner)
    with pytest.raises(DirectionError, match=r"has no label True"):  # a bool is no value, not 1
        directions.submit(run, "narrow", {"param": "method", "values": [True]}, owner)
    client.force_login(owner)  # the run page's form takes the names as typed
    typed = client.post(f"/runs/{run.pk}/directions/", {"kind": "narrow", "param": "method", "values": "rand1bin, best2exp"},
                        HTTP_ACCEPT="application/json")
    assert typed.status_code == 201 and typed.json()["direction"]["payload"]["values"] == [1, 2]
    evaluated_before = {c.pk: c.params["method"] for c in run.candidates.all()}
    new = orchestrator.advance(run.pk)
    run.refresh_from_db()
    method = next(p for p in run.space["parameters"] if p["name"] == "method")
    assert method == {"name": "method", "values": [1, 2], "labels": ["rand1bin", "best2exp"]}
    assert new and {c.params["method"] for c in new} <= {1, 2}
    # the candidates of values narrowed away keep their names on the pages and in the export
    rows = client.get(f"/api/runs/{run.pk}/table/", {"columns": "id,method", "limit": 100}).json()["rows"]
    assert {r["text"]["method"] for r in rows if r["id"] in evaluated_before} \
        == {methods[v] for v in evaluated_before.values()}
    from swarm.web.api.exports import kernel_tuner_cache

    exported = kernel_tuner_cache(run)
    assert exported["tune_params"]["method"] == methods
    assert {e["method"] for e in exported["cache"].values()} == {methods[v] for v in evaluated_before.values()} | \
        {methods[c.params["method"]] for c in new if c.status == "ok"}


@pytest.mark.django_db
def test_a_direction_naming_a_label_that_is_another_value_is_refused(tmp_path, owner):
    from swarm.runs import directions, orchestrator
    from swarm.runs.directions import DirectionError

    path = tmp_path / "unroll-full.json"
    path.write_text(json.dumps({"tune_params_keys": ["unroll"], "tune_params": {"unroll": [1, 2, 4, "full"]},
                                "cache": {str(u): {"unroll": u, "time": 1.0 + i} for i, u in enumerate([1, 2, 4, "full"])}}))
    goal = Goal.objects.get(pk=factory("import-cache", str(path))["goal"])
    run, pending = orchestrator.start_run(goal, budget=4, seed=1, batch_size=1)
    with pytest.raises(DirectionError, match=r"1 is both the label of value 0 and value 1 \(labelled 2\)"):
        directions.submit(run, "narrow", {"param": "unroll", "values": [1, 2]}, owner)
    assert directions.submit(run, "narrow", {"param": "unroll", "values": [4, "full"]}, owner).payload["values"] == [2, 3]


@pytest.mark.django_db
def test_a_missing_or_broken_cache_file_is_a_clear_error(tmp_path):
    with pytest.raises(CommandError, match="cannot import"):
        factory("import-cache", str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CommandError, match="cannot import"):
        factory("import-cache", str(bad))
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps({"tune_params_keys": ["A"], "tune_params": {"A": [1, 2]},
                                  "cache": {"1": {"A": 1, "time": "RuntimeFailedConfig"}}}))
    with pytest.raises(CommandError, match="cannot import .*no valid entry"):
        factory("import-cache", str(failed))
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_a_file_of_scores_is_a_goal_that_maximises_the_score(tmp_path):
    """Kernel Tuner's hyperparameter tuner records a ``score`` (higher is better, negative
    ones valid) and no time: the goal maximises it, and a run's best is the highest score."""
    entries = {f"{a},{b}": {"a": a, "b": b, "score": round(0.3 - 0.1 * abs(a - 2) - 0.2 * abs(b - 1), 3),
                            "scores": [0.0], "compile_time": 25.0}
               for a in range(5) for b in range(4)}
    path = tmp_path / "goal_scores.json"
    path.write_text(json.dumps({"device_name": "x86_64", "kernel_name": "hyperparamtuning_pso", "problem_size": [],
                                "tune_params_keys": ["a", "b"], "tune_params": {"a": list(range(5)), "b": list(range(4))},
                                "objective": "score", "cache": entries}))
    result = factory("import-cache", str(path))
    assert result["valid"] == 20 and result["failed"] == 0  # -0.5 is a score, not a failed time
    assert result["objective"] == {"metric": "score", "direction": "maximize", "field": "score"}
    assert result["optimum"] == 0.3 and result["optimum_ms"] is None and result["optimum_params"] == {"a": 2, "b": 1}
    assert Goal.objects.get(pk=result["goal"]).objectives == [{"metric": "score", "direction": "maximize"}]
    run = factory("run", "--goal", str(result["goal"]), "--budget", "20", "--seed", "3")
    assert run["evaluated"] == 20 and run["best"]["params"] == {"a": 2, "b": 1}
    assert run["best"]["metrics"]["score"] == 0.3 and "latency_ms" not in run["best"]["metrics"]
    out = StringIO()
    call_command("factory", "import-cache", str(path), stdout=out)
    assert "recorded optimum 0.3 score (maximize)" in out.getvalue()
    # the run's Kernel Tuner cache records the score, and reads back as a goal maximising it
    from swarm.models import Run
    from swarm.web.api.exports import kernel_tuner_cache

    exported = kernel_tuner_cache(Run.objects.filter(goal_id=result["goal"]).latest("id"))
    assert (exported["objective"], exported["objective_higher_is_better"]) == ("score", True)
    assert all("score" in e and "time" not in e for e in exported["cache"].values())
    again = tmp_path / "exported_scores.json"
    again.write_text(json.dumps(exported))
    back = factory("import-cache", str(again))
    assert back["objective"]["direction"] == "maximize" and back["optimum"] == 0.3
    table = _table_run(back["goal"])  # the table's columns and its best line name the score
    assert re.search(r"best: candidate \d+, score 0\.3$", table, re.M) and "┃ score ┃" in table, table
    # the file changed to another objective: a goal of its own, not the score goal reused
    data = json.loads(path.read_text())
    data["objective"] = "loss"
    for e in data["cache"].values():
        e["loss"] = -e["score"]
    path.write_text(json.dumps(data))
    changed = factory("import-cache", str(path))
    assert not changed["reused"] and changed["goal"] != result["goal"]
    assert Goal.objects.get(pk=changed["goal"]).objectives == [{"metric": "loss", "direction": "minimize"}]
    assert any("recorded space or objective differs" in w for w in changed["warnings"])


def _table_run(goal: int) -> str:
    """``factory run``'s text output for a short run on ``goal``."""
    out = StringIO()
    call_command("factory", "run", "--goal", str(goal), "--budget", "20", "--seed", "4", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_a_file_without_times_whose_objective_gives_no_direction_is_refused(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"tune_params_keys": ["a"], "tune_params": {"a": [1, 2]}, "objective": "widgets",
                                "cache": {"1": {"a": 1, "widgets": 3.0}, "2": {"a": 2, "widgets": 4.0}}}))
    with pytest.raises(CommandError, match="objective 'widgets' does not say whether higher is better"):
        factory("import-cache", str(path))
    assert not Goal.objects.exists()


# -- hostile files: duplicated import, half-written entry, failure markers --------------------


def conv_file(path: Path, n: int, *, tail: str = "", markers: dict[int, dict] | None = None) -> Path:
    """The first ``n`` convolution entries in Kernel Tuner's append-only layout (unclosed),
    entry ``i`` updated with ``markers[i]``, then ``tail``."""
    import gzip

    text = gzip.decompress(CONV.read_bytes()).decode()
    head, sep, body = text.partition('"cache": {\n')
    lines = body.splitlines(keepends=True)[:n]
    for i, marker in (markers or {}).items():
        key, entry = json.loads("{" + lines[i].rstrip().rstrip(",") + "}").popitem()
        lines[i] = json.dumps({key: {**entry, **marker}})[1:-1] + ",\n"
    path.write_text(head + sep + "".join(lines) + tail)
    return path


@pytest.mark.django_db
def test_importing_the_same_file_twice_reuses_its_goal(tmp_path):
    path = conv_file(tmp_path / "conv-twice.json", 30)
    first = factory("import-cache", str(path))
    again = factory("import-cache", str(path))
    assert first["reused"] is False and again["reused"] is True
    assert again["goal"] == first["goal"] and Goal.objects.count() == 1
    other = factory("import-cache", str(path), "--name", "conv-twice-other")  # asked for another data set
    assert other["goal"] != first["goal"] and other["reused"] is False
    assert any(f"also goal {first['goal']}" in w for w in other["warnings"])
    out = StringIO()
    call_command("factory", "import-cache", str(path), stdout=out)
    assert f"goal {first['goal']} (already imported: reused)" in out.getvalue()


@pytest.mark.django_db
def test_a_half_written_last_entry_is_reported_with_its_key_and_line(tmp_path):
    path = conv_file(tmp_path / "conv-half.json", 30, tail='"32,8,2,4,1,0,0,1,15,15": {"block_size_x": 32, "ti')
    result = factory("import-cache", str(path))
    assert result["entries"] == 30
    line = path.read_text().count("\n") + 1
    assert any(f"half-written last entry '32,8,2,4,1,0,0,1,15,15' at line {line}" in w for w in result["warnings"])
    out = StringIO()
    call_command("factory", "import-cache", str(path), stdout=out)
    assert "warning: dropped the half-written last entry" in out.getvalue()


@pytest.mark.django_db
def test_legacy_and_string_failure_markers_are_failed_candidates_in_the_api_and_csv(tmp_path):
    import csv

    from swarm.models import Run
    from swarm.web.api.exports import csv_lines

    markers = {1: {"time": 1e20}, 2: {"time": "1e+20"}, 3: {"time": "ErrorConfig"},
               4: {"GFLOP/s": "CompilationFailedConfig"}}
    path = conv_file(tmp_path / "conv-markers.json", 12, markers=markers)
    result = factory("import-cache", str(path))
    assert (result["valid"], result["failed"]) == (8, 4)
    assert result["failures"] == {"runtime_error": 3, "compile_error": 1}
    assert result["optimum_ms"] < 1e3
    assert any("legacy failure marker" in w for w in result["warnings"])
    run = factory("run", "--goal", str(result["goal"]), "--budget", "12", "--batch-size", "4", "--seed", "3")
    assert run["evaluated"] == 12
    assert run["status_counts"] == {"ok": 8, "runtime_error": 3, "compile_error": 1}
    for c in Candidate.objects.filter(goal_id=result["goal"]).select_related("evidence"):
        latency = c.evidence.metrics.get("latency_ms")
        assert (c.status == "ok") == (latency is not None) and (latency is None or latency < 1e3)
        if c.status == "runtime_error":
            assert "legacy failure marker" in c.evidence.log or "ErrorConfig" in c.evidence.log
    rows = list(csv.DictReader("".join(csv_lines(Run.objects.get(pk=run["id"]))).splitlines()))
    assert len(rows) == 12
    assert all(float(r["latency_ms"]) < 1e3 for r in rows if r["status"] == "ok")
    assert all(r["latency_ms"] == "" for r in rows if r["status"] != "ok")


@pytest.mark.django_db
@pytest.mark.parametrize("recorded", [GEMM, PNPOLY, ENERGY], ids=lambda p: p.name.split("_")[0])
def test_a_replay_runs_exported_cache_reads_back_as_recorded(tmp_path, recorded):
    """The export of a run on a recorded file keeps what the file recorded: its problem size and
    its entries' bookkeeping times, so that reading it back warns of nothing the file had."""
    from kernels.interchange.tuning_cache import load_cache
    from swarm.models import Run
    from swarm.web.api.exports import kernel_tuner_cache

    original = load_cache(recorded)
    result = factory("import-cache", str(recorded))
    factory("run", "--goal", str(result["goal"]), "--budget", "30", "--batch-size", "10", "--seed", "3")
    exported = kernel_tuner_cache(Run.objects.filter(goal_id=result["goal"]).latest("id"))
    assert exported["problem_size"] == list(original.problem_size or [])
    path = tmp_path / "exported.json"
    path.write_text(json.dumps(exported))
    again = load_cache(path)
    assert again.problem_size == original.problem_size
    assert (again.device_name, again.kernel_name) == (original.device_name, original.kernel_name)
    lacking = {w.split("'")[1] for w in again.warnings if "lack '" in w}
    lacked = {w.split("'")[1] for w in original.warnings if "lack '" in w}
    assert lacking <= lacked, again.warnings
    for key, entry in exported["cache"].items():
        recorded_entry = original.entries[key]
        for name in ("compile_time", "verification_time", "benchmark_time", "framework_time", "strategy_time"):
            assert entry.get(name) == recorded_entry.get(name), (key, name)


@pytest.mark.django_db
def test_an_export_names_the_goals_own_file_when_the_run_reuses_an_older_versions_evidence(tmp_path):
    from kernels.interchange.tuning_cache import load_cache
    from swarm.models import Run
    from swarm.web.api.exports import kernel_tuner_cache

    path = tmp_path / "data.json"

    def write(device, size, values):
        path.write_text(json.dumps({"device_name": device, "problem_size": size, "tune_params_keys": ["A"],
                                    "tune_params": {"A": values},
                                    "cache": {str(a): {"A": a, "time": 1.0 + a, "compile_time": 10.0 * a}
                                              for a in values}}))

    write("OLD", [100], [1, 2, 3])
    first = factory("import-cache", str(path))
    factory("run", "--goal", str(first["goal"]), "--budget", "3", "--seed", "1")
    write("NEW", [200], [1, 2, 3, 4])  # no kernel_name either
    second = factory("import-cache", str(path))
    assert second["goal"] != first["goal"]
    factory("run", "--goal", str(second["goal"]), "--budget", "4", "--seed", "1")  # reuses the first run's evidence
    exported = kernel_tuner_cache(Run.objects.filter(goal_id=second["goal"]).latest("id"))
    assert (exported["device_name"], exported["problem_size"], exported["kernel_name"]) == ("NEW", [200], "")
    assert {e["compile_time"] for e in exported["cache"].values()} == {10.0, 20.0, 30.0, 40.0}
    again = tmp_path / "again.json"
    again.write_text(json.dumps(exported))
    assert load_cache(again).kernel_name == load_cache(path).kernel_name == ""
