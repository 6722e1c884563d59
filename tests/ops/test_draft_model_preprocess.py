import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import draft_model_preprocess
from reference.cases.mtp_round_state import all_round_cases, make_round_state
from tests.draft_preprocess_cases import (  # noqa: F401  written once, also run on the CUDA kernel
    assert_states_equal, literal_state, one_slot_decode, test_draft_model_preprocess_bsz_256_structured,
    test_draft_model_preprocess_bsz_one_decode_literal, test_draft_model_preprocess_matches_reference,
    test_draft_model_preprocess_three_slots_literal,
)
from reference.draft_model_preprocess import INPUT_KEYS, UPDATED_KEYS, ref_draft_model_preprocess


def run_op(state, num_model_steps=1, is_splitwise_prefill=False, truncate_first_token=True):
    """Runs the op on a copy of a numpy state dict; returns the new state (numpy)."""
    tensors = {k: None if state.get(k) is None else paddle.to_tensor(state[k]) for k in INPUT_KEYS}
    args = [tensors[k] for k in INPUT_KEYS[:-1]]
    out = draft_model_preprocess(*args, num_model_steps, is_splitwise_prefill,
                                 target_model_is_block_step=tensors["target_model_is_block_step"],
                                 truncate_first_token=truncate_first_token)
    assert out is None
    new = dict(state)
    new.update({k: tensors[k].numpy() for k in UPDATED_KEYS})
    return new


@pytest.fixture
def run():
    """The backend of the shared tests (tests/draft_preprocess_cases.py): the Paddle op."""
    return run_op


def test_draft_model_preprocess_just_finished_prefill_completes_shifted_prompt():
    """Target prompt 10 11 12 13 (P = 4) was prefilled and verify emitted its first token 20
    (accept_num 1, step_idx_t 1, Dec_t 4, E_t 0 after the update). The draft was inserted with
    the prompt shifted left by one (11 12 13, E = L = 4): the op completes it with 20 at position
    E - 1, so draft position j pairs target hidden j with target token j + 1, over all 4 rows."""
    st = {
        "draft_tokens": np.full((1, 3), -1, np.int64),
        "input_ids": np.array([[11, 12, 13, -1, -1, -1]], np.int64),
        "stop_flags": np.array([False]),
        "seq_lens_this_time": np.array([4], np.int32),
        "seq_lens_encoder": np.array([4], np.int32),
        "seq_lens_decoder": np.array([0], np.int32),
        "step_idx": np.array([0], np.int64),
        "not_need_stop": np.array([False]),
        "pre_ids": np.full((1, 6), -1, np.int64),
        "accept_tokens": np.array([[20, -1, -1]], np.int64),
        "accept_num": np.array([1], np.int32),
        "target_model_seq_lens_encoder": np.array([0], np.int32),
        "target_model_seq_lens_decoder": np.array([4], np.int32),
        "target_model_step_idx": np.array([1], np.int64),
        "target_model_stop_flags": np.array([False]),
        "max_dec_len": np.array([16], np.int64),
        "target_model_draft_tokens": np.array([[20, -1, -1]], np.int64),
    }
    got = run_op(st)
    np.testing.assert_array_equal(got["input_ids"], [[11, 12, 13, 20, -1, -1]])
    np.testing.assert_array_equal(got["seq_lens_this_time"], [4])
    np.testing.assert_array_equal(got["seq_lens_encoder"], [4])
    np.testing.assert_array_equal(got["seq_lens_decoder"], [0])
    np.testing.assert_array_equal(got["step_idx"], [0])
    np.testing.assert_array_equal(got["pre_ids"], [[20, -1, -1, -1, -1, -1]])
    np.testing.assert_array_equal(got["draft_tokens"], [[-1, -1, -1]])  # decode buffer untouched
    np.testing.assert_array_equal(got["stop_flags"], [False])
    np.testing.assert_array_equal(got["not_need_stop"], [True])

    # Without truncation the first token is appended and the draft runs E + 1 tokens.
    got = run_op(st, truncate_first_token=False)
    np.testing.assert_array_equal(got["input_ids"], [[11, 12, 13, -1, 20, -1]])
    np.testing.assert_array_equal(got["seq_lens_this_time"], [5])
    np.testing.assert_array_equal(got["step_idx"], [0])


@pytest.mark.parametrize("n, want_drafts, want_pre_ids", [
    (1, [31, 7, 8, 9], [-1, -1, -1, -1, 31, -1, -1, -1]),
    (4, [31, 32, 33, 34], [-1, 31, 32, 33, 34, -1, -1, -1]),  # every draft accepted
    (0, [6, 7, 8, 9], [-1] * 8),  # nothing emitted: L = 0, the slot still runs
])
def test_draft_model_preprocess_decode_rederives_shadow_state(n, want_drafts, want_pre_ids):
    """Dec and step_idx come from the target every round, whatever the draft held before."""
    st = {
        "draft_tokens": np.array([[6, 7, 8, 9]], np.int64),
        "input_ids": np.zeros((1, 4), np.int64),
        "stop_flags": np.array([True]),  # a stopped draft slot restarts from the target state
        "seq_lens_this_time": np.array([3], np.int32),
        "seq_lens_encoder": np.array([0], np.int32),
        "seq_lens_decoder": np.array([99], np.int32),
        "step_idx": np.array([77], np.int64),
        "not_need_stop": np.array([False]),
        "pre_ids": np.full((1, 8), -1, np.int64),
        "accept_tokens": np.array([[31, 32, 33, 34]], np.int64),
        "accept_num": np.array([n], np.int32),
        "target_model_seq_lens_encoder": np.array([0], np.int32),
        "target_model_seq_lens_decoder": np.array([50], np.int32),
        "target_model_step_idx": np.array([5], np.int64),
        "target_model_stop_flags": np.array([False]),
        "max_dec_len": np.array([100], np.int64),
        "target_model_draft_tokens": np.array([[34, 1, 2, 3]], np.int64),
    }
    got = run_op(st, num_model_steps=3)
    np.testing.assert_array_equal(got["draft_tokens"], [want_drafts])
    np.testing.assert_array_equal(got["pre_ids"], [want_pre_ids])
    np.testing.assert_array_equal(got["seq_lens_this_time"], [n])
    np.testing.assert_array_equal(got["seq_lens_decoder"], [50 - n])
    np.testing.assert_array_equal(got["step_idx"], [5 - n])
    np.testing.assert_array_equal(got["stop_flags"], [False])
    np.testing.assert_array_equal(got["not_need_stop"], [True])
    np.testing.assert_array_equal(got["target_model_draft_tokens"], [[34, -1, -1, -1]])


def assert_skipped(got, before):
    """A skipped slot: stop, L = E = Dec = step_idx = 0; its token buffers untouched."""
    np.testing.assert_array_equal(got["stop_flags"], [True])
    for k in ("seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder", "step_idx"):
        np.testing.assert_array_equal(got[k], [0], err_msg=k)
    for k in ("draft_tokens", "input_ids", "pre_ids"):
        np.testing.assert_array_equal(got[k], before[k], err_msg=k)
    np.testing.assert_array_equal(got["target_model_draft_tokens"], [[before["target_model_draft_tokens"][0, 0], -1]])
    np.testing.assert_array_equal(got["not_need_stop"], [False])


def test_draft_model_preprocess_stopped_target_stops_draft():
    st = one_slot_decode(target_model_stop_flags=[True])
    assert_skipped(run_op(st), st)


def test_draft_model_preprocess_stopped_prefill_slot_is_cleared():
    """EOS as the first token: the target stopped right after its prefill; the draft prefill is
    dropped (E = 0) instead of running."""
    st = one_slot_decode(target_model_stop_flags=[True], seq_lens_encoder=[3], seq_lens_this_time=[3])
    assert_skipped(run_op(st), st)


def test_draft_model_preprocess_paused_target_stops_draft():
    """is_block_step marks a preempted slot even when its stop flag is not set ([C] treats
    paused as not running); nothing is kept, as resuming re-derives every draft value."""
    st = one_slot_decode(target_model_is_block_step=[True])
    assert_skipped(run_op(st), st)
    st = one_slot_decode(target_model_is_block_step=[True], target_model_stop_flags=[True])
    assert_skipped(run_op(st), st)


def test_draft_model_preprocess_resumes_after_pause():
    """The round after a pause: the target resumed in decode; the draft slot, stopped and zeroed
    while paused, restarts from the target's state."""
    paused = run_op(one_slot_decode(target_model_is_block_step=[True]))
    resumed = dict(one_slot_decode(), **{k: paused[k] for k in UPDATED_KEYS})
    resumed["target_model_draft_tokens"] = np.array([[32, 5]], np.int64)
    got = run_op(resumed)
    np.testing.assert_array_equal(got["stop_flags"], [False])
    np.testing.assert_array_equal(got["seq_lens_this_time"], [2])
    np.testing.assert_array_equal(got["seq_lens_decoder"], [12])
    np.testing.assert_array_equal(got["step_idx"], [4])
    np.testing.assert_array_equal(got["draft_tokens"], [[31, 32]])
    np.testing.assert_array_equal(got["not_need_stop"], [True])


def test_draft_model_preprocess_without_block_step_input_runs_unstopped_slot():
    """FastDeploy's call (no is_block_step) relies on the stop flag alone."""
    st = one_slot_decode()
    got = run_op(st)
    np.testing.assert_array_equal(got["stop_flags"], [False])
    np.testing.assert_array_equal(got["seq_lens_this_time"], [2])


@pytest.mark.parametrize("max_dec_len, num_model_steps, skipped", [
    (7, 1, True),  # step_idx_t 6 + 1 >= 7
    (8, 1, False),
    (8, 2, True),  # 6 + 2 >= 8: the drafts would run past the limit
    (9, 2, False),
    (3, 1, True),
])
def test_draft_model_preprocess_near_max_dec_len(max_dec_len, num_model_steps, skipped):
    st = one_slot_decode(max_dec_len=[max_dec_len])
    got = run_op(st, num_model_steps=num_model_steps)
    if skipped:
        assert_skipped(got, st)
    else:
        np.testing.assert_array_equal(got["stop_flags"], [False])
        np.testing.assert_array_equal(got["step_idx"], [4])
    got = run_op(st, num_model_steps=num_model_steps, is_splitwise_prefill=True)  # no limit on a PD prefill node
    np.testing.assert_array_equal(got["stop_flags"], [False])


def test_draft_model_preprocess_near_max_dec_len_skips_prefill():
    st = one_slot_decode(seq_lens_encoder=[3], target_model_step_idx=[1], max_dec_len=[2])
    assert_skipped(run_op(st), st)


def test_draft_model_preprocess_all_stopped_clears_not_need_stop():
    st = literal_state()
    st["target_model_stop_flags"][:] = True
    st["not_need_stop"][:] = True
    got = run_op(st)
    np.testing.assert_array_equal(got["not_need_stop"], [False])
    np.testing.assert_array_equal(got["stop_flags"], [True, True, True])
    np.testing.assert_array_equal(got["seq_lens_this_time"], [0, 0, 0])
    np.testing.assert_array_equal(got["target_model_draft_tokens"], [[21, -1, -1], [32, -1, -1], [42, -1, -1]])


def test_draft_model_preprocess_zero_slots():
    st = {k: (np.zeros((2,) + v.shape[1:], v.dtype) if v.ndim == 2 else np.zeros(0, v.dtype))
          for k, v in literal_state().items()}
    st["not_need_stop"] = np.array([True])
    got = run_op(st)
    np.testing.assert_array_equal(got["not_need_stop"], [False])


def test_draft_model_preprocess_history_past_pre_ids_width_is_skipped():
    """pre_ids positions step_idx_t - n + i >= Sp are not written (the history is full)."""
    st = one_slot_decode(target_model_step_idx=[8], accept_num=[2])  # positions 6, 7 of 8
    np.testing.assert_array_equal(run_op(st)["pre_ids"], [[-1] * 6 + [31, 32]])
    st = one_slot_decode(target_model_step_idx=[9], accept_num=[2])  # positions 7, 8
    np.testing.assert_array_equal(run_op(st)["pre_ids"], [[-1] * 7 + [31]])
    st = one_slot_decode(target_model_step_idx=[20], accept_num=[2])
    np.testing.assert_array_equal(run_op(st)["pre_ids"], [[-1] * 8])


def test_draft_model_preprocess_ignores_rows_past_bsz_and_target_encoder():
    """FastDeploy passes [max_num_seqs, *] buffers; rows past bsz stay as they were. The
    target's seq_lens_encoder is only in the signature for FastDeploy: garbage changes nothing."""
    st = make_round_state(np.random.default_rng(5), 17, "mixed", extra_rows=3)
    want = ref_draft_model_preprocess(st, 1)
    got = run_op(st)
    assert_states_equal(got, want)
    for k in ("draft_tokens", "input_ids", "pre_ids", "target_model_draft_tokens"):
        np.testing.assert_array_equal(got[k][17:], st[k][17:], err_msg=k)
    st["target_model_seq_lens_encoder"] = np.arange(17, dtype=np.int32) * 3
    assert_states_equal(run_op(st), want)


def test_draft_model_preprocess_accepts_fastdeploy_column_shape():
    st = literal_state()
    for k in ("stop_flags", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder", "step_idx",
              "accept_num", "target_model_seq_lens_encoder", "target_model_seq_lens_decoder",
              "target_model_step_idx", "target_model_stop_flags", "max_dec_len"):
        st[k] = st[k].reshape(-1, 1)
    got = run_op(st)
    np.testing.assert_array_equal(got["seq_lens_this_time"], [[4], [2], [0]])
    np.testing.assert_array_equal(got["step_idx"], [[0], [3], [0]])


@pytest.mark.parametrize("bsz, kind, seed", all_round_cases()[::3])
def test_draft_model_preprocess_matches_reference_without_block_step(bsz, kind, seed):
    st = make_round_state(np.random.default_rng(seed), bsz, kind, with_block_step=False)
    assert st["target_model_is_block_step"] is None
    assert_states_equal(run_op(st), ref_draft_model_preprocess(st, 1))


def _bad(name, change, match, **attrs):
    return pytest.param(change, match, attrs, id=name)


BAD_INPUTS = [
    _bad("draft_tokens_int32", {"draft_tokens": np.zeros((3, 3), np.int32)}, r"draft_tokens has dtype int32, expected int64"),
    _bad("input_ids_1d", {"input_ids": np.zeros(5, np.int64)}, r"input_ids has shape \[5\], expected a 2-D tensor"),
    _bad("pre_ids_too_few_rows", {"pre_ids": np.zeros((2, 8), np.int64)},
         r"pre_ids has shape \[2, 8\], expected at least bsz = 3 rows"),
    _bad("stop_flags_int32", {"stop_flags": np.zeros(3, np.int32)}, r"stop_flags has dtype int32, expected bool"),
    _bad("lens_int64", {"seq_lens_this_time": np.zeros(3, np.int64)}, r"seq_lens_this_time has dtype int64, expected int32"),
    _bad("lens_not_per_slot", {"seq_lens_this_time": np.zeros((1, 3), np.int32)},
         r"seq_lens_this_time has shape \[1, 3\], expected a per-slot tensor"),
    _bad("encoder_wrong_slots", {"seq_lens_encoder": np.zeros(2, np.int32)},
         r"seq_lens_encoder has 2 slots \(shape \[2\]\), expected bsz = 3"),
    _bad("step_idx_int32", {"step_idx": np.zeros(3, np.int32)}, r"step_idx has dtype int32, expected int64"),
    _bad("not_need_stop_int32", {"not_need_stop": np.zeros(1, np.int32)}, r"not_need_stop has dtype int32, expected bool"),
    _bad("not_need_stop_per_slot", {"not_need_stop": np.zeros(3, bool)}, r"not_need_stop has shape \[3\], expected \[1\]"),
    _bad("accept_tokens_no_columns", {"accept_tokens": np.zeros((3, 0), np.int64)},
         r"accept_tokens has shape \[3, 0\], expected at least one column"),
    _bad("accept_num_int64", {"accept_num": np.zeros(3, np.int64)}, r"accept_num has dtype int64, expected int32"),
    _bad("target_step_idx_int32", {"target_model_step_idx": np.zeros(3, np.int32)},
         r"target_model_step_idx has dtype int32, expected int64"),
    _bad("target_decoder_wrong_slots", {"target_model_seq_lens_decoder": np.zeros(4, np.int32)},
         r"target_model_seq_lens_decoder has 4 slots \(shape \[4\]\), expected bsz = 3"),
    _bad("target_stop_flags_int64", {"target_model_stop_flags": np.zeros(3, np.int64)},
         r"target_model_stop_flags has dtype int64, expected bool"),
    _bad("max_dec_len_int32", {"max_dec_len": np.zeros(3, np.int32)}, r"max_dec_len has dtype int32, expected int64"),
    _bad("target_drafts_int32", {"target_model_draft_tokens": np.zeros((3, 3), np.int32)},
         r"target_model_draft_tokens has dtype int32, expected int64"),
    _bad("block_step_wrong_slots", {"target_model_is_block_step": np.zeros(2, bool)},
         r"target_model_is_block_step has 2 slots \(shape \[2\]\), expected bsz = 3"),
    _bad("block_step_int32", {"target_model_is_block_step": np.zeros(3, np.int32)},
         r"target_model_is_block_step has dtype int32, expected bool"),
    _bad("num_model_steps_zero", {}, r"num_model_steps = 0, expected >= 1", num_model_steps=0),
    _bad("accept_num_past_draft_width", {"accept_num": np.array([1, 4, 2], np.int32)},
         r"accept_num\[1\] = 4 on running decode slot 1, expected 0 <= accept_num <= "
         r"min\(accept_tokens width 3, draft_tokens width 3\)"),
    _bad("accept_num_negative", {"accept_num": np.array([1, -1, 2], np.int32)}, r"accept_num\[1\] = -1 on running"),
    _bad("pre_ids_position_negative", {"target_model_step_idx": np.array([1, 1, 3], np.int64)},
         r"slot 1 writes pre_ids from position target_model_step_idx - accept_num = 1 - 2 < 0"),
    _bad("prefill_first_token_past_input_width", {"seq_lens_encoder": np.array([6, 0, 0], np.int32)},
         r"slot 0 is a draft prefill with seq_lens_encoder = 6; its first token goes to "
         r"input_ids\[0, 5\] but input_ids has width S = 5"),
    _bad("append_first_token_past_input_width", {"seq_lens_encoder": np.array([5, 0, 0], np.int32)},
         r"its first token goes to input_ids\[0, 5\] but input_ids has width S = 5", truncate_first_token=False),
]


@pytest.mark.parametrize("change, match, attrs", BAD_INPUTS)
def test_draft_model_preprocess_rejects_bad_input(change, match, attrs):
    st = literal_state()
    st["target_model_is_block_step"] = np.zeros(3, bool)
    st.update(change)
    before = {k: v.copy() for k, v in st.items()}
    with pytest.raises(ValueError, match=match):
        run_op(st, **attrs)
    assert_states_equal(st, before, keys=list(before))  # numpy inputs are not aliased by run


def test_draft_model_preprocess_value_errors_write_nothing():
    """The CPU op checks every slot before writing, so a bad slot 2 leaves slot 0 untouched."""
    st = literal_state()
    st["target_model_stop_flags"][2] = False
    st["accept_num"][2] = 7
    tensors = {k: paddle.to_tensor(st[k]) for k in INPUT_KEYS[:-1]}
    with pytest.raises(ValueError, match=r"accept_num\[2\] = 7"):
        draft_model_preprocess(*tensors.values(), 1)
    for k in UPDATED_KEYS:
        np.testing.assert_array_equal(tensors[k].numpy(), st[k], err_msg=k)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_model_steps": 1.0}, "num_model_steps must be a host int, got float"),
    ({"num_model_steps": paddle.to_tensor(1)}, "num_model_steps must be a host int, got Tensor"),
    ({"is_splitwise_prefill": 1}, "is_splitwise_prefill must be a host bool, got int"),
    ({"truncate_first_token": None}, "truncate_first_token must be a host bool, got NoneType"),
])
def test_draft_model_preprocess_rejects_bad_attribute_types(kwargs, match):
    tensors = [paddle.to_tensor(v) for v in literal_state().values()]
    kw = {"num_model_steps": 1, **kwargs}
    with pytest.raises(TypeError, match=match):
        draft_model_preprocess(*tensors, **kw)
