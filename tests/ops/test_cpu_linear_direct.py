"""batch_invariant_linear's direct CPU path (ops/_cpu_linear.py: the kernel through ctypes, no custom-op dispatch):
the same bits as the registered op on every layout, with and without bias, at awkward M, K, N; taken exactly for
the calls it claims (the op is not run then), and every other call (empty shapes, strided or gradient-wanting
inputs, wrong dtypes or shapes) goes through the op with the op's own error messages; off with
SPECWORKER_CPU_LINEAR_DIRECT=0."""

import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import _cpu_linear, batch_invariant_linear, model_ops, pack_linear_weight
from specworker.model_executor.ops._extension import _run
from tests.linear_cases import assert_same_bits, linear_inputs

LAYOUTS = ["plain", "panels", "panels_bf16"]


def _weight(w: np.ndarray, layout: str) -> paddle.Tensor:
    t = paddle.to_tensor(w)
    return t if layout == "plain" else pack_linear_weight(t, "bfloat16" if layout == "panels_bf16" else "float32")


@pytest.fixture
def op_calls(monkeypatch):
    """Counts the registered op's runs through model_ops (the wrapper's fallback)."""
    calls = []

    def counted(name, *args):
        calls.append(name)
        return _run(name, *args)

    monkeypatch.setattr(model_ops, "_run", counted)
    return calls


SIZES = [(1, 7, 32), (3, 129, 64), (4, 576, 96), (17, 64, 288), (64, 128, 384), (5, 33, 7)]
# panels need N % 32 == 0 (pack_linear_weight keeps [K, N] otherwise: the plain case)
CASES = [(layout, *size) for layout in LAYOUTS for size in SIZES if layout == "plain" or size[2] % 32 == 0]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("layout,M,K,N", CASES)
def test_direct_path_gives_the_op_bits(layout, with_bias, M, K, N, op_calls):
    rng = np.random.default_rng(M * 1000 + K + N)
    x, w, b = linear_inputs(rng, M, K, N, with_bias)
    xt, wt = paddle.to_tensor(x), _weight(w, layout)
    bt = None if b is None else paddle.to_tensor(b)
    got = batch_invariant_linear(xt, wt, bt)
    assert op_calls == [], "the direct path should have run, not the op"
    want = _run("batch_invariant_linear", xt, wt, bt)
    want = want[0] if isinstance(want, (list, tuple)) else want
    assert got.dtype == paddle.float32 and got.shape == [M, N] and got.place.is_cpu_place()
    assert_same_bits(got.numpy(), want.numpy(), f"direct vs op, {layout}, M={M} K={K} N={N}")


def test_direct_output_is_fresh_and_rows_are_batch_invariant(op_calls):
    rng = np.random.default_rng(7)
    x, w, b = linear_inputs(rng, 9, 96, 64, True)
    wt, bt = _weight(w, "panels"), paddle.to_tensor(b)
    full = batch_invariant_linear(paddle.to_tensor(x), wt, bt)
    again = batch_invariant_linear(paddle.to_tensor(x), wt, bt)
    assert full.data_ptr() != again.data_ptr()
    for r in (0, 4, 8):
        one = batch_invariant_linear(paddle.to_tensor(x[r:r + 1]), wt, bt)
        assert_same_bits(one.numpy(), full.numpy()[r:r + 1], f"row {r} alone vs in 9 rows")
    assert op_calls == []


def test_parameters_under_no_grad_take_the_direct_path(op_calls):
    """A model's weights are parameters (stop_gradient False); its forward runs under paddle.no_grad()."""
    rng = np.random.default_rng(6)
    x, w, b = linear_inputs(rng, 2, 32, 64, True)
    wt = paddle.create_parameter([32, 64], "float32", default_initializer=paddle.nn.initializer.Assign(w))
    assert not wt.stop_gradient
    with paddle.no_grad():
        got = batch_invariant_linear(paddle.to_tensor(x), wt, paddle.to_tensor(b))
    assert op_calls == []
    want = _run("batch_invariant_linear", paddle.to_tensor(x), paddle.to_tensor(w), paddle.to_tensor(b))
    want = want[0] if isinstance(want, (list, tuple)) else want
    assert_same_bits(got.numpy(), want.numpy(), "parameter weight under no_grad")
    batch_invariant_linear(paddle.to_tensor(x), wt, paddle.to_tensor(b))  # grad enabled: the op records it
    assert op_calls == ["batch_invariant_linear"]


def _strided_x(x: np.ndarray) -> paddle.Tensor:
    t = paddle.to_tensor(np.ascontiguousarray(x.T)).t()  # a transposed view (strides) where Paddle keeps one
    return t


@pytest.mark.parametrize("case", ["m_zero", "k_zero", "grad", "strided"])
def test_other_calls_run_the_op(case, op_calls):
    rng = np.random.default_rng(3)
    x, w, _ = linear_inputs(rng, 3, 16, 32, False)
    xt, wt = paddle.to_tensor(x), paddle.to_tensor(w)
    if case == "m_zero":
        xt = paddle.zeros([0, 16], dtype="float32")
    elif case == "k_zero":
        xt, wt = paddle.zeros([3, 0], dtype="float32"), paddle.zeros([0, 32], dtype="float32")
    elif case == "grad":
        xt.stop_gradient = False
    elif case == "strided":
        xt = _strided_x(x)
        if xt.is_contiguous():
            pytest.skip("this Paddle materialises the transposed view: no strided tensor to test")
    out = batch_invariant_linear(xt, wt)
    assert op_calls == ["batch_invariant_linear"]
    if case in ("grad", "strided"):
        want = _run("batch_invariant_linear", paddle.to_tensor(x), paddle.to_tensor(w), None)
        want = want[0] if isinstance(want, (list, tuple)) else want
        assert_same_bits(out.numpy(), want.numpy(), case)


@pytest.mark.parametrize("bad,message", [
    (lambda x, w, b: (x.astype("float64"), w, b), "x has dtype float64"),
    (lambda x, w, b: (x, w[:8], b), "expected [K, N] with K = x.shape[1] = 16"),
    (lambda x, w, b: (x, w, b[:5]), "bias has shape [5], expected [N] = [32]"),
    (lambda x, w, b: (x, w.astype("bfloat16"), b), "weight has dtype bfloat16"),
])
def test_bad_calls_get_the_op_message(bad, message, op_calls):
    rng = np.random.default_rng(4)
    x, w, b = (paddle.to_tensor(a) for a in linear_inputs(rng, 3, 16, 32, True))
    with pytest.raises(ValueError) as err:
        batch_invariant_linear(*bad(x, w, b))
    assert message in str(err.value) and "batch_invariant_linear" in str(err.value)
    assert op_calls == ["batch_invariant_linear"]


def test_env_switch_turns_the_direct_path_off(monkeypatch, op_calls):
    rng = np.random.default_rng(5)
    x, w, _ = (paddle.to_tensor(a) if a is not None else None for a in linear_inputs(rng, 2, 16, 32, False))
    monkeypatch.setenv("SPECWORKER_CPU_LINEAR_DIRECT", "0")
    _cpu_linear.direct_enabled.cache_clear()
    try:
        batch_invariant_linear(x, w)
        assert op_calls == ["batch_invariant_linear"]
    finally:
        monkeypatch.delenv("SPECWORKER_CPU_LINEAR_DIRECT")
        _cpu_linear.direct_enabled.cache_clear()
    batch_invariant_linear(x, w)
    assert op_calls == ["batch_invariant_linear"]  # back on: no second op run
