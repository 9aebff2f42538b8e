"""The benchmarks' PyTorch peers compute what the engines compute (small shapes), and the
benchmark arithmetic (ratios, agreement, corpora) is right. No timing assertions."""

import numpy as np
import pytest

from engines._bench import long_corpus, max_rel_error, ratios, short_corpus
from engines._validate import LAYER_TOLERANCE

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["llama-layer", "kda-layer"])
def test_the_pytorch_layer_matches_the_engine_on_prefill_and_decode(name):
    from engines._torch_models import bench_inputs, make_layer, run_rounds
    from engines.registry import make_engine

    torch.set_num_threads(1)
    layer, cfg = make_layer(name, "small")
    eng = make_engine(name, config="small")
    prompt, steps = 12, 3
    x = bench_inputs(cfg.hidden, prompt, steps)
    _, _, got = run_rounds(layer, x, prompt, steps)
    st = eng.new_cache(1, prompt + steps) if name == "llama-layer" else eng.new_state(1)
    plan = eng.plan({f"KERNEL_{w.upper()}": 0 for w in eng.plan_spec.workloads})  # baselines: no compiler needed
    want = np.concatenate([eng.prefill(x[None, :prompt], plan, st)[0],
                           *(eng.decode(x[prompt + i][None], st, plan) for i in range(steps))])
    assert got.shape == want.shape == (prompt + steps, cfg.hidden)
    assert max_rel_error(got, want) <= LAYER_TOLERANCE


def test_the_pytorch_layer_differs_when_the_weights_differ():
    from engines._torch_models import TorchLlamaLayer, bench_inputs, run_rounds
    from engines.llama import CONFIGS, llama_weights

    cfg = CONFIGS["small"]
    x = bench_inputs(cfg.hidden, 6, 1)
    a = run_rounds(TorchLlamaLayer(llama_weights(cfg, 0), cfg), x, 6, 1)[2]
    b = run_rounds(TorchLlamaLayer(llama_weights(cfg, 1), cfg), x, 6, 1)[2]
    assert max_rel_error(a, b) > 1e-2  # the agreement check can fail


def test_ratios_say_how_many_times_faster_each_side_is():
    rates = {"ref": {"a": 10.0, "b": 4.0}, "x": {"a": 20.0, "b": 2.0}}
    assert ratios(rates, "ref") == {"x": {"a": 2.0, "b": 0.5}}
    lat = {"torch": {"prefill_ms": 10.0}, "eng": {"prefill_ms": 5.0}}
    assert ratios(lat, "torch", higher_is_better=False) == {"eng": {"prefill_ms": 2.0}}


def test_max_rel_error_is_relative_to_the_reference_peak():
    ref = np.array([[1.0, -4.0], [2.0, 0.0]])
    assert max_rel_error(ref + np.array([[0.0, 0.0], [0.4, 0.0]]), ref) == pytest.approx(0.1)
    assert max_rel_error(ref, ref) == 0.0


def test_the_corpora_have_the_lengths_they_promise(minilm):
    short = [len(t) for t in minilm.tokenize(short_corpus())]
    assert len(short) == 64 and 7 <= min(short) and max(short) <= 14 and 8 <= np.mean(short) <= 12
    texts = long_corpus(minilm.tokenize, n=8)
    long = [len(t) for t in minilm.tokenize(texts)]
    assert len(set(texts)) == 8 and all(230 <= n <= 250 for n in long)
