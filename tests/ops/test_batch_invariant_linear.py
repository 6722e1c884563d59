"""batch_invariant_linear on CPU: values against the float64 reference (rtol = atol = 1e-5), the
documented float32 order bit for bit, batch invariance as exact bit equality (a row alone, among
3 / 4 / 17 / 64 / 257 other rows, at other positions, beside NaN / Inf rows), the weight panels of
pack_linear_weight (float32 and bfloat16) at every row-tile and column-block edge, every CPU code
path and thread count giving the same bits, the motivating paddle.matmul comparison, and the
argument checks.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import batch_invariant_linear, pack_linear_weight
from tests.linear_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    _bits, assert_same_bits, linear_inputs, test_batch_invariant_linear_follows_documented_fp32_order,
    test_batch_invariant_linear_k_zero_gives_bias_or_zeros, test_batch_invariant_linear_matches_reference,
    test_batch_invariant_linear_row_bits_independent_of_batch,
)
from reference.batch_invariant_linear import (
    ref_batch_invariant_linear_fp32_order,
    ref_bf16_round,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# (K, N): K = 1 and 7 are shorter than any SIMD tile; 129 and 384 are not multiples of 16 / 64 / 24
# (129 = one past a power of two); N = 1 and 7 leave only a masked / scalar tail, N = 259 (the tiny
# model's vocab) = 4 x 64 + 3 and 10 x 24 + 19, so every CPU path runs full tiles and a tail;
# 384 x 128 and 128 x 384 are the tiny model's MLP projections.
SHAPES_KN = [(1, 1), (7, 259), (129, 1), (129, 7), (16, 100), (128, 259), (128, 384), (384, 128)]
BATCH_SIZES = [0, 1, 3, 4, 17, 64, 257]  # 4 = one full row tile, 3 / 17 / 257 leave 3 / 1 / 1 rows


def _op(x, w, b=None) -> np.ndarray:
    out = batch_invariant_linear(paddle.to_tensor(x), paddle.to_tensor(w),
                                 None if b is None else paddle.to_tensor(b))
    assert out.dtype == paddle.float32 and list(out.shape) == [x.shape[0], w.shape[1]]
    return out.numpy()


def _op_weight(x, weight: paddle.Tensor, b=None) -> np.ndarray:
    """The op on a prepared weight tensor ([K, N] or panels)."""
    return batch_invariant_linear(paddle.to_tensor(x), weight, None if b is None else paddle.to_tensor(b)).numpy()


def _op_layout(x, w, b=None, layout="plain") -> np.ndarray:
    """The op with the weight held as `layout`: [K, N] or pack_linear_weight's panels (N % 32 != 0 keeps [K, N])."""
    if layout == "plain":
        return _op(x, w, b)
    return _op_weight(x, pack_linear_weight(paddle.to_tensor(w), "bfloat16" if layout == "panels_bf16" else "float32"), b)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/linear_cases.py): the Paddle op."""
    return _op_layout


@pytest.fixture(params=[(M, K, N, bias) for M in BATCH_SIZES for K, N in SHAPES_KN for bias in (False, True)],
                ids=lambda p: "-".join(map(str, p)))
def reference_grid(request):
    return request.param


@pytest.fixture(params=[(7, M, K, N, bias) for M in (1, 3, 64, 257) for K, N in SHAPES_KN for bias in (False, True)],
                ids=lambda p: "-".join(map(str, p[1:])))
def order_grid(request):
    return request.param


@pytest.fixture(params=[(K, N, bias, layout) for K, N in [(128, 384), (128, 259), (384, 128), (7, 259), (129, 7), (1, 1)]
                        for bias in (False, True) for layout in ("plain", "panels", "panels_bf16")],
                ids=lambda p: "-".join(map(str, p)))
def row_bits_grid(request):
    return request.param


@pytest.fixture
def batch_edges():
    """Among 3, 4, 17, 64 and 257 other rows; 4 / 5 and 16 / 17: the queries straddle a row-tile and a
    row-block edge."""
    return (3, 4, 17, 64, 257), (4, 5, 15)


# --- literal cases ------------------------------------------------------------------------------

def test_batch_invariant_linear_literal():
    # x = [[1, 2], [3, -1]], weight [K=2, N=3] = [[1, 0, 1], [0, 1, 1]], bias [0, 0, 10]:
    # row 0 -> [1, 2, 1 + 2 + 10], row 1 -> [3, -1, 3 - 1 + 10].
    x = np.array([[1, 2], [3, -1]], dtype=np.float32)
    w = np.array([[1, 0, 1], [0, 1, 1]], dtype=np.float32)
    b = np.array([0, 0, 10], dtype=np.float32)
    np.testing.assert_array_equal(_op(x, w, b), [[1, 2, 13], [3, -1, 12]])
    np.testing.assert_array_equal(_op(x, w), [[1, 2, 3], [3, -1, 2]])


def test_batch_invariant_linear_literal_rounding_follows_k_order():
    """Float32 sums of 1, 1e8 and -1e8 (exact products, weight = 1) worked by hand; near 1e8 the
    float32 spacing is 8, so 1e8 + 1 and 1e8 + 2 round to 1e8. Left to right:
      [1, 1e8, 1, -1e8]: 1 -> 1e8 -> 1e8 -> 0   (even/odd accumulators: (1 + 1) + 0 = 2; reversed: 1)
      [1, 1, 1e8, -1e8]: 1 -> 2 -> 1e8 -> 0     (pairwise tree or 4 accumulators: 2 + 0 = 2)
      [1e8, -1e8, 1, 1]: 1e8 -> 0 -> 1 -> 2"""
    x = np.array([[1, 1e8, 1, -1e8], [1, 1, 1e8, -1e8], [1e8, -1e8, 1, 1]], dtype=np.float32)
    w = np.ones((4, 1), dtype=np.float32)
    np.testing.assert_array_equal(_op(x, w), [[0.0], [0.0], [2.0]])
    np.testing.assert_array_equal(_op(x, w, np.array([0.5], dtype=np.float32)), [[0.5], [0.5], [2.5]])


def test_batch_invariant_linear_empty_batch():
    out = batch_invariant_linear(paddle.zeros([0, 128]), paddle.ones([128, 259]), paddle.ones([259]))
    assert list(out.shape) == [0, 259] and out.dtype == paddle.float32
    assert list(batch_invariant_linear(paddle.zeros([5, 3]), paddle.ones([3, 0])).shape) == [5, 0]


# --- batch invariance (exact bits) ---------------------------------------------------------------

def test_batch_invariant_linear_row_bits_unaffected_by_nan_and_inf_rows():
    """A NaN / Inf in another row of the batch must not leak into this row (no shared partial sums)."""
    rng = np.random.default_rng(3)
    q, w, b = linear_inputs(rng, 1, 128, 259, True)
    alone = _op(q, w, b)
    filler = rng.standard_normal((7, 128)).astype(np.float32)
    filler[1, 5], filler[3, 0], filler[6, 127] = np.nan, np.inf, -np.inf
    for pos in range(8):
        out = _op(np.concatenate([filler[:pos], q, filler[pos:]]), w, b)
        assert_same_bits(out[pos:pos + 1], alone, f"query at row {pos} beside NaN / Inf rows")
    assert np.isnan(out[1]).all(), "the NaN row itself must be NaN everywhere (IEEE propagation)"


def test_batch_invariant_linear_fused_columns_match_separate_calls():
    """Columns are independent too: one call on [W_q | W_k | W_v] gives the bits of three calls, so
    a model may fuse its projections without changing any output."""
    rng = np.random.default_rng(5)
    x, wq, bq = linear_inputs(rng, 9, 128, 128, True)
    _, wk, bk = linear_inputs(rng, 0, 128, 64, True)
    _, wv, bv = linear_inputs(rng, 0, 128, 67, True)
    fused = _op(x, np.concatenate([wq, wk, wv], axis=1), np.concatenate([bq, bk, bv]))
    separate = np.concatenate([_op(x, wq, bq), _op(x, wk, bk), _op(x, wv, bv)], axis=1)
    assert_same_bits(fused, separate, "fused vs separate projections")


def test_batch_invariant_linear_accepts_transposed_checkpoint_weight():
    """A checkpoint stores [N, K]; passing its transpose (a strided view) gives the same bits as a
    contiguous [K, N] copy (Paddle materialises the view; transpose once at load to avoid that)."""
    rng = np.random.default_rng(11)
    x, w, b = linear_inputs(rng, 5, 128, 259, True)
    w_nk = paddle.to_tensor(np.ascontiguousarray(w.T))
    got = batch_invariant_linear(paddle.to_tensor(x), w_nk.T, paddle.to_tensor(b)).numpy()
    assert_same_bits(got, _op(x, w, b), "transposed view vs contiguous weight")


def test_paddle_matmul_is_not_batch_invariant_here():
    """The motivating defect: paddle.matmul on this CPU may give a row different bits at M = 1 and
    M = 64 (its kernel picks the blocking from M), which flips near-tie argmaxes between a decode
    step and a verify step. Ours must give identical bits on the same inputs. The Paddle half is
    reported, not asserted: the test skips (after checking ours) if Paddle happens to agree."""
    rng = np.random.default_rng(0)
    paddle_diffs = []
    for K, N in [(128, 384), (128, 259), (384, 128)]:
        x = rng.standard_normal((64, K)).astype(np.float32)
        w = rng.standard_normal((K, N)).astype(np.float32)
        ours_alone = np.concatenate([_op(x[r:r + 1], w) for r in (0, 63)])
        ours_batch = _op(x, w)[[0, 63]]
        assert_same_bits(ours_batch, ours_alone, f"ours, K={K} N={N}: rows 0 and 63 at M = 64 vs M = 1")
        xt, wt = paddle.to_tensor(x), paddle.to_tensor(w)
        paddle_alone = np.concatenate([paddle.matmul(xt[r:r + 1], wt).numpy() for r in (0, 63)])
        paddle_batch = paddle.matmul(xt, wt).numpy()[[0, 63]]
        diff = float(np.abs(paddle_alone.astype(np.float64) - paddle_batch).max())
        paddle_diffs.append(diff)
        print(f"K={K} N={N}: paddle.matmul max |M=1 - M=64| = {diff:.3g} "
              f"({int((_bits(paddle_alone) != _bits(paddle_batch)).sum())} of {paddle_alone.size} outputs "
              f"differ); batch_invariant_linear: 0")
    if max(paddle_diffs) == 0.0:
        pytest.skip("paddle.matmul happened to be batch invariant on this machine; ours checked above")


# --- weight panels (pack_linear_weight) at the kernel's tile edges ------------------------------

# Rows: 1-4 take single-panel streaming blocks (M <= 4), 5+ 4-row tiles in 16-row blocks, so 5, 7, 8,
# 15, 16, 17, 33, 63, 64, 65 and 100 hit every tile remainder and block edge. N: one panel (32),
# one block of 64, a block plus a panel (96), 2.5 blocks (160) and SmolLM2's q/k/v width (960).
PANEL_ROWS = [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 33, 63, 64, 65, 100]
PANEL_SHAPES_KN = [(1, 32), (7, 96), (129, 64), (64, 160), (576, 960)]


def test_pack_linear_weight_layout_literal():
    """w [2, 64] = 0..127 row-major -> panels [2, 2, 32]: panel p row k = w[k, 32p : 32p + 32]."""
    w = np.arange(128, dtype=np.float32).reshape(2, 64)
    panels = pack_linear_weight(paddle.to_tensor(w))
    assert list(panels.shape) == [2, 2, 32] and panels.dtype == paddle.float32
    p = panels.numpy()
    np.testing.assert_array_equal(p[0, 1], w[1, :32])  # [32 .. 63] is w[0, 32:], so panel 0 row 1 = 64 .. 95
    np.testing.assert_array_equal(p[1, 0], np.arange(32, 64))
    np.testing.assert_array_equal(p[1, 1], np.arange(96, 128))
    # bfloat16 (small integers are exact): a row's columns in pairs (j, j + 16), so panel 1 row 0 is
    # w[0, 32], w[0, 48], w[0, 33], w[0, 49], ...
    bf16 = pack_linear_weight(paddle.to_tensor(w), "bfloat16")
    assert list(bf16.shape) == [2, 2, 32] and bf16.dtype == paddle.bfloat16
    h = paddle.cast(bf16, "float32").numpy()
    np.testing.assert_array_equal(h[1, 0, :6], [32, 48, 33, 49, 34, 50])
    np.testing.assert_array_equal(h, p.reshape(2, 2, 2, 16).transpose(0, 1, 3, 2).reshape(2, 2, 32))


def test_pack_linear_weight_keeps_other_widths():
    """N % 32 != 0 keeps the [K, N] layout: float32 returns the weight itself, bfloat16 its rounded values."""
    w = paddle.to_tensor(np.random.default_rng(1).standard_normal((5, 259)).astype(np.float32))
    assert pack_linear_weight(w) is w
    got = pack_linear_weight(w, "bfloat16")
    assert list(got.shape) == [5, 259] and got.dtype == paddle.float32
    assert_same_bits(got.numpy(), ref_bf16_round(w.numpy()), "bf16-rounded [K, N]")
    assert not np.array_equal(got.numpy(), w.numpy()), "random float32 values are not all bfloat16 values"


@pytest.mark.parametrize("weight, dtype, match", [
    (np.zeros((3, 32), np.float64), "float32", r"weight has dtype .*float64.* expected a 2-D float32"),
    (np.zeros((1, 3, 32), np.float32), "float32", r"weight has dtype .*float32 and shape \[1, 3, 32\], expected a 2-D float32"),
    (np.zeros((3, 32), np.float32), "float16", r"dtype = 'float16'; allowed: float32, bfloat16"),
], ids=["f64", "3d", "f16"])
def test_pack_linear_weight_rejects_bad_input(weight, dtype, match):
    with pytest.raises(ValueError, match="pack_linear_weight: " + match):
        pack_linear_weight(paddle.to_tensor(weight), dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("K,N", PANEL_SHAPES_KN)
@pytest.mark.parametrize("M", PANEL_ROWS)
def test_batch_invariant_linear_panels_follow_documented_order(M, K, N, with_bias, dtype):
    """Panels give the bits of the documented order on the weights they hold (bfloat16: the rounded
    values), at every row count around the tiles, so panels and [K, N] agree bit for bit too."""
    x, w, b = linear_inputs(np.random.default_rng([11, M, K, N]), M, K, N, with_bias)
    panels = pack_linear_weight(paddle.to_tensor(w), dtype)
    assert len(panels.shape) == 3, "N % 32 == 0 on CPU must give panels"
    values = w if dtype == "float32" else ref_bf16_round(w)
    want = ref_batch_invariant_linear_fp32_order(x, values, b)
    assert_same_bits(_op_weight(x, panels, b), want, f"{dtype} panels vs documented order")
    assert_same_bits(_op(x, values, b), want, "[K, N] vs documented order")


@pytest.mark.parametrize("panels, match", [
    (([3, 5, 32], "float32"), r"weight panels have shape \[3, 5, 32\], expected \[N / 32, K, 32\] with K = x.shape\[1\] = 4"),
    (([3, 4, 16], "float32"), r"weight panels have shape \[3, 4, 16\], expected \[N / 32, K, 32\]"),
    (([3, 4, 32], "float16"), r"weight panels have dtype float16, expected float32 or bfloat16"),
    (([2, 3, 4, 32], "float32"), r"weight has shape \[2, 3, 4, 32\], expected a 2-D tensor \[K, N\] \(or 3-D panels"),
], ids=["k_mismatch", "panel_width", "f16", "4d"])
def test_batch_invariant_linear_rejects_bad_panels(panels, match):
    with pytest.raises(ValueError, match=r"batch_invariant_linear: " + match):
        batch_invariant_linear(paddle.zeros([2, 4]), paddle.zeros(panels[0], dtype=panels[1]))
    bias = paddle.zeros([95])  # 3 panels hold N = 96
    with pytest.raises(ValueError, match=r"bias has shape \[95\], expected \[N\] = \[96\]"):
        batch_invariant_linear(paddle.zeros([2, 4]), paddle.zeros([3, 4, 32]), bias)


# --- every CPU code path gives the same bits -----------------------------------------------------

_PATH_SCRIPT = r"""
import json, sys
import numpy as np, paddle
from specworker.model_executor.ops import batch_invariant_linear, pack_linear_weight
shapes = json.loads(sys.argv[1])
outs = {}
try:
    for i, (M, K, N, seed) in enumerate(shapes):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((M, K)).astype(np.float32)
        w = rng.standard_normal((K, N)).astype(np.float32)
        b = rng.standard_normal(N).astype(np.float32)
        xt, wt, bt = paddle.to_tensor(x), paddle.to_tensor(w), paddle.to_tensor(b)
        outs[f"o{i}"] = batch_invariant_linear(xt, wt, bt).numpy()
        if N % 32 == 0:
            outs[f"p{i}"] = batch_invariant_linear(xt, pack_linear_weight(wt), bt).numpy()
            outs[f"h{i}"] = batch_invariant_linear(xt, pack_linear_weight(wt, "bfloat16"), bt).numpy()
except ValueError as e:
    print("ERROR:", e)
    sys.exit(3)
np.savez(sys.argv[2], **outs)
"""
# Row counts 1..5 cover every row-tile remainder, 16 / 17 a row-block edge; N covers full tiles,
# masked / scalar tails and (N % 32 == 0) the float32 and bfloat16 panels. (256, 416) is big enough
# (416 KiB of float32 weights) for the op to split it between threads at every M.
_PATH_SHAPES = [(M, K, N, 100 * M + N) for M in (1, 2, 3, 4, 5, 17, 64)
                for K, N in ((7, 1), (129, 259), (128, 384), (5, 23), (33, 96), (256, 416))]


def _run_path(isa: str, tmp_path: Path, threads: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPECWORKER_LINEAR_CPU_ISA=isa, PYTHONPATH=str(REPO_ROOT))
    env.pop("SPECWORKER_LINEAR_THREADS", None)
    if threads is not None:
        env["SPECWORKER_LINEAR_THREADS"] = threads
    out = tmp_path / f"{isa}-{threads}.npz"
    return subprocess.run([sys.executable, "-c", _PATH_SCRIPT, json.dumps(_PATH_SHAPES), str(out)],
                          env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


def _check_path_results(results: dict) -> None:
    for i, (M, K, N, seed) in enumerate(_PATH_SHAPES):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((M, K)).astype(np.float32)
        w = rng.standard_normal((K, N)).astype(np.float32)
        b = rng.standard_normal(N).astype(np.float32)
        want = ref_batch_invariant_linear_fp32_order(x, w, b)
        want_bf16 = ref_batch_invariant_linear_fp32_order(x, ref_bf16_round(w), b) if N % 32 == 0 else None
        for name, res in results.items():
            assert_same_bits(res[f"o{i}"], want, f"{name}, M={M} K={K} N={N}")
            if N % 32 == 0:
                assert_same_bits(res[f"p{i}"], want, f"{name} panels, M={M} K={K} N={N}")
                assert_same_bits(res[f"h{i}"], want_bf16, f"{name} bf16 panels, M={M} K={K} N={N}")


def test_batch_invariant_linear_cpu_paths_agree(tmp_path):
    """generic, AVX2 and AVX-512 (those this CPU has) and the auto choice give the same bits and
    follow the documented order, on [K, N] weights and on panels: a machine's instruction set never
    changes a result. Each path runs in its own process (SPECWORKER_LINEAR_CPU_ISA is read once)."""
    results, unsupported = {}, []
    for isa in ("generic", "avx2", "avx512", "auto"):
        proc = _run_path(isa, tmp_path)
        if proc.returncode == 3 and "does not support it" in proc.stdout:
            unsupported.append(isa)
            continue
        assert proc.returncode == 0, f"SPECWORKER_LINEAR_CPU_ISA={isa} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
        results[isa] = np.load(tmp_path / f"{isa}-None.npz")
    assert "generic" in results and "auto" in results, f"generic and auto always run; got {sorted(results)}"
    print(f"CPU paths compared: {sorted(results)}; not supported here: {unsupported}")
    _check_path_results(results)


def test_batch_invariant_linear_thread_count_changes_no_bit(tmp_path):
    """SPECWORKER_LINEAR_THREADS = 1, 2, 3 (more than this machine may have: threads then share cores)
    give the same bits: a thread owns whole outputs, so the split never changes a summation order."""
    results = {}
    for threads in ("1", "2", "3"):
        proc = _run_path("auto", tmp_path, threads)
        assert proc.returncode == 0, f"SPECWORKER_LINEAR_THREADS={threads} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
        results[f"threads={threads}"] = np.load(tmp_path / f"auto-{threads}.npz")
    _check_path_results(results)


@pytest.mark.parametrize("layout,n", [(layout, 4096) for layout in ("plain", "panels", "panels_bf16")] +
                         [("panels", 576), ("panels_bf16", 544), ("plain", 150), ("plain", 1000)])
def test_batch_invariant_linear_threaded_calls_repeat_their_bits(layout, n):
    """Many back-to-back calls that the pool splits between threads (576 x 4096: 9 MB of weights) all
    give the documented bits: no unit of work is lost or run twice, whatever the threads' timing. Also where the
    64-column blocks do not split evenly over two threads and the last ones are cut into 32-column blocks (576:
    9 blocks; 544: 8.5; plain 150: 2.3, 1000: 15.6), at one row block (M <= 16) and more."""
    rng = np.random.default_rng(21)
    _, w, b = linear_inputs(rng, 0, 576, n, True)
    weight = paddle.to_tensor(w) if layout == "plain" else pack_linear_weight(
        paddle.to_tensor(w), "bfloat16" if layout == "panels_bf16" else "float32")
    values = ref_bf16_round(w) if layout == "panels_bf16" else w
    for M in (1, 4, 5, 12, 16, 33):
        x = rng.standard_normal((M, 576)).astype(np.float32)
        want = ref_batch_invariant_linear_fp32_order(x, values, b)
        xt, bt = paddle.to_tensor(x), paddle.to_tensor(b)
        for call in range(40 if n == 4096 else 10):
            got = batch_invariant_linear(xt, weight, bt).numpy()
            assert_same_bits(got, want, f"M={M}, call {call}")


@pytest.mark.parametrize("threads", ["0", "two", "257"])
def test_batch_invariant_linear_rejects_bad_thread_count(tmp_path, threads):
    proc = _run_path("auto", tmp_path, threads)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert f"SPECWORKER_LINEAR_THREADS={threads}, expected an integer from 1 to 256" in proc.stdout


def test_batch_invariant_linear_rejects_unknown_cpu_path(tmp_path):
    proc = _run_path("sse9", tmp_path)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "SPECWORKER_LINEAR_CPU_ISA=sse9, expected auto, avx512, avx2 or generic" in proc.stdout


# --- argument checks ----------------------------------------------------------------------------

def _t(shape, dtype="float32"):
    """A (shape, dtype) spec; the test builds the tensor, so a failure report never prints it
    (Paddle's repr of a [2**31, 0] tensor walks 2**31 rows)."""
    return (tuple(shape), dtype)


@pytest.mark.parametrize(
    "x, weight, bias, match",
    [
        (_t([2, 3], "float64"), _t([3, 4]), None, "x has dtype float64, expected float32"),
        (_t([2, 3], "float16"), _t([3, 4]), None, "x has dtype float16, expected float32"),
        (_t([2, 3]), _t([3, 4], "bfloat16"), None, "weight has dtype bfloat16, expected float32"),
        (_t([2, 3]), _t([3, 4]), _t([4], "int32"), "bias has dtype int32, expected float32"),
        (_t([3]), _t([3, 4]), None, r"x has shape \[3\], expected a 2-D tensor"),
        (_t([1, 2, 3]), _t([3, 4]), None, r"x has shape \[1, 2, 3\], expected a 2-D tensor"),
        (_t([2, 3]), _t([12]), None, r"weight has shape \[12\], expected a 2-D tensor"),
        (_t([2, 3]), _t([4, 3]), None,
         r"weight has shape \[4, 3\], expected \[K, N\] with K = x.shape\[1\] = 3 \(x has shape \[2, 3\]"),
        (_t([2, 3]), _t([3, 4]), _t([5]), r"bias has shape \[5\], expected \[N\] = \[4\]"),
        (_t([2, 3]), _t([3, 4]), _t([4, 1]), r"bias has shape \[4, 1\], expected \[N\] = \[4\]"),
        (_t([2, 3]), _t([3, 4]), _t([1, 4]), r"bias has shape \[1, 4\], expected \[N\] = \[4\]"),
        # Sizes past int32 (the CUDA launcher's): empty tensors, so nothing is allocated.
        (_t([2**31, 0]), _t([0, 0]), None, r"M \(x.shape\[0\]\) = 2147483648 does not fit the kernel's int32"),
        (_t([0, 2**31]), _t([2**31, 0]), None, r"K \(x.shape\[1\]\) = 2147483648 does not fit the kernel's int32"),
    ],
    ids=["x_f64", "x_f16", "w_bf16", "bias_i32", "x_1d", "x_3d", "w_1d", "k_mismatch", "bias_len",
         "bias_col", "bias_row", "m_over_int32", "k_over_int32"],
)
def test_batch_invariant_linear_rejects_bad_input(x, weight, bias, match):
    tensors = [None if spec is None else paddle.zeros(spec[0], dtype=spec[1]) for spec in (x, weight, bias)]
    with pytest.raises(ValueError, match=r"batch_invariant_linear: " + match):
        batch_invariant_linear(*tensors)
