"""numpy reference for draft_model_update, written from docs/spec.md §5 and docs/spec.md §8.14
(era [B] rows through cu_seqlens_q_output; era [C]'s fixes: no draft-side EOS stop, no draft the
target cannot verify) as a per-slot loop.

Composable: the state is a dict holding the op's in-place buffers under the op's argument names
(STATE_KEYS); the function returns a new dict and never modifies its input. Other keys pass
through unchanged, so a multi-round test can keep the whole draft state in one dict (and put the
target's draft_tokens under "base_model_draft_tokens").
"""

from __future__ import annotations

import numpy as np

STATE_KEYS = (
    "draft_tokens",  # [N, D] int64, column 0 = next draft input token
    "pre_ids",  # [N, S] int64 draft history
    "seq_lens_this_time",  # [bsz] int32 (L)
    "seq_lens_encoder",  # [bsz] int32 (E)
    "seq_lens_decoder",  # [bsz] int32 (Dec)
    "step_idx",  # [bsz] int64
    "stop_flags",  # [bsz] bool
    "not_need_stop",  # [1] bool
    "base_model_draft_tokens",  # [N, D_target] int64, the target's draft_tokens
)


def ref_draft_model_update(state: dict, inter_next_tokens, cu_seqlens_q_output, max_dec_len, end_ids=None,
                           *, substep: int, strict: bool = True) -> dict:
    """One draft_model_update call on numpy state; returns the new state dict.

    Args:
        state: dict with STATE_KEYS (numpy arrays; per-slot ones may be [bsz] or [bsz, 1]).
        inter_next_tokens: [rows] (or [rows, 1]) int64, the draft's sampled token per output row.
        cu_seqlens_q_output: [bsz + 1] int32; slot b owns rows [cu[b], cu[b + 1]).
        max_dec_len: [bsz] int64.
        end_ids: unused (a draft EOS does not stop the draft slot); kept for the op's signature.
        substep: s; the proposal goes to base_model_draft_tokens[b, s + 1].
        strict: raise ValueError, like the CPU op, for a running slot without a row in
            inter_next_tokens; False gives the CUDA kernel's fallback (the slot proposes -1, stops).
    """
    del end_ids
    new = dict(state)
    for key in STATE_KEYS:
        new[key] = np.array(state[key], copy=True)
    draft, pre_ids, base = new["draft_tokens"], new["pre_ids"], new["base_model_draft_tokens"]
    lens = new["seq_lens_this_time"].reshape(-1)  # views: writes land in new[...]
    enc = new["seq_lens_encoder"].reshape(-1)
    dec = new["seq_lens_decoder"].reshape(-1)
    step = new["step_idx"].reshape(-1)
    stop = new["stop_flags"].reshape(-1)
    tokens = np.asarray(inter_next_tokens).reshape(-1)
    cu = np.asarray(cu_seqlens_q_output).reshape(-1)
    max_len = np.asarray(max_dec_len).reshape(-1)
    bsz, S = lens.shape[0], pre_ids.shape[1]
    if not 0 <= substep < base.shape[1] - 1:
        raise ValueError(f"substep = {substep}, expected 0 <= substep < {base.shape[1] - 1}")

    def propose_nothing_and_stop(b):
        draft[b, 0] = -1
        base[b, substep + 1] = -1
        stop[b] = True
        lens[b] = 0
        enc[b] = 0

    for b in range(bsz):
        if stop[b]:
            propose_nothing_and_stop(b)
            continue
        start, end = int(cu[b]), int(cu[b + 1])
        if not (start >= 0 and end > start and end <= tokens.shape[0]):
            if strict:
                raise ValueError(f"running slot {b} owns output rows [{start}, {end}) of {tokens.shape[0]}")
            propose_nothing_and_stop(b)
            continue
        token = tokens[end - 1]  # the slot's last output row
        if enc[b] > 0:  # prefill: the whole prompt chunk is now in the KV cache
            dec[b] += enc[b]
            enc[b] = 0
            step[b] += 1
        else:
            dec[b] += lens[b]
            step[b] += lens[b]
        if 0 <= step[b] < S:
            pre_ids[b, step[b]] = token
        if step[b] < max_len[b]:
            draft[b, 0] = token
            base[b, substep + 1] = token
            lens[b] = 1
        else:  # generated token number step + 1 > max_dec_len: the target can never emit it
            propose_nothing_and_stop(b)
    new["not_need_stop"].reshape(-1)[0] = bool((~stop.astype(bool)).any())
    return new
