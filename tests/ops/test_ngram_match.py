import numpy as np
import paddle
import pytest

from specworker.model_executor.ops import ngram_match
from tests.ngram_case_tests import (  # noqa: F401  written once, also run on the CUDA kernel
    WRITES, assert_state_equal, test_ngram_match_literal, test_ngram_match_matches_reference,
)
from tests.ngram_cases import (
    KINDS, NGRAM_CASES, NGRAM_SIZES, all_cases, literal_state, make_ngram_state, shared_input_faults,
)
from reference.ngram_match import ref_ngram_match

ARGS = ("input_ids", "input_ids_len", "pre_ids", "step_idx", "draft_token_num", "draft_tokens", "seq_lens_this_time",
        "seq_lens_encoder", "seq_lens_decoder", "max_dec_len")


def run_op(state: dict, **attrs) -> dict:
    """Runs the op on a numpy state (is_block_step optional); returns the new state."""
    t = {k: paddle.to_tensor(state[k]) for k in ARGS}
    paused = state.get("is_block_step")
    assert ngram_match(*(t[k] for k in ARGS), **attrs,
                       is_block_step=None if paused is None else paddle.to_tensor(paused)) is None
    return {**state, **{k: t[k].numpy() for k in WRITES}}


@pytest.fixture
def run():
    """The backend of the shared tests (tests/ngram_case_tests.py): the Paddle op."""
    return run_op


@pytest.fixture(params=[(bsz, kind, seed, sizes, seed % 3, True, column) for bsz, kind, sizes, seed in all_cases()
                        for column in (False, True)],
                ids=lambda p: f"{p[0]}-{p[1]}-{p[3][0]}-{p[3][1]}-{p[2]}-{'column' if p[6] else '1d'}")
def reference_grid(request):
    """(bsz, kind, seed, sizes, extra_rows, with_paused, column): every batch size x kind x n-gram sizes,
    1-D and FastDeploy's column."""
    return request.param


def test_ngram_match_fastdeploy_call_without_appended_arguments():
    """FastDeploy's 10 tensors + 2 attributes, positionally: min_ngram_size 1, no paused slots."""
    _, state, attrs, expected = NGRAM_CASES[0]
    t = [paddle.to_tensor(state[k]) for k in ARGS]
    ngram_match(*t, attrs["max_ngram_size"], attrs["max_draft_tokens"])
    np.testing.assert_array_equal(t[ARGS.index("draft_tokens")].numpy(), expected["draft_tokens"])
    np.testing.assert_array_equal(t[ARGS.index("seq_lens_this_time")].numpy(), expected["seq_lens_this_time"])


def test_ngram_match_updates_tensors_in_place():
    _, state, attrs, expected = NGRAM_CASES[2]
    t = {k: paddle.to_tensor(state[k]) for k in ARGS}
    ptrs = {k: t[k].data_ptr() for k in ARGS}
    ngram_match(*(t[k] for k in ARGS), **attrs)
    assert {k: t[k].data_ptr() for k in ARGS} == ptrs
    np.testing.assert_array_equal(t["draft_tokens"].numpy(), expected["draft_tokens"])


@pytest.mark.parametrize("num_draft, max_draft_tokens", [(0, 0), (1, 1), (5, 5), (5, 2), (3, 0)])
def test_ngram_match_matches_reference_other_draft_widths(num_draft, max_draft_tokens):
    """D = 1 (k = 0: no column to write), wide rows, and max_draft_tokens below or at D - 1."""
    for seed, kind in enumerate(("mixed", "repetitive", "near_max_dec_len")):
        state = make_ngram_state(np.random.default_rng(seed), 17, kind, num_draft=num_draft, extra_rows=2)
        attrs = dict(max_ngram_size=3, max_draft_tokens=max_draft_tokens)
        assert_state_equal(run_op(state, **attrs), ref_ngram_match(state, **attrs))


def test_ngram_match_without_is_block_step_drafts_for_paused_slot():
    """Without the optional input a paused slot with Dec > 0 is a decode slot (FastDeploy's op)."""
    state = literal_state([[1, 2, 1]], [[2]], paused=[True])
    assert run_op(state, max_ngram_size=2, max_draft_tokens=3)["seq_lens_this_time"][0] == 0
    del state["is_block_step"]
    got = run_op(state, max_ngram_size=2, max_draft_tokens=3)
    np.testing.assert_array_equal(got["draft_tokens"][0], [500, 1, 2, -1])  # [1 2] at 0 -> [1 2]
    assert got["seq_lens_this_time"][0] == 3


def test_ngram_match_rows_past_bsz_untouched():
    """bsz = 3 live slots (seq_lens_this_time) over 5-row buffers: rows 3, 4 keep their junk."""
    state = make_ngram_state(np.random.default_rng(7), 3, "all_decode", extra_rows=2)
    got = run_op(state, max_ngram_size=3, max_draft_tokens=3)
    np.testing.assert_array_equal(got["draft_tokens"][3:], state["draft_tokens"][3:])
    assert_state_equal(got, ref_ngram_match(state, max_ngram_size=3, max_draft_tokens=3))


def test_ngram_match_zero_live_slots():
    state = make_ngram_state(np.random.default_rng(8), 0, "mixed", extra_rows=3)
    got = run_op(state, max_ngram_size=3, max_draft_tokens=3)
    np.testing.assert_array_equal(got["draft_tokens"], state["draft_tokens"])


def test_ngram_match_long_history_prefers_longest_then_latest():
    """S = 600: many 1-gram and 2-gram occurrences, one 3-gram occurrence far back; the 3-gram wins
    over every closer shorter match."""
    rng = np.random.default_rng(3)
    prompt = list(rng.integers(10, 14, size=500))
    prompt[40:44] = [1, 2, 3, 77]
    gen = list(rng.integers(10, 14, size=50)) + [1, 2, 3]
    state = literal_state([prompt], [gen], prompt_width=600, history_width=600)
    got = run_op(state, max_ngram_size=3, max_draft_tokens=3)
    np.testing.assert_array_equal(got["draft_tokens"][0], [500] + [77] + prompt[44:46])


def _bad(**changes):
    _, state, _, _ = NGRAM_CASES[0]
    state = {k: np.copy(v) for k, v in state.items()}
    state.update(changes)
    return state


A = dict(max_ngram_size=3, max_draft_tokens=3)
BAD = shared_input_faults(_bad, A, width=4) + [
    ("encoder_too_few", _bad(seq_lens_encoder=np.zeros(2, np.int32)), A,
     r"seq_lens_encoder has 2 slots \(shape \[2\]\), expected at least bsz = 3"),
    ("decoder_bool", _bad(seq_lens_decoder=np.zeros(3, bool)), A, r"seq_lens_decoder has dtype bool, expected int32"),
    ("is_block_step_int", _bad(is_block_step=np.zeros(3, np.int32)), A, r"is_block_step has dtype int32, expected bool"),
    ("prompt_len_past_width", _bad(input_ids_len=np.array([9, 3, 2], np.int64)), A,
     r"input_ids_len\[0\] = 9, expected 0 <= input_ids_len <= 8"),
    ("negative_prompt_len", _bad(input_ids_len=np.array([-1, 3, 2], np.int64)), A, r"input_ids_len\[0\] = -1"),
    ("step_idx_past_history", _bad(step_idx=np.array([8, 1, 0], np.int64)), A,
     r"step_idx\[0\] = 8, expected 0 <= step_idx <= 7"),
]


@pytest.mark.parametrize("state, attrs, match", [pytest.param(s, a, m, id=i) for i, s, a, m in BAD])
def test_ngram_match_rejects_bad_input(state, attrs, match):
    t = {k: paddle.to_tensor(state[k]) for k in ARGS}
    paused = state.get("is_block_step")
    with pytest.raises(ValueError, match=match):
        ngram_match(*(t[k] for k in ARGS), **attrs, is_block_step=None if paused is None else paddle.to_tensor(paused))
    for k in WRITES:  # a rejected call writes nothing
        np.testing.assert_array_equal(t[k].numpy(), state[k], err_msg=k)


@pytest.mark.parametrize("state", [
    _bad(input_ids_len=np.array([6, 99, -5], np.int64)),  # slots 1 (stopped) and 2 (prefill) are not read
    _bad(step_idx=np.array([1, 50, -3], np.int64)),
], ids=["input_ids_len", "step_idx"])
def test_ngram_match_ignores_history_of_non_decode_slots(state):
    _, _, attrs, expected = NGRAM_CASES[0]
    got = run_op(state, **attrs)
    np.testing.assert_array_equal(got["draft_tokens"], expected["draft_tokens"])


def test_ngram_match_attributes_must_be_host_ints():
    _, state, _, _ = NGRAM_CASES[0]
    t = [paddle.to_tensor(state[k]) for k in ARGS]
    with pytest.raises(TypeError, match="max_ngram_size must be a host int, got float"):
        ngram_match(*t, 3.0, 3)
    with pytest.raises(TypeError, match="min_ngram_size must be a host int, got bool"):
        ngram_match(*t, 3, 3, min_ngram_size=True)


def test_ngram_match_kinds_and_sizes_are_covered():
    """The random cases exercise what the kinds promise: no-match slots, matches ending right before the
    suffix, histories shorter than n + 1, zero budgets, and every skipped-slot category."""
    seen = {"no_draft_decode": 0, "full_drafts": 0, "match_just_before_suffix": 0, "short": 0, "zero_budget": 0,
            "stopped_or_paused": 0, "prefill": 0}
    for bsz, kind, sizes, seed in all_cases():
        state = make_ngram_state(np.random.default_rng(seed), bsz, kind)
        out = ref_ngram_match(state, max_ngram_size=sizes[0], min_ngram_size=sizes[1], max_draft_tokens=3)
        for b in range(bsz):
            lens = int(out["seq_lens_this_time"][b])
            length = int(state["input_ids_len"][b] + state["step_idx"][b])
            room = int(state["max_dec_len"][b] - state["step_idx"][b] - 1)
            if state["seq_lens_encoder"][b] > 0:
                seen["prefill"] += 1
            elif lens == 0:
                seen["stopped_or_paused"] += 1
            else:
                seen["no_draft_decode"] += lens == 1
                seen["full_drafts"] += lens == 4
                seen["short"] += length <= sizes[0]
                seen["zero_budget"] += min(room, int(state["draft_token_num"][b])) <= 0
                seen["match_just_before_suffix"] += kind == "repetitive" and lens > 1
    assert all(v >= 20 for v in seen.values()), seen
    assert len(KINDS) * len(NGRAM_SIZES) * 4 == len(all_cases())
