"""The MiniLM-L6 encoder with its real weights agrees with sentence-transformers."""

import json
import subprocess
import sys

import numpy as np
import pytest

from engines._validate import MINILM_MIN_COSINE, validate
from engines.minilm import SENTENCES, TokenLimitError

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


def test_the_encoder_matches_sentence_transformers_on_real_sentences(minilm, st_reference):
    out = minilm.encode(SENTENCES)
    cos = np.sum(out * st_reference, axis=1)
    assert cos.min() >= MINILM_MIN_COSINE, cos
    assert np.abs(out - st_reference).max() < 1e-5
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("params", [
    {"FUSE_QKV": 0, "FUSE_BIAS_GELU": 0, "BUFFER_REUSE": 0, "BATCH_SIZE": 1},
    {"KERNEL_LAYERNORM": 1, "KERNEL_GEMM_BIAS": 1, "KERNEL_ATTENTION": 1, "KERNEL_GELU": 1, "BATCH_SIZE": 8},
    {"KERNEL_GELU": 1, "FUSE_BIAS_GELU": 0, "BATCH_SIZE": 64},
])
def test_every_plan_validates(minilm, st_reference, params):
    res = validate("minilm", engine=minilm, plan=params)
    assert res["status"] == "ok", res
    assert res["cosine_min"] >= MINILM_MIN_COSINE


def test_long_inputs_are_truncated_like_sentence_transformers_and_checked_otherwise(minilm):
    toks = minilm.tokenize([SENTENCES[-1]])
    assert len(toks[0]) == minilm.max_seq_length == 256
    with pytest.raises(TokenLimitError, match="at most 256"):
        minilm.check_tokens([[101] * 300])
    with pytest.raises(TokenLimitError, match="input\\[1\\] is empty"):
        minilm.check_tokens([[101, 102], []])


def test_the_cli_validate_prints_cosine_min(st_reference):
    out = subprocess.run([sys.executable, "-m", "engines", "validate", "--engine", "minilm", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["status"] == "ok" and res["cosine_min"] >= MINILM_MIN_COSINE and "max_abs_error" in res
