"""numpy reference for eagle_get_hidden_states (docs/spec.md §5; docs/spec.md §8.13), per-slot loops.

Composable with ref_draft_model_preprocess: it reads the same state dict (draft seq_lens_this_time /
seq_lens_encoder after preprocessing, target accept_num and target_model_seq_lens_this_time, the
target's L of the step just finished). Strict like the CPU op: inconsistent lengths raise ValueError.
"""

from __future__ import annotations

import numpy as np


def rows_kept(draft_len, draft_enc, accept_num):
    """Target rows slot b hands to the draft (a prefix of its target rows): none for a stopped
    draft slot, all E_b prompt rows for a draft prefill, the accept_num rows of the last accepted
    token and the accepted drafts for a decode."""
    if draft_len == 0:
        return 0
    if draft_enc > 0:
        return int(draft_enc)
    return int(accept_num)


def ref_eagle_get_hidden_states(target_hidden_states: np.ndarray, state: dict):
    """Returns (out [T, H] same dtype, output_token_num [1] int32).

    target_hidden_states: [T, H], the target's packed rows (slot b owns T rows from
    sum(target L_j, j < b) on). Output row cu_out[b] + j = target row cu_t[b] + j for j < kept_b,
    packed in slot order; rows past the total are zero. The total equals sum(draft L_b), so the
    output lines up with the draft's ids_remove_padding.
    """
    draft_len = np.asarray(state["seq_lens_this_time"]).reshape(-1)
    draft_enc = np.asarray(state["seq_lens_encoder"]).reshape(-1)
    accept_num = np.asarray(state["accept_num"]).reshape(-1)
    target_len = np.asarray(state["target_model_seq_lens_this_time"]).reshape(-1)
    T = target_hidden_states.shape[0]
    out = np.zeros_like(target_hidden_states)
    src = 0
    dst = 0
    for b in range(draft_len.shape[0]):
        if draft_len[b] < 0 or target_len[b] < 0:
            raise ValueError(f"slot {b}: negative length (draft L = {draft_len[b]}, target L = {target_len[b]})")
        kept = rows_kept(draft_len[b], draft_enc[b], accept_num[b])
        if kept < 0 or kept > target_len[b]:
            raise ValueError(f"slot {b}: keeps {kept} rows of the target's {target_len[b]}")
        if kept != draft_len[b]:
            raise ValueError(f"slot {b}: keeps {kept} rows but the draft feeds L = {draft_len[b]} tokens")
        if src + target_len[b] > T:
            raise ValueError(f"target rows end at {src + target_len[b]} > T = {T}")
        out[dst:dst + kept] = target_hidden_states[src:src + kept]
        src += int(target_len[b])
        dst += kept
    return out, np.array([dst], dtype=np.int32)
