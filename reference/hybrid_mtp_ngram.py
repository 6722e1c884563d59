"""numpy reference for hybrid_mtp_ngram, written from docs/spec.md §5.8 as a per-slot loop: the history is
prompt ++ generated ++ the MTP drafts, searched with ngram_match's rule (find_drafts of its reference).

Composable: the state is a dict holding the op's tensor inputs under its argument names (STATE_KEYS);
returns a new dict with draft_tokens and seq_lens_this_time replaced (input untouched, other keys passed
through).
"""

from __future__ import annotations

import numpy as np

from reference.ngram_match import NO_TOKEN, check_sizes, find_drafts, slot_budget, slot_history, writable_outputs

STATE_KEYS = (
    "input_ids",  # [N, S_in] int64, the prompt: [b, :input_ids_len[b]]
    "input_ids_len",  # [N] int64
    "pre_ids",  # [N, S] int64, generated token j (1-based) at [b, j]
    "step_idx",  # [N] int64, tokens generated so far
    "draft_token_num",  # [N] int32, adaptive draft budget
    "draft_tokens",  # [N, D] int64, MTP drafts in columns 1..s; written: columns s + 1..
    "seq_lens_this_time",  # [bsz] int32, 1 + MTP drafts; written
    "seq_lens_decoder",  # [N] int32
    "max_dec_len",  # [N] int64
    "seq_lens_encoder",  # [N] int32, optional (absent or None: FastDeploy's op, no prefill check)
)


def ref_hybrid_mtp_ngram(state: dict, *, max_ngram_size: int, min_ngram_size: int, max_draft_tokens: int,
                         num_model_steps: int, strict: bool = True) -> dict:
    """Slots with a complete MTP chain (L == 1 + s, E <= 0, Dec != 0) get up to budget - s n-gram drafts
    after their s MTP drafts, -1 after them, L = 1 + s + m; every other slot is untouched. strict: raise
    on bad history indices (CPU op); False clamps them (CUDA kernel)."""
    check_sizes(max_ngram_size, min_ngram_size, max_draft_tokens)
    width = np.asarray(state["draft_tokens"]).shape[1]
    s = num_model_steps
    if not 0 <= s <= width - 1:
        raise ValueError(f"num_model_steps = {s}, expected 0 <= num_model_steps <= D - 1 = {width - 1}")
    new, drafts, flat_lens = writable_outputs(state)
    per_slot = {k: np.asarray(state[k]).reshape(-1) for k in
                ("seq_lens_decoder", "draft_token_num", "step_idx", "max_dec_len")}
    enc = state.get("seq_lens_encoder")
    enc = None if enc is None else np.asarray(enc).reshape(-1)
    for b in range(flat_lens.shape[0]):
        if (enc is not None and enc[b] > 0) or per_slot["seq_lens_decoder"][b] == 0 or flat_lens[b] != 1 + s:
            continue
        history = np.concatenate([slot_history(state, b, strict=strict), drafts[b, 1:1 + s]])
        budget = slot_budget(per_slot, b, max_draft_tokens, width)
        found = find_drafts(history, budget - s, max_ngram_size, min_ngram_size)
        drafts[b, 1 + s:] = NO_TOKEN
        drafts[b, 1 + s:1 + s + len(found)] = found
        flat_lens[b] = 1 + s + len(found)
    return new
