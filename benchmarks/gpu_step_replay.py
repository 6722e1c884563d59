"""Whole-step GPU replay (CuPy, no Paddle): the kernel sequence of one speculative step for SmolLM2-135M and a
Llama-3-8B-shaped model (random bf16 weights), captured in CUDA graphs, at batch 1, 8, 32, 128 and tokens per
slot 1 (decode) and k + 1 = 3, 4 (verify), and the speedup that an acceptance length implies.

Runs on a GPU machine with nvcc + CuPy (the harness builds the kernels):
    python3 benchmarks/gpu_step_replay.py [--out benchmarks/results/gpu_step_replay.json] [--models ...]

Three graphs per (model, batch, k), each replayed 10 times after warm-up, median of 5 timings:
  decode  (n = 1): pre_process, target forward over B rows, rebuild_padding, lm_head, argmax, state ops
  verify  (n = k + 1): the same over B (k + 1) rows, then speculate_verify (greedy) before the state ops
  draft   (MTP, num_model_steps = k): draft_model_preprocess, eagle_get_hidden_states, then k substeps of the
          one-layer MTP module (substep 0 over the k + 1 rows of each slot, the others over 1 row), each with
          its lm_head (shared with the target) and argmax.
Target forward per layer: rms_norm, qkv linear, rotary, paged_attention (append + attention), o linear, residual +
rms_norm, gate_up linear, SiLU * up, down linear (residual added by the next norm). Ours (specworker launchers
through kernel_harness): batch_invariant_linear_bf16 (every linear, lm_head with float32 logits), fused_rms_norm
bf16 (every norm, the residual adds fused in; out of place, so the residual stream alternates between two buffers),
fused_swiglu bf16 (SiLU * up), qkv_norm_rotary bf16 (split + rotary, no q/k norms in these models), paged_attention
bf16, speculate_pre_process, rebuild_padding, speculate_verify, speculate_update,
speculate_set_value_by_flags_and_idx, draft_model_preprocess, eagle_get_hidden_states. CuPy RawKernels (no
specworker kernel exists): embedding gather, the rotary factors' gather
by position (once per forward, as RotaryEmbedding.factors), row argmax, the MTP input concat (its two
norms are fused_rms_norm), the draft's last-row gather. Not replayed: draft_model_update, draft_model_postprocess,
sampling other than greedy. The state ops run on their own copies of the slot state (from reference/cases), so graph
replays do not move the forward's lengths; every slot has CONTEXT cached tokens before the step.
Predicted speedup = AL / (verify / decode + draft / decode), at two measured ALs: the tiny pair's (README: k = 2
AL 2.82 at batch 1, configs/mtp_tiny.yaml; k = 3 AL 3.03, held-out prompts) and SmolLM2-135M's own MTP head's
(held-out chained AL 1.99 at k = 2, 2.25 at k = 3; docs/smollm2_mtp.md). `--recompute JSON` rewrites them from a
result file's measured ratios without a GPU.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.gpu_verify import make_case  # noqa: E402
from kernel_harness import ptr, raw_launcher, require_gpu_or_exit  # noqa: E402
from kernel_harness.paged_attention import bf16_workspace_bytes  # noqa: E402
from kernel_harness.speculate_verify import launch_args  # noqa: E402
from reference.cases.mtp_round_state import make_round_state  # noqa: E402
from reference.cases.post_verify_state import make_post_verify_state  # noqa: E402

MODELS = {
    "smollm2-135m": dict(layers=30, hidden=576, heads=9, kv_heads=3, head_dim=64, inter=1536, vocab=49152,
                         rope_theta=100000.0),
    "llama3-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=14336, vocab=128256,
                      rope_theta=500000.0),
}
BATCH = [1, 8, 32, 128]
DRAFTS = [2, 3]  # k: verify with k + 1 = 3, 4 tokens per slot
CONTEXT = 1024
BLOCK = 64
EPS = 1e-5  # rms_norm_eps of both models
AL_TINY = {2: 2.82, 3: 3.03}
# SmolLM2-135M's own MTP head (docs/smollm2_mtp.md): held-out chained acceptance, AL(k) = 1 + sum of P(first s accepted)
AL_SMOLLM2 = {2: 1.99, 3: 2.25}


AL_SOURCE = ("tiny pair (README): k=2 AL 2.82 (configs/mtp_tiny.yaml, batch 1), k=3 AL 3.03 (held-out prompts, "
             "batch 1); SmolLM2-135M MTP head (docs/smollm2_mtp.md): held-out chained AL 1.99 (k=2), 2.25 (k=3)")


def predictions(row: dict) -> dict:
    """The predicted speedups of a replay row, AL / (verify / decode + draft / decode), at the tiny pair's AL and at
    SmolLM2's MTP head's (held out)."""
    k, cost = row["k"], row["verify_over_decode"] + row["draft_over_decode"]
    return dict(al_tiny_pair=AL_TINY[k], predicted_speedup=AL_TINY[k] / cost, al_smollm2_head=AL_SMOLLM2[k],
                predicted_speedup_smollm2_head=AL_SMOLLM2[k] / cost)
OUT_F32, OUT_BF16 = 0, 2

KERNELS = r"""
__device__ __forceinline__ unsigned short fb(float f) {
  unsigned u = __float_as_uint(f); u += 0x7FFFu + ((u >> 16) & 1u); return (unsigned short)(u >> 16);
}
extern "C" __global__ void fill(unsigned short* out, long long n, unsigned seed, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    out[i] = fb(((h & 0xFFFFFF) / 8388608.0f - 1.0f) * scale);
  }
}
extern "C" __global__ void embed(const long long* ids, const unsigned short* table, unsigned short* out, int H, int V) {
  long long id = ids[blockIdx.x]; id = id < 0 ? 0 : (id >= V ? V - 1 : id);
  for (int i = threadIdx.x; i < H; i += blockDim.x) out[(long long)blockIdx.x * H + i] = table[id * H + i];
}
// Rotary factors of each packed row at its position dec[b] + (t - cu[b]) (row b < 0: position 0), clamped into the
// tables cos_full, sin_signed [P, D] float32: RotaryEmbedding.factors' gather, once per forward.
extern "C" __global__ void rope_factors(const float* cos_full, const float* sin_signed, const int* bid, const int* cu,
                                        const int* dec, float* cos_out, float* sin_out, int D, int P) {
  long long t = blockIdx.x; int b = bid[t];
  int pos = b < 0 ? 0 : dec[b] + (int)(t - cu[b]); pos = pos < 0 ? 0 : (pos >= P ? P - 1 : pos);
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    cos_out[t * D + i] = cos_full[(long long)pos * D + i]; sin_out[t * D + i] = sin_signed[(long long)pos * D + i];
  }
}
extern "C" __global__ void argmax_rows(const float* logits, long long* out, int V) {
  __shared__ float bv[256]; __shared__ int bi[256];
  long long r = blockIdx.x; float best = -3.4e38f; int idx = 0;
  for (int i = threadIdx.x; i < V; i += blockDim.x) { float x = logits[r * V + i]; if (x > best) { best = x; idx = i; } }
  bv[threadIdx.x] = best; bi[threadIdx.x] = idx; __syncthreads();
  for (int s = blockDim.x / 2; s; s >>= 1) {
    if (threadIdx.x < s && (bv[threadIdx.x + s] > bv[threadIdx.x] ||
        (bv[threadIdx.x + s] == bv[threadIdx.x] && bi[threadIdx.x + s] < bi[threadIdx.x]))) {
      bv[threadIdx.x] = bv[threadIdx.x + s]; bi[threadIdx.x] = bi[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = bi[0];
}
// MTP input: out [T, 2H] = [a, b] per row (a, b: the two fused_rms_norm outputs).
extern "C" __global__ void concat_rows(const unsigned short* a, const unsigned short* b, unsigned short* out, int H) {
  long long r = blockIdx.x;
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    out[r * 2 * H + i] = a[r * H + i]; out[r * 2 * H + H + i] = b[r * H + i];
  }
}
// out[b] = x[cu[b + 1] - 1]: each slot's last row.
extern "C" __global__ void last_rows(const unsigned short* x, const int* cu, unsigned short* out, int H) {
  long long src = cu[blockIdx.x + 1] - 1;
  for (int i = threadIdx.x; i < H; i += blockDim.x) out[(long long)blockIdx.x * H + i] = x[src * H + i];
}
"""


class Gpu:
    """The launchers and RawKernels on the current CuPy stream (read at every call, so graph capture records)."""

    def __init__(self, cp):
        self.cp = cp
        mod = cp.RawModule(code=KERNELS, options=("-std=c++14",))
        self.k = {n: mod.get_function(n) for n in ("fill", "embed", "rope_factors", "argmax_rows", "concat_rows",
                                                   "last_rows")}
        self.linear = raw_launcher("specworker_batch_invariant_linear_bf16_launch")
        self.attention = raw_launcher("specworker_paged_attention_bf16_launch")
        self.rms_norm = raw_launcher("specworker_fused_rms_norm_bf16_launch")
        self.qkv_rotary = raw_launcher("specworker_qkv_norm_rotary_bf16_launch")
        self.swiglu = raw_launcher("specworker_fused_swiglu_bf16_launch")

    def s(self):
        return ctypes.c_void_p(self.cp.cuda.get_current_stream().ptr)

    def raw(self, name, grid, block, *args):
        self.k[name]((grid,), (block,), args)

    def rand(self, shape, seed, scale):
        a = self.cp.empty(shape, dtype=self.cp.uint16)
        self.raw("fill", 1024, 256, a, np.int64(a.size), np.uint32(seed), np.float32(scale))
        return a

    def mm(self, x, w, out, M, K, N, out_dtype=OUT_BF16):
        check(self.linear(ptr(x), ptr(w), None, ptr(out), M, K, N, out_dtype, self.s()), "linear")

    def norm(self, x, w, out, rows, H, residual=None, residual_out=None):
        """out = rms_norm(h) * w with h = x (+ residual, then written to residual_out): fused_rms_norm bf16."""
        check(self.rms_norm(ptr(x), ptr(w), ptr(residual), ptr(out), ptr(residual_out), rows, H, EPS, self.s()),
              "fused_rms_norm_bf16")


def check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what} returned cudaError {rc}")


class Attention:
    """Paged bf16 attention of one layer over B slots of CONTEXT cached tokens (+ the step's rows)."""

    def __init__(self, g, m, max_batch, max_rows, seed):
        cp = g.cp
        self.nbs = -(-(CONTEXT + 8) // BLOCK)
        blocks = max_batch * self.nbs
        shape = (blocks, m["kv_heads"], BLOCK, m["head_dim"])
        self.key_cache, self.value_cache = g.rand(shape, seed, 1.0), g.rand(shape, seed + 1, 1.0)
        perm = np.random.default_rng(seed).permutation(blocks).astype(np.int32)
        self.tables = cp.asarray(perm.reshape(max_batch, self.nbs))
        self.blocks, self.m = blocks, m
        self.workspace = cp.empty(bf16_workspace_bytes(max_rows, m["heads"], m["head_dim"], BLOCK, self.nbs) // 4 + 1,
                                  dtype=cp.float32)

    def __call__(self, g, q, k, v, out, meta, T, B):
        m = self.m
        check(g.attention(ptr(q), ptr(k), ptr(v), ptr(self.key_cache), ptr(self.value_cache), ptr(self.tables),
                          ptr(meta["cu"]), ptr(meta["dec"]), ptr(meta["lens"]), ptr(meta["bid"]), ptr(out),
                          ptr(self.workspace), ctypes.c_int64(self.workspace.nbytes), T, B, m["heads"], m["kv_heads"],
                          m["head_dim"], self.blocks, BLOCK, self.nbs, ctypes.c_float(m["head_dim"] ** -0.5), g.s()),
              "paged_attention")


class Layer:
    def __init__(self, g, m, max_batch, max_rows, seed):
        H, D, I = m["hidden"], m["head_dim"], m["inter"]
        qkv = (m["heads"] + 2 * m["kv_heads"]) * D
        self.m = m
        self.w_qkv, self.w_o = g.rand((H, qkv), seed, 0.03), g.rand((m["heads"] * D, H), seed + 1, 0.03)
        self.w_gu, self.w_down = g.rand((H, 2 * I), seed + 2, 0.03), g.rand((I, H), seed + 3, 0.03)
        self.n1, self.n2 = g.rand((H,), seed + 4, 1.0), g.rand((H,), seed + 5, 1.0)
        self.attn = Attention(g, m, max_batch, max_rows, seed + 6)

    def __call__(self, g, b, resid, prev, meta, T, B):
        """The layer on the residual stream resid plus prev (the last layer's down output, or None); returns (its down
        output, the buffer that now holds the residual stream)."""
        m = self.m
        H, D, I = m["hidden"], m["head_dim"], m["inter"]
        qkv_w = (m["heads"] + 2 * m["kv_heads"]) * D
        if prev is None:
            g.norm(resid, self.n1, b["h"], T, H)
        else:
            resid = add_norm(g, b, prev, resid, self.n1, T, H)
        g.mm(b["h"], self.w_qkv, b["qkv"], T, H, qkv_w)
        check(g.qkv_rotary(ptr(b["qkv"]), ptr(meta["cos"]), ptr(meta["sin"]), None, None, ptr(b["q"]), ptr(b["k"]),
                           ptr(b["v"]), T, m["heads"], m["kv_heads"], D, EPS, g.s()), "qkv_norm_rotary_bf16")
        self.attn(g, b["q"], b["k"], b["v"], b["attn"], meta, T, B)
        g.mm(b["attn"], self.w_o, b["o"], T, m["heads"] * D, H)
        resid = add_norm(g, b, b["o"], resid, self.n2, T, H)
        g.mm(b["h"], self.w_gu, b["gu"], T, H, 2 * I)
        check(g.swiglu(ptr(b["gu"]), ptr(b["act"]), T, I, g.s()), "fused_swiglu_bf16")
        g.mm(b["act"], self.w_down, b["down"], T, I, H)
        return b["down"], resid


def add_norm(g, b, x, resid, w, T, H):
    """b["h"] = rms_norm(x + resid) * w; the sum goes to the other residual buffer, which is returned."""
    other = b["resid_alt"] if resid is b["resid"] else b["resid"]
    g.norm(x, w, b["h"], T, H, residual=resid, residual_out=other)
    return other


def buffers(cp, m, rows):
    """Activations for `rows` packed rows (bf16 as uint16)."""
    H, D, I = m["hidden"], m["head_dim"], m["inter"]
    u = lambda *s: cp.empty(s, dtype=cp.uint16)  # noqa: E731
    return dict(x=u(rows, H), resid=u(rows, H), resid_alt=u(rows, H), h=u(rows, H), en=u(rows, H),
                qkv=u(rows, (m["heads"] + 2 * m["kv_heads"]) * D),
                q=u(rows, m["heads"], D), k=u(rows, m["kv_heads"], D), v=u(rows, m["kv_heads"], D),
                attn=u(rows, m["heads"], D), o=u(rows, H), gu=u(rows, 2 * I), act=u(rows, I), down=u(rows, H),
                out=u(rows, H), logits=cp.empty((rows, m["vocab"]), dtype=cp.float32),
                ids=cp.empty(rows, dtype=cp.int64), mtp_in=u(rows, 2 * H), last=u(rows, H))


def step_meta(cp, B, n, head_dim):
    """Index tensors of a step of B slots with n rows each at positions CONTEXT .. CONTEXT + n - 1, and the rows'
    rotary factors (filled by Model.rope_factors)."""
    T = B * n
    return dict(cos=cp.empty((T, head_dim), dtype=cp.float32), sin=cp.empty((T, head_dim), dtype=cp.float32),
                cu=cp.arange(0, T + 1, n, dtype=cp.int32), dec=cp.full(B, CONTEXT, dtype=cp.int32),
                lens=cp.full(B, n, dtype=cp.int32), bid=cp.repeat(cp.arange(B, dtype=cp.int32), n),
                enc=cp.zeros(B, dtype=cp.int32), cuk=cp.empty(B + 1, dtype=cp.int32),
                o_cu=cp.empty(B + 1, dtype=cp.int32), o_bid=cp.empty(T, dtype=cp.int32),
                num=cp.empty(1, dtype=cp.int32), o_lens=cp.empty(B, dtype=cp.int32),
                input_ids=cp.asarray(np.random.default_rng(B).integers(0, 1000, (B, 2048))),
                draft_tokens=cp.asarray(np.random.default_rng(n).integers(0, 1000, (B, n))))


def rope_tables(cp, head_dim, theta, max_position):
    """cos_full = [cos, cos], sin_signed = [-sin, sin] of position * theta^(-2j / head_dim), [max_position, head_dim]
    float32 each, as RotaryEmbedding builds them."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(max_position, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    return cp.asarray(np.concatenate([cos, cos], 1)), cp.asarray(np.concatenate([-sin, sin], 1))


class Model:
    def __init__(self, g, m, max_batch, max_rows):
        self.m, self.g = m, g
        self.embed = g.rand((m["vocab"], m["hidden"]), 1, 1.0)
        self.lm_head = g.rand((m["hidden"], m["vocab"]), 2, 0.03)
        self.final_norm = g.rand((m["hidden"],), 3, 1.0)
        self.cos_full, self.sin_signed = rope_tables(g.cp, m["head_dim"], m["rope_theta"], CONTEXT + 16)
        self.layers = [Layer(g, m, max_batch, max_rows, 100 + 10 * i) for i in range(m["layers"])]
        self.mtp_layer = Layer(g, m, max_batch, max_rows, 9000)
        self.mtp_eh = g.rand((2 * m["hidden"], m["hidden"]), 9100, 0.03)
        self.mtp_norms = [g.rand((m["hidden"],), 9200 + i, 1.0) for i in range(3)]
        self.pre = raw_launcher("specworker_speculate_pre_process_launch")
        self.rebuild = raw_launcher("specworker_rebuild_padding_launch")

    def forward(self, b, meta, B, n):
        """pre_process, embedding, the layers, final norm, rebuild_padding, lm_head, argmax -> b["ids"]."""
        g, m, T = self.g, self.m, B * n
        H = m["hidden"]
        check(self.pre(ptr(meta["input_ids"]), 2048, ptr(meta["lens"]), ptr(meta["draft_tokens"]), n, ptr(meta["enc"]),
                       B, T, T, ptr(b["ids"]), ptr(meta["bid"]), ptr(meta["cu"]), ptr(meta["cuk"]), ptr(meta["o_cu"]),
                       ptr(meta["o_bid"]), ptr(meta["num"]), ptr(meta["o_lens"]), g.s()), "speculate_pre_process")
        g.raw("embed", T, 256, b["ids"], self.embed, b["resid"], np.int32(H), np.int32(m["vocab"]))
        self.rope_factors(meta, T)
        prev, resid = None, b["resid"]
        for layer in self.layers:
            prev, resid = layer(g, b, resid, prev, meta, T, B)
        add_norm(g, b, prev, resid, self.final_norm, T, H)
        check(self.rebuild(ptr(b["h"]), ptr(meta["cu"]), ptr(meta["lens"]), ptr(meta["dec"]), ptr(meta["enc"]),
                           ptr(meta["o_bid"]), ptr(meta["o_cu"]), None, 0, ptr(b["out"]), T, B, T, H, 2, g.s()),
              "rebuild_padding")
        g.mm(b["out"], self.lm_head, b["logits"], T, H, m["vocab"], OUT_F32)
        g.raw("argmax_rows", T, 256, b["logits"], b["ids"], np.int32(m["vocab"]))

    def rope_factors(self, meta, T):
        """meta["cos"], meta["sin"] = the rotary factors of the T packed rows at their positions."""
        self.g.raw("rope_factors", T, 128, self.cos_full, self.sin_signed, meta["bid"], meta["cu"], meta["dec"],
                   meta["cos"], meta["sin"], np.int32(self.m["head_dim"]), np.int32(self.cos_full.shape[0]))

    def mtp_substep(self, b, meta, B, n, hidden):
        """One MTP substep over B slots x n rows: [norm(embed(ids)), norm(hidden)] -> eh_proj -> layer -> norm ->
        each slot's last row -> lm_head -> argmax."""
        g, m, T = self.g, self.m, B * n
        H = m["hidden"]
        g.raw("embed", T, 256, b["ids"], self.embed, b["x"], np.int32(H), np.int32(m["vocab"]))
        self.rope_factors(meta, T)
        g.norm(b["x"], self.mtp_norms[0], b["en"], T, H)
        g.norm(hidden, self.mtp_norms[1], b["o"], T, H)
        g.raw("concat_rows", T, 256, b["en"], b["o"], b["mtp_in"], np.int32(H))
        g.mm(b["mtp_in"], self.mtp_eh, b["resid"], T, 2 * H, H)
        down, resid = self.mtp_layer(g, b, b["resid"], None, meta, T, B)
        add_norm(g, b, down, resid, self.mtp_norms[2], T, H)
        g.raw("last_rows", B, 256, b["h"], meta["cu"], b["last"], np.int32(H))
        g.mm(b["last"], self.lm_head, b["logits"], B, H, m["vocab"], OUT_F32)
        g.raw("argmax_rows", B, 256, b["logits"], b["ids"], np.int32(m["vocab"]))


class StateOps:
    """speculate_verify (greedy) + speculate_update + speculate_set_value_by_flags_and_idx, and the MTP round's
    draft_model_preprocess + eagle_get_hidden_states, on their own state (reference/cases) for B slots and k."""

    UPDATE = ("seq_lens_encoder", "seq_lens_decoder", "not_need_stop", "draft_tokens", "actual_draft_token_nums",
              "accept_tokens", "accept_num", "stop_flags", "seq_lens_this_time", "is_block_step", "stop_nums",
              "mask_rollback")
    SET_VALUE = ("pre_ids", "accept_tokens", "accept_num", "stop_flags", "seq_lens_encoder", "seq_lens_decoder",
                 "step_idx")

    def __init__(self, cp, B, k, vocab, hidden):
        self.cp, self.B, self.k = cp, B, k
        self.vcase, self.vdev = make_case(cp, "greedy", B, k, vocab)
        self.verify = raw_launcher("specworker_speculate_verify_launch")
        st = make_post_verify_state(np.random.default_rng(B + k), B, "all_decode", num_draft=k, max_model_len=4096)
        self.st = {n: cp.asarray(v) for n, v in st.items()}
        self.update = raw_launcher("specworker_speculate_update_launch")
        self.set_value = raw_launcher("specworker_speculate_set_value_by_flags_and_idx_launch")
        rs = make_round_state(np.random.default_rng(B * 10 + k), B, "all_decode", max_model_len=4096, num_draft=k,
                              num_model_steps=k)
        self.rs = {n: cp.asarray(v) for n, v in rs.items() if v is not None}
        self.rw = {n: int(rs[n].shape[1]) for n in ("draft_tokens", "input_ids", "pre_ids", "accept_tokens",
                                                   "target_model_draft_tokens")}
        self.T_round = int(rs["target_model_seq_lens_this_time"].sum())
        self.hidden = hidden
        self.gather_out = cp.empty((max(self.T_round, 1), hidden), dtype=cp.uint16)
        self.scratch, self.count = cp.empty(2 * B + 1, dtype=cp.int32), cp.empty(1, dtype=cp.int32)
        self.pre = raw_launcher("specworker_draft_model_preprocess_launch")
        self.gather = raw_launcher("specworker_eagle_get_hidden_states_launch")

    def s(self):
        return ctypes.c_void_p(self.cp.cuda.get_current_stream().ptr)

    def run_verify(self, sampled_ids):
        self.vdev["sampled_token_ids"] = sampled_ids  # the target's argmax of this step
        args = launch_args(self.vcase, self.vdev)
        args[-1] = self.s()
        check(self.verify(*args), "speculate_verify")

    def run_state(self, D):
        st = self.st
        check(self.update(*(ptr(st[n]) for n in self.UPDATE), self.B, self.B, D, self.s()), "speculate_update")
        check(self.set_value(*(ptr(st[n]) for n in self.SET_VALUE), self.B, 4096, D, self.s()), "set_value")

    def run_draft_prologue(self, target_hidden):
        d, w, B = self.rs, self.rw, self.B
        check(self.pre(ptr(d["draft_tokens"]), w["draft_tokens"], ptr(d["input_ids"]), w["input_ids"],
                       ptr(d["stop_flags"]), ptr(d["seq_lens_this_time"]), ptr(d["seq_lens_encoder"]),
                       ptr(d["seq_lens_decoder"]), ptr(d["step_idx"]), ptr(d["not_need_stop"]), ptr(d["pre_ids"]),
                       w["pre_ids"], ptr(d["accept_tokens"]), w["accept_tokens"], ptr(d["accept_num"]),
                       ptr(d["target_model_seq_lens_decoder"]), ptr(d["target_model_step_idx"]),
                       ptr(d["target_model_stop_flags"]), ptr(d["max_dec_len"]), ptr(d["target_model_draft_tokens"]),
                       w["target_model_draft_tokens"], ptr(d["target_model_is_block_step"]), B, self.k, 0, 1,
                       self.s()), "draft_model_preprocess")
        T = min(self.T_round, target_hidden.shape[0])
        check(self.gather(ptr(target_hidden), T, self.hidden, 2, ptr(d["seq_lens_this_time"]),
                          ptr(d["seq_lens_encoder"]), ptr(d["accept_num"]), ptr(d["target_model_seq_lens_this_time"]),
                          B, ptr(self.scratch), ptr(self.gather_out), self.gather_out.shape[0], ptr(self.count),
                          self.s()), "eagle_get_hidden_states")


def time_graph_ms(cp, fn, replays=10, runs=5):
    """Milliseconds per call of fn captured once in a graph: median over runs of `replays` replays."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fn()
        stream.synchronize()
        stream.begin_capture()
        fn()
        graph = stream.end_capture()
        for _ in range(2):
            graph.launch(stream)
        stream.synchronize()
        samples = []
        for _ in range(runs):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            for _ in range(replays):
                graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            samples.append(cp.cuda.get_elapsed_time(start, stop) / replays)
    return statistics.median(samples)


def bench_model(cp, g, name, batches):
    m = MODELS[name]
    max_b = max(batches)
    max_rows = max_b * (max(DRAFTS) + 1)
    model = Model(g, m, max_b, max_rows)
    b = buffers(cp, m, max_rows)
    cp.cuda.get_current_stream().synchronize()
    rows = []
    for B in batches:
        meta1 = step_meta(cp, B, 1, m["head_dim"])
        st1 = StateOps(cp, B, 1, m["vocab"], m["hidden"])

        def decode():
            model.forward(b, meta1, B, 1)
            st1.run_state(2)

        decode_ms = time_graph_ms(cp, decode)
        for k in DRAFTS:
            n = k + 1
            meta = step_meta(cp, B, n, m["head_dim"])
            st = StateOps(cp, B, k, m["vocab"], m["hidden"])
            meta_one = step_meta(cp, B, 1, m["head_dim"])

            def verify():
                model.forward(b, meta, B, n)
                st.run_verify(b["ids"])
                st.run_state(n)

            def draft():
                st.run_draft_prologue(b["h"])
                model.mtp_substep(b, meta, B, n, b["h"])
                for _ in range(k - 1):
                    model.mtp_substep(b, meta_one, B, 1, b["last"])

            verify_ms, draft_ms = time_graph_ms(cp, verify), time_graph_ms(cp, draft)
            vr, dr = verify_ms / decode_ms, draft_ms / decode_ms
            row = dict(model=name, batch=B, k=k, tokens_per_slot=n, context=CONTEXT, decode_ms=decode_ms,
                       verify_ms=verify_ms, draft_ms=draft_ms, verify_over_decode=vr, draft_over_decode=dr,
                       decode_tokens_per_s=B / decode_ms * 1e3)
            row.update(predictions(row))
            rows.append(row)
            print(f"{name:13s} B {B:4d} k {k}: decode {decode_ms:7.3f} ms  verify {verify_ms:7.3f} ms ({vr:4.2f}x)  "
                  f"draft {draft_ms:7.3f} ms ({dr:4.2f}x)  AL {AL_TINY[k]} -> {row['predicted_speedup']:4.2f}x, "
                  f"AL {AL_SMOLLM2[k]} -> {row['predicted_speedup_smollm2_head']:4.2f}x",
                  flush=True)
    del model, b
    cp.get_default_memory_pool().free_all_blocks()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="benchmarks/results/gpu_step_replay.json")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default=",".join(map(str, BATCH)))
    ap.add_argument("--recompute", metavar="JSON", help="no GPU: rewrite the predictions of a result file from its "
                    "measured ratios (after an AL changed) and exit")
    args = ap.parse_args()
    if args.recompute:
        result = json.loads(Path(args.recompute).read_text())
        for row in result["rows"]:
            row.update(predictions(row))
        result["meta"]["al_source"] = AL_SOURCE
        Path(args.recompute).write_text(json.dumps(result, indent=1))
        return
    cp = require_gpu_or_exit()
    g = Gpu(cp)
    batches = [int(x) for x in args.batches.split(",")]
    rows = []
    for name in args.models.split(","):
        rows += bench_model(cp, g, name, batches)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(dict(meta=meta(cp), rows=rows), indent=1))
    print(json.dumps(dict(rows=len(rows))))


def meta(cp):
    return dict(device=cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), cupy=cp.__version__, context=CONTEXT,
                block_size=BLOCK, al_source=AL_SOURCE, timing="CUDA graph of one call, median of 5 x 10 replays",
                weights="random bf16 (hash fill), distinct per layer")


if __name__ == "__main__":
    main()
