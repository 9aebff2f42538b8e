"""The validation set grows: failure inputs are kept per workload and re-run on every evaluation."""

import json
import multiprocessing
import os

import pytest

from kernels import Outcome, ValidationStore, evaluate, load_template

SHAPE = {"rows": 7, "hidden": 259}


def test_it_appends_and_deduplicates(tmp_path):
    store = ValidationStore(tmp_path)
    assert store.add("rmsnorm", SHAPE, 5, reason="too big")
    assert not store.add("rmsnorm", {"hidden": 259, "rows": 7}, 5)  # same case, other key order
    assert store.add("rmsnorm", SHAPE, 6)
    assert [(c.shape, c.seed) for c in store.cases("rmsnorm")] == [(SHAPE, 5), (SHAPE, 6)]
    assert store.cases("rmsnorm")[0].reason == "too big"
    assert store.cases("softmax") == []
    lines = store.path("rmsnorm").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["added"] for line in lines)


def test_it_returns_the_latest_cases_up_to_the_limit(tmp_path):
    store = ValidationStore(tmp_path)
    for seed in range(20):
        store.add("rmsnorm", SHAPE, seed)
    assert [c.seed for c in store.cases("rmsnorm", limit=16)] == list(range(4, 20))
    assert store.cases("rmsnorm", limit=0) == []


def test_it_skips_torn_or_foreign_lines(tmp_path):
    store = ValidationStore(tmp_path)
    store.add("rmsnorm", SHAPE, 1)
    with open(store.path("rmsnorm"), "a") as f:
        f.write('{"shape": {"rows": 1}, "se')  # a torn last line
    assert [c.seed for c in store.cases("rmsnorm")] == [1]
    assert store.add("rmsnorm", SHAPE, 2)  # appending after a torn line starts a new line
    assert [c.seed for c in store.cases("rmsnorm")] == [1, 2]
    with pytest.raises(ValueError, match="cannot name a file"):
        store.add("../etc", SHAPE, 1)


def _add_many(root, start):
    store = ValidationStore(root)
    for seed in range(start, start + 50):
        store.add("rmsnorm", SHAPE, seed % 60)


def test_concurrent_writers_neither_lose_nor_duplicate_cases(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_add_many, args=(tmp_path, s)) for s in (0, 10, 20, 30)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    store = ValidationStore(tmp_path)
    lines = store.path("rmsnorm").read_text().splitlines()
    assert sorted(json.loads(line)["seed"] for line in lines) == list(range(60))


WRONG_ON_ODD = """
#include <math.h>
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)
{
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden; float *yr = y + (long)r * hidden;
        int end = hidden / 8 * 8;
        double s = 0.0;
        for (int i = 0; i < end; ++i) s += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(s / hidden + eps));
        for (int i = 0; i < hidden; ++i) yr[i] = xr[i] * inv * w[i];
    }
}
"""


def test_an_evaluation_keeps_its_failure_cases_and_later_ones_rerun_them(tmp_path, quick_bench):
    store = ValidationStore(tmp_path)
    bad = evaluate("rmsnorm", WRONG_ON_ODD, {}, shape_set="test-small", bench=quick_bench, seed=1,
                   validation_store=store)
    assert bad.status == Outcome.wrong_result
    failed = [(c["shape"], c["seed"]) for c in bad.cases if c["verdict"] == "wrong_result"]
    stored = [(c.shape, c.seed) for c in store.cases("rmsnorm")]
    assert failed and sorted(map(str, stored)) == sorted(map(str, failed))
    assert "new failure case(s) kept" in bad.log

    good = evaluate("rmsnorm", load_template("rmsnorm"), {}, shape_set="test-small", bench=quick_bench, seed=2,
                    validation_store=store)
    assert good.status == Outcome.ok, good.log
    regression = [(c["shape"], c["seed"]) for c in good.cases if c["kind"] == "regression"]
    assert sorted(map(str, regression)) == sorted(map(str, stored))
    assert all(c["passed"] for c in good.cases)


def test_a_stored_case_catches_a_kernel_the_fresh_cases_might_miss(tmp_path, quick_bench):
    """A kernel wrong only on one specific input: the stored case exposes it every time."""
    store = ValidationStore(tmp_path)
    store.add("rmsnorm", {"rows": 3, "hidden": 100}, 42, reason="seeded by hand")
    src = WRONG_ON_ODD.replace("int end = hidden / 8 * 8;", "int end = hidden == 100 ? 96 : hidden;")
    ev = evaluate("rmsnorm", src, {}, shape_set="test-small", bench=quick_bench, seed=3, validation_store=store)
    assert ev.status == Outcome.wrong_result
    assert "regression rows=3,hidden=100 seed 42" in ev.log


def test_the_store_can_be_turned_off(tmp_path, quick_bench, monkeypatch):
    monkeypatch.setenv("KERNELS_VALIDATION_STORE_LIMIT", "0")
    store = ValidationStore(tmp_path)
    store.add("rmsnorm", {"rows": 3, "hidden": 100}, 42)
    ev = evaluate("rmsnorm", WRONG_ON_ODD, {}, shape_set="test-small", bench=quick_bench, seed=1, validation_store=store)
    assert ev.status == Outcome.wrong_result
    assert not [c for c in ev.cases if c["kind"] == "regression"]
    assert len(store.cases("rmsnorm")) == 1


@pytest.mark.parametrize("raw", ["nan", "inf", "lots"])
def test_a_store_limit_that_is_not_a_finite_number_is_refused_clearly(raw, monkeypatch):
    from kernels import config

    monkeypatch.setenv("KERNELS_VALIDATION_STORE_LIMIT", raw)
    with pytest.raises(ValueError, match="KERNELS_VALIDATION_STORE_LIMIT=.*must be a (finite )?number"):
        config.validation_store_limit()


def test_the_default_store_lives_in_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELS_DATA_DIR", str(tmp_path / "data"))
    assert ValidationStore().path("rmsnorm") == tmp_path / "data" / "validation" / "rmsnorm.jsonl"
    monkeypatch.delenv("KERNELS_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert ValidationStore().root == tmp_path / "xdg" / "int21-kernels" / "validation"
    assert os.fspath(ValidationStore().root).endswith("int21-kernels/validation")
