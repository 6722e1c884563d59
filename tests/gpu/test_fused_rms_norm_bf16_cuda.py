"""fused_rms_norm's bfloat16 kernel (specworker_fused_rms_norm_bf16_launch; CuPy + ctypes, no Paddle) against
ref_fused_rms_norm_bf16 bit for bit: literal rows, random rows over awkward sizes (the staging and rows-per-block
edges too), a row alone vs in a batch, and the launcher's refusals. Outputs start as BF16_CANARY and carry guard
rows, so a value the kernel forgets or a row it overruns shows up.
"""

import numpy as np
import pytest

from reference.batch_invariant_linear import ref_bf16_round
from reference.fused_rms_norm import ref_fused_rms_norm_bf16
from tests.gpu.harness import (BF16_CANARY, GUARD, assert_same_bf16_bits, bf16_device, bf16_host, ptr,
                               raw_launcher, require_gpu, stream)

cp = require_gpu()

CUDA_ERROR_INVALID_VALUE = 1
EPS = 1e-5


def launch(x, weight, residual, eps, *, with_residual_out=None, rows=None, hidden=None):
    """Runs the launcher on numpy inputs (bfloat16 values as float32). Returns (rc, out, residual_out or x)."""
    r, h = np.shape(x)
    with_residual_out = residual is not None if with_residual_out is None else with_residual_out
    d_x, d_w, d_res = bf16_device(cp, x), bf16_device(cp, weight), bf16_device(cp, residual)
    d_out = cp.full((r + GUARD, h), BF16_CANARY, cp.uint16)
    d_h = cp.full((r + GUARD, h), BF16_CANARY, cp.uint16) if with_residual_out else None
    rc = raw_launcher("specworker_fused_rms_norm_bf16_launch")(
        ptr(d_x), ptr(d_w), ptr(d_res), ptr(d_out), ptr(d_h), r if rows is None else rows,
        h if hidden is None else hidden, float(eps), stream())
    cp.cuda.get_current_stream().synchronize()
    if rc != 0:
        assert (cp.asnumpy(d_out) == BF16_CANARY).all(), "a refused launch wrote out"
        return rc, None, None
    out = bf16_host(cp, d_out, "out", guard=True)
    return rc, out, np.asarray(x, np.float32) if d_h is None else bf16_host(cp, d_h, "residual_out", guard=True)


def bf16_inputs(rng, rows: int, hidden: int, with_residual: bool):
    """bfloat16 activations of varied scale per row (1e-3 .. 1e3), weights around 1."""
    scale = np.float32(10.0) ** rng.uniform(-3, 3, size=(rows, 1))
    x = ref_bf16_round((rng.standard_normal((rows, hidden)) * scale).astype(np.float32))
    w = ref_bf16_round(rng.normal(1.0, 0.3, hidden).astype(np.float32))
    res = ref_bf16_round((rng.standard_normal((rows, hidden)) * scale).astype(np.float32)) if with_residual else None
    return x, w, res


def test_fused_rms_norm_bf16_literal_norm_reads_unrounded_h():
    """x = [1, 3], residual = [2^-8, 0], weight = 1, eps = 0. h = [1.00390625, 3] in float32; bfloat16 has 8
    significant bits, so residual_out = [1, 3] (a tie, to even). mean(h^2) = 5.0039139, rs = 2.2369432;
    out = [1.00390625 / rs, 3 / rs] = [0.448782, 1.341116] -> bf16 [0.44921875, 1.34375]. Norming the rounded h
    instead would give 0.44726562 first."""
    rc, out, h = launch(np.array([[1, 3]], np.float32), np.ones(2, np.float32),
                        np.array([[2.0 ** -8, 0]], np.float32), 0.0)
    assert rc == 0
    np.testing.assert_array_equal(h, [[1, 3]])
    np.testing.assert_array_equal(out, [[0.44921875, 1.34375]])


def test_fused_rms_norm_bf16_literal_without_residual():
    """x = [[2, 2, 2, 2]], eps = 0: mean = 4, rs = 2, out = weight exactly; residual_out is x."""
    rc, out, _ = launch(np.full((1, 4), 2, np.float32), np.array([1, -1, 0.5, 3], np.float32), None, 0.0)
    assert rc == 0
    np.testing.assert_array_equal(out, [[1, -1, 0.5, 3]])


@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("hidden", [1, 7, 111, 576, 3072, 3073, 4096, 12288, 12289])
@pytest.mark.parametrize("rows", [0, 1, 17, 1000])
def test_fused_rms_norm_bf16_matches_reference(rows, hidden, with_residual):
    """H = 1 (one term), 7 and 111 (not multiples of a warp), 576 and 4096 (SmolLM2-135M, Llama-3-8B), 3072 / 3073
    (the last width with 4 rows per block and the first with 1), 12288 / 12289 (the last staged width and the first
    unstaged one: lane 0 forms the terms from global memory)."""
    if rows * hidden > 4_000_000:
        rows = 64  # the reference loops over H in numpy; 64 wide rows still span 64 blocks
    x, w, res = bf16_inputs(np.random.default_rng([rows, hidden, with_residual]), rows, hidden, with_residual)
    rc, out, h = launch(x, w, res, EPS)
    assert rc == 0
    want_out, want_h = ref_fused_rms_norm_bf16(x, w, res, EPS)
    assert_same_bf16_bits(h, want_h, "residual_out")
    assert_same_bf16_bits(out, want_out, "out")


@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("hidden", [7, 576, 4096])
def test_fused_rms_norm_bf16_row_bits_independent_of_batch(hidden, with_residual):
    """Row 5 of a 257-row call has the bits it has alone, among 3 rows, and among every other row."""
    x, w, res = bf16_inputs(np.random.default_rng(hidden), 257, hidden, with_residual)
    _, full, full_h = launch(x, w, res, EPS)
    for rows in ([5], [4, 5, 6], list(range(1, 257, 2))):
        _, part, part_h = launch(x[rows], w, None if res is None else res[rows], EPS)
        assert_same_bf16_bits(part[rows.index(5)], full[5], f"out row 5 among {len(rows)} rows")
        assert_same_bf16_bits(part_h[rows.index(5)], full_h[5], f"residual_out row 5 among {len(rows)} rows")


def test_fused_rms_norm_bf16_zero_row_is_zero_with_eps():
    """A zero row gives 0 / sqrt(eps) * w = 0 (not NaN); with eps = 0 it is 0 / 0 = NaN, as IEEE says."""
    x, w = np.zeros((1, 5), np.float32), np.ones(5, np.float32)
    assert (launch(x, w, None, EPS)[1] == 0).all()
    assert np.isnan(launch(x, w, None, 0.0)[1]).all()


BAD_LAUNCHES = {  # launch() keyword arguments of a refused call
    "negative rows": dict(rows=-1), "zero hidden": dict(hidden=0), "negative eps": dict(eps=-1e-6),
    "NaN eps": dict(eps=float("nan")), "residual without residual_out": dict(with_residual_out=False),
    "residual_out without residual": dict(residual=None, with_residual_out=True),
}


@pytest.mark.parametrize("case", sorted(BAD_LAUNCHES))
def test_fused_rms_norm_bf16_rejects_bad_launch_arguments(case):
    x, w, res = bf16_inputs(np.random.default_rng(0), 2, 8, True)
    kwargs = dict(residual=res, eps=EPS) | BAD_LAUNCHES[case]
    residual, eps = kwargs.pop("residual"), kwargs.pop("eps")
    assert launch(x, w, residual, eps, **kwargs)[0] == CUDA_ERROR_INVALID_VALUE, case


def test_fused_rms_norm_bf16_zero_rows_writes_nothing():
    """rows = 0 launches nothing: the outputs' guard rows stay BF16_CANARY (bf16_host checks them)."""
    rc, out, h = launch(np.zeros((0, 4), np.float32), np.ones(4, np.float32), np.zeros((0, 4), np.float32), EPS)
    assert rc == 0 and out.shape == h.shape == (0, 4)
