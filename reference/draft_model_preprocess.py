"""numpy reference for draft_model_preprocess (docs/spec.md §5; docs/spec.md §8.12, era [C] "shadow
state"), written as per-slot loops. Composable: it maps a state dict to a new state dict, so a
multi-round test can chain it with the other step ops.

State dict keys (numpy arrays; the op's input names, in the op's input order):
  draft side:  draft_tokens [N, Dd] i64, input_ids [N, S] i64, stop_flags [bsz] bool,
               seq_lens_this_time / seq_lens_encoder / seq_lens_decoder [bsz] i32, step_idx [bsz] i64,
               not_need_stop [1] bool, pre_ids [N, Sp] i64
  target side: accept_tokens [N, Da] i64, accept_num [bsz] i32, target_model_seq_lens_encoder /
               target_model_seq_lens_decoder [bsz] i32, target_model_step_idx [bsz] i64,
               target_model_stop_flags [bsz] bool, max_dec_len [bsz] i64,
               target_model_draft_tokens [N, Dt] i64, target_model_is_block_step [bsz] bool or
               None / absent (optional)
Other keys are carried over unchanged. bsz = len(seq_lens_this_time).

Strict like the CPU op: a value that would index out of range raises ValueError.
"""

from __future__ import annotations

import numpy as np

DRAFT_KEYS = ("draft_tokens", "input_ids", "stop_flags", "seq_lens_this_time", "seq_lens_encoder",
              "seq_lens_decoder", "step_idx", "not_need_stop", "pre_ids")
TARGET_KEYS = ("accept_tokens", "accept_num", "target_model_seq_lens_encoder", "target_model_seq_lens_decoder",
               "target_model_step_idx", "target_model_stop_flags", "max_dec_len", "target_model_draft_tokens")
OPTIONAL_KEYS = ("target_model_is_block_step",)
INPUT_KEYS = DRAFT_KEYS + TARGET_KEYS + OPTIONAL_KEYS  # the op's input order
UPDATED_KEYS = DRAFT_KEYS + ("target_model_draft_tokens",)  # what the op writes in place


def ref_draft_model_preprocess(state: dict, num_model_steps: int, is_splitwise_prefill: bool = False,
                               truncate_first_token: bool = True) -> dict:
    """Bridges the target's state after verification to the draft's state for this round.

    Per slot b:
      * target draft_tokens[b, 1:] = -1 (slot 0, the last accepted token, is kept);
      * skip (draft stop = true, L = E = Dec = step_idx = 0) if the target slot is stopped, paused
        (target_model_is_block_step), or near its limit: step_idx_t + num_model_steps >= max_dec_len
        (this last rule is off when is_splitwise_prefill);
      * draft prefill (E > 0): the target's first token accept_tokens[b, 0] completes the shifted
        prompt at input_ids[b, E - 1] (truncate) or input_ids[b, E] (L = E + 1); pre_ids[b, 0] = it;
        step_idx = step_idx_t - 1; Dec is kept (prefix-cache start set at insertion);
      * draft decode: n = accept_num[b]; Dec = Dec_t - n, step_idx = step_idx_t - n (re-derived
        every round, no rollback); draft_tokens[b, :n] = accept_tokens[b, :n];
        pre_ids[b, step_idx_t - n + i] = accept_tokens[b, i] (skipped at >= Sp); L = n.
    not_need_stop[0] = any slot not skipped.
    """
    new = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
    if num_model_steps < 1:
        raise ValueError(f"num_model_steps = {num_model_steps}, expected >= 1")
    draft_tokens, input_ids, pre_ids = new["draft_tokens"], new["input_ids"], new["pre_ids"]
    stop, lens, enc, dec, step = (new[k].reshape(-1) for k in (
        "stop_flags", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder", "step_idx"))
    accept_tokens, target_drafts = new["accept_tokens"], new["target_model_draft_tokens"]
    accept_num, t_dec, t_step, t_stop, max_dec_len = (new[k].reshape(-1) for k in (
        "accept_num", "target_model_seq_lens_decoder", "target_model_step_idx", "target_model_stop_flags",
        "max_dec_len"))
    paused = new.get("target_model_is_block_step")
    paused = None if paused is None else paused.reshape(-1)
    S, Sp, Dd, Da = input_ids.shape[1], pre_ids.shape[1], draft_tokens.shape[1], accept_tokens.shape[1]

    running = 0
    for b in range(lens.shape[0]):
        target_drafts[b, 1:] = -1
        skip = bool(t_stop[b]) or (paused is not None and bool(paused[b]))
        if not is_splitwise_prefill and t_step[b] + num_model_steps >= max_dec_len[b]:
            skip = True
        if skip:
            stop[b] = True
            lens[b] = enc[b] = dec[b] = 0
            step[b] = 0
            continue
        running += 1
        stop[b] = False
        if enc[b] > 0:  # the target just finished its prefill and emitted its first token
            first = accept_tokens[b, 0]
            pos = enc[b] - 1 if truncate_first_token else enc[b]
            if pos >= S:
                raise ValueError(f"slot {b}: first token goes to input_ids[{b}, {pos}], width S = {S}")
            input_ids[b, pos] = first
            if Sp > 0:
                pre_ids[b, 0] = first
            lens[b] = enc[b] if truncate_first_token else enc[b] + 1
            step[b] = t_step[b] - 1
        else:
            n = int(accept_num[b])
            if n < 0 or n > Da or n > Dd:
                raise ValueError(f"slot {b}: accept_num = {n}, expected 0..min(Da = {Da}, Dd = {Dd})")
            dec[b] = t_dec[b] - n
            step[b] = t_step[b] - n
            for i in range(n):
                draft_tokens[b, i] = accept_tokens[b, i]
                pos = t_step[b] - n + i
                if pos < 0:
                    raise ValueError(f"slot {b}: pre_ids position {pos} < 0 (step_idx_t = {t_step[b]}, n = {n})")
                if pos < Sp:
                    pre_ids[b, pos] = accept_tokens[b, i]
            lens[b] = n
    new["not_need_stop"] = np.array([running > 0], dtype=bool)
    return new
