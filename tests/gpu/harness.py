"""The GPU tests' side of the standalone CUDA harness (kernel_harness builds and launches the
kernels): the skip policy, and guard rows for written buffers. A test module calls ``cp = require_gpu()``
at import: without CuPy, a GPU or nvcc the module is skipped with a message that says which one is missing.

No Paddle is imported here, so the same tests run on a GPU machine that has only nvcc and CuPy.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernel_harness import gpu_unavailable_reason, kernels_lib, launcher, ptr, raw_launcher, stream

__all__ = ["BF16_CANARY", "CANARY", "GUARD", "assert_same_bf16_bits", "bf16_device", "bf16_host",
           "gpu_unavailable_reason", "guarded", "kernels_lib", "launcher", "ptr", "raw_launcher",
           "require_gpu", "state_to_device", "stream", "unguarded"]

GUARD = 16  # rows past a written buffer's end that the kernel must leave untouched
CANARY = -7777  # what those rows hold
BF16_CANARY = 0x7FBF  # bfloat16 buffers' guard and poison: a NaN payload no kernel writes (CUDA's NaN is 0x7FFF)


def require_gpu():
    """Returns the cupy module, or skips the calling test module with the reason."""
    reason = gpu_unavailable_reason()
    if reason is not None:
        pytest.skip(f"GPU kernel tests skipped: {reason}", allow_module_level=True)
    import cupy as cp

    return cp


def guarded(cp, a):
    """Device copy of the numpy array `a` followed by GUARD rows of CANARY."""
    a = np.asarray(a)
    return cp.asarray(np.concatenate([a, np.full((GUARD,) + a.shape[1:], CANARY, a.dtype)]))


def unguarded(cp, d, name: str, like=None) -> np.ndarray:
    """The rows of the guarded device buffer `d` before its guard, as numpy (shaped like `like` when given),
    after checking that the guard rows still hold CANARY: a write past the end fails naming `name`."""
    a = cp.asnumpy(d)
    assert (a[-GUARD:] == CANARY).all(), f"{name} written past its end"
    return a[:-GUARD] if like is None else a[:-GUARD].reshape(np.shape(like))


def state_to_device(cp, state: dict, keys, writes, matrices) -> dict:
    """Device copies of state[k] for each k in keys, in the kernel's argument order: None (an omitted optional
    input) stays None, so ptr() passes NULL; the 2-D buffers named in `matrices` keep their shape and every
    other input goes flat (FastDeploy's [bsz, 1] per-slot columns too); the buffers in `writes` get the guard."""
    d = {}
    for k in keys:
        v = state.get(k)
        if v is not None:
            v = np.asarray(v) if k in matrices else np.reshape(v, -1)
            v = guarded(cp, v) if k in writes else cp.asarray(v)
        d[k] = v
    return d


def bf16_device(cp, a):
    """Device uint16 bits of `a` (float32 values that are bfloat16 values), or a None passed through."""
    if a is None:
        return None
    return cp.asarray((np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16))


def bf16_host(cp, d, name: str, guard: bool = False) -> np.ndarray:
    """float32 values of the device bfloat16 bits `d`; with `guard`, checks and drops its GUARD rows."""
    bits = cp.asnumpy(d)
    if guard:
        assert (bits[-GUARD:] == BF16_CANARY).all(), f"{name} written past its end"
        bits = bits[:-GUARD]
    return (bits.astype(np.uint32) << 16).view(np.float32)


def assert_same_bf16_bits(got: np.ndarray, want: np.ndarray, what: str):
    """got and want (float32 arrays of bfloat16 values) equal bit for bit, except that any NaN matches any NaN
    (CUDA rounds every NaN to 0x7FFF, numpy keeps the payload)."""
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    nan = np.isnan(want)
    same = np.where(nan, np.isnan(got), got.view(np.uint32) == want.view(np.uint32))
    if not same.all():
        idx = tuple(np.argwhere(~same)[0])
        raise AssertionError(f"{what}: {int((~same).sum())} of {same.size} values differ in their bits, first at "
                             f"{list(idx)}: {got[idx]!r} vs {want[idx]!r}")
