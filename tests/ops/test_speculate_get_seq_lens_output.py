import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import speculate_get_seq_lens_output
from tests.cases import all_cases, make_step_batch
from tests.reference.speculate_get_seq_lens_output import ref_speculate_get_seq_lens_output


def tensor(x):
    """int32 paddle tensor; a numpy array keeps its own dtype (so tests can pass a wrong one)."""
    return paddle.to_tensor(x if isinstance(x, np.ndarray) else np.asarray(x, dtype=np.int32))


def run(lens, encoder, decoder):
    return speculate_get_seq_lens_output(tensor(lens), tensor(encoder), tensor(decoder)).numpy()


@pytest.mark.parametrize(
    "lens, encoder, want",
    [
        # prefill chunk of 5 -> its last token only; stopped -> none; decode + 2 drafts -> all 3
        ([5, 0, 3], [5, 0, 0], [1, 0, 3]),
        # plain decode; one-token prefill chunk; decode with one draft
        ([1, 1, 2], [0, 1, 0], [1, 1, 2]),
        # the prefill rule is E_b != 0 (docs/spec.md §4.2, FastDeploy), so a negative E_b counts as prefill
        ([3, 2, 4], [-1, 0, 2], [1, 2, 1]),
    ],
)
def test_speculate_get_seq_lens_output_three_slots_literal(lens, encoder, want):
    out = speculate_get_seq_lens_output(tensor(lens), tensor(encoder), tensor([7, 0, 9]))
    assert out.shape == [3] and out.dtype == paddle.int32
    np.testing.assert_array_equal(out.numpy(), want)


def test_speculate_get_seq_lens_output_ignores_decoder_lens():
    np.testing.assert_array_equal(run([4, 2], [0, 0], [0, 0]), run([4, 2], [0, 0], [100, 3]))


def test_speculate_get_seq_lens_output_accepts_fastdeploy_column_shape():
    lens, encoder, decoder = (np.array(x, np.int32).reshape(3, 1) for x in ([5, 0, 3], [5, 0, 0], [0, 0, 4]))
    out = speculate_get_seq_lens_output(tensor(lens), tensor(encoder), tensor(decoder))
    assert out.shape == [3]
    np.testing.assert_array_equal(out.numpy(), [1, 0, 3])


def test_speculate_get_seq_lens_output_zero_slots():
    out = run(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))
    assert out.shape == (0,)


@pytest.mark.parametrize("bsz, kind, seed", all_cases())
def test_speculate_get_seq_lens_output_matches_reference(bsz, kind, seed):
    batch = make_step_batch(np.random.default_rng(seed), bsz, kind)
    args = (batch.seq_lens_this_time, batch.seq_lens_encoder, batch.seq_lens_decoder)
    np.testing.assert_array_equal(run(*args), ref_speculate_get_seq_lens_output(*args))


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
        run(lens, encoder, decoder)
