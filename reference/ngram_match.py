"""numpy reference for ngram_match, written from docs/spec.md "ngram_match" as a per-slot loop over
n (descending), each comparing the suffix with every earlier window and taking the last hit.

Composable: the state is a dict holding the op's tensor inputs under its argument names
(STATE_KEYS); returns a new dict with draft_tokens and seq_lens_this_time replaced (input
untouched, other keys passed through).
"""

from __future__ import annotations

import numpy as np

NO_TOKEN = -1
MAX_NGRAM_SIZE = 64  # the op's bound on max_ngram_size

STATE_KEYS = (
    "input_ids",  # [N, S_in] int64, the prompt: [b, :input_ids_len[b]]
    "input_ids_len",  # [N] int64
    "pre_ids",  # [N, S] int64, generated token j (1-based) at [b, j]
    "step_idx",  # [N] int64, tokens generated so far
    "draft_token_num",  # [N] int32, adaptive draft budget
    "draft_tokens",  # [N, D] int64, written: columns 1..
    "seq_lens_this_time",  # [bsz] int32, written
    "seq_lens_encoder",  # [N] int32
    "seq_lens_decoder",  # [N] int32
    "max_dec_len",  # [N] int64
    "is_block_step",  # [N] bool, optional (absent or None: FastDeploy's op)
)


def slot_history(state: dict, b: int, *, strict: bool = True) -> np.ndarray:
    """h = prompt ++ generated tokens of slot b (docs/spec.md). strict raises on an input_ids_len or
    step_idx outside the buffers, as the CPU op does; otherwise they are clamped, as the CUDA kernel
    does."""
    input_ids, pre_ids = np.asarray(state["input_ids"]), np.asarray(state["pre_ids"])
    prompt_len = int(np.asarray(state["input_ids_len"]).reshape(-1)[b])
    generated = int(np.asarray(state["step_idx"]).reshape(-1)[b])
    if strict:
        if not 0 <= prompt_len <= input_ids.shape[1]:
            raise ValueError(f"input_ids_len[{b}] = {prompt_len}, expected 0 <= input_ids_len <= "
                             f"{input_ids.shape[1]}")
        if not 0 <= generated <= pre_ids.shape[1] - 1:
            raise ValueError(f"step_idx[{b}] = {generated}, expected 0 <= step_idx <= {pre_ids.shape[1] - 1}")
    prompt_len = min(max(prompt_len, 0), input_ids.shape[1])
    generated = min(max(generated, 0), pre_ids.shape[1] - 1)
    return np.concatenate([input_ids[b, :prompt_len], pre_ids[b, 1:generated + 1]])


def find_drafts(history: np.ndarray, budget: int, max_ngram_size: int, min_ngram_size: int) -> np.ndarray:
    """The tokens after the most recent earlier occurrence of the longest matching suffix (at most
    `budget` of them); empty when nothing matches or budget <= 0."""
    length = len(history)
    if budget <= 0:
        return history[:0]
    for n in range(max_ngram_size, min_ngram_size - 1, -1):
        if length < n + 1:  # a suffix and an earlier start need n + 1 tokens
            continue
        suffix = history[length - n:]
        # windows[i] = history[i:i + n] for the starts i = 0 .. length - n - 1 (a token follows each)
        windows = np.lib.stride_tricks.sliding_window_view(history[:length - 1], n)
        starts = np.flatnonzero((windows == suffix).all(axis=1))
        if starts.size:
            start = int(starts[-1]) + n  # the most recent occurrence
            return history[start:start + min(budget, length - start)]
    return history[:0]


def check_sizes(max_ngram_size: int, min_ngram_size: int, max_draft_tokens: int) -> None:
    """Raises unless 1 <= min_ngram_size <= max_ngram_size <= MAX_NGRAM_SIZE and max_draft_tokens >= 0."""
    if not 1 <= min_ngram_size <= max_ngram_size <= MAX_NGRAM_SIZE:
        raise ValueError(f"ngram sizes min {min_ngram_size}, max {max_ngram_size}: expected "
                         f"1 <= min_ngram_size <= max_ngram_size <= {MAX_NGRAM_SIZE}")
    if max_draft_tokens < 0:
        raise ValueError(f"max_draft_tokens = {max_draft_tokens}, expected >= 0")


def writable_outputs(state: dict):
    """(new state, draft_tokens copy, flat view of the seq_lens_this_time copy): the two outputs are copies
    placed in a new dict, so the input state is left untouched."""
    new = dict(state)
    new["draft_tokens"] = np.array(state["draft_tokens"], copy=True)
    new["seq_lens_this_time"] = np.array(state["seq_lens_this_time"], copy=True)
    return new, new["draft_tokens"], new["seq_lens_this_time"].reshape(-1)


def slot_budget(per_slot: dict, b: int, max_draft_tokens: int, width: int) -> int:
    """Drafts slot b may hold in all: min(draft_token_num, max_draft_tokens, D - 1, max_dec_len - step_idx - 1)."""
    room = int(per_slot["max_dec_len"][b]) - int(per_slot["step_idx"][b]) - 1
    return min(int(per_slot["draft_token_num"][b]), max_draft_tokens, width - 1, room)


def ref_ngram_match(state: dict, *, max_ngram_size: int, max_draft_tokens: int, min_ngram_size: int = 1,
                    strict: bool = True) -> dict:
    """Drafts of every decode slot (docs/spec.md): prefill untouched, paused / stopped L = 0, decode
    L = 1 + drafts with draft_tokens[b, 1 + m:] = -1. strict: raise on bad history indices (CPU op);
    False clamps them (CUDA kernel)."""
    check_sizes(max_ngram_size, min_ngram_size, max_draft_tokens)
    new, drafts, flat_lens = writable_outputs(state)
    per_slot = {k: np.asarray(state[k]).reshape(-1) for k in
                ("seq_lens_encoder", "seq_lens_decoder", "draft_token_num", "step_idx", "max_dec_len")}
    paused = state.get("is_block_step")
    paused = None if paused is None else np.asarray(paused).reshape(-1)
    width = drafts.shape[1]
    for b in range(flat_lens.shape[0]):
        if per_slot["seq_lens_encoder"][b] > 0:
            continue
        if (paused is not None and paused[b]) or per_slot["seq_lens_decoder"][b] == 0:
            flat_lens[b] = 0
            continue
        history = slot_history(state, b, strict=strict)
        budget = slot_budget(per_slot, b, max_draft_tokens, width)
        found = find_drafts(history, budget, max_ngram_size, min_ngram_size)
        drafts[b, 1:] = NO_TOKEN
        drafts[b, 1:1 + len(found)] = found
        flat_lens[b] = 1 + len(found)
    return new
