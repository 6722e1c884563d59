"""qkv_norm_rotary on CPU: the shared cases (literal, randomized against ref_qkv_norm_rotary, batch invariance;
tests/qkv_norm_rotary_cases.py), bit equality with the unfused Python path it replaces in Attention.forward
(split, reshape, RMSNorm per head, apply_rotary_factors), the output type and the argument checks.
"""

import numpy as np
import paddle
import pytest

from specworker.model_executor.layers.rms_norm import RMSNorm
from specworker.model_executor.layers.rotary import RotaryEmbedding, apply_rotary_factors
from specworker.model_executor.ops import RotatedQKV, qkv_norm_rotary
from tests.qkv_norm_rotary_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    EPS, assert_same_bits, qkv_inputs, test_qkv_norm_rotary_literal_norms, test_qkv_norm_rotary_literal_rotation,
    test_qkv_norm_rotary_matches_reference, test_qkv_norm_rotary_rows_are_batch_invariant,
)

# (num_heads, num_kv_heads, head_dim) of the models whose Attention.forward calls the op: the built-in tiny
# model (6:2 x 32) and SmolLM2-135M (9:3 x 64), each whole and as rank 0 of 2 / 3 under tensor parallelism.
MODEL_SHAPES = [(6, 2, 32), (3, 1, 32), (9, 3, 64), (3, 1, 64)]


def _t(a):
    return None if a is None else paddle.to_tensor(a)


def run_op(qkv, cos_full, sin_signed, q_norm_weight, k_norm_weight, nh, nkv, d, eps):
    out = qkv_norm_rotary(_t(qkv), _t(cos_full), _t(sin_signed), _t(q_norm_weight), _t(k_norm_weight),
                          num_heads=nh, num_kv_heads=nkv, head_dim=d, eps=eps)
    return tuple(x.numpy() for x in out)


@pytest.fixture
def run():
    """The backend of the shared tests (tests/qkv_norm_rotary_cases.py): the Paddle op."""
    return run_op


def _unfused(qkv, cos, sin, nh, nkv, d, q_norm=None, k_norm=None):
    """Attention.forward's path before the op (eight Paddle ops, 22 more with norms), kept verbatim."""
    t = qkv.shape[0]
    qk, v = paddle.split(qkv, [(nh + nkv) * d, nkv * d], axis=-1)
    qk = qk.reshape([t, nh + nkv, d])
    if q_norm is not None:
        q, k = paddle.split(qk, [nh, nkv], axis=1)
        q = q_norm(q.reshape([-1, d])).reshape([t, nh, d])
        k = k_norm(k.reshape([-1, d])).reshape([t, nkv, d])
        qk = paddle.concat([q, k], axis=1)
    q, k = paddle.split(apply_rotary_factors(qk, cos, sin), [nh, nkv], axis=1)
    return q, k, v.reshape([t, nkv, d])


def _model_inputs(seed, t_num, nh, nkv, d):
    """A qkv projection and the factors RotaryEmbedding gathers for positions 0..4095 (clamped past it)."""
    rng = np.random.default_rng(seed)
    qkv, _, _, _, _ = qkv_inputs(rng, t_num, nh, nkv, d, norms=False)
    rope = RotaryEmbedding(d, 100000.0, 4096)
    cos, sin = rope.factors(paddle.to_tensor(rng.integers(0, 5000, t_num).astype(np.int32)))
    return paddle.to_tensor(qkv), cos, sin


@pytest.mark.parametrize("nh, nkv, d", MODEL_SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("t_num", [1, 4, 37])
def test_qkv_norm_rotary_matches_unfused_path_without_norms(t_num, nh, nkv, d):
    qkv, cos, sin = _model_inputs([t_num, nh, d], t_num, nh, nkv, d)
    got = qkv_norm_rotary(qkv, cos, sin, num_heads=nh, num_kv_heads=nkv, head_dim=d)
    for name, g, w in zip("qkv", got, _unfused(qkv, cos, sin, nh, nkv, d)):
        assert_same_bits(g.numpy(), w.numpy(), name)


def _correctly_rounded_sqrt(x):
    return paddle.to_tensor(np.sqrt(x.numpy()))


@pytest.mark.parametrize("nh, nkv, d", [(8, 4, 128), (4, 2, 64)], ids=lambda v: str(v))
def test_qkv_norm_rotary_with_norms_matches_unfused_path_up_to_its_sqrt(monkeypatch, nh, nkv, d):
    """With Qwen3's q/k norms the op equals the unfused path once that path's sqrt is correctly rounded
    (Paddle's CPU sqrt is not: it differs in the last bit on about half of the inputs, docs/spec.md §4.11)."""
    qkv, cos, sin = _model_inputs(3, 19, nh, nkv, d)
    q_norm, k_norm = RMSNorm(d, 1e-6), RMSNorm(d, 1e-6)
    rng = np.random.default_rng(4)
    q_norm.weight.set_value((1 + 0.5 * rng.standard_normal(d)).astype(np.float32))
    k_norm.weight.set_value((1 + 0.5 * rng.standard_normal(d)).astype(np.float32))
    got = qkv_norm_rotary(qkv, cos, sin, q_norm.weight, k_norm.weight, num_heads=nh, num_kv_heads=nkv, head_dim=d,
                          eps=1e-6)
    monkeypatch.setattr(paddle, "sqrt", _correctly_rounded_sqrt)
    for name, g, w in zip("qkv", got, _unfused(qkv, cos, sin, nh, nkv, d, q_norm, k_norm)):
        assert_same_bits(g.numpy(), w.numpy(), name)


def test_qkv_norm_rotary_returns_contiguous_float32_rotated_qkv():
    qkv, cos_full, sin_signed, qw, kw = qkv_inputs(np.random.default_rng(0), 3, 6, 2, 32, norms=True)
    out = qkv_norm_rotary(_t(qkv), _t(cos_full), _t(sin_signed), _t(qw), _t(kw), num_heads=6, num_kv_heads=2,
                          head_dim=32)
    assert isinstance(out, RotatedQKV)
    assert [list(x.shape) for x in out] == [[3, 6, 32], [3, 2, 32], [3, 2, 32]]
    assert all(x.dtype == paddle.float32 and x.is_contiguous() for x in out)


# --- argument checks ------------------------------------------------------------------------------

def _args(t_num=2, nh=2, nkv=1, d=4, norms=False):
    qkv, cos_full, sin_signed, qw, kw = qkv_inputs(np.random.default_rng(1), t_num, nh, nkv, d, norms)
    return dict(qkv=_t(qkv), cos_full=_t(cos_full), sin_signed=_t(sin_signed), q_norm_weight=_t(qw),
                k_norm_weight=_t(kw), num_heads=nh, num_kv_heads=nkv, head_dim=d)


def test_qkv_norm_rotary_rejects_none_for_a_required_tensor():
    with pytest.raises(TypeError, match=r"^qkv_norm_rotary: cos_full must be a paddle\.Tensor, got None$"):
        qkv_norm_rotary(**{**_args(), "cos_full": None})


@pytest.mark.parametrize("arg", ["qkv", "cos_full", "sin_signed", "q_norm_weight"])
def test_qkv_norm_rotary_rejects_a_dtype_other_than_float32(arg):
    args = _args(norms=True)
    args[arg] = args[arg].astype("float64")
    with pytest.raises(ValueError, match=rf"qkv_norm_rotary: {arg} has dtype float64, expected float32"):
        qkv_norm_rotary(**args)


def test_qkv_norm_rotary_rejects_a_qkv_width_other_than_the_heads():
    args = _args()  # (2 + 2 * 1) * 4 = 16 columns
    args["qkv"] = args["qkv"][:, :12]
    with pytest.raises(ValueError, match=r"qkv_norm_rotary: qkv has shape \[2, 12\], expected "
                                         r"\[T, \(num_heads \+ 2 \* num_kv_heads\) \* head_dim\] = \[T, 16\]"):
        qkv_norm_rotary(**args)


def test_qkv_norm_rotary_rejects_an_odd_head_dim():
    args = {**_args(nh=1, nkv=1, d=4), "head_dim": 3}
    with pytest.raises(ValueError, match=r"qkv_norm_rotary: head_dim = 3, expected an even number in \[2, 8192\]"):
        qkv_norm_rotary(**args)


def test_qkv_norm_rotary_rejects_heads_not_a_multiple_of_kv_heads():
    args = {**_args(nh=3, nkv=2, d=2)}
    with pytest.raises(ValueError, match="qkv_norm_rotary: num_heads = 3 is not a multiple of num_kv_heads = 2"):
        qkv_norm_rotary(**args)


@pytest.mark.parametrize("given", ["q_norm_weight", "k_norm_weight"])
def test_qkv_norm_rotary_rejects_unpaired_norm_weights(given):
    args = _args(norms=True)
    args["k_norm_weight" if given == "q_norm_weight" else "q_norm_weight"] = None
    with pytest.raises(ValueError, match="qkv_norm_rotary: q_norm_weight and k_norm_weight must be given together"):
        qkv_norm_rotary(**args)


def test_qkv_norm_rotary_rejects_factors_of_the_wrong_shape():
    args = _args()
    args["sin_signed"] = args["sin_signed"].reshape([1, 2, 4])
    with pytest.raises(ValueError, match=r"qkv_norm_rotary: sin_signed has shape \[1, 2, 4\], expected "
                                         r"\[T, 1, head_dim\] = \[2, 1, 4\] or \[T, head_dim\] = \[2, 4\]"):
        qkv_norm_rotary(**args)


def test_qkv_norm_rotary_rejects_a_norm_weight_of_the_wrong_width():
    args = _args(norms=True)
    args["k_norm_weight"] = paddle.ones([8])
    with pytest.raises(ValueError, match=r"qkv_norm_rotary: k_norm_weight has shape \[8\], expected "
                                         r"\[head_dim\] = \[4\]"):
        qkv_norm_rotary(**args)


@pytest.mark.parametrize("attr", ["num_heads", "num_kv_heads", "head_dim"])
def test_qkv_norm_rotary_rejects_a_head_count_that_is_not_a_host_int(attr):
    args = _args()
    args[attr] = float(args[attr])
    with pytest.raises(TypeError, match=f"qkv_norm_rotary: {attr} must be a host int, got float"):
        qkv_norm_rotary(**args)


@pytest.mark.parametrize("attrs, message", [
    (dict(num_heads=0), "num_heads = 0, expected >= 1"),
    (dict(num_kv_heads=0), "num_kv_heads = 0, expected >= 1"),
    (dict(head_dim=8194), r"head_dim = 8194, expected an even number in \[2, 8192\]"),
    (dict(eps=-1.0), "eps = -1, expected a finite number >= 0"),
    (dict(eps=float("nan")), "eps = nan, expected a finite number >= 0"),
])
def test_qkv_norm_rotary_rejects_bad_attributes(attrs, message):
    with pytest.raises(ValueError, match=f"qkv_norm_rotary: {message}"):
        qkv_norm_rotary(**{**_args(norms=True), **attrs})
