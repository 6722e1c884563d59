"""Bad Hugging Face checkpoints: each gives one clear error naming the file and the field, never a traceback
from deep inside (loader, tokenizer, and through the CLI)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from specworker.hf_tokenizer import HFTokenizer
from specworker.model_executor.models.hf_checkpoint import load_hf_target
from specworker.model_executor.models.hf_config import read_hf_config
from tests.test_cli import assert_one_line_error, specworker

DATA = Path(__file__).resolve().parents[1] / "data" / "hf_tiny"


@pytest.fixture
def ckpt(tmp_path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(DATA / "llama_linear", dst)
    return dst


def _edit_config(path: Path, **changes) -> None:
    cfg = json.loads((path / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (path / "config.json").write_text(json.dumps(cfg))


def _edit_weights(path: Path, edit) -> None:
    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"))


CONFIG_CASES = {
    "architecture": (dict(architectures=["GPT2LMHeadModel"]), "architectures = ['GPT2LMHeadModel']; allowed: one of"),
    "two_architectures": (dict(architectures=["LlamaForCausalLM", "Qwen2ForCausalLM"]), "architectures = "),
    "rope_type": (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}),
                  "rope_scaling.rope_type = 'yarn'; allowed: 'default', 'linear', 'llama3'"),
    "rope_llama3_incomplete": (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "lacks 'low_freq_factor'"),
    "activation": (dict(hidden_act="gelu"), "hidden_act = 'gelu'; allowed: 'silu'"),
    "kv_heads": (dict(num_key_value_heads=3), "num_key_value_heads = 3; allowed: a divisor of num_attention_heads"),
    "missing_hidden": (dict(hidden_size=None), "missing key 'hidden_size'"),
    "bool_layers": (dict(num_hidden_layers=True), "num_hidden_layers = True; allowed: an integer >= 1"),
    "moe": (dict(num_local_experts=8), "num_local_experts = 8"),
    "sliding_window": (dict(use_sliding_window=True), "use_sliding_window = True"),
    "eos_string": (dict(eos_token_id="</s>"), "eos_token_id = '</s>'"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_bad_config_names_file_and_key(ckpt, case):
    changes, message = CONFIG_CASES[case]
    _edit_config(ckpt, **changes)
    if case == "eos_string":
        (ckpt / "generation_config.json").unlink()
    with pytest.raises(ValueError) as err:
        load_hf_target(ckpt)
    assert message in str(err.value) and "config.json" in str(err.value), str(err.value)


def test_missing_config_and_weights(ckpt, tmp_path):
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"ckpt: no weights \(model.safetensors or model.safetensors.index"):
        load_hf_target(ckpt)
    with pytest.raises(FileNotFoundError, match="config.json: checkpoint config not found"):
        read_hf_config(tmp_path)


def test_shape_that_does_not_fit_the_config(ckpt):
    _edit_config(ckpt, intermediate_size=96)
    with pytest.raises(ValueError, match=r"model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' is "
                                         r"\[128, 64\], but config.json implies \[96, 64\]"):
        load_hf_target(ckpt)


def test_missing_and_unexpected_tensor(ckpt):
    _edit_weights(ckpt, lambda t: t.pop("model.layers.1.self_attn.k_proj.weight"))
    with pytest.raises(ValueError, match=r"missing tensor 'model.layers.1.self_attn.k_proj.weight' \(expected "
                                         r"\[\d+, 64\]"):
        load_hf_target(ckpt)
    shutil.copy(DATA / "llama_linear" / "model.safetensors", ckpt / "model.safetensors")
    _edit_weights(ckpt, lambda t: t.update({"model.layers.0.self_attn.q_proj.bias": np.zeros(64, np.float32)}))
    with pytest.raises(ValueError, match=r"unexpected tensor 'model.layers.0.self_attn.q_proj.bias'"):
        load_hf_target(ckpt)


def test_truncated_and_corrupt_safetensors(ckpt):
    path = ckpt / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-1000])
    with pytest.raises(ValueError, match=r"model.safetensors: truncated: tensor '.*' ends at byte"):
        load_hf_target(ckpt)
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(ValueError, match="not a safetensors file"):
        load_hf_target(ckpt)
    path.write_bytes(b"abc")
    with pytest.raises(ValueError, match="not a safetensors file"):
        load_hf_target(ckpt)


def test_missing_shard(tmp_path):
    ckpt = tmp_path / "sharded"
    shutil.copytree(DATA / "llama_sharded", ckpt)
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[-1]
    (ckpt / shard).unlink()
    with pytest.raises(FileNotFoundError, match=f"{shard}: shard listed in .*model.safetensors.index.json not found"):
        load_hf_target(ckpt)


def test_tokenizer_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json: tokenizer not found"):
        HFTokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="tokenizer.json: not a readable tokenizer.json"):
        HFTokenizer(tmp_path)


def test_cli_reports_bad_checkpoint_in_one_line(ckpt, tmp_path):
    _edit_config(ckpt, architectures=["MistralForCausalLM"])
    config = tmp_path / "c.yaml"
    config.write_text(f"model:\n  path: {ckpt}\nscheduler:\n  max_num_seqs: 2\n  max_model_len: 64\n  num_blocks: 16\n")
    assert_one_line_error(specworker("run", "--config", str(config)), "cannot load the model weights",
                          "architectures = ['MistralForCausalLM']")
    assert_one_line_error(specworker("check-config", str(config)), "cannot read the model",
                          "architectures = ['MistralForCausalLM']")
