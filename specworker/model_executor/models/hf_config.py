"""Hugging Face `config.json` of a Llama-family checkpoint -> LlamaArch (plus what loading needs).

Supported `architectures`: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Ernie4_5ForCausalLM
(dense). Keys are read as Hugging Face writes them, in both the transformers 4 form (`rope_theta`,
`rope_scaling`) and the 5 form (`rope_parameters`); a missing optional key takes the architecture's
transformers default. Anything we do not implement (another architecture, activation, rope type,
sliding window, MoE) is rejected with the file, the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from specworker.json_file import read_json_object
from specworker.model_executor.layers.rotary import RopeScaling
from specworker.model_executor.models.llama import LlamaArch

__all__ = ["ARCHITECTURES", "HFModelInfo", "is_hf_checkpoint", "read_hf_config"]

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
MAX_ROPE_TABLE = 32768  # rows of the RoPE table at most; longer contexts are refused by the worker


@dataclasses.dataclass(frozen=True, slots=True)
class _Family:
    """How one architecture maps onto LlamaArch's options (transformers' defaults when a key is absent)."""

    model_type: str
    bias_key: str | None  # config key switching the attention (and for ERNIE the MLP) biases
    qkv_bias: bool = False  # always (Qwen2)
    bias_covers_mlp: bool = False
    qk_norm: bool = False
    tie_default: bool = False
    rope_interleaved: bool = False  # rotary pairs (2j, 2j+1): q/k rows are permuted at load
    rms_norm_eps_default: float = 1e-6


ARCHITECTURES = {
    "LlamaForCausalLM": _Family("llama", "attention_bias"),
    "Qwen2ForCausalLM": _Family("qwen2", None, qkv_bias=True),
    "Qwen3ForCausalLM": _Family("qwen3", "attention_bias", qk_norm=True),
    "Ernie4_5ForCausalLM": _Family("ernie4_5", "use_bias", bias_covers_mlp=True, tie_default=True,
                                   rope_interleaved=True, rms_norm_eps_default=1e-5),
}
ROPE_TYPES = ("default", "linear", "llama3")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HFModelInfo:
    """What config.json (and generation_config.json) say about a checkpoint."""

    model_dir: Path
    architecture: str  # e.g. "LlamaForCausalLM"
    arch: LlamaArch
    rope_interleaved: bool
    stored_dtype: str | None  # torch_dtype / dtype as written (weights are converted at load anyway)
    eos_token_ids: list[int]
    bos_token_id: int | None
    num_mtp_layers: int  # ERNIE's num_nextn_predict_layers (0 when absent)


def is_hf_checkpoint(model_dir: str | Path) -> bool:
    """True when model_dir/config.json is in Hugging Face's form (has `architectures` or `num_hidden_layers`)."""
    path = Path(model_dir) / CONFIG_FILE
    if not path.is_file():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and ("architectures" in data or "num_hidden_layers" in data)


class _Reader:
    """Typed look-ups in one config dict; errors name the file and the key."""

    def __init__(self, path: Path, data: dict[str, Any]):
        self.path, self.data = path, data

    def fail(self, key: str, value: Any, allowed: str) -> ValueError:
        return ValueError(f"{self.path}: {key} = {value!r}; allowed: {allowed}")

    def int(self, key: str, default: Any = ..., low: int = 1) -> int:
        value = self.data.get(key, default)
        if value is ...:
            raise ValueError(f"{self.path}: missing key {key!r} (an integer >= {low})")
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(key, value, f"an integer >= {low}")
        return value

    def float(self, key: str, default: Any = ..., source: dict | None = None) -> float:
        value = (self.data if source is None else source).get(key, default)
        if value is ...:
            raise ValueError(f"{self.path}: missing key {key!r} (a number > 0)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise self.fail(key, value, "a number > 0")
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, value, "true or false")
        return value


def _architecture(r: _Reader) -> str:
    archs = r.data.get("architectures")
    if archs is None:  # fall back to model_type
        by_type = {f.model_type: name for name, f in ARCHITECTURES.items()}
        model_type = r.data.get("model_type")
        if model_type not in by_type:
            raise r.fail("model_type", model_type, ", ".join(map(repr, by_type)) + " (or an architectures list)")
        return by_type[model_type]
    if not isinstance(archs, list) or len(archs) != 1 or archs[0] not in ARCHITECTURES:
        raise r.fail("architectures", archs, "one of " + ", ".join(f"[{a!r}]" for a in ARCHITECTURES))
    return archs[0]


def _rope(r: _Reader) -> tuple[float, RopeScaling | None]:
    """rope_theta and the scaling, from rope_parameters (transformers 5) or rope_theta + rope_scaling (4)."""
    params = r.data.get("rope_parameters")
    key = "rope_parameters"
    if params is None:
        params, key = r.data.get("rope_scaling"), "rope_scaling"
    if params is not None and not isinstance(params, dict):
        raise r.fail(key, params, "a JSON object or null")
    params = params or {}
    theta_source = params if "rope_theta" in params else r.data
    theta = r.float("rope_theta", 10000.0, theta_source)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise r.fail(f"{key}.rope_type", rope_type, ", ".join(map(repr, ROPE_TYPES)))
    if rope_type == "default":
        return theta, None
    try:
        factor = float(params["factor"])
        if rope_type == "linear":
            return theta, RopeScaling(rope_type="linear", factor=factor)
        return theta, RopeScaling(rope_type="llama3", factor=factor, low_freq_factor=float(params["low_freq_factor"]),
                                  high_freq_factor=float(params["high_freq_factor"]),
                                  original_max_position_embeddings=int(params["original_max_position_embeddings"]))
    except KeyError as err:
        raise ValueError(f"{r.path}: {key} of rope_type {rope_type!r} lacks {err.args[0]!r}") from None
    except (TypeError, ValueError):
        raise r.fail(key, params, f"numbers for the {rope_type!r} parameters") from None


def _reject_unsupported(r: _Reader, architecture: str) -> None:
    act = r.data.get("hidden_act", r.data.get("hidden_activation", "silu"))
    if act != "silu":
        raise r.fail("hidden_act", act, "'silu' (SwiGLU MLP)")
    if r.data.get("use_sliding_window"):
        raise r.fail("use_sliding_window", True, "false (sliding-window attention is not implemented)")
    for key in ("moe_num_experts", "num_experts", "num_local_experts"):
        if r.data.get(key):
            raise r.fail(key, r.data[key], f"absent or 0 ({architecture} is loaded as a dense model; MoE is not "
                         "implemented)")


def _eos_bos(model_dir: Path, config: dict[str, Any]) -> tuple[list[int], int | None]:
    """eos ids (a list; generation_config.json first, then config.json) and the bos id."""
    gen_path = model_dir / GENERATION_CONFIG_FILE
    gen = read_json_object(gen_path) if gen_path.is_file() else {}
    eos, bos, where = None, None, gen_path
    for source, path in ((gen, gen_path), (config, model_dir / CONFIG_FILE)):
        if eos is None and source.get("eos_token_id") is not None:
            eos, where = source["eos_token_id"], path
        if bos is None and source.get("bos_token_id") is not None:
            bos = source["bos_token_id"]
    if eos is None:
        return [], bos
    ids = eos if isinstance(eos, list) else [eos]
    if not ids or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ids):
        raise ValueError(f"{where}: eos_token_id = {eos!r}; allowed: a token id or a list of token ids")
    return list(dict.fromkeys(ids)), bos if isinstance(bos, int) and not isinstance(bos, bool) else None


def read_hf_config(model_dir: str | Path) -> HFModelInfo:
    """Parses model_dir/config.json. Raises FileNotFoundError / ValueError naming the file and the key."""
    model_dir = Path(model_dir)
    path = model_dir / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: checkpoint config not found (a Hugging Face model directory holds "
                                f"{CONFIG_FILE}, model.safetensors or its shards, and tokenizer.json)")
    r = _Reader(path, read_json_object(path))
    architecture = _architecture(r)
    family = ARCHITECTURES[architecture]
    _reject_unsupported(r, architecture)
    hidden, heads = r.int("hidden_size"), r.int("num_attention_heads")
    kv_heads = r.int("num_key_value_heads", heads)
    if heads % kv_heads:
        raise r.fail("num_key_value_heads", kv_heads, f"a divisor of num_attention_heads = {heads}")
    head_dim = r.data.get("head_dim")
    head_dim = hidden // heads if head_dim is None else r.int("head_dim")
    if head_dim % 2:
        raise r.fail("head_dim", head_dim, "an even number (rotary pairs)")
    if r.data.get("head_dim") is None and hidden % heads:
        raise r.fail("hidden_size", hidden, f"a multiple of num_attention_heads = {heads} (or an explicit head_dim)")
    theta, scaling = _rope(r)
    bias = r.bool(family.bias_key, False) if family.bias_key else False
    arch = LlamaArch(
        vocab_size=r.int("vocab_size"), hidden_size=hidden, num_layers=r.int("num_hidden_layers"), num_heads=heads,
        num_kv_heads=kv_heads, intermediate_size=r.int("intermediate_size"), rope_theta=theta,
        rms_norm_eps=r.float("rms_norm_eps", family.rms_norm_eps_default), head_dim=head_dim,
        qkv_bias=family.qkv_bias or bias, o_bias=bias, mlp_bias=r.bool("mlp_bias", False) or
        (bias and family.bias_covers_mlp), qk_norm=family.qk_norm,
        tie_word_embeddings=r.bool("tie_word_embeddings", family.tie_default), rope_scaling=scaling,
        max_position=min(r.int("max_position_embeddings", 4096), MAX_ROPE_TABLE))
    eos, bos = _eos_bos(model_dir, r.data)
    dtype = r.data.get("torch_dtype", r.data.get("dtype"))
    return HFModelInfo(model_dir=model_dir, architecture=architecture, arch=arch,
                       rope_interleaved=family.rope_interleaved, stored_dtype=dtype if isinstance(dtype, str) else None,
                       eos_token_ids=eos, bos_token_id=bos,
                       num_mtp_layers=r.int("num_nextn_predict_layers", 0, low=0))
