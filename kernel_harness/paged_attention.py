"""paged_attention's CUDA launchers behind one call, dispatched on dtype as the Paddle binding does: float32 and
float16 go to specworker_paged_attention_launch, bfloat16 to the tensor-core specworker_paged_attention_bf16_launch
with its chunk workspace. Shared by tests/gpu, benchmarks/gpu_paged_attention_bf16.py and the step replay."""

from __future__ import annotations

import ctypes

from kernel_harness import launchers
from kernel_harness.build import kernels_lib, ptr

DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}
# Device arrays in the launchers' pointer order (paged_attention.h), out last.
POINTER_FIELDS = ("q", "k", "v", "key_cache", "value_cache", "block_tables", "cu_seqlens_q", "seq_lens_decoder",
                  "seq_lens_this_time", "batch_id_per_token", "out")
SIZE_FIELDS = ("token_cap", "bsz", "num_heads", "num_kv_heads", "head_dim", "num_blocks", "block_size",
               "max_blocks")


def bf16_workspace_bytes(token_cap: int, num_heads: int, head_dim: int, block_size: int, max_blocks: int) -> int:
    """specworker_paged_attention_bf16_workspace_bytes: float32 chunk states the bf16 launcher needs."""
    fn = kernels_lib().specworker_paged_attention_bf16_workspace_bytes
    fn.argtypes = [ctypes.c_int] * 5
    fn.restype = ctypes.c_int64
    return int(fn(token_cap, num_heads, head_dim, block_size, max_blocks))


def bf16_workspace(cp, sizes: dict):
    """A device buffer of the bf16 launcher's workspace for these sizes (at least 4 bytes)."""
    n = bf16_workspace_bytes(sizes["token_cap"], sizes["num_heads"], sizes["head_dim"], sizes["block_size"],
                             sizes["max_blocks"])
    return cp.empty(max(n, 4) // 4, dtype=cp.float32)


def launch(cp, arrays: dict, sizes: dict, scale: float, dtype: str, stream, workspace=None) -> int:
    """Calls the launcher for `dtype` on `arrays` (POINTER_FIELDS -> CuPy arrays) and `sizes` (SIZE_FIELDS ->
    ints, passed as given, also when invalid); returns its cudaError_t as int, without synchronizing.
    bfloat16 without `workspace` allocates one (so not inside a graph capture); workspace_bytes is its size."""
    pointers = [ptr(arrays[n]) for n in POINTER_FIELDS]
    ints = [int(sizes[n]) for n in SIZE_FIELDS]
    if dtype != "bfloat16":
        fn = launchers.raw_launcher("specworker_paged_attention_launch")
        return fn(*pointers, *ints, ctypes.c_float(scale), DTYPE_CODE.get(dtype, 99), stream)
    if workspace is None:
        workspace = bf16_workspace(cp, sizes) if sizes["block_size"] >= 1 else cp.empty(1, dtype=cp.float32)
    fn = launchers.raw_launcher("specworker_paged_attention_bf16_launch")
    return fn(*pointers, ptr(workspace), ctypes.c_int64(workspace.nbytes), *ints, ctypes.c_float(scale), stream)
