"""One Llama decoder block (RMSNorm -> GQA attention with RoPE -> residual -> RMSNorm -> SwiGLU -> residual),
shared by the target and the MTP draft. Two paths over the same weights (stored [in, out]):
  forward       inference: packed tokens, ops.batch_invariant_linear, ops.paged_attention, ops.fused_swiglu
                (batch invariant);
  forward_train training: [B, L] sequences, paddle.matmul, dense causal attention, autograd.
"""

from __future__ import annotations

import contextlib
import math

import paddle
import paddle.nn.functional as F

from specworker.model_executor import ops
from specworker.model_executor.forward_meta import ForwardMeta
from specworker.model_executor.layers.packed_weights import PackedWeights
from specworker.model_executor.layers.rms_norm import RMSNorm
from specworker.model_executor.layers.rotary import apply_rotary
from specworker.model_executor.parallel import SINGLE_RANK, TensorParallel

INIT_STD = 0.02


_SKIP_INIT = [False]


@contextlib.contextmanager
def skip_random_init():
    """Within: make_weight allocates zero-filled parameters instead of drawing normal(0, std) (a loader
    overwrites them; the random draw costs ~20 s for a 135M-parameter model on CPU)."""
    _SKIP_INIT.append(True)
    try:
        yield
    finally:
        _SKIP_INIT.pop()


def make_weight(layer: paddle.nn.Layer, shape: list[int], std: float = INIT_STD) -> paddle.Tensor:
    """A float32 parameter of `shape`, normal(0, std) initialised (the training script's init)."""
    init = paddle.nn.initializer.Constant(0.0) if _SKIP_INIT[-1] else paddle.nn.initializer.Normal(0.0, std)
    return layer.create_parameter(shape, dtype="float32", default_initializer=init)


def make_bias(layer: paddle.nn.Layer, width: int) -> paddle.Tensor:
    """A zero-initialised float32 bias parameter of [width]."""
    return layer.create_parameter([width], dtype="float32", is_bias=True,
                                  default_initializer=paddle.nn.initializer.Constant(0.0))


class Attention(PackedWeights, paddle.nn.Layer):
    """Grouped-query self-attention: query head h reads kv head h // (num_heads // num_kv_heads).

    head_dim may differ from hidden_size / num_heads (Qwen3, Llama variants). Optional parts, all loaded
    from checkpoints that have them: a q/k/v bias (Qwen2, Llama attention_bias), an o_proj bias (Llama
    attention_bias), per-head RMSNorm of q and k before the rotation (Qwen3 q_norm / k_norm).
    Under tensor parallelism (tp.size > 1) this rank holds heads tp.part(num_heads) and KV heads
    tp.part(num_kv_heads): qkv_proj is column-parallel (its own heads' columns), o_proj row-parallel (its
    heads' rows; the partial outputs are summed over ranks by tp.reduce_sum, then o_bias is added once).
    """

    PACKED = ("qkv_proj", "o_proj")

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, out_std: float, *,
                 head_dim: int | None = None, qkv_bias: bool = False, o_bias: bool = False, qk_norm: bool = False,
                 rms_norm_eps: float = 1e-6, tp: TensorParallel = SINGLE_RANK):
        super().__init__()
        self.head_dim = head_dim or hidden_size // num_heads
        self.tp = tp
        self.num_heads, self.num_kv_heads = num_heads // tp.size, num_kv_heads // tp.size  # this rank's heads
        self.q_width, self.kv_width = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = make_weight(self, [hidden_size, self.q_width + 2 * self.kv_width])
        self.qkv_bias = make_bias(self, self.q_width + 2 * self.kv_width) if qkv_bias else None
        self.o_proj = make_weight(self, [self.q_width, hidden_size], out_std)
        self.o_bias = make_bias(self, hidden_size) if o_bias else None
        self.q_norm = RMSNorm(self.head_dim, rms_norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, rms_norm_eps) if qk_norm else None
        self._o_bias_in_linear = self.o_bias if tp.size == 1 else None  # else added after the reduction

    def forward(self, x, cos, sin, meta: ForwardMeta, key_cache, value_cache, block_tables):
        """Inference. x [T, H]; cos/sin: RotaryEmbedding.factors [T, 1, head_dim];
        caches [num_blocks, kv_heads, block_size, head_dim]."""
        t = x.shape[0]
        qkv = ops.batch_invariant_linear(x, self.linear_weight("qkv_proj"), self.qkv_bias)
        q, k, v = self.rotate_qkv(qkv, cos, sin)
        out = ops.paged_attention(q, k, v, key_cache, value_cache, block_tables, meta.cu_seqlens_q,
                                  meta.seq_lens_decoder, meta.seq_lens_this_time, meta.batch_id_per_token)
        out = ops.batch_invariant_linear(out.reshape([t, self.q_width]), self.linear_weight("o_proj"),
                                         self._o_bias_in_linear)  # [T, H], this rank's heads' share
        return row_parallel_output(self.tp, out, self.o_bias)

    def rotate_qkv(self, qkv, cos, sin) -> ops.RotatedQKV:
        """qkv [T, q_width + 2 kv_width] -> q [T, heads, head_dim], k and v [T, kv_heads, head_dim]: heads split,
        q/k normed per head (Qwen3) and rotated, in one op (docs/spec.md §4.11)."""
        q_norm_weight = k_norm_weight = None
        eps = 1e-6  # unused without norms
        if self.q_norm is not None:
            q_norm_weight, k_norm_weight, eps = self.q_norm.weight, self.k_norm.weight, self.q_norm.eps
        return ops.qkv_norm_rotary(qkv, cos, sin, q_norm_weight, k_norm_weight, num_heads=self.num_heads,
                                   num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, eps=eps)

    def project_train(self, x, cos, sin):
        """Training-path q, k (normed, rotated) and v of x [B, L, H]: [B, L, heads or kv_heads, head_dim] each."""
        b, length = x.shape[0], x.shape[1]
        qkv = paddle.matmul(x, self.qkv_proj)
        if self.qkv_bias is not None:
            qkv = qkv + self.qkv_bias
        q, k, v = paddle.split(qkv, [self.q_width, self.kv_width, self.kv_width], axis=-1)
        q = q.reshape([b, length, self.num_heads, self.head_dim])
        k = k.reshape([b, length, self.num_kv_heads, self.head_dim])
        if self.q_norm is not None:
            q, k = self.q_norm.forward_train(q), self.k_norm.forward_train(k)
        v = v.reshape([b, length, self.num_kv_heads, self.head_dim])
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def output_train(self, out):
        """Training-path o_proj of the attention output [B, L, q_width] -> [B, L, H]."""
        out = paddle.matmul(out, self.o_proj)
        return out if self.o_bias is None else out + self.o_bias

    def forward_train(self, x, cos, sin):
        """Training. x [B, L, H]; cos/sin [L, head_dim / 2]. Returns [B, L, H]."""
        b, length = x.shape[0], x.shape[1]
        q, k, v = (a.transpose([0, 2, 1, 3]) for a in self.project_train(x, cos, sin))  # [B, heads, L, head_dim]
        group = self.num_heads // self.num_kv_heads
        if group > 1:
            k, v = paddle.repeat_interleave(k, group, axis=1), paddle.repeat_interleave(v, group, axis=1)
        scores = paddle.matmul(q, k, transpose_y=True) / math.sqrt(self.head_dim)  # [B, heads, L, L]
        causal = paddle.triu(paddle.full([length, length], float("-inf"), dtype=scores.dtype), diagonal=1)
        out = paddle.matmul(F.softmax(scores + causal, axis=-1), v)  # [B, heads, L, head_dim]
        return self.output_train(out.transpose([0, 2, 1, 3]).reshape([b, length, self.q_width]))


def row_parallel_output(tp: TensorParallel, partial: paddle.Tensor, bias: paddle.Tensor | None) -> paddle.Tensor:
    """A row-parallel projection's output: the sum of every rank's partial [T, H] plus the bias, which the
    linear op already added when tp.size == 1 (the single-rank path is unchanged)."""
    if tp.size == 1:
        return partial
    total = tp.reduce_sum(partial)
    return total if bias is None else total + bias


class SwiGLU(PackedWeights, paddle.nn.Layer):
    """down(silu(gate(x)) * up(x)), gate and up fused in one [H, 2I] weight (gate first). Under tensor
    parallelism this rank holds the intermediate columns tp.part(I) of gate and of up (column-parallel) and
    the same rows of down (row-parallel, summed over ranks by tp.reduce_sum, then down_bias once)."""

    PACKED = ("gate_up_proj", "down_proj")

    def __init__(self, hidden_size: int, intermediate_size: int, out_std: float, *, bias: bool = False,
                 tp: TensorParallel = SINGLE_RANK):
        super().__init__()
        self.tp = tp
        intermediate_size //= tp.size  # this rank's share
        self.intermediate_size = intermediate_size
        self.gate_up_proj = make_weight(self, [hidden_size, 2 * intermediate_size])
        self.gate_up_bias = make_bias(self, 2 * intermediate_size) if bias else None
        self.down_proj = make_weight(self, [intermediate_size, hidden_size], out_std)
        self.down_bias = make_bias(self, hidden_size) if bias else None
        self._down_bias_in_linear = self.down_bias if tp.size == 1 else None  # else added after the reduction

    def forward(self, x):
        """Inference. x [T, H] -> [T, H]."""
        gate_up = ops.batch_invariant_linear(x, self.linear_weight("gate_up_proj"), self.gate_up_bias)  # [T, 2I]
        out = ops.batch_invariant_linear(ops.fused_swiglu(gate_up), self.linear_weight("down_proj"),
                                         self._down_bias_in_linear)  # silu(gate) * up: docs/spec.md §4.12
        return row_parallel_output(self.tp, out, self.down_bias)

    def forward_train(self, x):
        """Training. x [B, L, H] -> [B, L, H]."""
        gate_up = paddle.matmul(x, self.gate_up_proj)
        gate, up = paddle.split(gate_up if self.gate_up_bias is None else gate_up + self.gate_up_bias, 2, axis=-1)
        out = paddle.matmul(F.silu(gate) * up, self.down_proj)
        return out if self.down_bias is None else out + self.down_bias


class DecoderLayer(paddle.nn.Layer):
    """Pre-norm block; out_std scales the init of the two residual-branch output projections."""

    def __init__(self, *, hidden_size: int, num_heads: int, num_kv_heads: int, intermediate_size: int,
                 rms_norm_eps: float, out_std: float = INIT_STD, head_dim: int | None = None, qkv_bias: bool = False,
                 o_bias: bool = False, mlp_bias: bool = False, qk_norm: bool = False, tp: TensorParallel = SINGLE_RANK):
        super().__init__()
        self.input_norm = RMSNorm(hidden_size, rms_norm_eps)
        self.attn = Attention(hidden_size, num_heads, num_kv_heads, out_std, head_dim=head_dim, qkv_bias=qkv_bias,
                              o_bias=o_bias, qk_norm=qk_norm, rms_norm_eps=rms_norm_eps, tp=tp)
        self.post_attn_norm = RMSNorm(hidden_size, rms_norm_eps)
        self.mlp = SwiGLU(hidden_size, intermediate_size, out_std, bias=mlp_bias, tp=tp)

    def pack_weights(self, dtype: str = "float32") -> None:
        """Inference copies of the four projections (PackedWeights.pack_weights)."""
        self.attn.pack_weights(dtype)
        self.mlp.pack_weights(dtype)

    def forward(self, x, residual, cos, sin, meta: ForwardMeta, key_cache, value_cache, block_tables):
        """Inference with the residual stream carried vLLM-style: the block's input is x + residual (x alone
        when residual is None: the first layer), and each residual add runs inside the next norm
        (ops.fused_rms_norm), so the caller adds the last mlp output once. Writes this step's K/V.
        Args: x [T, H]; residual [T, H] or None. Returns (mlp output [T, H], residual [T, H]), whose sum is
        the block's output."""
        h, residual = self.input_norm.forward_residual(x, residual)
        x = self.attn(h, cos, sin, meta, key_cache, value_cache, block_tables)
        h, residual = self.post_attn_norm.forward_residual(x, residual)
        return self.mlp(h), residual

    def forward_train(self, x, cos, sin):
        """Training. x [B, L, H] -> [B, L, H]."""
        x = x + self.attn.forward_train(self.input_norm.forward_train(x), cos, sin)
        return x + self.mlp.forward_train(self.post_attn_norm.forward_train(x))
