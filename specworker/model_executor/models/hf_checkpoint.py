"""Loads Hugging Face-layout checkpoints (config.json + model.safetensors or shards) into LlamaModel / MTPDraft.

The loader only fills the parameters of the same batch-invariant model the tiny pair uses; it never
changes the inference path. Per parameter it reads the checkpoint tensors it is made of (one layer at a
time, memory-mapped, bf16 / fp16 widened to float32), checks their shapes against config.json,
transposes HF's [out, in] Linear weights to our [in, out], fuses q/k/v and gate/up, and for
interleaved-RoPE checkpoints (ERNIE 4.5) permutes the q/k rows of every head so that pairs (2j, 2j+1)
become (j, j + d/2), our half-split rotation: the same permutation on q and k leaves every q.k
product, hence the attention, unchanged.

MTP drafts (docs/spec.md §5) come from the target's own checkpoint: ERNIE 4.5's `model.mtp_emb_norm.0`,
`model.mtp_hidden_norm.0`, `model.mtp_linear_proj.0` ([H, 2H]) and `model.mtp_block.0.*`, or DeepSeek-V3's
`model.layers.{L}.{enorm, hnorm, eh_proj, shared_head.norm}` + decoder layer at L = num_hidden_layers.
Both concatenate [embedding, hidden] in that order and take the target's hidden state after its final
norm (hidden_after_norm); the tiny pair's draft takes it before.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import paddle

from specworker.config import check_tensor_parallel
from specworker.model_executor.layers.decoder_layer import skip_random_init
from specworker.model_executor.models.hf_config import HFModelInfo, read_hf_config
from specworker.model_executor.models.llama import LlamaArch, LlamaModel
from specworker.model_executor.models.mtp import MTPDraft
from specworker.model_executor.models.safetensors_io import SafetensorsFile
from specworker.model_executor.models.tp_shards import Shard, heads_span, read_shard, vocab_shard
from specworker.model_executor.parallel import SINGLE_RANK, TensorParallel

__all__ = ["HFWeights", "load_hf_mtp", "load_hf_target"]

SINGLE_FILE, INDEX_FILE = "model.safetensors", "model.safetensors.index.json"
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


class HFWeights:
    """The tensors of a checkpoint directory: name -> shard, opened lazily; tracks which were used."""

    def __init__(self, model_dir: Path):
        self.model_dir = model_dir
        index = model_dir / INDEX_FILE
        single = model_dir / SINGLE_FILE
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
                raise ValueError(f"{index}: not a safetensors index (needs a 'weight_map' object; {err})") from None
            if not isinstance(weight_map, dict):
                raise ValueError(f"{index}: weight_map = {type(weight_map).__name__}; allowed: an object")
            self.files = {name: model_dir / shard for name, shard in weight_map.items()}
            for shard in sorted(set(self.files.values())):
                if not shard.is_file():
                    raise FileNotFoundError(f"{shard}: shard listed in {index} not found")
        elif single.is_file():
            self.files = {name: single for name in SafetensorsFile(single).names}
        else:
            raise FileNotFoundError(f"{model_dir}: no weights ({SINGLE_FILE} or {INDEX_FILE} with its shards)")
        self._open: dict[Path, SafetensorsFile] = {}
        self.used: set[str] = set()

    def check_headers(self) -> dict[str, int]:
        """Opens every shard's header (truncation and format checks); returns tensor counts per stored dtype."""
        counts: dict[str, int] = {}
        for name in self.files:
            f = self._file(name)
            counts[f.dtype(name)] = counts.get(f.dtype(name), 0) + 1
        return counts

    def __contains__(self, name: str) -> bool:
        return name in self.files

    def _file(self, name: str) -> SafetensorsFile:
        path = self.files[name]
        if path not in self._open:
            self._open[path] = SafetensorsFile(path)
        f = self._open[path]
        if name not in f.names:
            raise ValueError(f"{path}: tensor {name!r} is listed in {INDEX_FILE} but not in this shard")
        return f

    def read(self, name: str, shape: list[int], shard: Shard | None = None) -> np.ndarray:
        """Tensor `name` as float32, checked to be `shape`; with a shard only that slice is read."""
        if name not in self.files:
            raise ValueError(f"{self.model_dir}: missing tensor {name!r} (expected {shape} by config.json)")
        f = self._file(name)
        if f.shape(name) != shape:
            raise ValueError(f"{f.path}: tensor {name!r} is {f.shape(name)}, but config.json implies {shape}")
        self.used.add(name)
        return f.float32(name) if shard is None else read_shard(f, name, shard)

    def check_all_used(self, extra_ok: Callable[[str], bool]) -> None:
        for name in sorted(self.files):
            if name not in self.used and not name.endswith(_IGNORED_SUFFIXES) and not extra_ok(name):
                raise ValueError(f"{self.files[name]}: unexpected tensor {name!r} (not part of this architecture "
                                 "as config.json describes it)")


def _interleaved_to_half(w: np.ndarray, heads: int, head_dim: int) -> np.ndarray:
    """Rows of each head reordered (0, 2, 4, ..., 1, 3, 5, ...): [heads * head_dim, ...] -> same shape."""
    rest = w.shape[1:]
    return w.reshape(heads, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def _layer_tensors(w: HFWeights, src: str, arch: LlamaArch, interleaved: bool,
                   tp: TensorParallel = SINGLE_RANK) -> dict[str, np.ndarray]:
    """Our DecoderLayer's parameters (names relative to the layer) from the HF tensors under `src`; with
    tp.size > 1 this rank's share: its heads' rows of q/k/v (columns of o), its intermediate rows of gate /
    up (columns of down). A head's rows move together, so the interleaved-RoPE permutation commutes with it."""
    h, hd, i = arch.hidden_size, arch.head_dim, arch.intermediate_size
    q_rows, kv_rows = arch.num_heads * hd, arch.num_kv_heads * hd
    heads, kv_heads = arch.num_heads // tp.size, arch.num_kv_heads // tp.size  # this rank's
    # None (whole tensors) on one rank, so the single-rank path reads exactly as before
    q_part, kv_part, i_part = (None, None, None) if tp.size == 1 else (
        (heads_span(tp, arch.num_heads, hd),), (heads_span(tp, arch.num_kv_heads, hd),), (tp.part(i),))

    def rows(n: int, part):  # this rank's rows (axis 0) of an [n, ...] tensor
        return None if part is None else Shard(0, n, part)

    def cols(n: int, part):  # this rank's columns (axis 1) of an [h, n] tensor
        return None if part is None else Shard(1, n, part)

    def rot(x: np.ndarray, heads: int) -> np.ndarray:
        return _interleaved_to_half(x, heads, hd) if interleaved else x

    a, m = f"{src}self_attn.", f"{src}mlp."
    out = {
        "input_norm.weight": w.read(f"{src}input_layernorm.weight", [h]),
        "post_attn_norm.weight": w.read(f"{src}post_attention_layernorm.weight", [h]),
        "attn.qkv_proj": np.concatenate(
            [rot(w.read(f"{a}q_proj.weight", [q_rows, h], rows(q_rows, q_part)), heads).T,
             rot(w.read(f"{a}k_proj.weight", [kv_rows, h], rows(kv_rows, kv_part)), kv_heads).T,
             w.read(f"{a}v_proj.weight", [kv_rows, h], rows(kv_rows, kv_part)).T], axis=1),
        "attn.o_proj": w.read(f"{a}o_proj.weight", [h, q_rows], cols(q_rows, q_part)).T,
        "mlp.gate_up_proj": np.concatenate([w.read(f"{m}gate_proj.weight", [i, h], rows(i, i_part)).T,
                                            w.read(f"{m}up_proj.weight", [i, h], rows(i, i_part)).T], axis=1),
        "mlp.down_proj": w.read(f"{m}down_proj.weight", [h, i], cols(i, i_part)).T,
    }
    if arch.qkv_bias:
        out["attn.qkv_bias"] = np.concatenate([rot(w.read(f"{a}q_proj.bias", [q_rows], rows(q_rows, q_part)), heads),
                                               rot(w.read(f"{a}k_proj.bias", [kv_rows], rows(kv_rows, kv_part)),
                                                   kv_heads),
                                               w.read(f"{a}v_proj.bias", [kv_rows], rows(kv_rows, kv_part))])
    if arch.o_bias:
        out["attn.o_bias"] = w.read(f"{a}o_proj.bias", [h])
    if arch.qk_norm:
        out["attn.q_norm.weight"] = w.read(f"{a}q_norm.weight", [hd])
        out["attn.k_norm.weight"] = w.read(f"{a}k_norm.weight", [hd])
    if arch.mlp_bias:
        out["mlp.gate_up_bias"] = np.concatenate([w.read(f"{m}gate_proj.bias", [i], rows(i, i_part)),
                                                  w.read(f"{m}up_proj.bias", [i], rows(i, i_part))])
        out["mlp.down_bias"] = w.read(f"{m}down_proj.bias", [h])
    return out


def _fill(layer: paddle.nn.Layer, values: dict[str, np.ndarray], where: str) -> None:
    """Sets every parameter of `layer` from `values` (exactly its names)."""
    params = dict(layer.named_parameters())
    missing = sorted(set(params) - set(values))
    if missing:  # a loader bug, not a user error: the plan must cover the architecture
        raise AssertionError(f"{where}: no checkpoint source for {missing}")
    for name, value in values.items():
        param = params[name]
        if list(value.shape) != list(param.shape):
            raise AssertionError(f"{where}: {name} built as {list(value.shape)}, parameter is {list(param.shape)}")
        param.set_value(np.ascontiguousarray(value, dtype=np.float32))


def _is_mtp_tensor(name: str, arch: LlamaArch) -> bool:
    if name.startswith("model.mtp_"):
        return True
    prefix = f"model.layers.{arch.num_layers}."
    return name.startswith(prefix)


def load_hf_target(model_dir: str | Path, place=None, *, info: HFModelInfo | None = None,
                   linear_weight_dtype: str = "float32", tp: TensorParallel = SINGLE_RANK) -> LlamaModel:
    """The target of a Hugging Face checkpoint directory on `place` (default CPU), float32 compute, its linear
    weights packed for inference in linear_weight_dtype (LlamaModel.pack_weights); with tp.size > 1 this
    rank's shard, only its slices read.

    Raises FileNotFoundError (config, weights or a shard missing) or ValueError (unsupported config,
    a tensor missing, unexpected or of the wrong shape, an unreadable or truncated file), naming the file.
    """
    info = info or read_hf_config(model_dir)
    arch, weights = info.arch, HFWeights(Path(model_dir))
    check_tensor_parallel(tp.size, num_heads=arch.num_heads, num_kv_heads=arch.num_kv_heads,
                          intermediate_size=arch.intermediate_size, where=str(Path(model_dir) / "config.json"))
    with skip_random_init():
        model = LlamaModel(arch, tp)
    h, v = arch.hidden_size, arch.vocab_size
    for n, layer in enumerate(model.layers):
        _fill(layer, _layer_tensors(weights, f"model.layers.{n}.", arch, info.rope_interleaved, tp), f"layer {n}")
    vocab = None if tp.size == 1 else vocab_shard(tp, v, 0)  # this rank's rows of [V, H], zero-padded
    embed = weights.read("model.embed_tokens.weight", [v, h], vocab)
    head = embed if arch.tie_word_embeddings else weights.read("lm_head.weight", [v, h], vocab)
    rest = {"embed_tokens": embed, "norm.weight": weights.read("model.norm.weight", [h]),
            "lm_head": np.ascontiguousarray(head.T)}
    del head
    for name, value in rest.items():
        dict(model.named_parameters())[name].set_value(value)
    del embed, rest
    weights.check_all_used(lambda name: _is_mtp_tensor(name, arch) or
                           (arch.tie_word_embeddings and name == "lm_head.weight"))
    model.eos_token_ids = info.eos_token_ids
    model.eval()
    model.to_place(place or paddle.CPUPlace())
    model.pack_weights(linear_weight_dtype)
    return model


def load_hf_mtp(model_dir: str | Path, target: LlamaModel, place=None, *,
                linear_weight_dtype: str = "float32") -> MTPDraft:
    """The MTP draft stored in a Hugging Face checkpoint (ERNIE or DeepSeek-V3 naming), sharing `target`'s
    embedding, lm_head and (ERNIE) final norm. Raises ValueError when the checkpoint has no MTP layer."""
    info = read_hf_config(model_dir)
    arch, weights = info.arch, HFWeights(Path(model_dir))
    h = arch.hidden_size
    deepseek = f"model.layers.{arch.num_layers}."
    if "model.mtp_linear_proj.0.weight" in weights:
        own_norm = False
        values = {"enorm.weight": weights.read("model.mtp_emb_norm.0.weight", [h]),
                  "hnorm.weight": weights.read("model.mtp_hidden_norm.0.weight", [h]),
                  "eh_proj": weights.read("model.mtp_linear_proj.0.weight", [h, 2 * h]).T}
        src = "model.mtp_block.0."
    elif f"{deepseek}eh_proj.weight" in weights:
        own_norm = f"{deepseek}shared_head.norm.weight" in weights
        values = {"enorm.weight": weights.read(f"{deepseek}enorm.weight", [h]),
                  "hnorm.weight": weights.read(f"{deepseek}hnorm.weight", [h]),
                  "eh_proj": weights.read(f"{deepseek}eh_proj.weight", [h, 2 * h]).T}
        if own_norm:
            values["final_norm.weight"] = weights.read(f"{deepseek}shared_head.norm.weight", [h])
        src = deepseek
    else:
        raise ValueError(f"{model_dir}: no MTP layer in this checkpoint (looked for ERNIE's "
                         f"model.mtp_linear_proj.0.weight and DeepSeek-V3's {deepseek}eh_proj.weight)")
    with skip_random_init():
        draft = MTPDraft(target, hidden_after_norm=True, own_final_norm=own_norm)
    for name, value in _layer_tensors(weights, src, arch, info.rope_interleaved, target.tp).items():
        values[f"layer.{name}"] = value
    _fill(draft, values, f"{model_dir} MTP layer")
    draft.eval()
    draft.to(place or paddle.CPUPlace())
    draft.pack_weights(linear_weight_dtype)
    return draft
