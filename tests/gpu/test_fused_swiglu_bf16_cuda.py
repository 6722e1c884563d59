"""fused_swiglu's bfloat16 kernel (specworker_fused_swiglu_bf16_launch; CuPy + ctypes, no Paddle) against
ref_fused_swiglu_bf16 bit for bit: the float32 arithmetic of ref_fused_swiglu on the widened inputs, each output
rounded to bfloat16 once. Literal and special values, random rows over awkward sizes, a row alone vs in a batch, and
the launcher's refusals. Outputs start as BF16_CANARY and carry guard rows, so a value the kernel forgets or a row it
overruns shows up.
"""

import numpy as np
import pytest

from reference.batch_invariant_linear import ref_bf16_round
from reference.fused_swiglu import ref_fused_swiglu_bf16
from tests.gpu.harness import (BF16_CANARY, GUARD, assert_same_bf16_bits, bf16_device, bf16_host, ptr,
                               raw_launcher, require_gpu, stream)
from tests.fused_swiglu_cases import pack, fused_swiglu_inputs

cp = require_gpu()

CUDA_ERROR_INVALID_VALUE = 1


def launch(gate_up, *, rows=None, inter=None):
    """Runs the launcher on numpy gate_up (bfloat16 values as float32). Returns (rc, out or None)."""
    r, width = np.shape(gate_up)
    d_out = cp.full((r + GUARD, width // 2), BF16_CANARY, cp.uint16)
    rc = raw_launcher("specworker_fused_swiglu_bf16_launch")(
        ptr(bf16_device(cp, gate_up)), ptr(d_out), r if rows is None else rows,
        width // 2 if inter is None else inter, stream())
    cp.cuda.get_current_stream().synchronize()
    if rc != 0:
        assert (cp.asnumpy(d_out) == BF16_CANARY).all(), "a refused launch wrote out"
        return rc, None
    return rc, bf16_host(cp, d_out, "out", guard=True)


def bf16_inputs(rng, rows: int, inter: int) -> np.ndarray:
    """fused_swiglu_inputs rounded to bfloat16 (NaN kept as the canonical bfloat16 NaN)."""
    gate_up = fused_swiglu_inputs(rng, rows, inter)
    nan = np.isnan(gate_up)
    return np.where(nan, np.float32(np.nan), ref_bf16_round(np.where(nan, 0, gate_up)))


def test_fused_swiglu_bf16_literal_rounds_the_float32_result_once():
    """gate [1, 20, -200, 0], up [1, 0.5, 3, 1]: float32 silu(1) = 0.7310586 -> bf16 0.73046875 (8 significant
    bits: 0.7310586 lies between 0.73046875 and 0.734375, nearer the first); 20 * 0.5 = 10 exactly; -0; 0."""
    rc, out = launch(pack([[1, 20, -200, 0]], [[1, 0.5, 3, 1]]))
    assert rc == 0
    assert_same_bf16_bits(out, np.array([[0.73046875, 10, -0.0, 0]], np.float32), "out")
    assert np.signbit(out[0, 2]), "silu(-200) * 3 is -0"


@pytest.mark.parametrize("inter", [1, 7, 111, 1536, 8192])
@pytest.mark.parametrize("rows", [0, 1, 17, 300])
def test_fused_swiglu_bf16_matches_reference(rows, inter):
    gate_up = bf16_inputs(np.random.default_rng([rows, inter]), rows, inter)
    rc, out = launch(gate_up)
    assert rc == 0 and out.shape == (rows, inter)
    assert_same_bf16_bits(out, ref_fused_swiglu_bf16(gate_up), "out")


@pytest.mark.parametrize("inter", [7, 1536])
def test_fused_swiglu_bf16_row_bits_independent_of_batch(inter):
    """Row 5 of a 257-row call has the bits it has alone, among 3 rows, and among every other row."""
    gate_up = bf16_inputs(np.random.default_rng(inter), 257, inter)
    _, full = launch(gate_up)
    for rows in ([5], [4, 5, 6], list(range(1, 257, 2))):
        _, part = launch(gate_up[rows])
        assert_same_bf16_bits(part[rows.index(5)], full[5], f"out row 5 among {len(rows)} rows")


BAD_LAUNCHES = {"negative rows": dict(rows=-1), "zero inter": dict(inter=0)}


@pytest.mark.parametrize("case", sorted(BAD_LAUNCHES))
def test_fused_swiglu_bf16_rejects_bad_launch_arguments(case):
    rc, _ = launch(bf16_inputs(np.random.default_rng(0), 2, 8), **BAD_LAUNCHES[case])
    assert rc == CUDA_ERROR_INVALID_VALUE, case


def test_fused_swiglu_bf16_zero_rows_writes_nothing():
    """rows = 0 launches nothing: the output's guard rows stay BF16_CANARY (bf16_host checks them)."""
    rc, out = launch(np.zeros((0, 8), np.float32))
    assert rc == 0 and out.shape == (0, 4)
