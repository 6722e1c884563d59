import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import draft_model_postprocess, draft_model_update
from reference.cases import draft_state as dc
from tests.draft_update_case_tests import (  # noqa: F401  written once, also run on the CUDA kernel
    assert_state_equal, run_ref, test_draft_model_update_bsz_256_closed_form, test_draft_model_update_literal,
    test_draft_model_update_matches_reference, test_draft_model_update_random_rounds_match_reference,
    test_draft_model_update_round_of_three_substeps_literal,
)
from reference.draft_model_update import STATE_KEYS

PER_SLOT = ("seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder", "step_idx", "stop_flags")


def run_op(state, args, column=False):
    """Calls the op on a numpy state dict; returns the updated numpy state (per-slot as [bsz]).
    column=True passes per-slot buffers as FastDeploy's [bsz, 1]."""
    t = {}
    for key in STATE_KEYS:
        a = np.asarray(state[key])
        t[key] = paddle.to_tensor(a.reshape(-1, 1) if column and key in PER_SLOT else a)
    max_dec_len = np.asarray(args["max_dec_len"])
    draft_model_update(
        paddle.to_tensor(args["inter_next_tokens"]), t["draft_tokens"], t["pre_ids"], t["seq_lens_this_time"],
        t["seq_lens_encoder"], t["seq_lens_decoder"], t["step_idx"], paddle.to_tensor(args["cu_seqlens_q_output"]),
        t["stop_flags"], t["not_need_stop"], paddle.to_tensor(max_dec_len.reshape(-1, 1) if column else max_dec_len),
        paddle.to_tensor(args["end_ids"]), t["base_model_draft_tokens"], 0, args["substep"])
    return {key: (t[key].numpy().reshape(-1) if key in PER_SLOT else t[key].numpy()) for key in STATE_KEYS}


def postprocess_target(base_drafts, lens, enc, stop):
    t_lens = paddle.to_tensor(np.asarray(lens, dtype=np.int32))
    draft_model_postprocess(paddle.to_tensor(np.asarray(base_drafts, dtype=np.int64)), t_lens,
                            paddle.to_tensor(np.asarray(enc, dtype=np.int32)), paddle.to_tensor(np.asarray(stop)))
    return t_lens.numpy()


@pytest.fixture
def run():
    """The backend of the shared tests (tests/draft_update_case_tests.py): the Paddle op."""
    return run_op


@pytest.fixture
def postprocess_lens():
    return postprocess_target


@pytest.fixture(params=[(*case, 0) for case in dc.update_grid()], ids=lambda p: "-".join(map(str, p[:4])))
def reference_grid(request):
    """(bsz, kind, substep, seed, extra_rows): every batch size x kind x substep, no rows past bsz."""
    return request.param


@pytest.fixture(params=[(1, "mixed"), (3, "stopped"), (17, "mixed"), (256, "near_max_dec_len"), (256, "all_prefill"),
                        (256, "eos_drafts")], ids=lambda p: "-".join(map(str, p)))
def round_grid(request):
    """(bsz, kind, seed) of the random rounds."""
    bsz, kind = request.param
    return bsz, kind, bsz


def test_draft_model_update_accepts_fastdeploy_column_shapes():
    state, args, expected = dc.literal_update_case("mixed_three_slots")
    assert_state_equal(run_op(state, args, column=True), expected)


def test_draft_model_update_leaves_rows_past_bsz_untouched():
    state, args = dc.make_update_case(np.random.default_rng(5), 17, "mixed", 0, extra_rows=6)
    got = run_op(state, args)
    for key in ("draft_tokens", "pre_ids", "base_model_draft_tokens"):
        assert (got[key][17:] == dc.PAD).all(), key
    assert_state_equal(got, run_ref(state, args))


def test_draft_model_update_draft_eos_keeps_slot_running():
    """Decision (era [C]): a draft that is an end id is proposed and the draft slot keeps drafting;
    only verification stops a request. FastDeploy [B] stopped the draft slot here."""
    state, args, _ = dc.literal_update_case("eos_and_history_end")
    got = run_op(state, args)
    assert args["inter_next_tokens"][0] in dc.END_IDS and args["inter_next_tokens"][2] in dc.END_IDS
    np.testing.assert_array_equal(got["stop_flags"], [False, False, False])
    np.testing.assert_array_equal(got["base_model_draft_tokens"][:, 3], [2, 80, 1])
    assert got["not_need_stop"][0]


@pytest.mark.parametrize("seed", range(6))
def test_draft_model_update_never_proposes_what_the_target_cannot_verify(seed):
    """A draft written at new step_idx t is generated token t + 1; verification stops at max_dec_len,
    so t >= max_dec_len must give -1 (and a stop), t < max_dec_len the token itself."""
    state, args = dc.make_update_case(np.random.default_rng(seed), 64, "near_max_dec_len", seed % 3)
    got = run_op(state, args)
    s = args["substep"]
    ran = ~state["stop_flags"]
    proposed = got["base_model_draft_tokens"][:64, s + 1] != -1
    assert ran.any() and (ran & ~proposed).any() and proposed.any()
    np.testing.assert_array_equal(proposed, ran & (got["step_idx"] < args["max_dec_len"]))
    np.testing.assert_array_equal(got["stop_flags"], ~proposed)
    np.testing.assert_array_equal(got["draft_tokens"][:64, 0], got["base_model_draft_tokens"][:64, s + 1])


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("step_idx", np.array([5, 9, 0], np.int32), "step_idx has dtype int32, expected int64"),
        ("stop_flags", np.array([0, 1, 0], np.int32), "stop_flags has dtype int32, expected bool"),
        ("seq_lens_encoder", np.array([0, 0], np.int32), r"seq_lens_encoder has 2 slots .*expected bsz = 3"),
        ("cu_seqlens_q_output", np.array([[0], [2], [2], [3]], np.int32),
         r"cu_seqlens_q_output has shape \[4, 1\], expected \[bsz \+ 1\] = \[4\]"),
        ("not_need_stop", np.array([True, True]), r"not_need_stop has shape \[2\], expected \[1\]"),
        ("draft_tokens", np.zeros((2, 3), np.int64), r"draft_tokens has shape \[2, 3\], expected at least bsz = 3"),
        ("inter_next_tokens", np.zeros((9, 2, 1), np.int64), r"inter_next_tokens has shape \[9, 2, 1\], expected a 1-D"),
        ("max_dec_len", np.array([100, 100, 100], np.int32), "max_dec_len has dtype int32, expected int64"),
        ("substep", 3, r"substep = 3 writes base_model_draft_tokens\[:, 4\].*expected 0 <= substep < 3"),
        ("substep", -1, r"substep = -1 .*expected 0 <= substep < 3"),
    ],
    ids=['step_idx_dtype', 'stop_flags_dtype', 'seq_lens_encoder_slots', 'cu_seqlens_q_output_shape', 'not_need_stop_shape', 'draft_tokens_rows', 'inter_next_tokens_shape', 'max_dec_len_dtype', 'substep_past_width', 'substep_negative'],
)
def test_draft_model_update_rejects_bad_input(field, value, match):
    state, args, _ = dc.literal_update_case("mixed_three_slots")
    (state if field in state else args)[field] = value
    with pytest.raises(ValueError, match=match):
        run_op(state, args)


@pytest.mark.parametrize(
    "cu, match",
    [
        ([0, 2, 2, 2], r"running slot 2 .*rows \[cu_seqlens_q_output\[2\], cu_seqlens_q_output\[3\]\) = \[2, 2\)"),
        ([0, 2, 2, 10], r"running slot 2 .*= \[2, 10\); expected at least one row, within inter_next_tokens' 9 rows"),
    ],
    ids=["no_row", "row_past_end"],
)
def test_draft_model_update_rejects_running_slot_without_row_and_writes_nothing(cu, match):
    state, args, _ = dc.literal_update_case("mixed_three_slots")
    args["cu_seqlens_q_output"] = np.asarray(cu, np.int32)
    t = {key: paddle.to_tensor(state[key]) for key in STATE_KEYS}
    with pytest.raises(ValueError, match=match):
        draft_model_update(paddle.to_tensor(args["inter_next_tokens"]), t["draft_tokens"], t["pre_ids"],
                           t["seq_lens_this_time"], t["seq_lens_encoder"], t["seq_lens_decoder"], t["step_idx"],
                           paddle.to_tensor(args["cu_seqlens_q_output"]), t["stop_flags"], t["not_need_stop"],
                           paddle.to_tensor(args["max_dec_len"]), paddle.to_tensor(args["end_ids"]),
                           t["base_model_draft_tokens"], 0, 0)
    assert_state_equal({key: v.numpy() for key, v in t.items()}, state)
