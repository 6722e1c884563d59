"""hybrid_mtp_ngram inputs shared by tests/ops and tests/gpu: hand-worked three-slot cases and random batch
states after the MTP draft loop. Plain numpy (the GPU machine has no Paddle).

A state is a dict keyed by the op's argument names (reference/hybrid_mtp_ngram.py STATE_KEYS). As in
tests/ngram_cases.py, buffers hold junk wherever the op must not read or write: draft_tokens columns after
the MTP drafts and whole rows of slots that are not extended, so a wrong read or a missed write shows.
"""

from __future__ import annotations

import numpy as np

from tests import ngram_cases as nc

I32, I64 = np.int32, np.int64
J = nc.DRAFT_JUNK
BATCH_SIZES = nc.BATCH_SIZES
KINDS = ("mixed", "all_decode", "no_match", "repetitive", "short_history", "near_max_dec_len", "stopped_paused",
         "chains_cut_short")
NGRAM_SIZES = nc.NGRAM_SIZES
WIDTHS = ((3, 2), (3, 1), (5, 2), (3, 3), (3, 0), (0, 0))  # (k, num_model_steps); D = k + 1


def literal_state(prompts, generated, mtp_drafts, *, width, lens=None, **kw):
    """ngram_cases.literal_state plus the MTP drafts: draft_tokens[b, 1:1 + len(mtp_drafts[b])], junk after
    them, and seq_lens_this_time = 1 + len(mtp_drafts[b]) unless `lens` says otherwise."""
    state = nc.literal_state(prompts, generated, width=width, **kw)
    for b, d in enumerate(mtp_drafts):
        state["draft_tokens"][b, 1:1 + len(d)] = d
    state["seq_lens_this_time"] = np.array(lens if lens is not None else [1 + len(d) for d in mtp_drafts], I32)
    return state


# (name, state, attrs, expected): expected lists draft_tokens and seq_lens_this_time, worked by hand from
# docs/spec.md §5.8; everything else must come back unchanged.
HYBRID_CASES = [
    # slot 0: h = [1 2 3 4 | 1 | 2 3]: n = 3 suffix [1 2 3] at 0 -> continuation [4 1 2 3], budget 4 - s 2
    # -> [4 1]; slot 1 stopped (Dec 0, L 0): untouched; slot 2's MTP chain was cut short (L 1 < 1 + s):
    # untouched although its history would match.
    ("extends_complete_chain_only",
     literal_state([[1, 2, 3, 4], [1, 2, 1], [1, 2, 3, 4]], [[1], [2], [1]], [[2, 3], [], []], width=5,
                   dec=[10, 0, 10], lens=[3, 0, 1]),
     dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=4, num_model_steps=2),
     {"draft_tokens": [[500, 2, 3, 4, 1], [501, J, J, J, J], [502, J, J, J, J]], "seq_lens_this_time": [5, 0, 1]}),
    # slot 0: h = [1 2 3 | 4 | 5 6]: no earlier 6 -> only the -1 tail. slot 1: h = [9 8 | 7 | 7 7]: n = 3
    # [7 7 7] never earlier; n = 2 [7 7] most recently at 2, right before the suffix -> one token [7].
    # slot 2: h = [1 2 3 1 2 | 3 | 1 2]: n = 3 [3 1 2] at 2 -> [3 1 2 ..] runs into the drafts -> [3 1].
    ("no_match_match_at_the_end_and_into_the_drafts",
     literal_state([[1, 2, 3], [9, 8], [1, 2, 3, 1, 2]], [[4], [7], [3]], [[5, 6], [7, 7], [1, 2]], width=5),
     dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=4, num_model_steps=2),
     {"draft_tokens": [[500, 5, 6, -1, -1], [501, 7, 7, 7, -1], [502, 1, 2, 3, 1]], "seq_lens_this_time": [3, 4, 5]}),
    # h = [1 2 3 4 5 1 2 | 3 | 4 5] everywhere: n = 3 [3 4 5] at 2 -> [1 2 3 4 5]. slot 0: room
    # max_dec_len - G - 1 = 5 - 1 - 1 = 3 -> one n-gram token; slot 1: draft_token_num 2 = s -> none;
    # slot 2: draft_token_num 1 < s -> none, and the MTP drafts stay.
    ("room_and_draft_token_num_cap_the_total",
     literal_state([[1, 2, 3, 4, 5, 1, 2]] * 3, [[3]] * 3, [[4, 5]] * 3, width=5, max_dec_len=[5, 100, 100],
                   budget=[4, 2, 1]),
     dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=4, num_model_steps=2),
     {"draft_tokens": [[500, 4, 5, 1, -1], [501, 4, 5, -1, -1], [502, 4, 5, -1, -1]], "seq_lens_this_time": [4, 3, 3]}),
    # Same histories. max_draft_tokens 3 (< D - 1 = 4) caps slots 0 and 2 at one n-gram token (slot 0's
    # draft_token_num is 9); slot 1's draft_token_num 2 leaves none.
    ("max_draft_tokens_caps_the_total",
     literal_state([[1, 2, 3, 4, 5, 1, 2]] * 3, [[3]] * 3, [[4, 5]] * 3, width=5, budget=[9, 2, 3]),
     dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=3, num_model_steps=2),
     {"draft_tokens": [[500, 4, 5, 1, -1], [501, 4, 5, -1, -1], [502, 4, 5, 1, -1]], "seq_lens_this_time": [4, 3, 4]}),
    # Same histories, max_draft_tokens 9 and draft_token_num 9 / 9 / 4: the width caps each at D - 1 = 4
    # drafts in all -> two n-gram tokens [1 2].
    ("width_caps_the_total",
     literal_state([[1, 2, 3, 4, 5, 1, 2]] * 3, [[3]] * 3, [[4, 5]] * 3, width=5, budget=[9, 9, 4]),
     dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=9, num_model_steps=2),
     {"draft_tokens": [[500, 4, 5, 1, 2], [501, 4, 5, 1, 2], [502, 4, 5, 1, 2]], "seq_lens_this_time": [5, 5, 5]}),
    # MTP already drafted k = 3 (s = D - 1): slot 0 keeps its row; slot 1 has L = 1 + s but Dec 0
    # (stopped): untouched; slot 2 is a prefill chunk (E 4) whose L = 4 = 1 + s by chance: untouched.
    ("mtp_drafts_at_k_stopped_and_prefill",
     literal_state([[1, 2, 3, 1, 2]] * 3, [[3]] * 3, [[1, 2, 3], [1, 2, 3], []], width=4, dec=[10, 0, 0],
                   enc=[0, 0, 4], lens=[4, 4, 4]),
     dict(max_ngram_size=3, min_ngram_size=1, max_draft_tokens=3, num_model_steps=3),
     {"draft_tokens": [[500, 1, 2, 3], [501, 1, 2, 3], [502, J, J, J]], "seq_lens_this_time": [4, 4, 4]}),
    # min_ngram_size 2, s = 1. slot 0: h = [5 | 5] is shorter than n + 1 for every n >= 2 -> none;
    # slot 1: h = [6 | 5 | 6]: [5 6] never earlier and 1-grams are not tried -> none; slot 2:
    # h = [6 5 | 6 | 5]: n = 3 [5 6 5] never earlier, n = 2 [6 5] at 0 -> [6 5].
    ("history_shorter_than_n_and_min_ngram_size",
     literal_state([[], [6], [6, 5]], [[5], [5], [6]], [[5], [6], [5]], width=5),
     dict(max_ngram_size=3, min_ngram_size=2, max_draft_tokens=4, num_model_steps=1),
     {"draft_tokens": [[500, 5, -1, -1, -1], [501, 6, -1, -1, -1], [502, 5, 6, 5, -1]], "seq_lens_this_time": [2, 2, 4]}),
]


# ---- random states ------------------------------------------------------------------------------


def make_hybrid_state(rng: np.random.Generator, bsz: int, kind: str = "mixed", *, num_draft: int = 3,
                      num_model_steps: int = 2, prompt_width: int = 24, history_width: int = 24,
                      extra_rows: int = 0, vocab: int = 6, with_encoder: bool = True) -> dict:
    """bsz live slots plus extra_rows junk rows, as after draft_model_postprocess: decode slots hold a
    complete chain of num_model_steps MTP drafts (or, for some, a chain cut short); stopped and paused ones
    L = 0; prefill ones L = a chunk length (sometimes 1 + s, so only E tells them apart). kind shapes the
    histories as in tests/ngram_cases.py; chains_cut_short makes many decode chains short."""
    s, D = num_model_steps, num_draft + 1
    ngram_kind = "mixed" if kind == "chains_cut_short" else kind
    state = nc.make_ngram_state(rng, bsz, ngram_kind, num_draft=num_draft, prompt_width=prompt_width,
                                history_width=history_width, extra_rows=extra_rows, vocab=vocab)
    paused = state.pop("is_block_step")
    lens = state["seq_lens_this_time"]
    for b in range(bsz):
        if state["seq_lens_encoder"][b] > 0:
            lens[b] = 1 + s if rng.random() < 0.5 else rng.integers(1, 40)
        elif state["seq_lens_decoder"][b] == 0:
            lens[b] = 1 + s if rng.random() < 0.2 else 0
        elif paused[b]:
            lens[b] = 0
        else:
            short = rng.random() < (0.6 if kind == "chains_cut_short" else 0.1)
            drafted = int(rng.integers(0, s)) if short and s > 0 else s
            state["draft_tokens"][b, 1:1 + drafted] = _mtp_drafts(rng, state, b, drafted, kind, vocab)
            lens[b] = 1 + drafted
    if not with_encoder:
        del state["seq_lens_encoder"]
    return state


def _mtp_drafts(rng, state, b, count, kind, vocab):
    """Draft tokens as MTP might write them: mostly the history's own pattern continued (repetitive),
    tokens never seen in the history (no_match), else random ids from the history's vocabulary."""
    p, g = int(state["input_ids_len"][b]), int(state["step_idx"][b])
    history = np.concatenate([state["input_ids"][b, :p], state["pre_ids"][b, 1:g + 1]])
    if kind == "no_match":  # distinct from each other and from the history
        return rng.permutation(np.setdiff1d(np.arange(nc.JUNK), history))[:count].astype(I64)
    if kind == "repetitive" and len(history) and rng.random() < 0.8:
        period = int(rng.integers(1, 5))
        return np.resize(history[-period:], count).astype(I64) if count else history[:0]
    return rng.integers(0, vocab, size=count).astype(I64)


def all_cases():
    """(bsz, kind, (max_ngram_size, min_ngram_size), seed) for every batch size x kind x sizes (ngram_match's
    grid and seeds over this op's kinds)."""
    return nc.all_cases(KINDS)


to_column = nc.to_column  # FastDeploy's [N, 1] layout for every per-slot input (the states hold no is_block_step)
