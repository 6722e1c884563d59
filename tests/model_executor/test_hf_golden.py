"""Hugging Face checkpoints through specworker's loader vs logits recorded by the reference library.

tests/data/hf_tiny/<case>/ are tiny random checkpoints written by transformers' save_pretrained and
tests/data/hf_tiny/golden/<case>.npz their logits from transformers (tools/make_hf_golden.py, committed
outputs; this test needs neither torch nor transformers). Both of our forward paths are checked: the
training path (BLAS matmul, dense attention) and the inference path (batch-invariant linear, paged
attention over a KV cache, prefill then decode one token at a time).
"""

from pathlib import Path

import numpy as np
import paddle
import pytest

from specworker.model_executor.models.hf_checkpoint import load_hf_target
from specworker.model_executor.models.hf_config import read_hf_config
from tests.model_executor.test_llama import TargetRunner

DATA = Path(__file__).resolve().parents[1] / "data" / "hf_tiny"
CASES = ["llama", "llama_linear", "llama_sharded", "llama_bf16", "llama_fp16", "qwen2", "qwen3", "ernie4_5"]
ATOL = 1e-4


def _golden(case: str):
    data = np.load(DATA / "golden" / f"{case}.npz")
    return data["input_ids"], data["logits"]


@pytest.fixture(scope="module", params=CASES)
def loaded(request):
    return request.param, load_hf_target(DATA / request.param)


def test_golden_training_path(loaded):
    case, model = loaded
    ids, want = _golden(case)
    with paddle.no_grad():
        got = model.logits_train(model.forward_train(paddle.to_tensor(ids))).numpy()
    diff = float(np.abs(got - want).max())
    print(f"{case}: training path max abs diff {diff:.3g}")
    assert diff <= ATOL, f"{case}: max abs diff {diff}"
    assert np.array_equal(got.argmax(-1), want.argmax(-1))


def test_golden_inference_path(loaded):
    """Both rows prefilled together over their first half, then the rest one token per step (paged KV)."""
    case, model = loaded
    ids, want = _golden(case)
    rows, length = ids.shape
    half = length // 2
    runner = TargetRunner(model, rows)
    got = np.zeros_like(want)
    _, logits, cu = runner.step({b: (ids[b, :half].tolist(), 0, True) for b in range(rows)})
    for b in range(rows):
        got[b, :half] = logits[cu[b]:cu[b + 1]]
    for pos in range(half, length):
        _, logits, cu = runner.step({b: ([int(ids[b, pos])], pos, False) for b in range(rows)})
        for b in range(rows):
            got[b, pos] = logits[cu[b]]
    diff = float(np.abs(got - want).max())
    print(f"{case}: inference path max abs diff {diff:.3g}")
    assert diff <= ATOL, f"{case}: max abs diff {diff}"
    assert np.array_equal(got.argmax(-1), want.argmax(-1))


def test_golden_cases_cover_the_options():
    """The committed checkpoints exercise what the loader claims to support (so the golden tests mean it)."""
    infos = {case: read_hf_config(DATA / case) for case in CASES}
    llama = infos["llama"].arch
    assert llama.head_dim != llama.hidden_size // llama.num_heads and llama.num_kv_heads < llama.num_heads
    assert llama.tie_word_embeddings and llama.qkv_bias and llama.o_bias and llama.mlp_bias
    assert llama.rope_scaling.rope_type == "llama3"
    assert infos["llama_linear"].arch.rope_scaling.rope_type == "linear"
    assert not infos["llama_linear"].arch.tie_word_embeddings
    assert (DATA / "llama_sharded" / "model.safetensors.index.json").is_file()
    assert infos["qwen2"].arch.qkv_bias and not infos["qwen2"].arch.o_bias
    assert infos["qwen3"].arch.qk_norm
    assert infos["ernie4_5"].rope_interleaved
    for case, dtype in (("llama_bf16", "BF16"), ("llama_fp16", "F16")):
        header = (DATA / case / "model.safetensors").read_bytes()[:4096]
        assert f'"dtype":"{dtype}"'.encode() in header


def test_golden_transformers5_config_layout(tmp_path):
    """transformers 5 writes rope_parameters (rope_theta inside) and dtype: the same checkpoint loads the same."""
    import json
    import shutil

    for case in ("llama", "llama_linear"):
        dst = tmp_path / case
        shutil.copytree(DATA / case, dst)
        cfg = json.loads((dst / "config.json").read_text())
        scaling = cfg.pop("rope_scaling") or {"rope_type": "default"}
        cfg["rope_parameters"] = {**scaling, "rope_theta": cfg.pop("rope_theta")}
        cfg["dtype"] = cfg.pop("torch_dtype")
        (dst / "config.json").write_text(json.dumps(cfg))
        model = load_hf_target(dst)
        ids, want = _golden(case)
        with paddle.no_grad():
            got = model.logits_train(model.forward_train(paddle.to_tensor(ids))).numpy()
        assert float(np.abs(got - want).max()) <= ATOL, case
