import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import speculate_get_seq_lens_output
from tests.seq_lens_output_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    test_speculate_get_seq_lens_output_matches_reference,
    test_speculate_get_seq_lens_output_three_slots_literal,
    test_speculate_get_seq_lens_output_zero_slots,
)


def tensor(x):
    """int32 paddle tensor; a numpy array keeps its own dtype (so tests can pass a wrong one)."""
    return paddle.to_tensor(x if isinstance(x, np.ndarray) else np.asarray(x, dtype=np.int32))


def run_op(lens, encoder, decoder):
    return speculate_get_seq_lens_output(tensor(lens), tensor(encoder), tensor(decoder)).numpy()


@pytest.fixture
def run():
    """The backend of the shared tests (tests/seq_lens_output_cases.py): the Paddle op."""
    return run_op


def test_speculate_get_seq_lens_output_ignores_decoder_lens():
    np.testing.assert_array_equal(run_op([4, 2], [0, 0], [0, 0]), run_op([4, 2], [0, 0], [100, 3]))


def test_speculate_get_seq_lens_output_accepts_fastdeploy_column_shape():
    lens, encoder, decoder = (np.array(x, np.int32).reshape(3, 1) for x in ([5, 0, 3], [5, 0, 0], [0, 0, 4]))
    out = speculate_get_seq_lens_output(tensor(lens), tensor(encoder), tensor(decoder))
    assert out.shape == [3]
    np.testing.assert_array_equal(out.numpy(), [1, 0, 3])


@pytest.mark.parametrize(
    "lens, encoder, decoder, match",
    [
        (np.array([1, 2], np.int64), [0, 0], [0, 0], r"seq_lens_this_time has dtype int64, expected int32"),
        ([1, 2], np.array([0, 0], np.int64), [0, 0], r"seq_lens_encoder has dtype int64, expected int32"),
        ([1, 2], [0, 0], np.array([0, 0], np.int64), r"seq_lens_decoder has dtype int64, expected int32"),
        ([[1, 2]], [0, 0], [0, 0], r"seq_lens_this_time has shape \[1, 2\], expected a per-slot tensor"),
        ([1, 2], [0, 0, 0], [0, 0], r"seq_lens_encoder has 3 slots \(shape \[3\]\), expected bsz = 2"),
        ([1, 2], [0, 0], [0], r"seq_lens_decoder has 1 slots \(shape \[1\]\), expected bsz = 2"),
        ([1, -3], [0, 0], [0, 0], r"seq_lens_this_time\[1\] = -3, expected >= 0"),
    ],
)
def test_speculate_get_seq_lens_output_rejects_bad_input(lens, encoder, decoder, match):
    with pytest.raises(ValueError, match=match):
        run_op(lens, encoder, decoder)
