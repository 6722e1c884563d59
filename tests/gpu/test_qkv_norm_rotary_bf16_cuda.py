"""qkv_norm_rotary's bfloat16 kernel (specworker_qkv_norm_rotary_bf16_launch; CuPy + ctypes, no Paddle) against
ref_qkv_norm_rotary_bf16 bit for bit: a literal rotation, random heads over the shapes of the float32 tests with and
without norms, a row alone vs in a batch, and the launcher's refusals. Outputs start as BF16_CANARY and carry guard
rows, so a value the kernel forgets or a row it overruns shows up.
"""

import numpy as np
import pytest

from reference.batch_invariant_linear import ref_bf16_round
from reference.qkv_norm_rotary import ref_qkv_norm_rotary_bf16
from tests.gpu.harness import (BF16_CANARY, GUARD, assert_same_bf16_bits, bf16_device, bf16_host, ptr,
                               raw_launcher, require_gpu, stream)
from tests.qkv_norm_rotary_cases import (BAD_LAUNCH_ARGUMENTS, HEAD_SHAPES, QUARTER_COS, QUARTER_SIN,
                                         qkv_inputs)

cp = require_gpu()

CUDA_ERROR_INVALID_VALUE = 1
EPS = 1e-6


def launch(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, nh, nkv, d, eps):
    """Runs the launcher on numpy inputs (bfloat16 values as float32, float32 factors). Returns (rc, q, k, v)."""
    t_num = np.shape(qkv)[0]
    outs = [cp.full((t_num + GUARD, heads, d), BF16_CANARY, cp.uint16) for heads in (nh, nkv, nkv)]
    factors = [cp.asarray(np.ascontiguousarray(a, np.float32)) for a in (cos_full, sin_signed)]
    # Held until the launch: a temporary's memory could go back to the pool and hold the next input.
    d_qkv, d_qw, d_kw = (bf16_device(cp, a) for a in (qkv, q_norm_weight, k_norm_weight))
    rc = raw_launcher("specworker_qkv_norm_rotary_bf16_launch")(
        ptr(d_qkv), *map(ptr, factors), ptr(d_qw), ptr(d_kw), *map(ptr, outs), t_num, nh, nkv, d, float(eps), stream())
    cp.cuda.get_current_stream().synchronize()
    if rc != 0:
        assert all((cp.asnumpy(o) == BF16_CANARY).all() for o in outs), "a refused launch wrote an output"
        return rc, None, None, None
    return (rc, *(bf16_host(cp, o, name, guard=True) for o, name in zip(outs, "qkv")))


def bf16_qkv_inputs(rng, t_num, nh, nkv, d, norms):
    """qkv_inputs (tests/qkv_norm_rotary_cases.py) with qkv and the norm weights rounded to bfloat16."""
    qkv, cos_full, sin_signed, qw, kw = qkv_inputs(rng, t_num, nh, nkv, d, norms, factor_rank=2)
    qw, kw = (None if w is None else ref_bf16_round(w) for w in (qw, kw))
    return ref_bf16_round(qkv), cos_full, sin_signed, qw, kw


def test_qkv_norm_rotary_bf16_literal_rotation():
    """Two rows, two q heads, one kv head, head_dim 4, no norms: row 0 unrotated, row 1 a quarter turn
    (out = [-y2, -y3, y0, y1], exact in bfloat16); v is copied."""
    qkv = np.tile(np.arange(1, 17, dtype=np.float32), (2, 1))  # q0 1..4, q1 5..8, k 9..12, v 13..16
    rc, q, k, v = launch(qkv, QUARTER_COS, QUARTER_SIN, None, None, 2, 1, 4, EPS)
    assert rc == 0
    np.testing.assert_array_equal(q[0], [[1, 2, 3, 4], [5, 6, 7, 8]])
    np.testing.assert_array_equal(q[1], [[-3, -4, 1, 2], [-7, -8, 5, 6]])
    np.testing.assert_array_equal(k, [[[9, 10, 11, 12]], [[-11, -12, 9, 10]]])
    np.testing.assert_array_equal(v, [[[13, 14, 15, 16]]] * 2)


@pytest.mark.parametrize("norms", [False, True])
@pytest.mark.parametrize("nh, nkv, d", HEAD_SHAPES + [(32, 8, 128)])
@pytest.mark.parametrize("t_num", [0, 1, 3, 17, 300])
def test_qkv_norm_rotary_bf16_matches_reference(t_num, nh, nkv, d, norms):
    """The float32 tests' head shapes (d = 2 .. 128, d = 6 and 96 not powers of two) plus Llama-3-8B's 32:8 x 128."""
    inputs = bf16_qkv_inputs(np.random.default_rng([t_num, nh, nkv, d, norms]), t_num, nh, nkv, d, norms)
    rc, q, k, v = launch(*inputs, nh, nkv, d, EPS)
    assert rc == 0
    want = ref_qkv_norm_rotary_bf16(*inputs, num_heads=nh, num_kv_heads=nkv, head_dim=d, eps=EPS)
    for got, ref, name in zip((q, k, v), want, "qkv"):
        assert_same_bf16_bits(got, ref, name)


@pytest.mark.parametrize("norms", [False, True])
def test_qkv_norm_rotary_bf16_rows_are_batch_invariant(norms):
    """Row 5 of a 65-row call has the bits it has alone, among 3 rows, and among every other row."""
    qkv, cos_full, sin_signed, qw, kw = bf16_qkv_inputs(np.random.default_rng(7), 65, 9, 3, 64, norms)
    _, *full = launch(qkv, cos_full, sin_signed, qw, kw, 9, 3, 64, EPS)
    for rows in ([5], [4, 5, 6], list(range(1, 65, 2))):
        _, *part = launch(qkv[rows], cos_full[rows], sin_signed[rows], qw, kw, 9, 3, 64, EPS)
        for got, ref, name in zip(part, full, "qkv"):
            assert_same_bf16_bits(got[rows.index(5)], ref[5], f"{name} row 5 among {len(rows)} rows")


@pytest.mark.parametrize("nh, nkv, d, eps, norms", BAD_LAUNCH_ARGUMENTS)
def test_qkv_norm_rotary_bf16_launcher_rejects_bad_arguments(nh, nkv, d, eps, norms):
    weight = np.ones(d, np.float32) if norms else None
    factors = np.zeros((2, d), np.float32)
    rc, *_ = launch(np.zeros((2, (nh + 2 * nkv) * d), np.float32), factors, factors, weight, weight, nh, nkv, d, eps)
    assert rc == CUDA_ERROR_INVALID_VALUE


def test_qkv_norm_rotary_bf16_launcher_rejects_unpaired_norm_weights():
    qkv, cos_full, sin_signed, qw, _ = bf16_qkv_inputs(np.random.default_rng(0), 2, 2, 1, 4, norms=True)
    rc, *_ = launch(qkv, cos_full, sin_signed, qw, None, 2, 1, 4, EPS)
    assert rc == CUDA_ERROR_INVALID_VALUE


def test_qkv_norm_rotary_bf16_launcher_writes_nothing_for_zero_tokens():
    rc, q, k, v = launch(np.zeros((0, 16), np.float32), np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32),
                         None, None, 2, 1, 4, EPS)
    assert rc == 0 and q.shape == (0, 2, 4) and k.shape == v.shape == (0, 1, 4)
