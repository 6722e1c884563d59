"""Wrappers of the model-side ops: attention over the paged KV cache, batch-invariant linear (float32 and
bfloat16), residual add + RMSNorm, q/k norm and rotary of the qkv projection, the MLP's silu(gate) * up."""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import paddle

from specworker.model_executor.ops._cpu_linear import linear_cpu, swiglu_cpu
from specworker.model_executor.ops._extension import _host_int, _run, op_wrapper


@op_wrapper
def paged_attention(
    q: paddle.Tensor,
    k: paddle.Tensor,
    v: paddle.Tensor,
    key_cache: paddle.Tensor,
    value_cache: paddle.Tensor,
    block_tables: paddle.Tensor,
    cu_seqlens_q: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    batch_id_per_token: paddle.Tensor,
    block_size: int | None = None,
    scale: float | None = None,
) -> paddle.Tensor:
    """Appends this step's k/v rows to the paged KV cache (in place), then causal attention.

    FastDeploy's append_attention without RoPE, quantization or launch scratch buffers (hence its
    own name and argument list). Slot b's token i, packed row t = cu_seqlens_q[b] + i, sits at
    position p = seq_lens_decoder[b] + i: k[t] and v[t] are written to cache block
    block_tables[b, p // block_size] at offset p % block_size, and out[t, h] is
    softmax(scale * K q[t, h]) V over the slot's positions 0..p (its cached tokens plus this
    step's tokens up to itself), K and V from kv head h // (num_heads // num_kv_heads). Prefill
    (Dec 0), chunked prefill, decode and speculative verify (k + 1 queries) mix freely.
    Batch invariant: out[t] is bit-identical whatever the other slots, T or T_cap, and whether its
    query runs alone (1-token decode) or among its slot's verify queries.

    Args:
        q: [T_cap, num_heads, head_dim] float32 / float16 / bfloat16; 1 <= head_dim <= 256.
        k, v: [T_cap, num_kv_heads, head_dim], q's dtype; num_heads % num_kv_heads == 0.
        key_cache, value_cache: [num_blocks, num_kv_heads, block_size, head_dim], q's dtype;
            updated in place at every (slot, position) written this step, untouched elsewhere.
        block_tables: [N >= bsz, max_blocks_per_seq] int32 block ids, -1 = unallocated.
        cu_seqlens_q: [bsz + 1] int32, exclusive prefix sum of seq_lens_this_time.
        seq_lens_decoder: [>= bsz] (or [N, 1]) int32, tokens already cached per slot (Dec_b).
        seq_lens_this_time: [bsz] (or [bsz, 1]) int32, L_b; 0 for stopped / idle slots.
        batch_id_per_token: [T_cap] int32 slot of each packed row, -1 past T = cu_seqlens_q[bsz].
        block_size: None takes key_cache.shape[2]; else it must equal it.
        scale: softmax scale; None is 1 / sqrt(head_dim). Passed as float32.
    Returns:
        out: [T_cap, num_heads, head_dim], q's dtype; rows with batch id -1 are zeros.
    Raises:
        ValueError: wrong dtype/shape/device/attribute; on CPU also any index that would read or
            write out of range, raised before the caches are touched: a block_tables entry outside
            [0, num_blocks) (-1 included) for a block a slot uses (positions 0..Dec_b + L_b - 1),
            Dec_b + L_b > max_blocks_per_seq * block_size, T > T_cap, negative lengths,
            cu_seqlens_q not the prefix sum of seq_lens_this_time, a batch id that disagrees
            with cu_seqlens_q. On GPU those cannot raise without a host sync: a row whose own
            position has no valid block is not written to the cache, and a row that cannot be
            computed (bad batch id or lengths, a missing block among positions 0..p) gets zeros;
            tokens past T_cap have no row and are neither written nor computed.

    Example (block_size 2, head_dim 2, one head, scale 1, all keys 0, so weights are uniform):
        slot 0 decode with Dec 2 (cached v [2, 4], [4, 8] in block 3) and L 2 (v [6, 12], [8, 16]),
        slot 1 stopped; block_tables [[3, 0], [-1, -1]], cu_seqlens_q [0, 2, 2],
        seq_lens_decoder [2, 0], seq_lens_this_time [2, 0], batch_id_per_token [0, 0, -1]
        -> out [[[4, 8]], [[5, 10]], [[0, 0]]] (query 0 averages positions 0..2, query 1 0..3),
           key_cache[0] / value_cache[0] hold positions 2 and 3.
    """
    head_dim = q.shape[-1]
    if block_size is None:
        block_size = key_cache.shape[2] if len(key_cache.shape) == 4 else -1
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0
    out = _run(
        "paged_attention",
        q,
        k,
        v,
        key_cache,
        value_cache,
        block_tables,
        cu_seqlens_q,
        seq_lens_decoder,
        seq_lens_this_time,
        batch_id_per_token,
        _host_int("paged_attention", "block_size", block_size),
        float(scale),
    )
    return out[0] if isinstance(out, (list, tuple)) else out


class RotatedQKV(NamedTuple):
    """qkv_norm_rotary's outputs, paged_attention's q, k and v."""

    q: paddle.Tensor  # [T, num_heads, head_dim] float32, normed (optional) and rotated
    k: paddle.Tensor  # [T, num_kv_heads, head_dim] float32, normed (optional) and rotated
    v: paddle.Tensor  # [T, num_kv_heads, head_dim] float32, qkv's v columns unchanged


@op_wrapper
def qkv_norm_rotary(
    qkv: paddle.Tensor,
    cos_full: paddle.Tensor,
    sin_signed: paddle.Tensor,
    q_norm_weight: paddle.Tensor | None = None,
    k_norm_weight: paddle.Tensor | None = None,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    eps: float = 1e-6,
) -> RotatedQKV:
    """Splits the packed qkv projection into heads, applies the optional per-head RMSNorm (Qwen3's
    q_norm / k_norm) and the rotary embedding to q and k, in one op (docs/spec.md §4.11).

    Per row t and q or k head, y = the head's head_dim values: with norms, y_k = fl(fl(y_k / r) * w_k) with
    r = sqrt(fl(sum_k fl(fl(y_k * y_k) * fl(1 / d)) + eps)), the sum in k order and the sqrt correctly
    rounded; then out_j = fl(fl(y_j * cos_full_j) + fl(y_{(j + d/2) mod d} * sin_signed_j)), i.e.
    apply_rotary_factors' bits. Every step is one float32 operation (no FMA), so CPU and GPU agree bit for
    bit and a row's bits never depend on the other rows.

    Args:
        qkv: [T, (num_heads + 2 * num_kv_heads) * head_dim] float32: q heads, then k heads, then v heads.
        cos_full, sin_signed: [T, 1, head_dim] (RotaryEmbedding.factors) or [T, head_dim] float32.
        q_norm_weight, k_norm_weight: [head_dim] float32, both or neither.
        num_heads, num_kv_heads: heads of q and of k / v; num_heads % num_kv_heads == 0.
        head_dim: even, at most 8192.
        eps: the norms' epsilon (passed as float32); unused without norm weights.
    Returns:
        RotatedQKV(q [T, num_heads, head_dim], k [T, num_kv_heads, head_dim], v [T, num_kv_heads, head_dim]),
        float32, contiguous.
    Raises:
        ValueError: a dtype other than float32, a qkv width other than (num_heads + 2 * num_kv_heads) *
            head_dim, factors not [T, 1, head_dim] or [T, head_dim], a norm weight not [head_dim] or given
            without the other, an odd head_dim, num_heads % num_kv_heads != 0, devices differ.
        TypeError: a head count or head_dim that is not a host int.
    Example (one head each, head_dim 2, no norms, cos_full [[c, c]], sin_signed [[-s, s]] with c = 0, s = 1,
        i.e. a quarter turn): qkv [[1, 2, 3, 4, 5, 6]] -> q [[[-2, 1]]], k [[[-4, 3]]], v [[[5, 6]]].
    """
    out = _run(
        "qkv_norm_rotary",
        qkv,
        cos_full,
        sin_signed,
        q_norm_weight,
        k_norm_weight,
        _host_int("qkv_norm_rotary", "num_heads", num_heads),
        _host_int("qkv_norm_rotary", "num_kv_heads", num_kv_heads),
        _host_int("qkv_norm_rotary", "head_dim", head_dim),
        float(eps),
    )
    return RotatedQKV(*out)


LINEAR_PANEL = 32  # columns per weight panel of the CPU linear kernel
LINEAR_WEIGHT_DTYPES = ("float32", "bfloat16")


@op_wrapper
def batch_invariant_linear(
    x: paddle.Tensor, weight: paddle.Tensor, bias: paddle.Tensor | None = None
) -> paddle.Tensor:
    """x @ weight + bias with a fixed per-output summation order: a row's bits never depend on
    the other rows of the call (how many there are, or where the row sits).

    Same arguments as paddle.nn.functional.linear (weight is [in_features, out_features], the
    layout of paddle.nn.Linear.weight; a checkpoint's [N, K] matrix is transposed once at load),
    or on CPU the panels pack_linear_weight makes of it. Every output is
        acc = +0.0; for k in 0 .. K-1: acc = float32(acc + float32(x[r, k] * weight[k, n]))
        out[r, n] = float32(acc + bias[n])   (or acc without bias)
    i.e. a left-to-right float32 sum of rounded products, never fused or reassociated, on CPU
    and GPU alike (the two agree bit for bit), whatever the layout, instruction set or thread
    count (SPECWORKER_LINEAR_THREADS). Speculative decoding needs this to be lossless: a BLAS
    matmul picks its summation order from M, so a token's logits on a 1-row decode step and on a
    (k+1)-row verify step differ in the last bits and near-tie argmaxes flip.

    Args:
        x: [M, K] float32, M >= 0 (M = 0 gives a [0, N] result).
        weight: [K, N] float32, or (CPU) panels [N / 32, K, 32] float32 / bfloat16 from
            pack_linear_weight (a bfloat16 weight is widened to float32 exactly).
        bias: [N] float32, or None.
    Returns:
        out: [M, N] float32 on x's device.
    Raises:
        ValueError: a dtype other than float32 (bfloat16 panels aside), x or weight of the wrong
            rank, K mismatch, panels not [N / 32, K, 32] or on a GPU, bias not [N], inputs on
            different devices, a size over 2**31 - 1. No input value is used as an index, so the
            CPU and GPU ops raise on exactly the same inputs (panels aside).
    Example: x [[1, 2]], weight [[1, 0, 1], [0, 1, 1]], bias [0, 0, 10] -> [[1, 2, 13]].

    On CPU a call the kernel takes as it is runs it without Paddle's custom-op dispatch (~15 us a call;
    ops/_cpu_linear.py): the same kernel, so the same bits; anything else, errors included, goes through the op.
    """
    direct = linear_cpu(x, weight, bias)
    if direct is not None:
        return direct
    out = _run("batch_invariant_linear", x, weight, bias)
    return out[0] if isinstance(out, (list, tuple)) else out


@op_wrapper
def batch_invariant_linear_bf16(
    x: paddle.Tensor, weight: paddle.Tensor, bias: paddle.Tensor | None = None
) -> paddle.Tensor:
    """x @ weight + bias on bfloat16 inputs, float32 out, with each output's arithmetic fixed by K
    alone (docs/spec.md §4.8): a row's bits never depend on the other rows of the call.

    GPU: tensor-core MMAs (m16n8k16, float32 accumulation), one accumulator per output fed one MMA
    per 16-wide k step in increasing k, then + bias; the tile shape the launcher picks from M, K and
    N never changes that. CPU: the inputs widened to float32 exactly, then batch_invariant_linear's
    float32 order. Both devices are batch invariant and within the bound of docs/spec.md §4.8 of the
    exact value (ref_batch_invariant_linear_bf16_error_bound); they do not agree with each other bit
    for bit.

    Args:
        x: [M, K] bfloat16, M >= 0 (M = 0 gives a [0, N] result).
        weight: [K, N] bfloat16 (in_features x out_features, the layout of paddle.nn.Linear.weight).
        bias: [N] bfloat16, or None.
    Returns:
        out: [M, N] float32 on x's device.
    Raises:
        ValueError: a dtype other than bfloat16, x or weight not 2-D, K mismatch, bias not [N],
            inputs on different devices, a size over 2**31 - 1.
    Example: x [[1, 2]], weight [[1, 0, 1], [0, 1, 1]], bias [0, 0, 10] (all bfloat16) -> [[1, 2, 13]].
    """
    out = _run("batch_invariant_linear_bf16", x, weight, bias)
    return out[0] if isinstance(out, (list, tuple)) else out


def pack_linear_weight(weight: paddle.Tensor, dtype: str = "float32") -> paddle.Tensor:
    """weight in the layout batch_invariant_linear streams fastest on its device; made once at load.

    On CPU with N % 32 == 0: panels [N / 32, K, 32] in `dtype`, panel p row k = weight[k, 32p : 32p + 32]
    (one contiguous stream per 32 columns); bfloat16 halves the bytes and stores a row's columns in pairs
    (j, j + 16): element 2j = column 32p + j, element 2j + 1 = column 32p + j + 16, so the kernel widens
    16 pairs with one shift and one mask. Elsewhere (GPU, or N % 32 != 0):
    the [K, N] weight itself, or for bfloat16 its values rounded to bfloat16 (returned as float32), so
    every layout computes with the same values:
        batch_invariant_linear(x, pack_linear_weight(w, d)) has the bits of
        batch_invariant_linear(x, w if d == "float32" else w.astype(bfloat16).astype(float32)).
    The only platform branch of the model path: the CUDA kernel reads [K, N] alone.

    Args:
        weight: [K, N] float32.
        dtype: "float32" or "bfloat16" (round to nearest even).
    Returns:
        a new tensor (the parameter is not aliased), or weight itself (float32 [K, N] kept as is).
    Raises:
        ValueError: weight not a 2-D float32 tensor, or an unknown dtype.
    Example: w [2, 64] -> panels [2, 2, 32] with panels[1, 0] == w[0, 32:64]; bfloat16: panels[1, 0, :4] ==
        w[0, [32, 48, 33, 49]].
    """
    if dtype not in LINEAR_WEIGHT_DTYPES:
        raise ValueError(f"pack_linear_weight: dtype = {dtype!r}; allowed: {', '.join(LINEAR_WEIGHT_DTYPES)}")
    if weight.dtype != paddle.float32 or len(weight.shape) != 2:
        raise ValueError(f"pack_linear_weight: weight has dtype {weight.dtype} and shape {list(weight.shape)}, "
                         "expected a 2-D float32 [K, N]")
    k, n = weight.shape
    if dtype == "bfloat16":
        weight = paddle.cast(weight, "bfloat16")
    if weight.place.is_cpu_place() and n % LINEAR_PANEL == 0 and n > 0:
        panels = weight.reshape([k, n // LINEAR_PANEL, LINEAR_PANEL]).transpose([1, 0, 2])  # [P, K, 32]
        if dtype == "bfloat16":  # [P, K, 2, 16] -> [P, K, 16, 2]: pairs (j, j + 16)
            panels = panels.reshape([n // LINEAR_PANEL, k, 2, 16]).transpose([0, 1, 3, 2])
            panels = panels.reshape([n // LINEAR_PANEL, k, LINEAR_PANEL])
        return panels.contiguous()
    return paddle.cast(weight, "float32") if dtype == "bfloat16" else weight


class FusedRmsNormOutput(NamedTuple):
    """fused_rms_norm's outputs; always two, with or without a residual."""

    out: paddle.Tensor  # [R, H] float32, the normalised rows
    residual_out: paddle.Tensor  # [R, H] float32, h = x + residual (x itself when residual is None)


@op_wrapper
def fused_rms_norm(
    x: paddle.Tensor, weight: paddle.Tensor, residual: paddle.Tensor | None, eps: float
) -> FusedRmsNormOutput:
    """Residual add + RMSNorm of every row in one call, in a fixed IEEE order (docs/spec.md §4.10).

    Per row: h = x (residual None) or float32(x + residual); acc = +0.0; for k in 0 .. H-1:
    acc = float32(acc + float32(float32(h[k] * h[k]) * float32(1 / H))); rs = the correctly rounded
    float32 sqrt of float32(acc + eps); out[k] = float32(float32(h[k] / rs) * weight[k]). Never fused
    or reassociated: CPU and GPU agree bit for bit, and a row's bits never depend on the other rows
    (a 1-token decode and a k + 1-token verify give a token the same bits).

    Args:
        x: [R, H] float32, R >= 0, H >= 1.
        weight: [H] float32.
        residual: [R, H] float32 (the residual stream before this norm), or None.
        eps: host float, >= 0 and finite once rounded to float32 (the op checks it).
    Returns:
        FusedRmsNormOutput(out [R, H] float32, residual_out [R, H] float32: h, the residual stream
        after the add; without residual it is x itself, not a copy).
    Raises:
        TypeError: eps is not a host number.
        ValueError: a dtype other than float32, x not 2-D or H = 0, weight not [H], residual not x's
            shape, inputs on different devices, eps negative or not finite, a size over 2**31 - 1.
    Example: x [[3, 4]], residual [[0, 0]], weight [1, 2], eps 0 -> mean(h^2) = 12.5, rs = 3.535534,
        out [[0.84852815, 2.2627418]], residual_out [[3, 4]].
    """
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"fused_rms_norm: eps must be a host float, got {type(eps).__name__}")
    out, residual_out = _run("fused_rms_norm", x, weight, residual, float(eps))
    return FusedRmsNormOutput(out=out, residual_out=x if residual is None else residual_out)


@op_wrapper
def fused_swiglu(gate_up: paddle.Tensor) -> paddle.Tensor:
    """silu(gate) * up of the packed MLP projection in one op, with the project's own float32 silu
    (docs/spec.md §4.12).

    out[r, i] = float32(silu(gate_up[r, i]) * gate_up[r, I + i]), silu(g) = g / (1 + exp(-g)) built from IEEE
    float32 adds, multiplies and one divide in a fixed order (a Cody-Waite exp with a fixed polynomial, scaled by
    exact powers of two; within 2.4 ulps of the exact value over the whole float32 range). No libm, no FMA:
    CPU and GPU agree bit for bit and a row's bits never depend on the other rows. silu(+inf) = +inf,
    silu(-inf) = -0, NaN stays NaN; the product follows IEEE (so 0 * inf is NaN). Not named swiglu: that is a
    built-in Paddle op, which a custom op of the same name would override.

    Args:
        gate_up: [R, 2I] float32, R >= 0, I >= 1: the I gate columns, then the I up columns (SwiGLU's
            gate_up_proj output).
    Returns:
        out: [R, I] float32 on gate_up's device.
    Raises:
        ValueError: a dtype other than float32, gate_up not 2-D or its last dimension odd or 0, a size over
            2**31 - 1.
    Example: gate_up [[0, 20, -200, 5, 0.5, 3]] (I = 3) -> [[0, 10, -0]]: silu(0) = 0, silu(20) rounds to 20,
        silu(-200) rounds to -0.
    """
    direct = swiglu_cpu(gate_up)  # on CPU the op's loop without the custom-op dispatch (ops/_cpu_linear.py)
    if direct is not None:
        return direct
    out = _run("fused_swiglu", gate_up)
    return out[0] if isinstance(out, (list, tuple)) else out
