"""Hand-worked three-slot cases for the state-update ops, shared by tests/ops and tests/gpu.

Each case is (name, state, expected): `state` is a post-verify state (keys as in
reference/cases/post_verify_state.py), `expected` lists every buffer the op writes, worked out by hand from
SPEC; anything not listed must come back unchanged. Plain numpy, no Paddle.
"""

import numpy as np

I32, I64 = np.int32, np.int64


def _a(x, dtype):
    return np.array(x, dtype=dtype)


def _update_state(enc, dec, lens, n, accept_tokens, actual, stop, paused, stop_nums, drafts=None,
                  num_slots=None):
    """A speculate_update input; rows past len(lens) (up to num_slots) are padding."""
    N = num_slots or len(lens)
    D = len(accept_tokens[0])

    def pad(x, fill, dtype):
        return _a(list(x) + [fill] * (N - len(x)), dtype)

    return {
        "seq_lens_encoder": pad(enc, 9, I32),
        "seq_lens_decoder": pad(dec, 9, I32),
        "not_need_stop": _a([False], bool),
        "draft_tokens": _a(drafts if drafts is not None else [[-1] * D] * N, I64),
        "actual_draft_token_nums": pad(actual, 1, I32),
        "accept_tokens": _a(list(accept_tokens) + [[77] * D] * (N - len(accept_tokens)), I64),
        "accept_num": pad(n, 1, I32),
        "stop_flags": pad(stop, False, bool),
        "seq_lens_this_time": _a(lens, I32),
        "is_block_step": pad(paused, False, bool),
        "stop_nums": _a([stop_nums], I64),
        "mask_rollback": _a([-9] * N, I32),
    }


F, T = False, True

UPDATE_CASES = [
    # slot 0 prefill of 4 prompt tokens emitted token 7; slot 1 decode fed 1 + 2 drafts, accepted
    # one draft (n = 2, actual shrinks 2 -> 1); slot 2 stopped earlier (n = 0: draft_tokens stays
    # -1, accept_tokens[2, -1] = 23 of the row before must not be read). 1 stopped < 3.
    ("mixed_prefill_decode_stopped",
     _update_state(enc=[4, 0, 0], dec=[0, 10, 0], lens=[4, 3, 0], n=[1, 2, 0],
                   accept_tokens=[[7, 70, 71], [21, 22, 23], [31, 32, 33]], actual=[2, 2, 2],
                   stop=[F, F, T], paused=[F, F, F], stop_nums=3),
     {"seq_lens_encoder": [0, 0, 0], "seq_lens_decoder": [4, 12, 0], "not_need_stop": [True],
      "draft_tokens": [[7, -1, -1], [22, -1, -1], [-1, -1, -1]], "actual_draft_token_nums": [2, 1, 2],
      "mask_rollback": [0, 1, 0]}),
    # D = 4: every draft accepted -> grow by 2, capped at D - 1 = 3 (2 -> 3, 3 -> 3, 1 -> 3).
    ("all_drafts_accepted_grows_capped",
     _update_state(enc=[0, 0, 0], dec=[5, 6, 7], lens=[3, 4, 2], n=[3, 4, 2],
                   accept_tokens=[[11, 12, 13, 14], [21, 22, 23, 24], [31, 32, 33, 34]],
                   actual=[2, 3, 1], stop=[F, F, F], paused=[F, F, F], stop_nums=3),
     {"seq_lens_encoder": [0, 0, 0], "seq_lens_decoder": [8, 10, 9], "not_need_stop": [True],
      "draft_tokens": [[13, -1, -1, -1], [24, -1, -1, -1], [32, -1, -1, -1]],
      "actual_draft_token_nums": [3, 3, 3], "mask_rollback": [0, 0, 0]}),
    # D = 4: a rejection shrinks by 1 with floor 1 (1 -> 1, 3 -> 2); L = 1 (no drafts) keeps it.
    ("rejection_shrinks_floor_one",
     _update_state(enc=[0, 0, 0], dec=[5, 6, 7], lens=[2, 4, 1], n=[1, 2, 1],
                   accept_tokens=[[11, 12, 13, 14], [21, 22, 23, 24], [31, 32, 33, 34]],
                   actual=[1, 3, 2], stop=[F, F, F], paused=[F, F, F], stop_nums=3),
     {"seq_lens_encoder": [0, 0, 0], "seq_lens_decoder": [6, 8, 8], "not_need_stop": [True],
      "draft_tokens": [[11, -1, -1, -1], [22, -1, -1, -1], [31, -1, -1, -1]],
      "actual_draft_token_nums": [1, 2, 2], "mask_rollback": [1, 2, 0]}),
    # slot 0 last chunk of a chunked prefill (8 tokens cached, 3 more now); slot 1 prefill that
    # stopped at its first token (EOS 2): E still moves into Dec, counts as stopped; slot 2 paused
    # with stale values: nothing read or written. 2 stopped < 3.
    ("just_finished_prefill_and_paused",
     _update_state(enc=[3, 5, 2], dec=[8, 0, 6], lens=[3, 5, 0], n=[1, 1, 2],
                   accept_tokens=[[41, 0, 0], [2, 0, 0], [61, 62, 63]], actual=[2, 2, 2],
                   stop=[F, T, T], paused=[F, F, T], stop_nums=3),
     {"seq_lens_encoder": [0, 0, 2], "seq_lens_decoder": [11, 5, 6], "not_need_stop": [True],
      "draft_tokens": [[41, -1, -1], [2, -1, -1], [-1, -1, -1]], "actual_draft_token_nums": [2, 2, 2],
      "mask_rollback": [0, 0, -9]}),
    # slot 0 stopped by this verify after 2 of 3 tokens (EOS): Dec and actual stay (set_value
    # clears Dec), draft_tokens[0, 0] = the EOS; slot 1 paused with a stale accept_num 3 and
    # E = Dec = 0: untouched; slot 2 running decode without drafts. 2 stopped < 3.
    ("stopped_this_step_and_paused",
     _update_state(enc=[0, 0, 0], dec=[20, 0, 9], lens=[3, 0, 1], n=[2, 3, 1],
                   accept_tokens=[[51, 2, 53], [61, 62, 63], [71, 72, 73]], actual=[2, 2, 2],
                   stop=[T, T, F], paused=[F, T, F], stop_nums=3),
     {"seq_lens_encoder": [0, 0, 0], "seq_lens_decoder": [20, 0, 10], "not_need_stop": [True],
      "draft_tokens": [[2, -1, -1], [-1, -1, -1], [71, -1, -1]], "actual_draft_token_nums": [2, 2, 2],
      "mask_rollback": [0, -9, 0]}),
    # bsz 3 of N = 5 slots: stopped, paused, stopped this step, plus 2 padding rows -> 5 stopped,
    # not_need_stop = 5 < 5 = False. Padding rows (E = Dec = 9) are untouched.
    ("all_stopped_with_padding_rows",
     _update_state(enc=[0, 0, 0], dec=[0, 0, 14], lens=[0, 0, 2], n=[0, 0, 1],
                   accept_tokens=[[11, 12, 13], [21, 22, 23], [2, 32, 33]], actual=[2, 2, 2],
                   stop=[T, T, T], paused=[F, T, F], stop_nums=5, num_slots=5),
     {"seq_lens_encoder": [0, 0, 0, 9, 9], "seq_lens_decoder": [0, 0, 14, 9, 9], "not_need_stop": [False],
      "draft_tokens": [[-1, -1, -1], [-1, -1, -1], [2, -1, -1], [-1, -1, -1], [-1, -1, -1]],
      "actual_draft_token_nums": [2, 2, 2, 1, 1], "mask_rollback": [0, -9, 0, -9, -9]}),
]


def _set_value_state(n, accept_tokens, stop, step_idx, enc, dec, max_model_len, pre_ids=None):
    N = len(n)
    return {
        "pre_ids": _a(pre_ids if pre_ids is not None else [[-1] * max_model_len] * N, I64),
        "accept_tokens": _a(accept_tokens, I64),
        "accept_num": _a(n, I32),
        "stop_flags": _a(stop, bool),
        "seq_lens_this_time": _a([1] * N, I32),
        "seq_lens_encoder": _a(enc, I32),
        "seq_lens_decoder": _a(dec, I32),
        "step_idx": _a(step_idx, I64),
    }


_ = -1
SET_VALUE_CASES = [
    # S = 8. slot 0 decode: 2 tokens end at step_idx 5 -> positions 4, 5; slot 1 prefill's first
    # token (speculate_update already moved E into Dec) -> position 1; slot 2 stopped earlier.
    ("decode_prefill_stopped_earlier",
     _set_value_state(n=[2, 1, 0], accept_tokens=[[31, 32, 33], [41, 42, 43], [51, 52, 53]],
                      stop=[F, F, T], step_idx=[5, 1, 4], enc=[0, 0, 0], dec=[9, 6, 0], max_model_len=8),
     {"pre_ids": [[_, _, _, _, 31, 32, _, _], [_, 41, _, _, _, _, _, _], [_] * 8],
      "accept_num": [2, 1, 0], "seq_lens_decoder": [9, 6, 0]}),
    # Slots stopped by this step's verify keep their final tokens: slot 0 decode ended by EOS (2)
    # at step_idx 7; slot 1 prefill that stopped at its first token; then both are cleared.
    # slot 2 running, one token at position 2.
    ("stopped_this_step_keeps_final_tokens",
     _set_value_state(n=[3, 1, 1], accept_tokens=[[51, 52, 2], [2, 0, 0], [61, 62, 63]],
                      stop=[T, T, F], step_idx=[7, 1, 2], enc=[0, 0, 0], dec=[20, 5, 3], max_model_len=8),
     {"pre_ids": [[_, _, _, _, _, 51, 52, 2], [_, 2, _, _, _, _, _, _], [_, _, 61, _, _, _, _, _]],
      "accept_num": [0, 0, 1], "seq_lens_decoder": [0, 0, 3]}),
    # Near the ends of the history (S = 8): slot 0 ends at step_idx 9 -> positions 9, 8 skipped,
    # 7 written; slot 1 (inconsistent step_idx 2 < n 3) -> positions 2, 1 written, 0 skipped;
    # slot 2 step_idx 0 -> nothing. Position 0 holds 5 and must keep it.
    ("history_bounds_skip_outside_1_to_S",
     _set_value_state(n=[3, 3, 1], accept_tokens=[[71, 72, 73], [81, 82, 83], [91, 92, 93]],
                      stop=[F, F, F], step_idx=[9, 2, 0], enc=[0, 0, 0], dec=[30, 4, 4], max_model_len=8,
                      pre_ids=[[5] + [_] * 7] * 3),
     {"pre_ids": [[5, _, _, _, _, _, _, 71], [5, 82, 83, _, _, _, _, _], [5, _, _, _, _, _, _, _]],
      "accept_num": [3, 3, 1], "seq_lens_decoder": [30, 4, 4]}),
    # FastDeploy's idle test: slot 0 has E = Dec = 0 (holds no sequence) -> its stale tokens are
    # not written; slot 1 still has E = 3 (called before speculate_update) -> written; slot 2
    # has n = 0 -> nothing.
    ("idle_slot_with_stale_tokens_not_written",
     _set_value_state(n=[2, 1, 0], accept_tokens=[[11, 12, 13], [21, 22, 23], [31, 32, 33]],
                      stop=[F, F, F], step_idx=[3, 1, 3], enc=[0, 3, 0], dec=[0, 0, 7], max_model_len=6),
     {"pre_ids": [[_] * 6, [_, 21, _, _, _, _], [_] * 6],
      "accept_num": [2, 1, 0], "seq_lens_decoder": [0, 0, 7]}),
]
