"""benchmarks.engines' report: tables, ratios and the losses it names, from a made-up report
(no timing)."""

from benchmarks.engines import layer_table, losses, markdown, minilm_table


def report():
    lat = {"numpy": {"prefill_ms": 40.0, "decode_ms_per_token": 4.0},
           "torch": {"prefill_ms": 20.0, "decode_ms_per_token": 2.0},
           "default": {"prefill_ms": 10.0, "decode_ms_per_token": 4.0}}
    bd = [{"label": "gate_up_proj", "workload": "gemm", "ms": 3.0, "share": 0.6},
          {"label": "rope", "workload": "rope", "ms": 1.0, "share": 0.2}]
    layer = {"engine": "llama-layer", "config": "small", "prompt": 8, "decode_context": "8 .. 9 tokens",
             "latency": lat, "torch": {"torch": "2.x"},
             "speedup_vs_numpy": {"torch": {"prefill_ms": 2.0, "decode_ms_per_token": 2.0},
                                  "default": {"prefill_ms": 4.0, "decode_ms_per_token": 1.0}},
             "speedup_vs_torch": {"numpy": {"prefill_ms": 0.5, "decode_ms_per_token": 0.5},
                                  "default": {"prefill_ms": 2.0, "decode_ms_per_token": 0.5}},
             "decode_weight_gb_per_s": {"numpy": 1.0, "torch": 2.0, "default": 1.0},
             "agreement_with_torch": {"default": 3e-8}, "breakdown": {"prefill": bd, "decode": bd}}
    minilm = {"tokens_per_input": {"short": 10.0, "long": 240.0},
              "sentences_per_s": {"sentence-transformers": {"short_batch_1": 10.0, "long_batch_32": 2.0},
                                  "default": {"short_batch_1": 12.0, "long_batch_32": 1.6}},
              "speedup_vs_sentence_transformers": {"default": {"short_batch_1": 1.2, "long_batch_32": 0.8}},
              "breakdown": {"default/long_batch_32": [{"label": "attention", "workload": "attention", "ms": 5.0,
                                                       "share": 0.5}]},
              "torch_profile": {"long_batch_32": [["aten::addmm", 50.0, 0.7]]}}
    return {"host": {"hostname": "h", "machine": "x86_64", "cpus": 2, "date": "2030-01-01T00:00:00+00:00",
                     "load_avg": [3.0, 2.0, 1.0]}, "threads": 2, "rounds": 2, "seconds": 5.0,
            "minilm": minilm, "llama_layer": layer, "kda_layer": {"error": "boom"}}


def test_losses_name_each_scenario_below_one_with_its_dominant_operators():
    lines = losses(report())
    assert len(lines) == 2
    assert lines[0].startswith("- MiniLM `default` long batch 32: 0.80x") and "attention 50%" in lines[0]
    assert "aten::addmm 70%" in lines[0]
    assert "`default` decode: 0.50x PyTorch" in lines[1] and "gate_up_proj 60%" in lines[1]
    assert "1.0 GB/s against PyTorch's 2.0 GB/s" in lines[1]


def test_tables_carry_the_ratios_and_the_agreement():
    t = layer_table(report()["llama_layer"])
    assert "| default | 10 | 2.00x | 4.00x | 4 | 0.50x | 1.00x | 1.00 | 3.0e-08 |" in t
    assert "| torch | 20 | - | 2.00x |" in t
    m = minilm_table(report()["minilm"])
    assert "| default | 12 (1.20x) | 1.6 (0.80x) |" in m and "(240 tok)" in m


def test_the_markdown_is_headed_by_host_and_date_and_reports_errors():
    md = markdown(report(), ["--rounds", "2"])
    assert md.splitlines()[2].startswith("Host `h` (2 CPUs, x86_64), 2030-01-01")
    assert "shared with other work" in md and "Kimi Linear KDA layer: error" in md
    assert "## Where the engines lose" in md
