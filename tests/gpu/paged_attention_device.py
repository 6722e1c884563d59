"""paged_attention cases on the device through its CUDA launchers (CuPy + ctypes, no Paddle), for
tests/gpu/test_paged_attention_cuda.py and test_paged_attention_bf16_cuda.py: inputs go to the device in the
case's dtype, the output starts as NaN bytes, and results come back as float32 numpy."""

from __future__ import annotations

import ctypes

import numpy as np

from kernel_harness import paged_attention
from tests.gpu.harness import require_gpu, stream
from reference.paged_attention import ref_paged_attention
from reference.cases.paged_attention import AttentionCase

cp = require_gpu()

POISON_BYTE = 0xFF  # NaN in float32, float16 and bfloat16: an unwritten row cannot pass for zeros
CUDA_SUCCESS = 0


def to_device(x: np.ndarray, dtype: str):
    """float32 values (already representable in dtype) as a device array of dtype's bits."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "float32":
        return cp.asarray(x)
    if dtype == "float16":
        return cp.asarray(x.astype(np.float16))
    return cp.asarray((x.view(np.uint32) >> 16).astype(np.uint16))  # bfloat16: CuPy has no such dtype


def from_device(d, dtype: str) -> np.ndarray:
    h = cp.asnumpy(d)
    if dtype == "bfloat16":
        return (h.astype(np.uint32) << 16).view(np.float32)
    return h.astype(np.float32)


def launch(case: AttentionCase, dtype: str = "float32", *, s=None, dims: dict | None = None, workspace=None):
    """Runs paged_attention's launcher for dtype (bfloat16: the tensor-core one, kernel_harness.paged_attention)
    on the case. Returns (rc, out, key_cache, value_cache) as float32 numpy; `dims` overrides the integer
    sizes handed to the launcher (for the argument checks)."""
    arrays = {name: to_device(getattr(case, name), dtype) for name in ("q", "k", "v", "key_cache", "value_cache")}
    arrays.update({name: cp.asarray(np.ascontiguousarray(getattr(case, name), dtype=np.int32))
                   for name in ("block_tables", "cu_seqlens_q", "seq_lens_decoder", "seq_lens_this_time",
                                "batch_id_per_token")})
    token_cap, num_heads, head_dim = case.q.shape
    arrays["out"] = cp.empty(arrays["q"].shape, dtype=arrays["q"].dtype)
    arrays["out"].view(cp.uint8).fill(POISON_BYTE)
    sizes = dict(token_cap=token_cap, bsz=case.seq_lens_this_time.reshape(-1).shape[0], num_heads=num_heads,
                 num_kv_heads=case.k.shape[1], head_dim=head_dim, num_blocks=case.key_cache.shape[0],
                 block_size=case.block_size, max_blocks=case.block_tables.shape[1])
    sizes.update(dims or {})
    rc = paged_attention.launch(cp, arrays, sizes, case.scale, dtype, stream() if s is None else ctypes.c_void_p(s.ptr),
                                workspace)
    cp.cuda.get_current_stream().synchronize()
    return (rc, from_device(arrays["out"], dtype), from_device(arrays["key_cache"], dtype),
            from_device(arrays["value_cache"], dtype))


def run_cuda(case: AttentionCase, dtype: str = "float32"):
    rc, out, key_cache, value_cache = launch(case, dtype)
    assert rc == CUDA_SUCCESS, f"paged_attention ({dtype}) launcher returned cudaError {rc}"
    return out, key_cache, value_cache


def expect_with_skips(case: AttentionCase, zero_rows=(), unwritten=()):
    """The reference on the valid case, with `zero_rows` zeroed and the cache entries (block, offset) of
    `unwritten` left as they were before the step: what the kernels give where the CPU op would raise."""
    out, key_cache, value_cache = ref_paged_attention(*case.args(), case.block_size, case.scale)
    out[list(zero_rows)] = 0
    for block, offset in unwritten:
        key_cache[block, :, offset] = case.key_cache[block, :, offset]
        value_cache[block, :, offset] = case.value_cache[block, :, offset]
    return out, key_cache, value_cache
