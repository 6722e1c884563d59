"""MTP drafts stored in Hugging Face checkpoints (ERNIE 4.5 and DeepSeek-V3 naming) vs a numpy reference
written from those models' definitions (HF tensor layout, interleaved RoPE for ERNIE, hidden state after
the target's final norm, concat order [embedding, hidden]). The transformers classes have no MTP layer, so
the reference is ours; the target under it is the golden-tested loader's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import paddle
import pytest
from safetensors.numpy import load_file, save_file

from specworker.model_executor.models.hf_checkpoint import load_hf_mtp, load_hf_target
from specworker.model_executor.models.hf_config import read_hf_config

DATA = Path(__file__).resolve().parents[1] / "data" / "hf_tiny"


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rope(x, pos, theta, interleaved):
    """x [L, heads, d] rotated HF-style: pairs (j, j + d/2), or (2j, 2j + 1) when interleaved."""
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2) / d)
    ang = pos[:, None] * inv[None, :]  # [L, d/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * c - b * s, b * c + a * s
        return out
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * c - b * s, b * c + a * s], -1)


def _ref_layer(x, t, p, arch, interleaved):
    """One HF decoder layer over a whole sequence x [L, H] from tensors t under prefix p."""
    length, hd = x.shape[0], arch.head_dim
    h = _rms(x, t[p + "input_layernorm.weight"], arch.rms_norm_eps)
    q = (h @ t[p + "self_attn.q_proj.weight"].T).reshape(length, arch.num_heads, hd)
    k = (h @ t[p + "self_attn.k_proj.weight"].T).reshape(length, arch.num_kv_heads, hd)
    v = (h @ t[p + "self_attn.v_proj.weight"].T).reshape(length, arch.num_kv_heads, hd)
    pos = np.arange(length, dtype=np.float64)
    if arch.rope_scaling is not None:  # the cases here: none, or linear (positions / factor)
        assert arch.rope_scaling.rope_type == "linear"
        pos = pos / arch.rope_scaling.factor
    q, k = _rope(q, pos, arch.rope_theta, interleaved), _rope(k, pos, arch.rope_theta, interleaved)
    group = arch.num_heads // arch.num_kv_heads
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + np.triu(np.full((length, length), -np.inf), 1)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    x = x + np.einsum("hqk,khd->qhd", probs, v).reshape(length, -1) @ t[p + "self_attn.o_proj.weight"].T
    h = _rms(x, t[p + "post_attention_layernorm.weight"], arch.rms_norm_eps)
    gate, up = h @ t[p + "mlp.gate_proj.weight"].T, h @ t[p + "mlp.up_proj.weight"].T
    return x + (gate / (1 + np.exp(-gate)) * up) @ t[p + "mlp.down_proj.weight"].T


def _write_mtp(src_case: str, dst: Path, naming: str) -> dict[str, np.ndarray]:
    """Copies a tiny checkpoint and adds a random MTP layer under `naming`; returns all tensors (float64)."""
    shutil.copytree(DATA / src_case, dst)
    info = read_hf_config(dst)
    a, rng = info.arch, np.random.default_rng(5)
    tensors = load_file(str(dst / "model.safetensors"))
    prefix = "model.mtp_block.0." if naming == "ernie" else f"model.layers.{a.num_layers}."
    layer0 = {k[len("model.layers.0."):]: v for k, v in tensors.items() if k.startswith("model.layers.0.")}
    new = {prefix + k: (rng.normal(1.0, 0.2, v.shape) if "norm" in k else rng.normal(0, 0.2, v.shape))
           for k, v in layer0.items()}
    h = a.hidden_size
    names = ({"e": "model.mtp_emb_norm.0.weight", "h": "model.mtp_hidden_norm.0.weight",
              "proj": "model.mtp_linear_proj.0.weight"} if naming == "ernie" else
             {"e": prefix + "enorm.weight", "h": prefix + "hnorm.weight", "proj": prefix + "eh_proj.weight",
              "out": prefix + "shared_head.norm.weight"})
    new[names["e"]], new[names["h"]] = rng.normal(1.0, 0.2, h), rng.normal(1.0, 0.2, h)
    new[names["proj"]] = rng.normal(0, 0.2, (h, 2 * h))
    if "out" in names:
        new[names["out"]] = rng.normal(1.0, 0.2, h)
    tensors.update({k: v.astype(np.float32) for k, v in new.items()})
    save_file(tensors, str(dst / "model.safetensors"))
    cfg = json.loads((dst / "config.json").read_text())
    cfg["num_nextn_predict_layers"] = 1
    (dst / "config.json").write_text(json.dumps(cfg))
    return {k: v.astype(np.float64) for k, v in tensors.items()}, names, prefix


@pytest.mark.parametrize("src_case,naming", [("ernie4_5", "ernie"), ("llama_linear", "deepseek")])
def test_hf_mtp_matches_reference(tmp_path, src_case, naming):
    tensors, names, prefix = _write_mtp(src_case, tmp_path / "ckpt", naming)
    info = read_hf_config(tmp_path / "ckpt")
    a = info.arch
    target = load_hf_target(tmp_path / "ckpt")  # the MTP tensors are not an error for the target
    draft = load_hf_mtp(tmp_path / "ckpt", target)
    ids = np.random.default_rng(1).integers(0, a.vocab_size, (1, 10))
    with paddle.no_grad():
        hidden = target.forward_train(paddle.to_tensor(ids))[0]  # [L, H] before the final norm
        prev = draft.prepare_hidden(hidden, from_target=True)
        nxt = np.roll(ids, -1, axis=1)  # token_{i+1} at column i (the last column is unused)
        got_h = draft.forward_train(paddle.to_tensor(nxt), prev.unsqueeze(0))[0]
        got = draft.compute_logits(got_h).numpy()
    eps = a.rms_norm_eps
    h_final = _rms(hidden.numpy().astype(np.float64), tensors["model.norm.weight"], eps)
    embed = tensors["model.embed_tokens.weight"]
    fused = np.concatenate([_rms(embed[nxt[0]], tensors[names["e"]], eps), _rms(h_final, tensors[names["h"]], eps)], -1)
    out = _ref_layer(fused @ tensors[names["proj"]].T, tensors, prefix, a, info.rope_interleaved)
    out_norm = tensors[names.get("out", "model.norm.weight")]
    head = embed if a.tie_word_embeddings else tensors["lm_head.weight"]
    want = _rms(out, out_norm, eps) @ head.T
    diff = float(np.abs(got - want).max())
    assert diff <= 1e-4 and np.array_equal(got.argmax(-1), want.argmax(-1)), diff
    assert draft.hidden_after_norm and (draft.final_norm is not None) == (naming == "deepseek")


def test_hf_mtp_absent_is_a_clear_error():
    target = load_hf_target(DATA / "llama_linear")
    with pytest.raises(ValueError, match="no MTP layer in this checkpoint"):
        load_hf_mtp(DATA / "llama_linear", target)
