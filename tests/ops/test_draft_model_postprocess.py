import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import draft_model_postprocess
from tests import draft_cases as dc
from tests.reference.draft_model_postprocess import ref_draft_model_postprocess


def run_op(state, column=False):
    """Calls the op on a numpy state dict; returns the new base_model_seq_lens_this_time [bsz]."""
    def per_slot(a):
        a = np.asarray(a)
        return paddle.to_tensor(a.reshape(-1, 1) if column else a)

    lens = per_slot(state["base_model_seq_lens_this_time"])
    draft_model_postprocess(paddle.to_tensor(np.asarray(state["base_model_draft_tokens"])), lens,
                            per_slot(state["base_model_seq_lens_encoder"]), per_slot(state["base_model_stop_flags"]))
    return lens.numpy().reshape(-1)


def make_state(drafts, lens, enc, stop):
    return dict(base_model_draft_tokens=np.asarray(drafts, np.int64),
                base_model_seq_lens_this_time=np.asarray(lens, np.int32),
                base_model_seq_lens_encoder=np.asarray(enc, np.int32), base_model_stop_flags=np.asarray(stop, bool))


# slot 0 decode with 2 drafts -> 3; slot 1 prefill (E 5) -> untouched 9 (its row is ignored, gap
# and all); slot 2 decode with no draft -> 1; slot 3 stopped -> 0 (its row is ignored).
LITERAL = make_state([[7, 8, 9, -1], [5, -1, 6, 6], [3, -1, -1, -1], [-1, 1, -1, 3]], [9, 9, 9, 9], [0, 5, 0, 0],
                     [False, False, False, True])
LITERAL_EXPECTED = [3, 9, 1, 0]


def test_draft_model_postprocess_literal():
    np.testing.assert_array_equal(run_op(LITERAL), LITERAL_EXPECTED)
    np.testing.assert_array_equal(ref_draft_model_postprocess(LITERAL)["base_model_seq_lens_this_time"],
                                  LITERAL_EXPECTED)


def test_draft_model_postprocess_accepts_fastdeploy_column_shapes():
    np.testing.assert_array_equal(run_op(LITERAL, column=True), LITERAL_EXPECTED)


def test_draft_model_postprocess_full_row_and_width_one():
    np.testing.assert_array_equal(run_op(make_state([[1, 2, 3, 4]], [0], [0], [False])), [4])
    np.testing.assert_array_equal(run_op(make_state([[1], [2]], [5, 5], [0, 0], [False, True])), [1, 0])


@pytest.mark.parametrize("bsz, kind, seed", dc.postprocess_grid())
def test_draft_model_postprocess_matches_reference(bsz, kind, seed):
    state = dc.make_postprocess_case(np.random.default_rng(seed), bsz, kind, extra_rows=seed % 3)
    np.testing.assert_array_equal(run_op(state), ref_draft_model_postprocess(state)["base_model_seq_lens_this_time"])


@pytest.mark.parametrize(
    "row, match",
    [
        ([7, -1, 8, -1], r"slot 1 has a gap in base_model_draft_tokens: column 1 is -1 but column 2 holds draft 8"),
        ([7, 8, -1, 9], r"slot 1 has a gap in base_model_draft_tokens: column 2 is -1 but column 3 holds draft 9"),
        ([-1, 8, 9, -1], r"decode slot 1 is running but base_model_draft_tokens\[1, 0\] = -1"),
    ],
    ids=["gap_after_column_0", "gap_after_column_1", "no_last_accepted_token"],
)
def test_draft_model_postprocess_gap_raises_and_writes_nothing(row, match):
    """[ours] FastDeploy counted every entry != -1, so a gap made the target feed the -1 as a token."""
    state = make_state([[1, 2, -1, -1], row, [3, -1, -1, -1]], [0, 0, 0], [0, 0, 0], [False] * 3)
    lens = paddle.to_tensor(state["base_model_seq_lens_this_time"])
    with pytest.raises(ValueError, match=match):
        draft_model_postprocess(paddle.to_tensor(state["base_model_draft_tokens"]), lens,
                                paddle.to_tensor(state["base_model_seq_lens_encoder"]),
                                paddle.to_tensor(state["base_model_stop_flags"]))
    np.testing.assert_array_equal(lens.numpy(), [0, 0, 0])
    with pytest.raises(ValueError):
        ref_draft_model_postprocess(state)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("base_model_draft_tokens", np.array([7, 8, 9], np.int64), r"base_model_draft_tokens has shape \[3\], expected a 2-D"),
        ("base_model_draft_tokens", np.zeros((4, 0), np.int64), r"expected \[N, D\] with 1 <= D"),
        ("base_model_draft_tokens", np.zeros((3, 4), np.int32), "base_model_draft_tokens has dtype int32, expected int64"),
        ("base_model_seq_lens_this_time", np.zeros(4, np.int64), "base_model_seq_lens_this_time has dtype int64"),
        ("base_model_seq_lens_encoder", np.zeros(3, np.int32), r"base_model_seq_lens_encoder has 3 slots .*expected bsz = 4"),
        ("base_model_stop_flags", np.zeros(4, np.int32), "base_model_stop_flags has dtype int32, expected bool"),
    ],
    ids=["drafts_rank", "drafts_width_zero", "drafts_dtype", "lens_dtype", "encoder_slots", "stop_flags_dtype"],
)
def test_draft_model_postprocess_rejects_bad_input(field, value, match):
    state = dict(LITERAL, **{field: value})
    with pytest.raises(ValueError, match=match):
        run_op(state)
