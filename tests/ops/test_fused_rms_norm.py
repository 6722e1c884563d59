"""fused_rms_norm on CPU: literal rows, the randomized grid bit for bit against ref_fused_rms_norm, batch
invariance, the wrapper's no-residual form (residual_out is x itself) and the argument checks.
"""

import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import FusedRmsNormOutput, fused_rms_norm
from tests.fused_rms_norm_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    test_fused_rms_norm_eps_is_added_after_the_sum, test_fused_rms_norm_literal_rows,
    test_fused_rms_norm_literal_without_residual, test_fused_rms_norm_matches_reference,
    test_fused_rms_norm_row_bits_independent_of_batch,
)


def _t(a) -> paddle.Tensor:
    return paddle.to_tensor(np.asarray(a, dtype=np.float32))


@pytest.fixture
def run():
    """The backend of the shared tests (tests/fused_rms_norm_cases.py): the Paddle op."""
    def run_op(x, weight, residual, eps):
        got = fused_rms_norm(_t(x), _t(weight), None if residual is None else _t(residual), eps)
        assert isinstance(got, FusedRmsNormOutput)
        assert got.out.dtype == got.residual_out.dtype == paddle.float32
        return got.out.numpy(), got.residual_out.numpy()
    return run_op


def test_fused_rms_norm_without_residual_returns_x_itself():
    """No copy: residual_out is the very tensor passed as x, so the next layer's add reads it as is."""
    x = _t([[1, 2], [3, 4]])
    got = fused_rms_norm(x, _t([1, 1]), None, 1e-6)
    assert got.residual_out is x
    out, residual = got  # always two fields
    assert list(out.shape) == [2, 2] and residual is x


def test_fused_rms_norm_with_residual_leaves_inputs_untouched():
    x, res = _t([[1, 2]]), _t([[3, 4]])
    out, h = fused_rms_norm(x, _t([1, 1]), res, 1e-6)
    np.testing.assert_array_equal(h.numpy(), [[4, 6]])
    np.testing.assert_array_equal(x.numpy(), [[1, 2]])
    np.testing.assert_array_equal(res.numpy(), [[3, 4]])


def test_fused_rms_norm_zero_rows_with_residual():
    """R = 0: Paddle hands the empty residual to the op as None; the outputs are still [0, H]."""
    out, h = fused_rms_norm(_t(np.zeros((0, 5))), _t(np.ones(5)), _t(np.zeros((0, 5))), 1e-6)
    assert list(out.shape) == list(h.shape) == [0, 5]


@pytest.mark.parametrize("kwargs, match", [
    (dict(x=np.zeros((2, 3), np.float64)), r"^fused_rms_norm: x has dtype float64, expected float32"),
    (dict(x=np.zeros(3, np.float32)), r"^fused_rms_norm: x has shape \[3\], expected a 2-D tensor"),
    (dict(x=np.zeros((2, 0), np.float32), weight=np.zeros(0, np.float32)),
     r"^fused_rms_norm: x has shape \[2, 0\], expected \[R, H\] with H >= 1"),
    (dict(weight=np.ones(4, np.float32)), r"^fused_rms_norm: weight has shape \[4\], expected \[H\] = \[3\]"),
    (dict(weight=np.ones((1, 3), np.float32)), r"^fused_rms_norm: weight has shape \[1, 3\], expected \[H\]"),
    (dict(weight=np.ones(3, np.int32)), r"^fused_rms_norm: weight has dtype int32, expected float32"),
    (dict(residual=np.zeros((3, 3), np.float32)),
     r"^fused_rms_norm: residual has shape \[3, 3\], expected x's shape \[2, 3\]"),
    (dict(residual=np.zeros((2, 3), np.float16)), r"^fused_rms_norm: residual has dtype float16, expected float32"),
    (dict(eps=-1e-6), r"^fused_rms_norm: eps = -1e-06, expected a finite value >= 0"),
    (dict(eps=float("nan")), r"^fused_rms_norm: eps = nan, expected a finite value >= 0"),
    (dict(eps=1e40), r"^fused_rms_norm: eps = inf, expected a finite value >= 0"),  # inf once float32
])
def test_fused_rms_norm_rejects_bad_arguments(kwargs, match):
    args = dict(x=np.zeros((2, 3), np.float32), weight=np.ones(3, np.float32), residual=None, eps=1e-6)
    args.update(kwargs)
    tensors = {k: None if v is None else paddle.to_tensor(v) for k, v in args.items() if k != "eps"}
    with pytest.raises(ValueError, match=match):
        fused_rms_norm(**tensors, eps=args["eps"])


@pytest.mark.parametrize("eps", ["1e-6", True, None, paddle.to_tensor(1e-6)])
def test_fused_rms_norm_rejects_eps_not_a_host_number(eps):
    with pytest.raises(TypeError, match=r"^fused_rms_norm: eps must be a host float, got "):
        fused_rms_norm(_t([[1.0]]), _t([1.0]), None, eps)
