"""Cases for draft_model_update / draft_model_postprocess shared by the CPU op tests (tests/ops),
the CUDA tests (tests/gpu) and benchmarks/gpu_draft_model_update.py: random but valid draft states per
substep, and literal cases whose expected values were worked out by hand. Plain numpy (the GPU machine
has no Paddle).

An update case is (state, args): state holds the op's in-place buffers under its argument names
(reference/draft_model_update.STATE_KEYS); args are the read-only inputs.
"""

from __future__ import annotations

import numpy as np

from reference.cases.step_batch import pack_output_index
from reference.speculate_get_seq_lens_output import ref_speculate_get_seq_lens_output

UPDATE_KINDS = ("mixed", "all_prefill", "all_decode", "stopped", "all_stopped", "near_max_dec_len",
                "history_end", "eos_drafts")
POSTPROCESS_KINDS = ("mixed", "all_decode", "all_prefill", "stopped", "all_stopped", "no_drafts", "full_drafts",
                     "paused")
END_IDS = np.array([1, 2], dtype=np.int64)
PAD = 7777  # rows past bsz of the [N, *] buffers (FastDeploy passes whole max_num_seqs buffers)


def update_args(state, tokens, max_dec_len, substep, capacity=None):
    """Read-only inputs of one update call: the draft's output index is built from its own L/E as
    the proposer's pre_process does (O_b rule, docs/spec.md §4.2) and packed by pack_output_index."""
    lens, enc = state["seq_lens_this_time"], state["seq_lens_encoder"]
    rows_per_slot = ref_speculate_get_seq_lens_output(lens, enc, state["seq_lens_decoder"])
    _, cu = pack_output_index(rows_per_slot)
    total = int(cu[-1])
    capacity = total if capacity is None else capacity
    tokens = np.asarray(tokens, dtype=np.int64)
    assert tokens.shape[0] >= total, "a token per output row"
    next_tokens = np.full(capacity, -1, dtype=np.int64)
    next_tokens[:total] = tokens[:total]
    return dict(inter_next_tokens=next_tokens, cu_seqlens_q_output=cu,
                max_dec_len=np.asarray(max_dec_len, dtype=np.int64), end_ids=END_IDS, substep=substep)


def next_substep_args(rng: np.random.Generator, state, max_dec_len, substep, capacity=None, V: int = 111):
    """Inputs of the next substep of a round: a random token per output row of the current state."""
    rows = ref_speculate_get_seq_lens_output(state["seq_lens_this_time"], state["seq_lens_encoder"],
                                             state["seq_lens_decoder"]).sum()
    return update_args(state, rng.integers(0, V, size=rows), max_dec_len, substep, capacity)


def update_state(draft_tokens, pre_ids, lens, enc, dec, step_idx, stop, base, not_need_stop=False):
    return dict(
        draft_tokens=np.asarray(draft_tokens, dtype=np.int64),
        pre_ids=np.asarray(pre_ids, dtype=np.int64),
        seq_lens_this_time=np.asarray(lens, dtype=np.int32),
        seq_lens_encoder=np.asarray(enc, dtype=np.int32),
        seq_lens_decoder=np.asarray(dec, dtype=np.int32),
        step_idx=np.asarray(step_idx, dtype=np.int64),
        stop_flags=np.asarray(stop, dtype=bool),
        not_need_stop=np.asarray([not_need_stop], dtype=bool),
        base_model_draft_tokens=np.asarray(base, dtype=np.int64),
    )


def make_update_case(rng: np.random.Generator, bsz: int, kind: str = "mixed", substep: int = 0, k: int = 3,
                     S: int = 48, V: int = 111, extra_rows: int = 0):
    """A random draft state before update at `substep` (all slots of a real round: after substep 0
    every running slot is decode with L = 1), plus its read-only inputs."""
    D = k + 1
    N = bsz + extra_rows
    if kind == "all_prefill":
        cat = np.full(bsz, "prefill")
    elif kind == "all_decode":
        cat = np.full(bsz, "decode")
    elif kind == "all_stopped":
        cat = np.full(bsz, "stopped")
    else:
        cat = np.where(rng.random(bsz) < 0.4, "prefill", "decode")
        if kind == "stopped":
            cat[rng.random(bsz) < 0.35] = "stopped"
        elif kind == "mixed":
            cat[rng.random(bsz) < 0.15] = "stopped"
    if substep > 0:
        cat[cat == "prefill"] = "decode"
    lens = np.zeros(bsz, np.int32)
    enc = np.zeros(bsz, np.int32)
    dec = np.zeros(bsz, np.int32)
    step = np.zeros(bsz, np.int64)
    stop = cat == "stopped"
    advance = np.zeros(bsz, np.int64)  # how far the update moves step_idx
    for b in range(bsz):
        if cat[b] == "decode":
            lens[b] = rng.integers(1, D + 1) if substep == 0 else 1
            dec[b] = rng.integers(1, 4 * S)
            step[b] = rng.integers(0, S)
            advance[b] = lens[b]
        elif cat[b] == "prefill":
            lens[b] = enc[b] = rng.integers(1, S + 1)
            dec[b] = 0 if rng.random() < 0.6 else rng.integers(0, S)
            step[b] = 0 if rng.random() < 0.7 else rng.integers(0, S)
            advance[b] = 1
        else:  # stopped; some keep stale lengths, as a paused slot does
            if rng.random() < 0.3:
                lens[b] = rng.integers(1, D + 1)
                enc[b] = lens[b] if rng.random() < 0.5 else 0
            dec[b] = rng.integers(0, 4 * S)
            step[b] = rng.integers(0, S)
        if kind == "history_end":  # the new step_idx lands around S
            step[b] = max(0, S - advance[b] + rng.integers(-2, 3))
    step_new = step + advance
    if kind == "near_max_dec_len":  # step_new - 1, step_new: nothing to propose; + 1: the last one
        max_dec_len = step_new + rng.integers(-1, 2, size=bsz)
    else:
        max_dec_len = step_new + rng.integers(1, 40, size=bsz)

    draft_tokens = rng.integers(0, V, size=(N, D))
    pre_ids = rng.integers(0, V, size=(N, S))
    base = np.full((N, D), -1, np.int64)
    base[:, 0] = rng.integers(0, V, size=N)
    base[:, substep + 1] = rng.integers(0, V, size=N)  # stale, so every slot's write shows
    for b in range(bsz):
        draft_tokens[b, max(lens[b], 1):] = -1
        pre_ids[b, step[b] + 1:] = -1
        if not stop[b]:
            base[b, 1:substep + 1] = rng.integers(0, V, size=substep)
    for a in (draft_tokens, pre_ids, base):
        a[bsz:] = PAD
    state = update_state(draft_tokens, pre_ids, lens, enc, dec, step, stop, base, rng.random() < 0.5)
    rows = ref_speculate_get_seq_lens_output(lens, enc, dec).sum()
    if kind == "eos_drafts":
        tokens = rng.choice(np.concatenate([END_IDS, [3, 4]]), size=rows)
    else:
        tokens = rng.integers(0, V, size=rows)
    return state, update_args(state, tokens, max_dec_len, substep, capacity=N * D)


def update_grid(batch_sizes=(1, 3, 17, 256)):
    """(bsz, kind, substep, seed) over every batch size x kind x substep 0..2."""
    return [(bsz, kind, s, 10000 * i + 100 * j + s) for i, bsz in enumerate(batch_sizes)
            for j, kind in enumerate(UPDATE_KINDS) for s in range(3)]


def make_postprocess_case(rng: np.random.Generator, bsz: int, kind: str = "mixed", k: int = 3, V: int = 111,
                          extra_rows: int = 0) -> dict:
    """A random target state after the proposer: contiguous drafts in columns 1 .. of decode slots.
    Kind "paused" passes base_model_is_block_step (others leave it None, FastDeploy's form):
    paused slots, some also stopped, hold rows the op must not check (a gap, or -1 in column 0)."""
    D, N = k + 1, bsz + extra_rows
    stop = rng.random(bsz) < (1.0 if kind == "all_stopped" else 0.3 if kind in ("stopped", "paused") else 0.0)
    paused = (rng.random(bsz) < 0.4) if kind == "paused" else None
    prefill = rng.random(bsz) < (1.0 if kind == "all_prefill" else 0.0 if kind == "all_decode" else 0.3)
    enc = np.where(prefill, rng.integers(1, 64, size=bsz), 0).astype(np.int32)
    lens = rng.integers(0, 64, size=bsz).astype(np.int32)  # stale: every counted slot is rewritten
    drafts = np.full((N, D), -1, np.int64)
    drafts[:, 0] = rng.integers(0, V, size=N)
    for b in range(bsz):
        n = {"no_drafts": 0, "full_drafts": k}.get(kind, int(rng.integers(0, k + 1)))
        drafts[b, 1:1 + n] = rng.integers(0, V, size=n)
        if paused is not None and paused[b] and rng.random() < 0.5:
            drafts[b, rng.integers(0, D)] = -1  # a paused slot's row is not read
    drafts[bsz:] = PAD
    return dict(base_model_draft_tokens=drafts, base_model_seq_lens_this_time=lens,
                base_model_seq_lens_encoder=enc, base_model_stop_flags=stop, base_model_is_block_step=paused)


def postprocess_grid(batch_sizes=(1, 3, 17, 256)):
    return [(bsz, kind, 1000 * i + j) for i, bsz in enumerate(batch_sizes) for j, kind in enumerate(POSTPROCESS_KINDS)]


# ----------------------------------------------------------------------------------------------
# Literal update cases: (state, args, expected state), every expected value written by hand.
# S = 10 history columns, D = 3 draft columns, D_target = 4.

_PRE = [[-1] * 10 for _ in range(3)]
_BASE = [[5, -1, -1, -1], [6, -1, -1, -1], [7, -1, -1, -1]]


def _literal(name):
    """Returns (state, args, expected) for the named literal case."""
    if name == "mixed_three_slots":
        # slot 0 decode (L 2: rows 0, 1 -> token 71), slot 1 stopped, slot 2 prefill (E 4: row 2).
        # The stopped slot's stale column-1 value 55 shows its -1 write.
        state = update_state([[30, 31, -1], [-1, -1, -1], [-1, -1, -1]], _PRE, [2, 0, 4], [0, 0, 4], [10, 3, 0],
                             [5, 9, 0], [False, True, False], [[5, -1, -1, -1], [6, 55, -1, -1], [7, -1, -1, -1]])
        args = update_args(state, [70, 71, 90], [100, 100, 100], substep=0, capacity=9)
        assert list(args["cu_seqlens_q_output"]) == [0, 2, 2, 3]
        pre = [row[:] for row in _PRE]
        pre[0][7], pre[2][1] = 71, 90
        expected = update_state([[71, 31, -1], [-1, -1, -1], [90, -1, -1]], pre, [1, 0, 1], [0, 0, 0], [12, 3, 4],
                                [7, 9, 1], [False, True, False],
                                [[5, 71, -1, -1], [6, -1, -1, -1], [7, 90, -1, -1]], True)
    elif name == "near_max_dec_len":
        # slot 0 decode: new step 7 < max 8 -> proposed; slot 1 decode: new step 8 = max -> -1, stops;
        # slot 2 prefill with max_dec_len 1: new step 1 -> -1, stops. pre_ids still records the tokens.
        state = update_state([[40, -1, -1], [41, -1, -1], [-1, -1, -1]], _PRE, [1, 1, 3], [0, 0, 3], [20, 30, 0],
                             [6, 7, 0], [False, False, False], _BASE)
        args = update_args(state, [50, 51, 52], [8, 8, 1], substep=0)
        pre = [row[:] for row in _PRE]
        pre[0][7], pre[1][8], pre[2][1] = 50, 51, 52
        expected = update_state([[50, -1, -1], [-1, -1, -1], [-1, -1, -1]], pre, [1, 0, 0], [0, 0, 0], [21, 31, 3],
                                [7, 8, 1], [False, True, True],
                                [[5, 50, -1, -1], [6, -1, -1, -1], [7, -1, -1, -1]], True)
    elif name == "all_stopped_and_paused":
        # slot 0 stopped; slot 1 paused decode (L 3, its 3 rows are ignored); slot 2 paused prefill
        # (E 5 -> 0). Nothing proposed, Dec / step_idx / pre_ids kept, not_need_stop True -> False.
        # Column 2 holds stale values so the -1 writes show.
        base = [[5, 17, 44, -1], [6, 18, 45, -1], [7, 19, 46, -1]]
        state = update_state([[1, 2, 3], [4, 5, 6], [7, 8, 9]], _PRE, [0, 3, 5], [0, 0, 5], [8, 50, 0],
                             [4, 20, 0], [True, True, True], base, True)
        args = update_args(state, [60, 61, 62, 63], [100, 100, 100], substep=1)
        assert list(args["cu_seqlens_q_output"]) == [0, 0, 3, 4]
        expected = update_state([[-1, 2, 3], [-1, 5, 6], [-1, 8, 9]], _PRE, [0, 0, 0], [0, 0, 0], [8, 50, 0],
                                [4, 20, 0], [True, True, True],
                                [[5, 17, -1, -1], [6, 18, -1, -1], [7, 19, -1, -1]], False)
    elif name == "eos_and_history_end":
        # substep 2, decode slots with L 1. Slots 0 and 2 draft an end id (1, 2): still proposed and
        # still running. Slot 1's new step 10 = S: the pre_ids write is skipped, the token proposed.
        base = [[5, 11, 12, -1], [6, 13, 14, -1], [7, 15, 16, -1]]
        state = update_state([[12, -1, -1], [14, -1, -1], [16, -1, -1]], _PRE, [1, 1, 1], [0, 0, 0], [9, 60, 33],
                             [4, 9, 3], [False, False, False], base)
        args = update_args(state, [2, 80, 1], [100, 100, 100], substep=2)
        pre = [row[:] for row in _PRE]
        pre[0][5], pre[2][4] = 2, 1
        expected = update_state([[2, -1, -1], [80, -1, -1], [1, -1, -1]], pre, [1, 1, 1], [0, 0, 0], [10, 61, 34],
                                [5, 10, 4], [False, False, False],
                                [[5, 11, 12, 2], [6, 13, 14, 80], [7, 15, 16, 1]], True)
    elif name == "just_finished_prefill":
        # substep 1. Slot 0 finished its draft prefill at substep 0 (E 0, Dec 5, step 1, L 1) and is
        # now a decode slot; slot 1 decode; slot 2 stopped at substep 0 (length) -> -1 again.
        state = update_state([[21, -1, -1], [22, -1, -1], [-1, -1, -1]], _PRE, [1, 1, 0], [0, 0, 0], [5, 30, 41],
                             [1, 7, 13], [False, False, True], [[5, 21, -1, -1], [6, 22, -1, -1], [7, 23, 47, -1]])
        args = update_args(state, [61, 62], [100, 100, 13], substep=1)
        assert list(args["cu_seqlens_q_output"]) == [0, 1, 2, 2]
        pre = [row[:] for row in _PRE]
        pre[0][2], pre[1][8] = 61, 62
        expected = update_state([[61, -1, -1], [62, -1, -1], [-1, -1, -1]], pre, [1, 1, 0], [0, 0, 0], [6, 31, 41],
                                [2, 8, 13], [False, False, True],
                                [[5, 21, 61, -1], [6, 22, 62, -1], [7, 23, -1, -1]], True)
    elif name == "bsz_one_decode":
        state = update_state([[20, 21, 22]], [[-1] * 10], [3], [0], [100], [2], [False], [[9, -1, -1, -1]])
        args = update_args(state, [30, 31, 32], [100], substep=0, capacity=3)
        pre = [[-1] * 10]
        pre[0][5] = 32
        expected = update_state([[32, 21, 22]], pre, [1], [0], [103], [5], [False], [[9, 32, -1, -1]], True)
    else:
        raise KeyError(name)
    return state, args, expected


LITERAL_UPDATE_CASES = ("mixed_three_slots", "near_max_dec_len", "all_stopped_and_paused", "eos_and_history_end",
                        "just_finished_prefill", "bsz_one_decode")


def pattern_case(bsz=256, S=300):
    """bsz decode slots with L 1 at substep 0; slot b has step_idx b, Dec 10 + b, token 1000 + b and
    max_dec_len 200. Closed form: slots b < 199 propose 1000 + b (new step b + 1 < 200), the rest
    stop with -1; Dec 11 + b; pre_ids[b, b + 1] = 1000 + b."""
    b = np.arange(bsz)
    state = update_state(np.full((bsz, 2), -1), np.full((bsz, S), -1), np.ones(bsz), np.zeros(bsz), 10 + b, b,
                         np.zeros(bsz, bool), np.full((bsz, 4), 5))
    args = update_args(state, 1000 + b, np.full(bsz, 200), substep=0)
    runs = b < 199
    proposal = np.where(runs, 1000 + b, -1)
    base = np.full((bsz, 4), 5)
    base[:, 1] = proposal
    draft = np.full((bsz, 2), -1)
    draft[:, 0] = proposal
    pre = np.full((bsz, S), -1)
    pre[b, b + 1] = 1000 + b
    expected = update_state(draft, pre, runs.astype(int), np.zeros(bsz), 11 + b, b + 1, ~runs, base, True)
    return state, args, expected


def literal_update_case(name):
    return _literal(name)


# Multi-substep literal round (k = 3 substeps, D_target = 4, S = 16), hand-computed:
#   slot 0 decode with 2 accepted tokens (L 2, Dec 18, step 8): drafts 101, 110, 120;
#   slot 1 draft prefill (E = L = 5): drafts 102, 111, 121;
#   slot 2 decode (L 1, step 11, max_dec_len 13): 103 at substep 0 (new step 12 < 13); at
#   substep 1 the new step 13 reaches max_dec_len -> -1 and the slot stops; substep 2 -> -1.
# Then draft_model_postprocess on the target (all decode, running): L = [4, 4, 2].
ROUND_TOKENS = ([100, 101, 102, 103], [110, 111, 112], [120, 121])
ROUND_MAX_DEC_LEN = [100, 100, 13]


def round_start_state():
    pre = [[-1] * 16 for _ in range(3)]
    return update_state([[90, 91, -1, -1], [-1, -1, -1, -1], [92, -1, -1, -1]], pre, [2, 5, 1], [0, 5, 0],
                        [18, 0, 40], [8, 0, 11], [False, False, False],
                        [[91, -1, -1, -1], [93, -1, -1, -1], [92, -1, -1, -1]])


ROUND_EXPECTED_BASE = [[91, 101, 110, 120], [93, 102, 111, 121], [92, 103, -1, -1]]
ROUND_EXPECTED_LENS = [1, 1, 0]
ROUND_EXPECTED_DEC = [22, 7, 42]
ROUND_EXPECTED_STEP = [12, 3, 13]
ROUND_EXPECTED_STOP = [False, False, True]
ROUND_EXPECTED_PRE = {(0, 10): 101, (0, 11): 110, (0, 12): 120, (1, 1): 102, (1, 2): 111, (1, 3): 121,
                      (2, 12): 103, (2, 13): 112}
ROUND_EXPECTED_TARGET_LENS = [4, 4, 2]
