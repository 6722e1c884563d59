"""Wrappers of the sampling-side ops: penalties, reasoning constraint, top-p candidates, verify."""

from __future__ import annotations

from typing import NamedTuple

import paddle

from specworker.model_executor.ops._extension import _run, op_wrapper
from specworker.model_executor.ops.state_ops import cu_with_total


class TopPCandidatesOutput(NamedTuple):
    """top_p_candidates' outputs; unpacks like FastDeploy's three."""

    verify_scores: paddle.Tensor  # [rows, C] float32, best first; 0 past actual_candidate_lens
    verify_tokens: paddle.Tensor  # [rows, C] int64; -1 past actual_candidate_lens
    actual_candidate_lens: paddle.Tensor  # [rows] int32, the top-p set size; 0 on skipped rows


@op_wrapper
def top_p_candidates(
    probs: paddle.Tensor,
    top_p: paddle.Tensor,
    batch_id_per_token_output: paddle.Tensor,
    candidates_len: int = 5,
    max_seq_len: int = 0,
) -> TopPCandidatesOutput:
    """The top-p candidates of every logit row, at most C, best first (FastDeploy order).

    Row t belongs to slot b = batch_id_per_token_output[t]. Its entries of probs[t] are ranked
    by probability, best first, ties to the smaller id; a NaN probability ranks as -inf.
    actual_candidate_lens[t] is the smallest m >= 1 whose running float32 sum of the first m
    scores reaches top_p[b]; when the top-C mass never reaches it the length is C (FastDeploy
    leaves 0, which makes verification reject every draft). Only the first
    actual_candidate_lens[t] entries are candidates: every entry past the length holds token
    -1 and score 0. (FastDeploy zero-fills there; token 0 is a vocabulary id, so ours writes
    the -1 "no token" sentinel, which no draft can equal.)

    Args:
        probs: [rows, V] float32 probabilities (rows = output capacity or T_out), V >= 1.
        top_p: [N] (or FastDeploy's [N, 1]) float32 per-slot top-p.
        batch_id_per_token_output: [>= rows] int32 slot of each row, -1 past T_out.
        candidates_len: C, 1 <= C <= 100 (FastDeploy accepts 1-10 and 20-100 in steps of 10;
            every value in between works here).
        max_seq_len: FastDeploy's legacy attribute; unused.
    Returns:
        TopPCandidatesOutput(verify_scores [rows, C] float32, verify_tokens [rows, C] int64,
        actual_candidate_lens [rows] int32). Entries past the length hold 0 / -1; rows with
        batch id -1 have length 0 (all 0 / -1). When V < C the length is at most V.
    Raises:
        ValueError: wrong dtype/shape, candidates_len outside [1, 100]; on CPU also a batch id
            outside [-1, N). On GPU such a row is treated like a -1 row (no host sync).

    Example (C = 2, top_p [0.5, 0.9], batch ids [0, 1, -1]):
        probs [[0.1, 0.6, 0.3], [0.4, 0.2, 0.4], [...]]
        -> verify_tokens [[1, -1], [0, 2], [-1, -1]], verify_scores [[0.6, 0], [0.4, 0.4], [0, 0]],
           actual_candidate_lens [1, 2, 0]   (row 0: 0.6 >= 0.5 keeps one candidate; row 1:
           0.4 + 0.4 < 0.9, so the length is C = 2).
    """
    for name, value in (("candidates_len", candidates_len), ("max_seq_len", max_seq_len)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"top_p_candidates: {name} must be a host int, got {type(value).__name__}")
    scores, tokens, lens = _run(
        "top_p_candidates", probs, top_p, batch_id_per_token_output, int(candidates_len), int(max_seq_len)
    )
    return TopPCandidatesOutput(verify_scores=scores, verify_tokens=tokens, actual_candidate_lens=lens)


@op_wrapper
def reasoning_phase_token_constraint(
    logits: paddle.Tensor,
    pre_ids: paddle.Tensor,
    stop_flags: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    step_idx: paddle.Tensor,
    allowed_tokens: paddle.Tensor,
    reasoning_status: paddle.Tensor,
    batch_id_per_token_output: paddle.Tensor,
    cu_seqlens_q_output: paddle.Tensor,
    enable_thinking: paddle.Tensor,
    think_end_id: int,
    line_break_id: int,
) -> None:
    """Advances each slot's reasoning status and masks the first row after "\n</think>\n\n".

    In place on logits and reasoning_status; returns None. Status per slot b < bsz (stopped
    slots and status 3 are left alone), with t0..t3 = pre_ids[b, step_idx[b] - k] for
    k = 0..3 (-1 outside the row):
        0 thinking  -> 2 on the first token of a request with enable_thinking False
                       (seq_lens_encoder > 0, step_idx == 0), else -> 1 if think_end_id is in t0..t3;
        1 boundary  -> (also right after 0 -> 1, once step_idx >= 3) 2 if (t3, t2, t1, t0) is
                       (line_break_id, think_end_id, line_break_id, line_break_id), else 3 if
                       think_end_id is no longer in t0..t3;
        2 constrain -> 3 on the next call (one-shot).
    Then the first logit row of every slot whose updated status is 2 (row t with
    t == cu_seqlens_q_output[b]) becomes -1e10 everywhere except the allowed_tokens ids in
    [0, V), which keep their logits; no row changes when allowed_tokens is empty.

    Args:
        logits: [rows, V] float32, updated in place; rows >= T_out = cu_seqlens_q_output[bsz].
        pre_ids: [N, S] int64 generated history; pre_ids[b, step_idx[b]] is the last token.
        stop_flags: [N] (or [N, 1]) bool.
        seq_lens_this_time: [bsz] (or [bsz, 1]) int32; only its length bsz <= N is used.
        seq_lens_encoder: [bsz] (or [bsz, 1]) int32; > 0 on a prefill step.
        step_idx: [N] (or [N, 1]) int64 tokens generated so far.
        allowed_tokens: [A] int64 ids the constrained row may take (ERNIE: <tool_call>, <response>).
        reasoning_status: [N] (or [N, 1]) int32, updated in place.
        batch_id_per_token_output: [>= rows] int32 slot of each row, -1 past T_out.
        cu_seqlens_q_output: [bsz + 1] int32 exclusive prefix sum of the rows per slot
            (FastDeploy's [bsz] slot starts are accepted too).
        enable_thinking: [N] (or [N, 1]) bool.
        think_end_id, line_break_id: token ids of "</think>" and "\n".
    Raises:
        ValueError: wrong dtype/shape; on CPU also (before anything is written) a batch id
            outside [-1, bsz) and cu_seqlens_q_output not a prefix sum from 0 or describing more
            rows than logits has (T_out > rows > 0). On GPU such a row is skipped and nothing
            past the logits rows is touched (no host sync).

    Example (think_end_id 9, line_break_id 7, allowed [4], V = 6): slot 0 with status 1,
    step_idx 5 and pre_ids[0, 2:6] = [7, 9, 7, 7] moves to 2, and its first row
    [1, 2, 3, 4, 5, 6] becomes [-1e10, -1e10, -1e10, -1e10, 5, -1e10]; its later rows keep
    their logits. On the next call the status moves to 3 and nothing is masked.
    """
    for name, value in (("think_end_id", think_end_id), ("line_break_id", line_break_id)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"reasoning_phase_token_constraint: {name} must be a host int, got {type(value).__name__}")
    cu_seqlens_q_output = _full_cu(cu_seqlens_q_output, seq_lens_this_time.shape[0], logits.shape[0])
    _run(
        "reasoning_phase_token_constraint",
        logits,
        pre_ids,
        stop_flags,
        seq_lens_this_time,
        seq_lens_encoder,
        step_idx,
        allowed_tokens,
        reasoning_status,
        batch_id_per_token_output,
        cu_seqlens_q_output,
        enable_thinking,
        int(think_end_id),
        int(line_break_id),
    )


def _full_cu(cu_seqlens_q_output: paddle.Tensor, bsz: int, rows: int) -> paddle.Tensor:
    """FastDeploy's [bsz] cu_seqlens_q_output (slot starts) -> [bsz + 1], closed with the logits
    row count `rows` on the device; a [bsz + 1] one is returned as is. These ops read cu[b] as a
    slot's first row and cu[bsz] only as a bound (<= rows), so the two forms give equal outputs."""
    if cu_seqlens_q_output.ndim == 1 and cu_seqlens_q_output.shape[0] == bsz and bsz > 0:
        return cu_with_total(cu_seqlens_q_output, paddle.full_like(cu_seqlens_q_output[:1], rows))
    return cu_seqlens_q_output


VERIFY_STRATEGIES = ("topp", "greedy", "target_match", "rejection")


ACCEPT_POLICIES = ("normal", "accept_all", "reject_all")


def _mode_name(field: str, value, allowed: tuple[str, ...]) -> str:
    """A mode given as a name (any case) or as its index in `allowed`, returned as the name."""
    if isinstance(value, str) and value.lower() in allowed:
        return value.lower()
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= int(value) < len(allowed):
        return allowed[int(value)]
    raise ValueError(f"speculate_verify: {field} = {value!r}, expected one of {allowed} or its index")


@op_wrapper
def speculate_verify(
    sampled_token_ids: paddle.Tensor,
    accept_tokens: paddle.Tensor,
    accept_num: paddle.Tensor,
    step_idx: paddle.Tensor,
    stop_flags: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    draft_tokens: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    verify_tokens: paddle.Tensor,
    verify_scores: paddle.Tensor,
    max_dec_len: paddle.Tensor,
    end_tokens: paddle.Tensor,
    is_block_step: paddle.Tensor,
    cu_seqlens_q_output: paddle.Tensor,
    actual_candidate_len: paddle.Tensor,
    actual_draft_token_nums: paddle.Tensor,
    topp: paddle.Tensor,
    max_seq_len: int = 0,
    verify_window: int = 2,
    enable_topp: bool = True,
    benchmark_mode: bool = False,
    accept_all_drafts: bool = False,
    target_probs: paddle.Tensor | None = None,
    draft_probs: paddle.Tensor | None = None,
    infer_seed: paddle.Tensor | None = None,
    reasoning_status: paddle.Tensor | None = None,
    verify_strategy: str | int = "topp",
    accept_policy: str | int = "normal",
) -> None:
    """Verifies one step's draft tokens and emits each slot's tokens, in place (docs/spec.md §4.5).

    Slot b reads output rows s = cu_seqlens_q_output[b] onwards: draft draft_tokens[b, i + 1] is
    checked against row s + i for i < L - 1 (L = seq_lens_this_time[b]), stopping at the first
    rejection; that row (or row s + L - 1 when all pass) gives one correction/bonus token.
    Prefill slots, reject_all / benchmark_mode and reasoning_status 1 accept no draft. EOS or
    max_dec_len stops a slot. Block-step, stopped and idle slots get accept_num 0, nothing else.
    Arguments are FastDeploy's, in its order; target_probs .. accept_policy are ours.

    Args (N = max_num_seqs, B = bsz <= N, D = k + 1, rows >= T_out, C candidates, V vocab):
        sampled_token_ids: [rows] or [rows, 1] int64, token sampled from each target row.
        accept_tokens: [N, D] int64, updated: emitted tokens then -1 on verified slots.
        accept_num: [N] int32, updated: tokens emitted (0 for slots not verified).
        step_idx: [N] int64, updated: + tokens emitted.
        stop_flags: [N] bool, updated: set on EOS or max_dec_len.
        seq_lens_encoder / seq_lens_decoder: [N] int32 (decoder unused).
        draft_tokens: [N, D] int64, [b, 0] last token, [b, 1..L-1] drafts.
        seq_lens_this_time: [B] int32.
        verify_tokens / verify_scores: [rows, C] int64 / float32, top candidates per row, [r, 0] top-1;
            only the first actual_candidate_len[r] entries of a row are read by topp.
        max_dec_len: [N] int64. end_tokens: [E] int64. is_block_step: [N] bool.
        cu_seqlens_q_output: [B + 1] int32, exclusive prefix sum of output rows per slot.
        actual_candidate_len: [rows] int32. actual_draft_token_nums: [N] int32 (unused).
        topp: [N] float32. max_seq_len: unused (FastDeploy legacy).
        verify_window: FastDeploy's topp verify window, >= 0; no effect: topp accepts a draft
            only inside the row's top-p set, the first min(actual_candidate_len, C) candidates
            (FastDeploy's fallback beyond it accepted drafts outside the set; issue 16).
        enable_topp: topp samples the correction/bonus token from the candidates (else top-1).
        benchmark_mode: reject all drafts.
        accept_all_drafts: FastDeploy's flag, same as accept_policy="accept_all".
        target_probs: [rows, V] float32, required by and only allowed with "rejection".
        draft_probs: [N, D - 1, V] float32, draft distributions (absent: one-hot at the draft).
        infer_seed: [N] int64 per-slot seeds (absent: slot index); see counter_rng.h.
        reasoning_status: [N] int32, status 1 accepts no draft.
        verify_strategy: "topp" | "greedy" | "target_match" | "rejection" or FastDeploy's int.
        accept_policy: "normal" | "accept_all" | "reject_all" or its index.
    Returns:
        None; accept_tokens, accept_num, step_idx and stop_flags are updated in place.
    Example (greedy, k = 2, one decode slot, rows 0..2 have top-1 [5, 9, 4]):
        draft_tokens [[7, 5, 8]], L [3] -> row 0 accepts 5, row 1 rejects 8 and corrects to 9:
        accept_tokens [[5, 9, -1]], accept_num [2], step_idx += 2.
    """
    strategy = _mode_name("verify_strategy", verify_strategy, VERIFY_STRATEGIES)
    policy = _mode_name("accept_policy", accept_policy, ACCEPT_POLICIES)
    _run(
        "speculate_verify",
        sampled_token_ids, accept_tokens, accept_num, step_idx, stop_flags, seq_lens_encoder,
        seq_lens_decoder, draft_tokens, seq_lens_this_time, verify_tokens, verify_scores,
        max_dec_len, end_tokens, is_block_step, cu_seqlens_q_output, actual_candidate_len,
        actual_draft_token_nums, topp, target_probs, draft_probs, infer_seed, reasoning_status,
        int(max_seq_len), int(verify_window), bool(enable_topp), bool(benchmark_mode),
        bool(accept_all_drafts), strategy, policy,
    )


@op_wrapper
def speculate_get_token_penalty_multi_scores(
    pre_ids: paddle.Tensor,
    logits: paddle.Tensor,
    penalty_scores: paddle.Tensor,
    frequency_scores: paddle.Tensor,
    presence_scores: paddle.Tensor,
    temperatures: paddle.Tensor,
    bad_tokens: paddle.Tensor,
    bad_tokens_len: paddle.Tensor,
    cur_len: paddle.Tensor,
    min_len: paddle.Tensor,
    eos_token_id: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    batch_id_per_token_output: paddle.Tensor,
    cu_seqlens_q_output: paddle.Tensor,
    max_seq_len: int = 0,
    draft_tokens: paddle.Tensor | None = None,
) -> paddle.Tensor:
    """Min length, repetition/frequency/presence penalties, temperature and bad words, in place.

    Row t of logits belongs to slot b = batch_id_per_token_output[t] (-1: left untouched) at local
    index i = t - cu_seqlens_q_output[b]. In order: eos ids -> -1e10 while cur_len[b] + i <
    min_len[b]; for each distinct id v of the history with count c: l = l * alpha if l < 0 else
    l / alpha, then l -= c * frequency + presence (as l - c * frequency - presence); the row /=
    temperature; bad tokens -> -1e10 (-1e4 for float16 logits). The history is pre_ids[b, 1 ..
    cur_len[b]] (position 0 unused, ids outside [0, V) skipped; none when cur_len[b] < 0), plus
    draft_tokens[b, 1 .. i] when draft_tokens is given, so row i sees exactly what
    non-speculative decoding would see if those drafts are accepted. Without draft_tokens every
    row of a slot shares the history (FastDeploy's behaviour).

    Args:
        pre_ids: [N, S] int64 generated-token history (-1 past cur_len).
        logits: [rows, V] float32, float16 or bfloat16, updated in place; rows >= T_out =
            cu_seqlens_q_output[bsz] (T_out itself or the output capacity; 0 rows: a no-op).
        penalty_scores, frequency_scores, presence_scores: [N] (or [N, 1]) float32 alpha, beta, gamma.
        temperatures: [N] (or [N, 1]) float32, > 0 for every slot that has a row (CPU raises;
            the CUDA kernel treats <= 0 as 1). Greedy rows should pass 1.
        bad_tokens: [N, W] int64; bad_tokens_len: [N] int64 (clamped to [0, W]).
        cur_len: [N] int64 tokens generated so far (step_idx); min_len: [N] int64.
        eos_token_id: [E] (or [E, 1]) int64.
        seq_lens_this_time: [bsz] int32 (only bsz <= N is used).
        batch_id_per_token_output: [capacity >= logits rows] int32 slot per row, -1 past T_out.
        cu_seqlens_q_output: [bsz + 1] int32 exclusive prefix sum of the rows per slot
            (FastDeploy's [bsz] slot starts are accepted too).
        max_seq_len: legacy FastDeploy attribute, ignored.
        draft_tokens: [ours] optional [N, D] int64 (column 0 = last accepted token, then drafts).
    Returns:
        logits itself (updated in place).
    Raises:
        ValueError: wrong dtype/shape/device; on CPU also (before any row is written) a batch
            id >= bsz, a row outside its slot's [cu[b], cu[b + 1]), cur_len[b] > S - 1, a row
            needing drafts past column D - 1, a temperature <= 0, and cu_seqlens_q_output not a
            prefix sum from 0 or describing more rows than logits has (T_out > rows > 0). On GPU
            those cannot raise without a host sync: one block per logits row (nothing past the
            tensor is touched), invalid rows skipped, history clamped, temperature <= 0 as 1.
    Example: slot 0 with rows [0, 2) (cu = [0, 2]), cur_len 2, pre_ids[0] = [-1, 7, 7, -1],
    draft_tokens[0] = [7, 9, -1], alpha 1, beta 0.5, gamma 0, temperature 1: row 0 subtracts
    2 * 0.5 from logit 7; row 1 (conditioned on draft 9) also subtracts 0.5 from logit 9.
    """
    cu_seqlens_q_output = _full_cu(cu_seqlens_q_output, seq_lens_this_time.shape[0], logits.shape[0])
    _run(
        "speculate_get_token_penalty_multi_scores",
        pre_ids,
        logits,
        penalty_scores,
        frequency_scores,
        presence_scores,
        temperatures,
        bad_tokens,
        bad_tokens_len,
        cur_len,
        min_len,
        eos_token_id,
        seq_lens_this_time,
        batch_id_per_token_output,
        cu_seqlens_q_output,
        draft_tokens,
        int(max_seq_len),
    )
    return logits
