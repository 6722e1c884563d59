"""ngram_match inputs shared by tests/ops, tests/gpu and the benchmark: hand-worked three-slot cases
and random batch states. Plain numpy (the GPU machine has no Paddle).

A state is a dict keyed by the op's argument names (reference/ngram_match.py STATE_KEYS).
Buffers hold junk wherever the op must not read (prompt past input_ids_len, pre_ids column 0 and
past step_idx, rows past bsz) and draft_tokens / seq_lens_this_time start as junk, so a wrong
read or a missed write shows.
"""

from __future__ import annotations

import numpy as np

I32, I64 = np.int32, np.int64
BATCH_SIZES = (1, 3, 17, 256)
KINDS = ("mixed", "all_decode", "no_match", "repetitive", "short_history", "near_max_dec_len", "stopped_paused")
NGRAM_SIZES = ((3, 1), (1, 1), (5, 2), (64, 1))  # (max_ngram_size, min_ngram_size)
JUNK = 7000  # junk token ids are >= JUNK; real ones are below
DRAFT_JUNK = 9000


def literal_state(prompts, generated, *, width=4, enc=None, dec=None, max_dec_len=None, budget=None,
                  paused=None, prompt_width=8, history_width=8):
    """A state of len(prompts) slots from per-slot token lists (generated[b] are pre_ids[b, 1:]); slots
    are decode (Dec 10, E 0) unless enc / dec say otherwise."""
    n = len(prompts)
    input_ids = np.full((n, prompt_width), JUNK, I64)
    pre_ids = np.full((n, history_width), JUNK + 1, I64)
    for b, (p, g) in enumerate(zip(prompts, generated)):
        input_ids[b, :len(p)] = p
        pre_ids[b, 1:1 + len(g)] = g
    state = {
        "input_ids": input_ids,
        "input_ids_len": np.array([len(p) for p in prompts], I64),
        "pre_ids": pre_ids,
        "step_idx": np.array([len(g) for g in generated], I64),
        "draft_token_num": np.array(budget if budget is not None else [width - 1] * n, I32),
        "draft_tokens": np.full((n, width), DRAFT_JUNK, I64),
        "seq_lens_this_time": np.full(n, 99, I32),
        "seq_lens_encoder": np.array(enc if enc is not None else [0] * n, I32),
        "seq_lens_decoder": np.array(dec if dec is not None else [10] * n, I32),
        "max_dec_len": np.array(max_dec_len if max_dec_len is not None else [100] * n, I64),
    }
    if paused is not None:
        state["is_block_step"] = np.array(paused, bool)
    for b in range(n):  # column 0: the last accepted token (never written by the op)
        state["draft_tokens"][b, 0] = 500 + b
    return state


J = DRAFT_JUNK
# (name, state, attrs, expected): expected lists draft_tokens and seq_lens_this_time, worked by hand
# from docs/spec.md; everything else must come back unchanged.
NGRAM_CASES = [
    # slot 0: h = [5 6 7 8 5 6 | 7]: n = 3 suffix [5 6 7] at i = 0 -> [8 5 6]; slot 1 stopped (Dec 0):
    # L = 0, row untouched; slot 2 prefill (E 5): untouched.
    ("mixed_decode_stopped_prefill",
     literal_state([[5, 6, 7, 8, 5, 6], [1, 1, 1], [2, 3]], [[7], [1], []], enc=[0, 0, 5], dec=[7, 0, 0]),
     dict(max_ngram_size=3, max_draft_tokens=3),
     {"draft_tokens": [[500, 8, 5, 6], [501, J, J, J], [502, J, J, J]], "seq_lens_this_time": [4, 0, 99]}),
    # slot 0: h = [1 2 3 | 9]: no earlier 9 -> no drafts, tail -1; slot 1: h = [] (P 0, G 0): nothing;
    # slot 2: h = [4 4 | 4]: n = 3 needs 4 tokens, n = 2 suffix [4 4] at i = 0 -> room for 1 token.
    ("no_match_empty_and_overlap",
     literal_state([[1, 2, 3], [], [4, 4]], [[9], [], [4]]),
     dict(max_ngram_size=3, max_draft_tokens=3),
     {"draft_tokens": [[500, -1, -1, -1], [501, -1, -1, -1], [502, 4, -1, -1]], "seq_lens_this_time": [1, 1, 2]}),
    # slot 0: h = [9 7 1 9 7 2 3 | 9 7]: n = 3 [3 9 7] never earlier; n = 2 [9 7] at i = 0 and 3: the most
    # recent (3) wins -> [2 3 9] (FastDeploy's first prompt match would give [1 9 7]).
    # slot 1: h = [1 2 1 2 1 | 2]: n = 3 [2 1 2] at i = 1 (i = 2 is [1 2 1]) -> only 2 tokens follow.
    # slot 2: suffix spans prompt and generated: h = [3 4 5 6 3 | 4], n = 2 [3 4] at 0 -> [5 6 3].
    ("most_recent_wins_room_and_boundary",
     literal_state([[9, 7, 1, 9, 7, 2, 3], [1, 2, 1, 2, 1], [3, 4, 5, 6, 3]], [[9, 7], [2], [4]]),
     dict(max_ngram_size=3, max_draft_tokens=3),
     {"draft_tokens": [[500, 2, 3, 9], [501, 1, 2, -1], [502, 5, 6, 3]], "seq_lens_this_time": [4, 3, 4]}),
    # h = [1 2 3 1 2 | 3] everywhere (n = 3 at i = 0 -> 1 2 3 follow); budgets: slot 0 room
    # max_dec_len - G - 1 = 3 - 1 - 1 = 1; slot 1 draft_token_num 2; slot 2 room 0 -> no drafts.
    ("budget_room_and_draft_token_num",
     literal_state([[1, 2, 3, 1, 2]] * 3, [[3]] * 3, max_dec_len=[3, 100, 2], budget=[3, 2, 3]),
     dict(max_ngram_size=3, max_draft_tokens=3),
     {"draft_tokens": [[500, 1, -1, -1], [501, 1, 2, -1], [502, -1, -1, -1]], "seq_lens_this_time": [2, 3, 1]}),
    # max_draft_tokens = 1 caps every slot (slot 1's draft_token_num is 7, slot 2's 0).
    ("max_draft_tokens_caps",
     literal_state([[1, 2, 3, 1, 2]] * 3, [[3]] * 3, budget=[3, 7, 0]),
     dict(max_ngram_size=3, max_draft_tokens=1),
     {"draft_tokens": [[500, 1, -1, -1], [501, 1, -1, -1], [502, -1, -1, -1]], "seq_lens_this_time": [2, 2, 1]}),
    # h = [1 2 3 1 2 3 4 | 1 2]: n = 3 [4 1 2] never earlier, n = 2 [1 2] at 0 and 3 -> after 3: [3 4 1 2];
    # draft_token_num 7 > D - 1 is capped at D - 1 = 3 (max_draft_tokens 5 is above it too).
    ("draft_token_num_above_width",
     literal_state([[1, 2, 3, 1, 2, 3, 4]] * 3, [[1, 2]] * 3, budget=[3, 7, 0]),
     dict(max_ngram_size=3, max_draft_tokens=5),
     {"draft_tokens": [[500, 3, 4, 1], [501, 3, 4, 1], [502, -1, -1, -1]], "seq_lens_this_time": [4, 4, 1]}),
    # min_ngram_size 2: slot 0 h = [8 1 | 8] has only a 1-gram match -> none; slot 1 h = [8 1 8 | 1]:
    # [8 1] at 0 -> [8 1]; slot 2 paused -> L = 0, row untouched.
    ("min_ngram_size_and_paused",
     literal_state([[8, 1], [8, 1, 8], [8, 1, 8]], [[8], [1], [1]], paused=[False, False, True]),
     dict(max_ngram_size=4, max_draft_tokens=3, min_ngram_size=2),
     {"draft_tokens": [[500, -1, -1, -1], [501, 8, 1, -1], [502, J, J, J]], "seq_lens_this_time": [1, 3, 0]}),
]


# ---- random states ------------------------------------------------------------------------------


def make_ngram_state(rng: np.random.Generator, bsz: int, kind: str = "mixed", *, num_draft: int = 3,
                     prompt_width: int = 24, history_width: int = 24, extra_rows: int = 0, vocab: int = 6,
                     with_paused: bool = True) -> dict:
    """bsz live slots plus extra_rows junk rows. Decode histories draw from `vocab` ids (small: matches
    are frequent); kind shapes them (see KINDS)."""
    D, N = num_draft + 1, bsz + extra_rows
    state = {
        "input_ids": rng.integers(JUNK, JUNK + 100, size=(N, prompt_width)).astype(I64),
        "input_ids_len": rng.integers(0, prompt_width + 1, size=N).astype(I64),
        "pre_ids": rng.integers(JUNK + 100, JUNK + 200, size=(N, history_width)).astype(I64),
        "step_idx": rng.integers(0, history_width, size=N).astype(I64),
        "draft_token_num": rng.integers(0, D + 2, size=N).astype(I32),
        "draft_tokens": rng.integers(DRAFT_JUNK, DRAFT_JUNK + 100, size=(N, D)).astype(I64),
        "seq_lens_this_time": rng.integers(50, 60, size=bsz).astype(I32),
        "seq_lens_encoder": np.zeros(N, I32),
        "seq_lens_decoder": rng.integers(1, 100, size=N).astype(I32),
        "max_dec_len": np.zeros(N, I64),
    }
    if with_paused:
        state["is_block_step"] = np.zeros(N, bool)
    for b in range(N):
        _fill_slot(rng, state, b, _category(rng, kind, with_paused), kind, D, vocab)
    return state


def _category(rng, kind, with_paused):
    if kind in ("all_decode", "no_match", "repetitive", "short_history", "near_max_dec_len"):
        return "decode" if rng.random() < 0.9 else "prefill"
    cats, p = ("decode", "prefill", "stopped", "paused"), (0.55, 0.15, 0.15, 0.15)
    if kind == "stopped_paused":
        p = (0.3, 0.1, 0.3, 0.3)
    c = cats[rng.choice(4, p=p)]
    return "stopped" if c == "paused" and not with_paused else c


def _fill_slot(rng, s, b, cat, kind, D, vocab):
    S_in, S = s["input_ids"].shape[1], s["pre_ids"].shape[1]
    if cat == "prefill":
        s["seq_lens_encoder"][b] = rng.integers(1, 40)
        return
    if cat == "stopped":
        s["seq_lens_decoder"][b] = 0
        return
    if cat == "paused":
        s["is_block_step"][b] = True
        s["seq_lens_decoder"][b] = rng.integers(0, 5)
        return
    p = int(rng.integers(0, S_in + 1))
    g = int(rng.integers(0, S))
    if kind == "short_history":  # fewer tokens than max_ngram_size + 1
        p, g = int(rng.integers(0, 3)), int(rng.integers(0, 3))
    history = _history(rng, kind, p + g, vocab)
    s["input_ids"][b, :p] = history[:p]
    s["pre_ids"][b, 1:g + 1] = history[p:]
    s["input_ids_len"][b], s["step_idx"][b] = p, g
    room = int(rng.integers(-1, 2)) if kind == "near_max_dec_len" else int(rng.integers(-1, D + 3))
    s["max_dec_len"][b] = g + 1 + room  # room = max_dec_len - G - 1


def _history(rng, kind, length, vocab):
    if kind == "no_match":  # all distinct: no suffix occurs earlier
        return rng.permutation(JUNK)[:length].astype(I64)
    if kind == "repetitive":  # a short period with rare noise: matches end right before the suffix
        period = rng.integers(0, vocab, size=int(rng.integers(1, 5)))
        h = np.resize(period, length).astype(I64)
        noise = rng.random(length) < 0.05
        h[noise] = rng.integers(0, vocab, size=int(noise.sum()))
        return h
    return rng.integers(0, vocab, size=length).astype(I64)


def all_cases(kinds=KINDS):
    """(bsz, kind, (max_ngram_size, min_ngram_size), seed) for every batch size x kind x sizes."""
    return [(bsz, kind, sizes, 1000 * i + 100 * j + 10 * k)
            for i, bsz in enumerate(BATCH_SIZES) for j, kind in enumerate(kinds)
            for k, sizes in enumerate(NGRAM_SIZES)]


def to_column(state: dict) -> dict:
    """FastDeploy's [N, 1] layout for every per-slot input."""
    out = dict(state)
    for k in ("input_ids_len", "step_idx", "draft_token_num", "seq_lens_this_time", "seq_lens_encoder",
              "seq_lens_decoder", "max_dec_len", "is_block_step"):
        if out.get(k) is not None:
            out[k] = out[k].reshape(-1, 1)
    return out


def shared_input_faults(bad, attrs: dict, width: int) -> list:
    """(id, state, attrs, match) for faults in the inputs and attributes ngram_match and hybrid_mtp_ngram
    share, which one C++ check rejects for both (cpu_ops/ngram_checks.h). bad(**changes) is a three-slot
    state of input_ids width 8 with the changes applied; attrs the op's valid attributes; width its D."""
    return [
        ("input_ids_int32", bad(input_ids=np.zeros((3, 8), np.int32)), attrs,
         r"input_ids has dtype int32, expected int64"),
        ("input_ids_1d", bad(input_ids=np.zeros(3, np.int64)), attrs,
         r"input_ids has shape \[3\], expected a 2-D tensor"),
        ("input_ids_len_int32", bad(input_ids_len=np.zeros(3, np.int32)), attrs,
         r"input_ids_len has dtype int32, expected int64"),
        ("pre_ids_too_few_rows", bad(pre_ids=np.zeros((2, 8), np.int64)), attrs,
         r"pre_ids has shape \[2, 8\], expected at least bsz = 3 rows"),
        ("step_idx_int32", bad(step_idx=np.zeros(3, np.int32)), attrs, r"step_idx has dtype int32, expected int64"),
        ("draft_token_num_int64", bad(draft_token_num=np.zeros(3, np.int64)), attrs,
         r"draft_token_num has dtype int64, expected int32"),
        ("draft_tokens_int32", bad(draft_tokens=np.zeros((3, width), np.int32)), attrs,
         r"draft_tokens has dtype int32, expected int64"),
        ("lens_2d", bad(seq_lens_this_time=np.zeros((1, 3), np.int32)), attrs,
         r"seq_lens_this_time has shape \[1, 3\], expected a per-slot tensor"),
        ("max_dec_len_int32", bad(max_dec_len=np.zeros(3, np.int32)), attrs,
         r"max_dec_len has dtype int32, expected int64"),
        ("min_ngram_zero", bad(), dict(attrs, min_ngram_size=0),
         r"min_ngram_size = 0, max_ngram_size = 3, expected 1 <="),
        ("min_above_max", bad(), dict(attrs, min_ngram_size=4), r"min_ngram_size = 4, max_ngram_size = 3"),
        ("max_ngram_above_64", bad(), dict(attrs, max_ngram_size=65), r"max_ngram_size <= 64"),
        ("negative_max_draft_tokens", bad(), dict(attrs, max_draft_tokens=-1), r"max_draft_tokens = -1, expected >= 0"),
    ]
