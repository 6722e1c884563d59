"""speculate_verify fixtures shared by the CPU op tests and the CUDA kernel tests (plain numpy).

A case is a dict of the op's keyword arguments (numpy arrays, attributes, strategy and policy
names), so it feeds ops.speculate_verify (as Paddle tensors), the CUDA launcher (as CuPy arrays)
and ref_speculate_verify alike. Output rows are indexed by cu_seqlens_q_output built with
reference.cases.step_batch.pack_output_index from O_b (docs/spec.md §4.2).
"""

from __future__ import annotations

import numpy as np

from kernel_harness.speculate_verify import OUT_FIELDS, POLICIES, STRATEGIES, resolve_modes  # noqa: F401
from reference.cases.step_batch import make_step_batch, pack_output_index

STALE_TOKEN = 777  # accept_tokens fill before the call: a slot that is not verified keeps it
STALE_NUM = 3


def output_lens(seq_lens_this_time, seq_lens_encoder) -> np.ndarray:
    """O_b: 0 idle, 1 prefill or single token, else L_b (docs/spec.md §4.2)."""
    lens = np.asarray(seq_lens_this_time).reshape(-1)
    enc = np.asarray(seq_lens_encoder).reshape(-1)
    return np.where(lens <= 0, 0, np.where(enc > 0, 1, lens)).astype(np.int32)


def _softmax_rows(rng, shape, scale_lo=0.5, scale_hi=4.0) -> np.ndarray:
    logits = rng.normal(size=shape) * rng.uniform(scale_lo, scale_hi, size=shape[:-1] + (1,))
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def _sample_rows(rng, probs) -> np.ndarray:
    cum = np.cumsum(probs.astype(np.float64), axis=-1)
    u = rng.random(cum.shape[:-1] + (1,)) * cum[..., -1:]
    return np.minimum((cum < u).sum(axis=-1), probs.shape[-1] - 1).astype(np.int64)


def make_verify_case(seed: int, bsz: int, kind: str = "mixed", strategy: str = "greedy",
                     vocab: int = 111, num_draft: int = 3, num_candidates: int = 5,
                     with_draft_probs: bool = True, with_seed: bool = True,
                     one_hot: bool = False, accept_policy: str = "normal",
                     verify_window: int = 2, enable_topp: bool = True) -> dict:
    """A random but valid verify step: drafts agree with the strategy's target often enough
    that runs get accepted, some rows put their mass on an end token, max_dec_len sometimes
    falls inside the run, and some slots are prefill, stopped, block-step or reasoning status 1."""
    rng = np.random.default_rng(seed)
    batch = make_step_batch(rng, bsz, kind, max_model_len=16, num_draft=num_draft)
    N, D, V, C = bsz, num_draft + 1, vocab, num_candidates
    lens, enc = batch.seq_lens_this_time, batch.seq_lens_encoder
    _, cu = pack_output_index(output_lens(lens, enc))
    rows = N * D  # the engine's output capacity; rows past T_out are garbage
    end_tokens = np.array([V - 1, 3], dtype=np.int64)
    if one_hot:  # temperature 0: all mass on one id per row
        probs = np.zeros((rows, V), np.float32)
        probs[np.arange(rows), rng.integers(0, V, size=rows)] = 1.0
    else:
        probs = _softmax_rows(rng, (rows, V))
    eos_rows = rng.random(rows) < 0.06  # swap the row's peak onto an end token
    for r in np.flatnonzero(eos_rows):
        top, eos = int(np.argmax(probs[r])), int(end_tokens[rng.integers(0, 2)])
        probs[r, [top, eos]] = probs[r, [eos, top]]
    order = np.argsort(-probs, axis=1, kind="stable")  # descending, ties: smaller id first
    verify_tokens = np.ascontiguousarray(order[:, :C]).astype(np.int64)
    verify_scores = np.take_along_axis(probs, verify_tokens, axis=1).astype(np.float32)
    cand_len = np.ones(rows, np.int32) if one_hot else rng.integers(0, C + 3, size=rows).astype(np.int32)
    sampled = verify_tokens[:, 0].copy() if one_hot else _sample_rows(rng, probs)
    draft_probs = _softmax_rows(rng, (N, max(D - 1, 0), V))
    for b in range(N):  # a draft model that roughly agrees with the target: q = 0.6 p + 0.4 noise
        for i in range(min(lens[b], D) - 1 if enc[b] <= 0 else 0):
            mixed = 0.6 * probs[cu[b] + i] + 0.4 * draft_probs[b, i]
            draft_probs[b, i] = (mixed / mixed.sum()).astype(np.float32)

    draft_tokens = np.full((N, D), -1, np.int64)
    draft_tokens[:, 0] = rng.integers(0, V, size=N)
    for b in range(N):
        if enc[b] > 0:
            draft_tokens[b, 1:] = rng.integers(0, V, size=D - 1)
            continue
        for i in range(1, lens[b]):
            row, x = cu[b] + i - 1, rng.random()
            if strategy == "rejection":
                tok = _sample_rows(rng, draft_probs[b, i - 1]) if x < 0.85 else rng.integers(0, V)
            elif strategy == "target_match":
                tok = sampled[row] if x < 0.7 else rng.integers(0, V)
            elif strategy == "topp" and x < 0.3:
                # the second candidate, or any: verify_tokens lists all C (unlike top_p_candidates'
                # output), so rows whose length is shorter check that verify ignores the rest
                tok = verify_tokens[row, 1 if x < 0.15 else rng.integers(0, C)]
            else:
                tok = verify_tokens[row, 0] if x < 0.7 else rng.integers(0, V)
            draft_tokens[b, i] = tok

    step_idx = rng.integers(0, 40, size=N).astype(np.int64)
    max_dec_len = np.where(rng.random(N) < 0.3, step_idx + rng.integers(1, D + 2, size=N), 1000)
    case = dict(
        sampled_token_ids=sampled,
        accept_tokens=np.full((N, D), STALE_TOKEN, np.int64),
        accept_num=np.full(N, STALE_NUM, np.int32),
        step_idx=step_idx,
        stop_flags=batch.stop_flags.copy(),
        seq_lens_encoder=enc,
        seq_lens_decoder=batch.seq_lens_decoder,
        draft_tokens=draft_tokens,
        seq_lens_this_time=lens,
        verify_tokens=verify_tokens,
        verify_scores=verify_scores,
        max_dec_len=max_dec_len.astype(np.int64),
        end_tokens=end_tokens,
        is_block_step=rng.random(N) < 0.08,
        cu_seqlens_q_output=cu,
        actual_candidate_len=cand_len,
        actual_draft_token_nums=np.full(N, num_draft, np.int32),
        topp=rng.uniform(0.2, 1.0, size=N).astype(np.float32),
        max_seq_len=16,
        verify_window=verify_window,
        enable_topp=enable_topp,
        benchmark_mode=False,
        accept_all_drafts=False,
        target_probs=probs if strategy == "rejection" else None,
        draft_probs=draft_probs if strategy == "rejection" and with_draft_probs else None,
        infer_seed=rng.integers(-(2**62), 2**62, size=N).astype(np.int64) if with_seed else None,
        reasoning_status=rng.choice(np.array([0, 1, 2, 3], np.int32), size=N, p=[0.6, 0.2, 0.1, 0.1]),
        verify_strategy=strategy,
        accept_policy=accept_policy,
    )
    return case


# Literal three-slot cases. Each slot: L, encoder length, drafts (D = 4 entries: last token, then
# drafts), step, max_dec_len, flags; `top1` is each output row's target token. literal_case()
# encodes the rows for a strategy (greedy/topp: candidate 0 with score 1; target_match: sampled
# ids; rejection: one-hot target probabilities), so one hand-worked expectation holds for every
# strategy (temperature 0).

LITERAL_V = 16
LITERAL_D = 4
# strategy variants: (name, strategy, extra arguments)
LITERAL_VARIANTS = (
    ("greedy", "greedy", {}),
    ("target_match", "target_match", {}),
    ("topp", "topp", {"enable_topp": True}),
    ("topp_top1_bonus", "topp", {"enable_topp": False}),
    ("rejection_onehot_q", "rejection", {}),
    ("rejection_uniform_q", "rejection", {"uniform_q": True}),
)


def _slot(L, drafts=(9, -1, -1, -1), enc=0, step=0, max_dec=100, stop=False, block=False, reasoning=0):
    return dict(L=L, drafts=drafts, enc=enc, step=step, max_dec=max_dec, stop=stop, block=block,
                reasoning=reasoning)


# name -> (slots, top1 per slot's rows, end_tokens, attrs, expected tokens per slot (None: not
# verified), expected step_idx, expected stop_flags)
LITERAL_CASES = {
    "match_and_mismatch": (
        [_slot(4, (9, 5, 6, 7)), _slot(4, (9, 5, 9, 7)), _slot(4, (9, 1, 6, 7))],
        [[5, 6, 7, 8], [5, 6, 7, 8], [4, 6, 7, 8]], [2], {},
        [[5, 6, 7, 8], [5, 6], [4]], [4, 2, 1], [False, False, False],
    ),
    "mixed_draft_lengths": (
        [_slot(1, step=5), _slot(2, (9, 5, -1, -1), step=5), _slot(4, (9, 5, 6, 7), step=5)],
        [[3], [5, 6], [5, 6, 1, 8]], [2], {},
        [[3], [5, 6], [5, 6, 1]], [6, 7, 8], [False, False, False],
    ),
    "eos_inside_run": (
        [_slot(4, (9, 5, 2, 7)), _slot(4, (9, 2, 6, 7)), _slot(2, (9, 5, -1, -1))],
        [[5, 2, 7, 8], [2, 6, 7, 8], [5, 2]], [2], {},
        [[5, 2], [2], [5, 2]], [2, 1, 2], [True, True, True],
    ),
    "max_dec_len_mid_run": (
        [_slot(4, (9, 5, 6, 7), step=10, max_dec=12), _slot(4, (9, 5, 6, 7), step=10, max_dec=11),
         _slot(4, (9, 5, 3, 7), step=10, max_dec=12)],
        [[5, 6, 7, 8], [5, 6, 7, 8], [5, 3, 7, 8]], [2, 3], {},
        # length stop writes end_tokens[0] = 2, except on a token that is itself an end token (3)
        [[5, 2], [2], [5, 3]], [12, 11, 12], [True, True, True],
    ),
    "prefill_and_reasoning": (
        [_slot(6, (0, 0, 0, 0), enc=6), _slot(4, (9, 5, 6, 7), reasoning=1),
         _slot(4, (9, 5, 6, 7), reasoning=2)],
        [[4], [5, 6, 7, 8], [5, 6, 7, 8]], [2], {},
        [[4], [5], [5, 6, 7, 8]], [1, 1, 4], [False, False, False],
    ),
    "accept_all": (
        [_slot(4, (9, 1, 4, 6)), _slot(3, (0, 0, 0, 0), enc=3), _slot(2, (9, 1, -1, -1))],
        [[5, 6, 7, 8], [7], [5, 6]], [2], {"accept_policy": "accept_all"},
        [[1, 4, 6, 8], [7], [1, 6]], [4, 1, 2], [False, False, False],
    ),
    "accept_all_drafts_flag": (
        [_slot(4, (9, 1, 4, 6)), _slot(3, (0, 0, 0, 0), enc=3), _slot(2, (9, 1, -1, -1))],
        [[5, 6, 7, 8], [7], [5, 6]], [2], {"accept_all_drafts": True},
        [[1, 4, 6, 8], [7], [1, 6]], [4, 1, 2], [False, False, False],
    ),
    "reject_all": (
        [_slot(4, (9, 5, 6, 7)), _slot(1), _slot(2, (9, 5, -1, -1))],
        [[5, 6, 7, 8], [3], [5, 6]], [2], {"accept_policy": "reject_all"},
        [[5], [3], [5]], [1, 1, 1], [False, False, False],
    ),
    "benchmark_mode_beats_accept_all": (
        [_slot(4, (9, 5, 6, 7)), _slot(1), _slot(2, (9, 5, -1, -1))],
        [[5, 6, 7, 8], [3], [5, 6]], [2], {"benchmark_mode": True, "accept_all_drafts": True},
        [[5], [3], [5]], [1, 1, 1], [False, False, False],
    ),
    "stopped_and_block_step": (
        [_slot(0, step=10, stop=True), _slot(2, (9, 5, -1, -1), step=10, block=True),
         _slot(2, (9, 5, -1, -1), step=10)],
        [[], [5, 6], [5, 6]], [2], {},
        [None, None, [5, 6]], [10, 10, 12], [True, False, False],
    ),
}


def literal_case(name: str, variant: str) -> tuple[dict, dict]:
    """(case arguments, expected outputs) of LITERAL_CASES[name] encoded for a strategy variant."""
    slots, top1, end_tokens, attrs, tokens, steps, stops = LITERAL_CASES[name]
    _, strategy, extra = next(v for v in LITERAL_VARIANTS if v[0] == variant)
    N, D, V, C = len(slots), LITERAL_D, LITERAL_V, 2
    lens = np.array([s["L"] for s in slots], np.int32)
    enc = np.array([s["enc"] for s in slots], np.int32)
    _, cu = pack_output_index(output_lens(lens, enc))
    rows = N * D
    row_top1 = np.full(rows, 15, np.int64)  # rows past T_out: filler
    for b, ids in enumerate(top1):
        row_top1[cu[b]:cu[b] + len(ids)] = ids
    verify_tokens = np.stack([row_top1, np.full(rows, 14)], axis=1).astype(np.int64)
    sampled = np.full(rows, 12, np.int64)
    if strategy == "target_match":  # target_match must read sampled ids, not candidates
        sampled, verify_tokens = row_top1.copy(), np.full((rows, C), 13, np.int64)
    probs = np.zeros((rows, V), np.float32)
    probs[np.arange(rows), row_top1] = 1.0
    case = dict(
        sampled_token_ids=sampled,
        accept_tokens=np.full((N, D), STALE_TOKEN, np.int64),
        accept_num=np.full(N, STALE_NUM, np.int32),
        step_idx=np.array([s["step"] for s in slots], np.int64),
        stop_flags=np.array([s["stop"] for s in slots], bool),
        seq_lens_encoder=enc,
        seq_lens_decoder=np.where(enc > 0, 0, 20).astype(np.int32),
        draft_tokens=np.array([s["drafts"] for s in slots], np.int64),
        seq_lens_this_time=lens,
        verify_tokens=verify_tokens,
        verify_scores=np.tile(np.array([[1.0, 0.0]], np.float32), (rows, 1)),
        max_dec_len=np.array([s["max_dec"] for s in slots], np.int64),
        end_tokens=np.array(end_tokens, np.int64),
        is_block_step=np.array([s["block"] for s in slots], bool),
        cu_seqlens_q_output=cu,
        actual_candidate_len=np.ones(rows, np.int32),
        actual_draft_token_nums=np.full(N, D - 1, np.int32),
        topp=np.full(N, 0.9, np.float32),
        max_seq_len=64,
        verify_window=2,
        enable_topp=extra.get("enable_topp", True),
        benchmark_mode=False,
        accept_all_drafts=False,
        target_probs=probs if strategy == "rejection" else None,
        draft_probs=np.full((N, D - 1, V), 1.0 / V, np.float32) if extra.get("uniform_q") else None,
        infer_seed=np.array([11, 22, 33], np.int64),
        reasoning_status=np.array([s["reasoning"] for s in slots], np.int32),
        verify_strategy=strategy,
        accept_policy="normal",
    )
    case.update(attrs)
    expected = expected_outputs(case, tokens, steps, stops)
    return case, expected


def expected_outputs(case: dict, tokens, steps, stops) -> dict:
    """Hand-written per-slot tokens (None: slot not verified) -> the four output arrays."""
    acc = np.array(case["accept_tokens"], copy=True)
    num = np.zeros(len(tokens), np.int32)
    for b, toks in enumerate(tokens):
        if toks is not None:
            acc[b, :] = -1
            acc[b, :len(toks)] = toks
            num[b] = len(toks)
    return {"accept_tokens": acc, "accept_num": num, "step_idx": np.array(steps, np.int64),
            "stop_flags": np.array(stops, bool)}


def strategy_literal_cases() -> dict:
    """Literal cases where a strategy departs from greedy: name -> (case, expected)."""
    cases = {}
    # topp: candidate-set acceptance, no acceptance outside the set, clamped candidate lengths.
    base, _ = literal_case("match_and_mismatch", "topp_top1_bonus")
    topp = dict(base, verify_tokens=np.full((12, 3), 15, np.int64),
                verify_scores=np.tile(np.array([[0.6, 0.3, 0.1]], np.float32), (12, 1)),
                actual_candidate_len=np.ones(12, np.int32),
                draft_tokens=np.array([[9, 6, 7, 8], [9, 6, 7, 8], [9, 6, 7, 1]], np.int64))
    # slot 0 rows 0-3: row 0 lists 6 within its 2 candidates; slots 1 (rows 4-7) and 2 (rows
    # 8-11): the draft 6 is the second entry of a one-candidate row, outside the top-p set, so it
    # is rejected even though the next drafts equal their rows' top-1 (issue 16: FastDeploy's
    # verify-window fallback used to accept slot 1 as [6, 7, 8, 12]); correction = top-1 5.
    topp["verify_tokens"][:, :3] = [[5, 6, 11], [7, 1, 1], [8, 1, 1], [10, 1, 1],
                                    [5, 6, 11], [7, 1, 1], [8, 1, 1], [12, 1, 1],
                                    [5, 6, 11], [7, 1, 1], [8, 1, 1], [13, 1, 1]]
    topp["actual_candidate_len"][0] = 2
    cases["topp_candidate_set_only"] = (topp, expected_outputs(
        topp, [[6, 7, 8, 10], [5], [5]], [4, 1, 1], [False] * 3))

    topp2 = dict(topp, verify_tokens=topp["verify_tokens"].copy(), verify_scores=topp["verify_scores"].copy(),
                 actual_candidate_len=np.ones(12, np.int32),
                 seq_lens_this_time=np.array([4, 3, 2], np.int32),
                 draft_tokens=np.array([[9, 6, 7, 8], [9, 6, 7, -1], [9, 11, -1, -1]], np.int64))
    topp2["cu_seqlens_q_output"] = pack_output_index([4, 3, 2])[1]
    topp2["verify_tokens"][:9, :3] = [[5, 6, 11], [7, 1, 1], [8, 1, 1], [10, 1, 1],
                                      [5, 6, 11], [7, 1, 1], [9, 1, 1],
                                      [5, 6, 11], [13, 1, 1]]
    topp2["verify_scores"][0] = [1.0, 0.0, 0.0]  # slot 0: a zero-probability second entry
    # slot 1: the second entry outside the set followed by one top-1 match; both rejected
    topp2["actual_candidate_len"][7] = 9  # clamped to C = 3: the third candidate 11 is in the set
    cases["topp_outside_set_short_run_clamped_len"] = (topp2, expected_outputs(
        topp2, [[5], [5], [11, 13]], [1, 1, 2], [False] * 3))

    # FastDeploy's top_p_candidates zero-fills past the length (token 0, score 0). Token 0 is a
    # vocabulary id: a draft 0 must not match those entries (FastDeploy's own verify-window
    # fallback reads the second entry unconditionally and would accept slot 0 as [0, 7, 8, 10]).
    # Slot 1: with two candidates 0 is inside the set and accepted; slot 2: length 0 keeps none.
    topp3 = dict(topp, verify_tokens=np.zeros((12, 3), np.int64),
                 verify_scores=np.zeros((12, 3), np.float32),
                 actual_candidate_len=np.ones(12, np.int32),
                 draft_tokens=np.array([[9, 0, 7, 8], [9, 0, 7, 8], [9, 0, 7, 8]], np.int64))
    topp3["verify_tokens"][:, 0] = [5, 7, 8, 10, 5, 7, 8, 12, 5, 7, 8, 13]
    topp3["verify_scores"][:, 0] = 0.6
    topp3["verify_scores"][4, 1] = 0.3
    topp3["actual_candidate_len"][4] = 2
    topp3["actual_candidate_len"][8] = 0
    cases["topp_zero_filled_entries_are_not_candidates"] = (topp3, expected_outputs(
        topp3, [[5], [0, 7, 8, 12], [5]], [1, 4, 1], [False] * 3))

    # target_match follows sampled_token_ids, not the candidates.
    tm, _ = literal_case("match_and_mismatch", "greedy")
    tm = dict(tm, verify_strategy="target_match",
              seq_lens_this_time=np.array([4, 3, 2], np.int32),
              seq_lens_encoder=np.array([0, 3, 0], np.int32),
              draft_tokens=np.array([[9, 5, 6, 7], [0, 0, 0, 0], [9, 3, -1, -1]], np.int64))
    tm["cu_seqlens_q_output"] = pack_output_index([4, 1, 2])[1]  # [0, 4, 5, 7]
    tm["sampled_token_ids"] = np.array([5, 6, 1, 8, 4, 3, 14, 0, 0, 0, 0, 0], np.int64)
    tm["verify_tokens"] = np.tile(np.array([[7, 7]], np.int64), (12, 1))
    cases["target_match_reads_sampled_ids"] = (tm, expected_outputs(
        tm, [[5, 6, 1], [4], [3, 14]], [3, 1, 2], [False] * 3))

    # rejection: q == p always accepts; q(x) == 0 rejects and the residual resamples x; a
    # residual without mass falls back to p.
    rj, _ = literal_case("match_and_mismatch", "rejection_onehot_q")
    p = np.zeros((12, LITERAL_V), np.float32)
    q = np.zeros((3, 3, LITERAL_V), np.float32)
    p[0, [5, 6]] = q[0, 0, [5, 6]] = 0.5
    p[1, [6, 7]] = q[0, 1, [6, 7]] = [0.25, 0.75]
    p[2, 8] = q[0, 2, 8] = 1.0
    p[3, 10] = 1.0
    p[4, 4], q[1, 0, 11] = 1.0, 1.0
    p[6, 7] = q[2, 0, 7] = 1.0
    rj = dict(rj, target_probs=p, draft_probs=q, seq_lens_this_time=np.array([4, 2, 2], np.int32),
              draft_tokens=np.array([[9, 5, 7, 8], [9, 4, -1, -1], [9, 3, -1, -1]], np.int64))
    rj["cu_seqlens_q_output"] = pack_output_index([4, 2, 2])[1]  # [0, 4, 6, 8]
    cases["rejection_ratio_one_zero_q_and_empty_residual"] = (rj, expected_outputs(
        rj, [[5, 7, 8, 10], [4], [7]], [4, 1, 1], [False] * 3))
    return cases


def topp_outside_set_case() -> tuple[np.ndarray, np.ndarray, dict]:
    """Issue 16's topp case, for top_p_candidates followed by speculate_verify: one decode slot,
    k = 3, verify_window 2. Row 0 has p(5) = 0.7 >= top_p 0.6, so its top-p set is {5}; the first
    draft 6 is row 0's second most likely token (p 0.2), outside the set, and drafts 7 and 8 are
    rows 1 and 2's top-1. FastDeploy rejects the draft (accept_num 1: the correction 5); the
    verify-window fallback over a full top-C list accepted 6, 7, 8 and the bonus (accept_num 4).
    Returns (probs [4, V] float32, top_p [1] float32, the verify case without its three
    candidate fields)."""
    V = 16
    probs = np.full((4, V), 0.0, np.float32)
    probs[0, [5, 6, 2]] = [0.7, 0.2, 0.1]
    probs[1, [7, 1]] = [0.9, 0.1]
    probs[2, [8, 1]] = [0.9, 0.1]
    probs[3, [10, 1]] = [0.9, 0.1]
    top_p = np.array([0.6], np.float32)
    case = dict(
        sampled_token_ids=probs.argmax(axis=1).astype(np.int64),
        accept_tokens=np.full((1, 4), STALE_TOKEN, np.int64),
        accept_num=np.full(1, STALE_NUM, np.int32),
        step_idx=np.array([5], np.int64),
        stop_flags=np.zeros(1, bool),
        seq_lens_encoder=np.zeros(1, np.int32),
        seq_lens_decoder=np.array([20], np.int32),
        draft_tokens=np.array([[9, 6, 7, 8]], np.int64),
        seq_lens_this_time=np.array([4], np.int32),
        max_dec_len=np.array([100], np.int64),
        end_tokens=np.array([2], np.int64),
        is_block_step=np.zeros(1, bool),
        cu_seqlens_q_output=np.array([0, 4], np.int32),
        actual_draft_token_nums=np.array([3], np.int32),
        topp=top_p.copy(),
        max_seq_len=0, verify_window=2, enable_topp=True, benchmark_mode=False,
        accept_all_drafts=False, target_probs=None, draft_probs=None,
        infer_seed=np.array([7], np.int64), reasoning_status=None,
        verify_strategy="topp", accept_policy="normal",
    )
    return probs, top_p, case


def distribution_case(seed: int, num_slots: int, k: int, strategy: str, vocab: int = 10) -> tuple[dict, np.ndarray]:
    """num_slots independent one-slot trials in one call: every slot has k drafts drawn from a
    draft distribution q and the same target distribution p on every row. Returns (case, p)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(vocab)).astype(np.float32)
    q = rng.dirichlet(np.ones(vocab)).astype(np.float32)
    N, D, rows = num_slots, k + 1, num_slots * (k + 1)
    draft_tokens = np.zeros((N, D), np.int64)
    draft_tokens[:, 1:] = _sample_rows(rng, np.broadcast_to(q, (N, k, vocab)))
    lens = np.full(N, D, np.int32)
    order = np.argsort(-p, kind="stable")
    case = dict(
        sampled_token_ids=_sample_rows(rng, np.broadcast_to(p, (rows, vocab))),
        accept_tokens=np.zeros((N, D), np.int64),
        accept_num=np.zeros(N, np.int32),
        step_idx=np.zeros(N, np.int64),
        stop_flags=np.zeros(N, bool),
        seq_lens_encoder=np.zeros(N, np.int32),
        seq_lens_decoder=np.full(N, 8, np.int32),
        draft_tokens=draft_tokens,
        seq_lens_this_time=lens,
        verify_tokens=np.tile(order[None, :3], (rows, 1)).astype(np.int64),
        verify_scores=np.tile(p[order[:3]][None, :], (rows, 1)).astype(np.float32),
        max_dec_len=np.full(N, 10_000, np.int64),
        end_tokens=np.array([-5], np.int64),  # no id of the vocabulary stops a slot
        is_block_step=np.zeros(N, bool),
        cu_seqlens_q_output=pack_output_index(lens)[1],
        actual_candidate_len=np.full(rows, 2, np.int32),
        actual_draft_token_nums=np.full(N, k, np.int32),
        topp=np.full(N, 1.0, np.float32),
        max_seq_len=0, verify_window=2, enable_topp=True, benchmark_mode=False,
        accept_all_drafts=False,
        target_probs=np.tile(p, (rows, 1)) if strategy == "rejection" else None,
        draft_probs=np.tile(q, (N, k, 1)) if strategy == "rejection" else None,
        infer_seed=(np.arange(N, dtype=np.int64) * 7919 + seed),
        reasoning_status=None,
        verify_strategy=strategy,
        accept_policy="normal",
    )
    return case, p


# Non-default options each compared with the reference, on CPU and on the GPU.
OPTION_CASES = [
        ("topp", dict(enable_topp=False)),
        ("topp", dict(verify_window=0)),
        ("topp", dict(verify_window=3, num_candidates=2)),
        ("topp", dict(with_seed=False)),
        ("rejection", dict(with_draft_probs=False)),
        ("rejection", dict(with_seed=False)),
        ("rejection", dict(num_draft=1)),
        ("rejection", dict(num_draft=5, vocab=17)),
        ("greedy", dict(num_draft=0)),
        ("greedy", dict(accept_policy="accept_all")),
        ("rejection", dict(accept_policy="accept_all")),
        ("target_match", dict(accept_policy="reject_all")),
]
