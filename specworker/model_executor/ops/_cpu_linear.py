"""batch_invariant_linear (and fused_swiglu, `swiglu_cpu`) on CPU without Paddle's custom-op dispatch: the op's own
CPU kernel (`specworker_batch_invariant_linear_cpu`, custom_ops/cpu_ops/kernels/batch_invariant_linear.h;
`specworker_fused_swiglu_cpu`, custom_ops/cpu_ops/fused_swiglu.cc; in the same library Paddle loaded), called
through ctypes into a `paddle.empty` output.

Why: a custom-op call costs ~15 us of dispatch on this CPU whatever its size (the kernel of a 1-row decode
projection takes 2-40 us), so at M = 1-4 the op reached 0.50-0.86 of the memory roofline where the kernel alone
reaches 0.69-0.92 (README, CPU linear table), and the tiny pair's step is mostly dispatch.

Same kernel, same arguments, so the same bits as the op (tests/ops/test_cpu_linear_direct.py). Only calls the
kernel is known to accept take this path: dygraph, CPU, no gradient wanted (under paddle.no_grad(), or every input
stop_gradient), float32 x [M, K] with M, K, N >= 1
and sizes below 2^31, a float32 [K, N] weight or [N / 32, K, 32] float32 / bfloat16 panels, a float32 [N] bias or
none, all contiguous. Anything else returns None and the caller runs the op, whose C++ checks name the argument;
so every error message is the op's. SPECWORKER_CPU_LINEAR_DIRECT=0 turns the path off (A/B measurements).
"""

from __future__ import annotations

import ctypes
import functools
import os

import paddle

from specworker.model_executor import op_build
from specworker.model_executor.ops._extension import load_ops

__all__ = ["direct_enabled", "kernel_library", "linear_cpu", "swiglu_cpu"]

PLAIN_F32, PANELS_F32, PANELS_BF16 = 0, 1, 2  # SPECWORKER_LINEAR_* layouts of the kernel's header
PANEL = 32
_INT32_MAX = 2**31 - 1


@functools.cache
def kernel_library() -> ctypes.CDLL:
    """The extension library (registered with Paddle first: the same build checks) with the kernel's C API typed."""
    load_ops()
    lib = ctypes.CDLL(str(op_build.LIBRARY))
    f = lib.specworker_batch_invariant_linear_cpu
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                  ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
    f.restype = ctypes.c_int
    lib.specworker_linear_cpu_isa.restype = ctypes.c_char_p
    g = lib.specworker_fused_swiglu_cpu
    g.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    g.restype = ctypes.c_int
    lib.specworker_linear_cpu_error.restype = ctypes.c_char_p
    return lib


@functools.cache
def direct_enabled() -> bool:
    """False when SPECWORKER_CPU_LINEAR_DIRECT is 0 (read once)."""
    return os.environ.get("SPECWORKER_CPU_LINEAR_DIRECT", "1") != "0"


_F32, _BF16 = paddle.float32, paddle.bfloat16


def _empty(shape: list[int], place) -> paddle.Tensor:
    """An uninitialised float32 tensor: Paddle's internal empty (~1 us) where it works, else paddle.empty (~4 us)."""
    try:
        return paddle._C_ops.empty(shape, _F32, place)
    except (AttributeError, TypeError, ValueError):
        return paddle.empty(shape, dtype=_F32, device=place)


def _layout(weight: paddle.Tensor, k: int) -> tuple[int, int] | None:
    """(layout, N) of a weight the kernel takes for in_features k, else None. (Dtypes compare by identity: Paddle's
    dtype objects are singletons, and a miss only sends the call to the op.)"""
    shape, dtype = weight.shape, weight.dtype
    if len(shape) == 2:
        return (PLAIN_F32, shape[1]) if dtype is _F32 and shape[0] == k else None
    if len(shape) == 3 and shape[1] == k and shape[2] == PANEL:
        if dtype is _F32:
            return PANELS_F32, shape[0] * PANEL
        if dtype is _BF16:
            return PANELS_BF16, shape[0] * PANEL
    return None


def _cpu_matrix(x: paddle.Tensor) -> tuple[list[int], object] | None:
    """([rows, cols], place) of a float32 2-D CPU tensor in dygraph while the direct path is on, else None."""
    if x.dtype is not _F32 or not direct_enabled():
        return None
    place = x.place
    if not place.is_cpu_place() or not paddle.in_dynamic_mode():
        return None
    shape = x.shape
    return (shape, place) if len(shape) == 2 else None


def linear_cpu(x: paddle.Tensor, weight: paddle.Tensor, bias: paddle.Tensor | None) -> paddle.Tensor | None:
    """x @ weight (+ bias) [M, N] float32 by the kernel itself, or None when the call is not one it takes (see the
    module docstring). The caller (ops.batch_invariant_linear, after op_wrapper's checks: tensors, one place)
    then runs the op."""
    matrix = _cpu_matrix(x)
    if matrix is None:
        return None
    (m, k), place = matrix
    found = _layout(weight, k)
    if found is None:
        return None
    layout, n = found
    if not (0 < m <= _INT32_MAX and 0 < k <= _INT32_MAX and 0 < n <= _INT32_MAX):
        return None  # empty shapes and the op's size limits: the op's own handling
    if bias is not None and (bias.dtype is not _F32 or bias.shape != [n] or not bias.is_contiguous()):
        return None
    if not (x.is_contiguous() and weight.is_contiguous()):
        return None  # strided views: the op
    if paddle.is_grad_enabled() and not (x.stop_gradient and weight.stop_gradient
                                         and (bias is None or bias.stop_gradient)):
        return None  # autograd records the op (a model's parameters under paddle.no_grad() do not count)
    out = _empty([m, n], place)
    rc = kernel_library().specworker_batch_invariant_linear_cpu(
        x.data_ptr(), weight.data_ptr(), layout, None if bias is None else bias.data_ptr(), out.data_ptr(),
        m, k, n, 0)
    return out if rc == 0 else None  # an unusable SPECWORKER_LINEAR_CPU_ISA / _THREADS: the op raises its message


def swiglu_cpu(gate_up: paddle.Tensor) -> paddle.Tensor | None:
    """fused_swiglu of gate_up [R, 2I] -> [R, I] float32 by the op's own loop, or None when the call is not one it
    takes (not a contiguous float32 2-D CPU tensor in dygraph with R >= 1 and an even width 2 .. 2^31 - 1; the
    caller then runs the op, whose checks name the argument). The op has no gradient either way."""
    matrix = _cpu_matrix(gate_up)
    if matrix is None:
        return None
    (rows, width), place = matrix
    if not (0 < rows <= _INT32_MAX and 2 <= width <= _INT32_MAX and width % 2 == 0) or not gate_up.is_contiguous():
        return None
    out = _empty([rows, width // 2], place)
    kernel_library().specworker_fused_swiglu_cpu(gate_up.data_ptr(), out.data_ptr(), rows, width // 2)
    return out
