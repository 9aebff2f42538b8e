"""Hostile input to ``factory import-cache`` and to runs of replay goals: a clear CommandError
naming the file and what is wrong, and no goal left behind."""

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from kernels.backends import replay as replay_backend
from swarm.models import Goal, Run


@pytest.fixture(autouse=True)
def private_registry(monkeypatch):
    """Registrations made by a test do not leak into other tests (a fresh process's registry)."""
    monkeypatch.setattr(replay_backend, "_registered", {})


def cache_file(path: Path, *, keys=("A", "B"), tune_params=None, entries=None) -> Path:
    """A small Kernel Tuner cache file: A in {1, 2}, B in {4, 8}, every configuration recorded."""
    if tune_params is None:
        tune_params = {"A": [1, 2], "B": [4, 8]}
    if entries is None:
        entries = {f"{a},{b}": {"A": a, "B": b, "time": float(a * b), "times": [a * b] * 3}
                   for a in (1, 2) for b in (4, 8)}
    path.write_text(json.dumps({"device_name": "Test GPU", "kernel_name": "k", "tune_params_keys": keys,
                                "tune_params": tune_params, "objective": "time", "cache": entries}))
    return path


def import_cache(path: Path, *args: str) -> dict:
    out = StringIO()
    call_command("factory", "import-cache", str(path), *args, "--json", stdout=out)
    return json.loads(out.getvalue())


@pytest.mark.django_db
def test_a_well_formed_small_file_imports(tmp_path):
    result = import_cache(cache_file(tmp_path / "small.json"))
    assert result["entries"] == 4 and result["valid"] == 4 and result["target"] == "replay:small"


@pytest.mark.django_db
@pytest.mark.parametrize("change, words", [
    (dict(keys=5), r"'tune_params_keys' must be a list of parameter names, not int"),
    (dict(keys=["A", 5]), r"'tune_params_keys' must be a list of parameter names, not .*5"),
    (dict(keys=["A", "A"]), r"'tune_params_keys' names 'A' twice"),
    (dict(tune_params=[1, 2]), r"'tune_params' must be an object"),
    (dict(tune_params={"A": 1, "B": [4, 8]}), r"'tune_params' of 'A' must be a list of values, not int"),
    (dict(tune_params={"A": [[1, 2], 2], "B": [4, 8]}), r"'tune_params' of 'A' has the value \[1, 2\]"),
    (dict(entries={"1,4": {"A": [1], "B": 4, "time": 1.0}}), r"entry '1,4': parameter 'A' is \[1\]"),
    (dict(tune_params={}, entries={"1,4": {"A": {"x": 1}, "B": 4, "time": 1.0}}), r"entry '1,4': parameter 'A'"),
    (dict(entries={"1,4": {"A": 1, "B": 4, "time": 1.0}, "2": {"A": 2, "time": 2.0}}),
     r"entry '2' lacks parameter 'B'"),
])
def test_a_malformed_header_or_entry_is_a_clear_error_naming_the_file(tmp_path, change, words):
    path = cache_file(tmp_path / "bad.json", **change)
    with pytest.raises(CommandError, match=rf"cannot import .*bad\.json: {words}"):
        import_cache(path)
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_an_entry_missing_a_parameter_names_it_not_just_the_bare_key(tmp_path):
    entries = {"1,4": {"A": 1, "B": 4, "time": 1.0}, "2,4": {"B": 4, "time": 2.0}}
    path = cache_file(tmp_path / "missingk.json", entries=entries)
    with pytest.raises(CommandError) as err:
        import_cache(path)
    assert str(err.value).endswith("missingk.json: entry '2,4' lacks parameter 'A' (an entry records every "
                                   "parameter of 'tune_params_keys')")


@pytest.mark.django_db
def test_a_data_set_name_another_goal_uses_for_another_file_is_refused(tmp_path, monkeypatch):
    a = cache_file(tmp_path / "a.json")
    b = cache_file(tmp_path / "b.json", tune_params={"A": [1, 2], "B": [4, 8, 16]})
    first = import_cache(a, "--name", "good")
    assert first["target"] == "replay:good"
    # Another process (a fresh registry) knows the name only from the database.
    monkeypatch.setattr(replay_backend, "_registered", {})
    with pytest.raises(CommandError, match=rf"data set name 'good' is already goal {first['goal']}'s, for "
                                           rf".*a\.json: pass another --name"):
        import_cache(b, "--name", "good")
    assert list(Goal.objects.values_list("pk", flat=True)) == [first["goal"]]
    assert import_cache(a, "--name", "good")["reused"] is True  # the same file again is fine
    assert import_cache(b, "--name", "good-b")["target"] == "replay:good-b"


@pytest.mark.django_db
def test_a_data_set_name_of_a_file_in_the_replay_folders_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "folder"
    folder.mkdir()
    cache_file(folder / "shared-one.json")
    monkeypatch.setenv("KERNELS_REPLAY_DIRS", str(folder))
    mine = cache_file(tmp_path / "mine.json")
    with pytest.raises(CommandError, match=r"data set name 'shared-one' is .*shared-one\.json.*pass another --name"):
        import_cache(mine, "--name", "shared-one")
    assert not Goal.objects.exists()
    assert import_cache(folder / "shared-one.json")["target"] == "replay:shared-one"  # the folder's own file


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["a/b", "x:y", "..", "a..b", "has space", "", "-dash", "n" * 101, "é"])
def test_a_data_set_name_that_is_not_a_simple_identifier_is_refused(tmp_path, name):
    with pytest.raises(CommandError, match=r"cannot import .*data set name .* letters, digits"):
        import_cache(cache_file(tmp_path / "ok.json"), f"--name={name}")
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_a_file_name_that_is_not_a_data_set_name_is_made_one(tmp_path):
    assert import_cache(cache_file(tmp_path / "two words+x.json"))["target"] == "replay:two-words-x"
    long = "convolution_" + "A100-PCIE-40GB_" * 6
    first = import_cache(cache_file(tmp_path / f"{long}1.json"))["target"]
    second = import_cache(cache_file(tmp_path / f"{long}2.json"))["target"]
    assert first != second and len(first) == len(second) == 64  # the goal's target column
    assert first.startswith("replay:convolution_A100-PCIE-40GB_")


@pytest.mark.django_db
def test_running_a_replay_goal_whose_file_was_deleted_names_the_file(tmp_path):
    path = cache_file(tmp_path / "gone.json")
    goal = import_cache(path)["goal"]
    path.unlink()
    with pytest.raises(CommandError, match=rf"goal {goal}'s recorded data {path} .*no such file.*import-cache"):
        call_command("factory", "run", "--goal", str(goal), "--budget", "2", "--json", stdout=StringIO())
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_running_a_replay_goal_whose_file_became_garbage_is_a_clear_error(tmp_path):
    path = cache_file(tmp_path / "garbage.json")
    goal = import_cache(path)["goal"]
    path.write_text("{not json")
    with pytest.raises(CommandError, match=r"garbage\.json: not valid JSON"):
        call_command("factory", "run", "--goal", str(goal), "--budget", "2", "--json", stdout=StringIO())
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_replay_target_without_its_goal_is_refused():
    with pytest.raises(CommandError, match=r"factory import-cache"):
        call_command("factory", "run", "--target", "replay:whatever", "--budget", "2", "--json", stdout=StringIO())
    assert not Goal.objects.exists()
