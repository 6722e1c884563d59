"""batch_invariant_linear_bf16 as a Paddle op on CPU: a literal case, values against the float64
reference within the bound of docs/spec.md §4.8, the CPU contract bit for bit (bfloat16 inputs widened,
then batch_invariant_linear's float32 order), batch invariance as exact bit equality, the empty sizes
and the argument checks. The CUDA kernel has its own tests (tests/gpu/test_batch_invariant_linear_bf16_cuda.py).
"""

import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import batch_invariant_linear_bf16
from reference.batch_invariant_linear import ref_batch_invariant_linear_fp32_order
from reference.batch_invariant_linear_bf16 import (
    ref_batch_invariant_linear_bf16, ref_batch_invariant_linear_bf16_error_bound, ref_bf16_round,
)

# (K, N): K = 1 and 7 are shorter than any SIMD tile of the float32 kernel underneath; N = 259 and 7
# leave tails; 576 x 192 is a SmolLM2-135M k / v projection.
SHAPES_KN = [(1, 1), (7, 259), (40, 7), (129, 33), (576, 192)]
BATCH_SIZES = [1, 3, 17, 64]


def bf16_inputs(rng, M: int, K: int, N: int, with_bias: bool):
    """bfloat16 values as float32: x ~ N(0, 1), weight ~ N(0, 1 / K), bias ~ N(0, 1)."""
    x = ref_bf16_round(rng.standard_normal((M, K)).astype(np.float32))
    w = ref_bf16_round((rng.standard_normal((K, N)) / np.sqrt(max(K, 1))).astype(np.float32))
    b = ref_bf16_round(rng.standard_normal(N).astype(np.float32)) if with_bias else None
    return x, w, b


def bf16_tensor(a: np.ndarray) -> paddle.Tensor:
    """A bfloat16 tensor of float32 values that are bfloat16 values already (the cast is exact)."""
    return paddle.to_tensor(a, dtype="float32").astype("bfloat16")


def run_op(x, w, b=None) -> np.ndarray:
    out = batch_invariant_linear_bf16(bf16_tensor(x), bf16_tensor(w), None if b is None else bf16_tensor(b))
    assert out.dtype == paddle.float32 and list(out.shape) == [x.shape[0], w.shape[1]], \
        f"expected float32 [{x.shape[0]}, {w.shape[1]}], got {out.dtype} {list(out.shape)}"
    return out.numpy()


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str):
    same = got.view(np.uint32) == want.view(np.uint32)
    assert same.all(), f"{what}: {(~same).sum()} of {same.size} outputs differ in their bits"


def test_batch_invariant_linear_bf16_literal():
    x = np.array([[1, 2]], np.float32)
    w = np.array([[1, 0, 1], [0, 1, 1]], np.float32)
    np.testing.assert_array_equal(run_op(x, w, np.array([0, 0, 10], np.float32)), [[1, 2, 13]])


@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("M", BATCH_SIZES)
@pytest.mark.parametrize("K,N", SHAPES_KN, ids=lambda v: str(v))
def test_batch_invariant_linear_bf16_matches_reference_and_cpu_contract(K, N, M, with_bias):
    x, w, b = bf16_inputs(np.random.default_rng([M, K, N, with_bias]), M, K, N, with_bias)
    got = run_op(x, w, b)
    err = np.abs(got.astype(np.float64) - ref_batch_invariant_linear_bf16(x, w, b))
    bound = ref_batch_invariant_linear_bf16_error_bound(x, w, b, out_bf16=False)
    assert (err <= bound).all(), f"max |err| {err.max():.3g} exceeds the bf16 bound (max {bound.max():.3g})"
    # The CPU contract: the widened values in batch_invariant_linear's float32 order, bit for bit.
    assert_same_bits(got, ref_batch_invariant_linear_fp32_order(x, w, b), "CPU op vs the documented float32 order")


@pytest.mark.parametrize("K,N", [(7, 259), (576, 192)], ids=lambda v: str(v))
def test_batch_invariant_linear_bf16_row_bits_independent_of_batch(K, N):
    rng = np.random.default_rng([K, N])
    q, w, b = bf16_inputs(rng, 1, K, N, True)
    alone = run_op(q, w, b)
    for others in (3, 17, 64):
        filler = bf16_inputs(rng, others, K, N, False)[0]
        for pos in (0, others // 2, others):
            out = run_op(np.concatenate([filler[:pos], q, filler[pos:]]), w, b)
            assert_same_bits(out[pos:pos + 1], alone, f"query at row {pos} of {others + 1}")


def test_batch_invariant_linear_bf16_empty_sizes():
    b = np.array([1, -2, 0.5], np.float32)
    np.testing.assert_array_equal(run_op(np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32), b),
                                  np.tile(b, (2, 1)))  # K = 0: the bias
    assert run_op(np.zeros((0, 4), np.float32), np.ones((4, 3), np.float32)).shape == (0, 3)


def _t(shape, dtype="bfloat16"):
    return paddle.zeros(shape, dtype=dtype)


@pytest.mark.parametrize("x,w,b,match", [
    (_t([2, 4], "float32"), _t([4, 3]), None, r"batch_invariant_linear_bf16.*x.*float32"),
    (_t([2, 4]), _t([4, 3], "float32"), None, r"batch_invariant_linear_bf16.*weight.*float32"),
    (_t([2, 4]), _t([5, 3]), None, r"weight has shape \[5, 3\], expected \[K, N\] with K = x.shape\[1\] = 4"),
    (_t([2, 4, 1]), _t([4, 3]), None, r"batch_invariant_linear_bf16.*x"),
    (_t([2, 4]), _t([4, 3]), _t([4]), r"bias has shape \[4\], expected \[N\] = \[3\]"),
    (_t([2, 4]), _t([4, 3]), _t([3], "float32"), r"batch_invariant_linear_bf16.*bias.*float32"),
])
def test_batch_invariant_linear_bf16_rejects_bad_arguments(x, w, b, match):
    with pytest.raises(ValueError, match=match):
        batch_invariant_linear_bf16(x, w, b)


def test_batch_invariant_linear_bf16_rejects_missing_x():
    with pytest.raises(TypeError, match="batch_invariant_linear_bf16"):
        batch_invariant_linear_bf16(None, _t([4, 3]))
