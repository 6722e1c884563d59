import numpy as np
import paddle
import pytest

from reference.hybrid_mtp_ngram import ref_hybrid_mtp_ngram
from reference.ngram_match import ref_ngram_match
from specworker.model_executor.ops import hybrid_mtp_ngram, ngram_match
from tests import hybrid_cases as hc
from tests.hybrid_case_tests import (  # noqa: F401  written once, also run on the CUDA kernel
    WRITES, assert_state_equal, test_hybrid_mtp_ngram_literal, test_hybrid_mtp_ngram_matches_reference,
    test_hybrid_mtp_ngram_matches_reference_other_widths,
)
from tests.hybrid_cases import HYBRID_CASES, KINDS, NGRAM_SIZES, all_cases, literal_state, make_hybrid_state
from tests.ngram_cases import shared_input_faults

ARGS = ("input_ids", "input_ids_len", "pre_ids", "step_idx", "draft_token_num", "draft_tokens", "seq_lens_this_time",
        "seq_lens_decoder", "max_dec_len")
ATTRS = ("max_ngram_size", "min_ngram_size", "max_draft_tokens", "num_model_steps")


def run_op(state: dict, **attrs) -> dict:
    """Runs the op on a numpy state (seq_lens_encoder optional); returns the new state."""
    t = {k: paddle.to_tensor(state[k]) for k in ARGS}
    enc = state.get("seq_lens_encoder")
    assert hybrid_mtp_ngram(*(t[k] for k in ARGS), *(attrs[k] for k in ATTRS),
                            seq_lens_encoder=None if enc is None else paddle.to_tensor(enc)) is None
    return {**state, **{k: t[k].numpy() for k in WRITES}}


@pytest.fixture
def run():
    """The backend of the shared tests (tests/hybrid_case_tests.py): the Paddle op."""
    return run_op


@pytest.fixture(params=[(bsz, kind, sizes, seed, True, column) for bsz, kind, sizes, seed in all_cases()
                        for column in (False, True)],
                ids=lambda p: f"{p[0]}-{p[1]}-{p[2][0]}-{p[2][1]}-{p[3]}-{'column' if p[5] else '1d'}")
def reference_grid(request):
    """(bsz, kind, sizes, seed, with_encoder, column): every batch size x kind x n-gram sizes, 1-D and
    FastDeploy's column."""
    return request.param


def test_hybrid_mtp_ngram_updates_tensors_in_place():
    _, state, attrs, expected = HYBRID_CASES[1]
    t = {k: paddle.to_tensor(state[k]) for k in ARGS}
    ptrs = {k: t[k].data_ptr() for k in ARGS}
    hybrid_mtp_ngram(*(t[k] for k in ARGS), *(attrs[k] for k in ATTRS))
    assert {k: t[k].data_ptr() for k in ARGS} == ptrs
    np.testing.assert_array_equal(t["draft_tokens"].numpy(), expected["draft_tokens"])


def test_hybrid_mtp_ngram_with_no_mtp_drafts_is_ngram_match():
    """num_model_steps = 0 on running decode slots with L = 1 (and no paused or prefill slot): the history
    is prompt ++ generated and the whole budget is n-gram drafts, which is ngram_match's rule."""
    for seed in range(6):
        state = make_hybrid_state(np.random.default_rng(seed), 33, "all_decode", num_draft=4, num_model_steps=0)
        state["seq_lens_encoder"][:] = 0
        state["seq_lens_this_time"][:] = np.where(state["seq_lens_decoder"][:33] != 0, 1, 0)
        attrs = dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=4)
        want = ref_ngram_match(state, **attrs)
        assert_state_equal(run_op(state, **attrs, num_model_steps=0), want)
        t = {k: paddle.to_tensor(state[k]) for k in ARGS + ("seq_lens_encoder",)}
        ngram_match(*(t[k] for k in ("input_ids", "input_ids_len", "pre_ids", "step_idx", "draft_token_num",
                                     "draft_tokens", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder",
                                     "max_dec_len")), 3, 4)
        assert_state_equal({k: t[k].numpy() for k in WRITES}, want)


def test_hybrid_mtp_ngram_without_seq_lens_encoder_extends_prefill_rows():
    """FastDeploy's op has no seq_lens_encoder: a prefill row whose L happens to be 1 + s is then
    extended (the MTP proposer always passes it)."""
    _, state, attrs, expected = HYBRID_CASES[5]  # slot 2: prefill chunk with L = 4 = 1 + s
    assert run_op(state, **attrs)["draft_tokens"][2].tolist() == expected["draft_tokens"][2]
    state = {k: v for k, v in state.items() if k != "seq_lens_encoder"}
    state["seq_lens_decoder"] = np.array([10, 0, 10], np.int32)
    state["draft_tokens"][2, 1:] = [1, 2, 3]
    state["seq_lens_this_time"][2] = 3  # s = 2: h = [1 2 3 1 2 | 3 | 1 2] -> n = 3 [3 1 2] at 2 -> [3]
    got = run_op(state, **{**attrs, "num_model_steps": 2})
    np.testing.assert_array_equal(got["draft_tokens"][2], [502, 1, 2, 3])
    assert got["seq_lens_this_time"][2] == 4


def test_hybrid_mtp_ngram_rows_past_bsz_untouched():
    state = make_hybrid_state(np.random.default_rng(7), 3, "all_decode", extra_rows=2)
    attrs = dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=3, num_model_steps=2)
    got = run_op(state, **attrs)
    np.testing.assert_array_equal(got["draft_tokens"][3:], state["draft_tokens"][3:])
    assert_state_equal(got, ref_hybrid_mtp_ngram(state, **attrs))


def test_hybrid_mtp_ngram_zero_live_slots():
    state = make_hybrid_state(np.random.default_rng(8), 0, "mixed", extra_rows=3)
    got = run_op(state, max_ngram_size=3, min_ngram_size=1, max_draft_tokens=3, num_model_steps=2)
    np.testing.assert_array_equal(got["draft_tokens"], state["draft_tokens"])


def test_hybrid_mtp_ngram_long_history_prefers_longest_then_latest():
    """S = 600, the suffix spans the generated tokens and the MTP drafts: the one 3-gram occurrence far
    back wins over every closer 1- and 2-gram match."""
    rng = np.random.default_rng(3)
    prompt = list(rng.integers(10, 14, size=500))
    prompt[40:45] = [1, 2, 3, 77, 78]
    prompt[300:303] = [2, 3, 90]  # a closer 2-gram [2 3]
    prompt[400:402] = [3, 91]  # a closer 1-gram [3]
    gen = list(rng.integers(10, 14, size=50)) + [1]
    state = literal_state([prompt], [gen], [[2, 3]], width=5, prompt_width=600, history_width=600)
    got = run_op(state, max_ngram_size=3, min_ngram_size=1, max_draft_tokens=4, num_model_steps=2)
    np.testing.assert_array_equal(got["draft_tokens"][0], [500, 2, 3, 77, 78])


def _bad(**changes):
    _, state, _, _ = HYBRID_CASES[0]
    state = {k: np.copy(v) for k, v in state.items()}
    state.update(changes)
    return state


A = dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=4, num_model_steps=2)
BAD = shared_input_faults(_bad, A, width=5) + [
    ("decoder_too_few", _bad(seq_lens_decoder=np.zeros(2, np.int32)), A,
     r"seq_lens_decoder has 2 slots \(shape \[2\]\), expected at least bsz = 3"),
    ("encoder_bool", _bad(seq_lens_encoder=np.zeros(3, bool)), A, r"seq_lens_encoder has dtype bool, expected int32"),
    ("negative_num_model_steps", _bad(), dict(A, num_model_steps=-1),
     r"num_model_steps = -1, expected 0 <= num_model_steps <= D - 1 = 4"),
    ("num_model_steps_past_width", _bad(), dict(A, num_model_steps=5), r"num_model_steps = 5, expected 0 <="),
    ("prompt_len_past_width", _bad(input_ids_len=np.array([9, 3, 4], np.int64)), A,
     r"input_ids_len\[0\] = 9, expected 0 <= input_ids_len <= 8"),
    ("negative_prompt_len", _bad(input_ids_len=np.array([-1, 3, 4], np.int64)), A, r"input_ids_len\[0\] = -1"),
    ("step_idx_past_history", _bad(step_idx=np.array([8, 1, 1], np.int64)), A,
     r"step_idx\[0\] = 8, expected 0 <= step_idx <= 7"),
]


@pytest.mark.parametrize("state, attrs, match", [pytest.param(s, a, m, id=i) for i, s, a, m in BAD])
def test_hybrid_mtp_ngram_rejects_bad_input(state, attrs, match):
    t = {k: paddle.to_tensor(state[k]) for k in ARGS}
    enc = state.get("seq_lens_encoder")
    with pytest.raises(ValueError, match=match):
        hybrid_mtp_ngram(*(t[k] for k in ARGS), *(attrs[k] for k in ATTRS),
                         seq_lens_encoder=None if enc is None else paddle.to_tensor(enc))
    for k in WRITES:  # a rejected call writes nothing
        np.testing.assert_array_equal(t[k].numpy(), state[k], err_msg=k)


@pytest.mark.parametrize("state", [
    _bad(input_ids_len=np.array([4, 99, -5], np.int64)),  # slot 1 (stopped) and slot 2 (chain cut short): not read
    _bad(step_idx=np.array([1, 50, -3], np.int64)),
], ids=["input_ids_len", "step_idx"])
def test_hybrid_mtp_ngram_ignores_history_of_slots_it_does_not_extend(state):
    _, _, attrs, expected = HYBRID_CASES[0]
    got = run_op(state, **attrs)
    np.testing.assert_array_equal(got["draft_tokens"], expected["draft_tokens"])


def test_hybrid_mtp_ngram_attributes_must_be_host_ints():
    _, state, _, _ = HYBRID_CASES[0]
    t = [paddle.to_tensor(state[k]) for k in ARGS]
    with pytest.raises(TypeError, match="max_ngram_size must be a host int, got float"):
        hybrid_mtp_ngram(*t, 3.0, 1, 4, 2)
    with pytest.raises(TypeError, match="num_model_steps must be a host int, got bool"):
        hybrid_mtp_ngram(*t, 3, 1, 4, True)


def test_hybrid_mtp_ngram_fastdeploy_call_needs_num_model_steps():
    """FastDeploy's 9 tensors + 3 attributes do not bind: without num_model_steps the op cannot tell a
    complete MTP chain from one cut short."""
    _, state, _, _ = HYBRID_CASES[0]
    t = [paddle.to_tensor(state[k]) for k in ARGS]
    with pytest.raises(TypeError, match="num_model_steps"):
        hybrid_mtp_ngram(*t, 3, 1, 4)


def test_hybrid_mtp_ngram_kinds_and_sizes_are_covered():
    """The random cases exercise what the kinds promise: extended slots, complete chains with no match,
    matches limited by the room left, slots untouched because their chain was cut short, and stopped /
    prefill slots whose L equals 1 + s."""
    seen = {"extended": 0, "complete_no_match": 0, "room_limited": 0, "cut_short": 0, "stopped_like_a_chain": 0,
            "prefill_like_a_chain": 0, "short_history": 0}
    for bsz, kind, sizes, seed in all_cases():
        state = make_hybrid_state(np.random.default_rng(seed), bsz, kind)
        out = ref_hybrid_mtp_ngram(state, max_ngram_size=sizes[0], min_ngram_size=sizes[1], max_draft_tokens=3,
                                   num_model_steps=2)
        for b in range(bsz):
            before, after = int(state["seq_lens_this_time"][b]), int(out["seq_lens_this_time"][b])
            decode = state["seq_lens_encoder"][b] <= 0 and state["seq_lens_decoder"][b] != 0
            room = int(state["max_dec_len"][b] - state["step_idx"][b] - 1)
            budget = min(room, int(state["draft_token_num"][b]), 3)
            length = int(state["input_ids_len"][b] + state["step_idx"][b]) + 2
            seen["prefill_like_a_chain"] += state["seq_lens_encoder"][b] > 0 and before == 3
            seen["stopped_like_a_chain"] += state["seq_lens_decoder"][b] == 0 and before == 3
            if not decode:
                continue
            seen["cut_short"] += 1 <= before < 3
            seen["extended"] += after > before
            seen["complete_no_match"] += before == 3 and after == 3 and budget > 2
            seen["room_limited"] += before == 3 and room == 3 and after == 4
            seen["short_history"] += before == 3 and length <= sizes[0]
    assert all(v >= 20 for v in seen.values()), seen
    assert len(KINDS) * len(NGRAM_SIZES) * len(hc.BATCH_SIZES) == len(all_cases())
