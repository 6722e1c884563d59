import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import get_cu_seqlens
from tests.reference.get_cu_seqlens import ref_get_cu_seqlens


def test_get_cu_seqlens_literal():
    out = get_cu_seqlens(paddle.to_tensor([2, 0, 3], dtype="int32"))
    assert out.shape == [4] and out.dtype == paddle.int32
    np.testing.assert_array_equal(out.numpy(), [0, 2, 2, 5])


def test_get_cu_seqlens_accepts_fastdeploy_column_shape():
    out = get_cu_seqlens(paddle.to_tensor([[1], [4]], dtype="int32"))
    np.testing.assert_array_equal(out.numpy(), [0, 1, 5])


@pytest.mark.parametrize("bsz", [0, 1, 3, 17, 256, 1000])
def test_get_cu_seqlens_matches_reference(bsz):
    rng = np.random.default_rng(bsz)
    lens = rng.integers(0, 9, size=bsz).astype(np.int32)
    lens[rng.random(bsz) < 0.3] = 0
    out = get_cu_seqlens(paddle.to_tensor(lens))
    np.testing.assert_array_equal(out.numpy(), ref_get_cu_seqlens(lens))


@pytest.mark.parametrize(
    "lens, dtype, match",
    [
        ([1, 2], "int64", "dtype int64, expected int32"),
        ([[1, 2]], "int32", r"shape \[1, 2\], expected a per-slot tensor"),
        ([1, -2], "int32", r"seq_lens\[1\] = -2, expected >= 0"),
    ],
)
def test_get_cu_seqlens_rejects_bad_input(lens, dtype, match):
    with pytest.raises(ValueError, match=match):
        get_cu_seqlens(paddle.to_tensor(lens, dtype=dtype))
