"""A production kernel runs in an engine only at shapes its evidence covers: its shape set's
model axes (hidden, N, K, heads, ...), or shapes a passed guard check validated it at."""

import pytest

from engines._binding import PRODUCTION, KernelSpec, StaticRegistry, bind
from engines._coverage import choose, covers, model_axes
from engines.llama import LlamaLayer
from kernels import load_template

pytestmark = pytest.mark.timeout(300)


def rmsnorm_entry(shape_set, candidate, **kw):
    return {"workload": "rmsnorm", "target": "cpu-x86_64", "shape_set": shape_set, "source": load_template("rmsnorm"),
            "params": {}, "candidate": candidate, **kw}


def norm_rows(engine, mode="prefill"):
    return [r for r in engine.describe(engine.plan({}), (mode,))[mode] if r["workload"] == "rmsnorm"]


def test_model_axes_drop_the_load_axes():
    assert model_axes({"rows": 512, "hidden": 4096}) == {"hidden": 4096}
    assert model_axes({"M": 1, "N": 6144, "K": 4096}) == {"N": 6144, "K": 4096}
    assert model_axes({"batch": 1, "kv_len": 512, "heads": 32, "kv_heads": 8, "head_dim": 128}) == {
        "heads": 32, "kv_heads": 8, "head_dim": 128}


def test_a_kernel_promoted_for_other_shapes_is_not_bound_and_describe_says_why():
    # Promoted for llama3-8b (hidden 4096); the small layer runs hidden 256.
    eng = LlamaLayer("small", registry=StaticRegistry([rmsnorm_entry("llama3-8b", 7)]))
    rows = norm_rows(eng)
    assert rows and all(r["kernel"]["kind"] == "baseline" for r in rows)
    note = rows[0]["kernel"]["note"]
    assert "llama3-8b" in note and "hidden=4096" in note and "hidden=256" in note and "baseline" in note


def test_the_promotion_whose_shape_set_covers_is_bound_not_the_latest():
    entries = [rmsnorm_entry("test-small", 1), rmsnorm_entry("llama3-8b", 2)]  # the latest last
    eng = LlamaLayer("small", registry=StaticRegistry(entries))
    rows = norm_rows(eng) + norm_rows(eng, "decode")
    assert all(r["kernel"]["kind"] == "production" and r["kernel"]["candidate"] == 1 for r in rows)
    assert "test-small" in rows[0]["kernel"]["note"]


def test_validated_shapes_cover_and_a_candidate_under_the_guard_is_covered():
    spec = KernelSpec("rmsnorm", load_template("rmsnorm"), origin="production", shape_set="llama3-8b",
                      validated_shapes=({"hidden": 256},))
    assert covers(spec, {"rows": 24, "hidden": 256})[0]
    assert "validated" in covers(spec, {"rows": 24, "hidden": 256})[1]
    assert not covers(spec, {"rows": 1, "hidden": 512})[0]
    cand = KernelSpec("rmsnorm", "", origin="candidate", shape_set="llama3-8b")
    assert covers(cand, {"rows": 1, "hidden": 512})[0]
    assert choose([], {"hidden": 1}) == (None, "")


def test_bind_refuses_an_uncovered_kernel_from_a_lookup_only_registry():
    class One:
        def lookup(self, workload, target, shape):
            return KernelSpec("rmsnorm", load_template("rmsnorm"), origin="production", shape_set="test-small")

    assert bind("rmsnorm", PRODUCTION, shape={"rows": 1, "hidden": 4096}, registry=One()).kind == "baseline"
    assert bind("rmsnorm", PRODUCTION, shape={"rows": 1, "hidden": 256}, registry=One()).kind == "production"
