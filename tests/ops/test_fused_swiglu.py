"""fused_swiglu on CPU: the literal and special-value rows, the randomized grid bit for bit against ref_fused_swiglu,
silu's accuracy against float64, batch invariance (tests/fused_swiglu_cases.py), the distance to the Paddle path it
replaced, and the argument checks.
"""

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from specworker.model_executor.ops import _cpu_linear, fused_swiglu, model_ops
from specworker.model_executor.ops._extension import _run
from tests.fused_swiglu_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    pack, test_fused_swiglu_literal_row, test_fused_swiglu_matches_reference,
    test_fused_swiglu_row_bits_independent_of_batch, test_fused_swiglu_silu_within_ulps_of_float64,
    test_fused_swiglu_special_values,
)


@pytest.fixture(params=["direct", "op"])
def run(request):
    """The backends of the shared tests (tests/fused_swiglu_cases.py): ops.fused_swiglu (on CPU its direct path:
    the op's loop through ctypes, ops/_cpu_linear.py) and the registered Paddle op itself."""
    def run_op(gate_up):
        x = paddle.to_tensor(np.asarray(gate_up, np.float32))
        if request.param == "direct":
            out = fused_swiglu(x)
        else:
            out = _run("fused_swiglu", x)
            out = out[0] if isinstance(out, (list, tuple)) else out
        assert out.dtype == paddle.float32
        return out.numpy()
    return run_op


def test_fused_swiglu_direct_path_is_taken_and_gives_the_op_bits(monkeypatch):
    """A CPU float32 call runs the loop without the custom-op dispatch (the op is not run), with the op's bits;
    with SPECWORKER_CPU_LINEAR_DIRECT=0 it goes through the op."""
    calls = []
    monkeypatch.setattr(model_ops, "_run", lambda name, *args: (calls.append(name), _run(name, *args))[1])
    rng = np.random.default_rng(3)
    gate_up = paddle.to_tensor((rng.standard_normal((5, 2 * 97)) * 8).astype(np.float32))
    got = fused_swiglu(gate_up)
    assert calls == []
    want = _run("fused_swiglu", gate_up)
    want = want[0] if isinstance(want, (list, tuple)) else want
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.numpy().view(np.uint32))
    monkeypatch.setattr(_cpu_linear, "direct_enabled", lambda: False)
    np.testing.assert_array_equal(fused_swiglu(gate_up).numpy().view(np.uint32), want.numpy().view(np.uint32))
    assert calls == ["fused_swiglu"]


def test_fused_swiglu_zero_rows_gives_an_empty_output():
    out = fused_swiglu(paddle.zeros([0, 10], "float32"))
    assert list(out.shape) == [0, 5] and out.dtype == paddle.float32


def test_fused_swiglu_leaves_its_input_untouched():
    gate_up = pack([[1.5, -2.0]], [[3.0, 4.0]])
    x = paddle.to_tensor(gate_up)
    fused_swiglu(x)
    np.testing.assert_array_equal(x.numpy(), gate_up)


def test_fused_swiglu_close_to_the_paddle_path_it_replaced():
    """The old SwiGLU.forward computed F.silu(gate) * up with Paddle's CPU silu: another approximation of the same
    function, so the two agree to a few float32 ulps (rtol 1e-6 on activations of a trained model's scale), not in
    every bit."""
    rng = np.random.default_rng(3)
    gate, up = (rng.standard_normal((64, 1536)) * 3).astype(np.float32), rng.standard_normal((64, 1536))
    gate_up = pack(gate, up)
    old = (F.silu(paddle.to_tensor(gate)) * paddle.to_tensor(up.astype(np.float32))).numpy()
    np.testing.assert_allclose(fused_swiglu(paddle.to_tensor(gate_up)).numpy(), old, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("gate_up, match", [
    (np.zeros((2, 4), np.float64), r"^fused_swiglu: gate_up has dtype float64, expected float32"),
    (np.zeros((2, 4), np.float16), r"^fused_swiglu: gate_up has dtype float16, expected float32"),
    (np.zeros((2, 4), np.int32), r"^fused_swiglu: gate_up has dtype int32, expected float32"),
    (np.zeros(6, np.float32), r"^fused_swiglu: gate_up has shape \[6\], expected a 2-D tensor"),
    (np.zeros((2, 3, 4), np.float32), r"^fused_swiglu: gate_up has shape \[2, 3, 4\], expected a 2-D tensor"),
    (np.zeros((2, 5), np.float32),
     r"^fused_swiglu: gate_up has shape \[2, 5\], expected \[R, 2I\] with an even last dimension 2I >= 2"),
    (np.zeros((2, 1), np.float32),
     r"^fused_swiglu: gate_up has shape \[2, 1\], expected \[R, 2I\] with an even last dimension 2I >= 2"),
    (np.zeros((2, 0), np.float32),
     r"^fused_swiglu: gate_up has shape \[2, 0\], expected \[R, 2I\] with an even last dimension 2I >= 2"),
])
def test_fused_swiglu_rejects_bad_arguments(gate_up, match):
    with pytest.raises(ValueError, match=match):
        fused_swiglu(paddle.to_tensor(gate_up))


@pytest.mark.parametrize("gate_up, match", [
    (None, r"^fused_swiglu: gate_up must be a paddle\.Tensor, got None$"),
    (np.zeros((2, 4), np.float32), r"^fused_swiglu: gate_up must be a paddle\.Tensor, got numpy\.ndarray$"),
    ([[1.0, 2.0]], r"^fused_swiglu: gate_up must be a paddle\.Tensor, got builtins\.list$"),
])
def test_fused_swiglu_rejects_gate_up_not_a_tensor(gate_up, match):
    with pytest.raises(TypeError, match=match):
        fused_swiglu(gate_up)
