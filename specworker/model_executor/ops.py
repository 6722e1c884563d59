"""Typed Python wrappers of the specworker custom ops; the only importer of the compiled extension.

Every wrapper accepts CPU or GPU tensors; the C++ op dispatches on place, so no Python code
branches on the platform. The extension is loaded lazily on the first op call: importing this
module never fails, calling an op with a missing or stale build raises OpsNotBuiltError,
which says how to build.
"""

from __future__ import annotations

import functools
import numbers
import os
import warnings
from typing import NamedTuple

import paddle

from specworker.model_executor import op_build

import numpy as np
__all__ = [
    "OpsNotBuiltError",
    "PaddingOffsetOutput",
    "load_ops",
    "get_cu_seqlens",
    "get_padding_offset",
    "speculate_get_seq_lens_output",
    "rebuild_padding",
    "TopPCandidatesOutput",
    "reasoning_phase_token_constraint",
    "top_p_candidates",
    "speculate_update",
    "speculate_set_value_by_flags_and_idx",
    "speculate_verify",
    "VERIFY_STRATEGIES",
    "ACCEPT_POLICIES",
    "speculate_get_token_penalty_multi_scores",
    "EagleHiddenStatesOutput",
    "draft_model_preprocess",
    "eagle_get_hidden_states",
    "draft_model_update",
    "draft_model_postprocess",
    "batch_invariant_linear",
]


class OpsNotBuiltError(RuntimeError):
    """The compiled extension is missing, stale, or was built for another Paddle."""


def _check_current() -> None:
    how = "build it with `make ops` (or `python custom_ops/setup_ops.py`)"
    if not op_build.LIBRARY.exists():
        raise OpsNotBuiltError(f"specworker custom ops are not built ({op_build.LIBRARY} is missing); {how}")
    manifest = op_build.read_manifest()
    if manifest is None:
        raise OpsNotBuiltError(f"{op_build.MANIFEST} is missing or unreadable; {how}")
    # Inside a source checkout, a build older than the sources is stale. An installed copy
    # without custom_ops/ has nothing to compare against.
    if op_build.OPS_ROOT.is_dir() and manifest.get("digest") != op_build.source_digest():
        raise OpsNotBuiltError(f"specworker custom ops are stale (custom_ops/ changed since the build); {how}")
    if manifest.get("paddle") != paddle.__version__:
        raise OpsNotBuiltError(
            f"specworker custom ops were built for paddle {manifest.get('paddle')}, "
            f"this is paddle {paddle.__version__}; {how}"
        )
    if manifest.get("with_cuda") != bool(paddle.is_compiled_with_cuda()):
        raise OpsNotBuiltError(
            f"specworker custom ops were built with_cuda={manifest.get('with_cuda')}, but this Paddle has "
            f"with_cuda={bool(paddle.is_compiled_with_cuda())}; {how}"
        )


@functools.cache
def load_ops() -> frozenset[str]:
    """Registers the extension's ops with Paddle once; returns their names."""
    if not os.environ.get("SPECWORKER_SKIP_STALE_CHECK"):
        _check_current()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No ccache found")
        from paddle.utils.cpp_extension.extension_utils import load_op_meta_info_and_register_op

    return frozenset(load_op_meta_info_and_register_op(str(op_build.LIBRARY)))


def _run(op_name: str, *args):
    """Runs a registered op; an argument check failing in C++ surfaces as ValueError."""
    load_ops()
    try:
        return paddle._C_ops._run_custom_op(op_name, *args)
    except OSError as e:  # Paddle reports PD_CHECK failures as OSError
        raise ValueError(str(e).strip()) from None


def get_cu_seqlens(seq_lens: paddle.Tensor) -> paddle.Tensor:
    """Exclusive prefix sum of per-slot lengths.

    Args:
        seq_lens: [bsz] (or [bsz, 1]) int32 lengths, >= 0.
    Returns:
        cu_seqlens: [bsz + 1] int32, cu_seqlens[0] = 0, cu_seqlens[bsz] = sum(seq_lens).
    Example: seq_lens [2, 0, 3] -> cu_seqlens [0, 2, 2, 5].
    """
    out = _run("get_cu_seqlens", seq_lens)
    return out[0] if isinstance(out, (list, tuple)) else out


class PaddingOffsetOutput(NamedTuple):
    """get_padding_offset's outputs; unpacks like FastDeploy's four."""

    ids_remove_padding: paddle.Tensor | None  # [token_num_cpu] int64; None if input_ids was None
    batch_id_per_token: paddle.Tensor  # [token_num_cpu] int32, -1 past the packed tokens
    cu_seqlens_q: paddle.Tensor  # [bsz + 1] int32
    cu_seqlens_k: paddle.Tensor  # [bsz + 1] int32, equal to cu_seqlens_q


def get_padding_offset(
    input_ids: paddle.Tensor | None,
    seq_lens_this_time: paddle.Tensor,
    draft_tokens: paddle.Tensor | None,
    seq_lens_encoder: paddle.Tensor | None,
    token_num_cpu: int,
) -> PaddingOffsetOutput:
    """Packs this step's query tokens and builds the varlen index (FastDeploy argument order).

    Slot b owns rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of the packed outputs; its i-th row
    holds draft_tokens[b, i] on a decode slot (draft_tokens given and seq_lens_encoder[b] <= 0),
    else input_ids[b, i]. Rows from T = sum(seq_lens_this_time) up to token_num_cpu hold -1.

    Args:
        input_ids: [N, S] int64 (N >= bsz), or None to compute only the index outputs (the
            output side of pre_process). The C++ op then returns a [0] tensor in its place,
            which this wrapper turns into None.
        seq_lens_this_time: [bsz] (or FastDeploy's [bsz, 1]) int32 tokens per slot, L_b >= 0.
        draft_tokens: [N, D] int64 or None; given together with seq_lens_encoder, and only
            with input_ids.
        seq_lens_encoder: [bsz] (or [bsz, 1]) int32 or None; > 0 marks a prefill slot.
        token_num_cpu: output capacity (a host int, no sync), >= T; may exceed T.
    Returns:
        PaddingOffsetOutput(ids_remove_padding [token_num_cpu] int64 or None,
        batch_id_per_token [token_num_cpu] int32, cu_seqlens_q [bsz + 1] int32,
        cu_seqlens_k [bsz + 1] int32).
    Raises:
        ValueError: wrong dtype/shape, unpaired draft_tokens/seq_lens_encoder, draft_tokens
            without input_ids; on CPU also L_b < 0, T > token_num_cpu, L_b > D on a decode
            slot, L_b > S on a slot reading input_ids.
        TypeError: token_num_cpu is not an integer.
    On GPU the value errors cannot be raised without a host sync; the kernel stays in bounds
    instead: a negative L_b counts as 0, rows past token_num_cpu are not written, and a token
    index past D (decode) or S (prefill) yields -1.

    Example (slot 0 prefill, slot 1 stopped, slot 2 decode; token_num_cpu = 6):
        input_ids [[11, 12, 13], [21, 22, 23], [31, 32, 33]], draft_tokens [[-1, -1],
        [-1, -1], [35, 36]], seq_lens_this_time [3, 0, 2], seq_lens_encoder [3, 0, 0]
        -> cu_seqlens_q = cu_seqlens_k [0, 3, 3, 5],
           ids_remove_padding [11, 12, 13, 35, 36, -1],
           batch_id_per_token [0, 0, 0, 2, 2, -1].
    """
    if isinstance(token_num_cpu, bool) or not isinstance(token_num_cpu, numbers.Integral):
        raise TypeError(f"get_padding_offset: token_num_cpu must be a host int, got {type(token_num_cpu).__name__}")
    # Paddle hands every zero-size optional input to a custom op as None. At bsz = 0 that turns
    # the empty seq_lens_encoder into None and would fail the pairing check; no slot reads a
    # draft then, so the pair is dropped here.
    if seq_lens_this_time.shape[0] == 0 and input_ids is not None and draft_tokens is not None \
            and seq_lens_encoder is not None:
        draft_tokens = seq_lens_encoder = None
    ids, batch_id, cu_q, cu_k = _run(
        "get_padding_offset", input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder, int(token_num_cpu)
    )
    if input_ids is not None and ids.shape[0] != token_num_cpu:
        # input_ids had no elements (N = 0 or S = 0) and reached the op as None, so it built the
        # index outputs only; with no token to read, every row is -1.
        ids = paddle.full_like(batch_id, -1, dtype="int64")
    return PaddingOffsetOutput(
        ids_remove_padding=None if input_ids is None else ids,
        batch_id_per_token=batch_id,
        cu_seqlens_q=cu_q,
        cu_seqlens_k=cu_k,
    )


def speculate_get_seq_lens_output(
    seq_lens_this_time: paddle.Tensor, seq_lens_encoder: paddle.Tensor, seq_lens_decoder: paddle.Tensor
) -> paddle.Tensor:
    """Logit rows each slot needs this step (O_b).

    Args:
        seq_lens_this_time: [bsz] (or [bsz, 1]) int32 tokens per slot, L_b >= 0.
        seq_lens_encoder: [bsz] (or [bsz, 1]) int32; != 0 marks a prefill step.
        seq_lens_decoder: [bsz] (or [bsz, 1]) int32; unused, shape-checked (FastDeploy signature).
    Returns:
        seq_lens_output: [bsz] int32; 0 if L_b == 0, 1 if L_b == 1, 1 on a prefill slot (only
        the last prompt token needs a logit), else L_b (the last accepted token and every draft).
    Raises:
        ValueError: wrong dtype/shape; on CPU also L_b < 0 (on GPU such a slot gets 0 rows).

    Example: seq_lens_this_time [5, 0, 3], seq_lens_encoder [5, 0, 0] -> [1, 0, 3].
    """
    out = _run("speculate_get_seq_lens_output", seq_lens_this_time, seq_lens_encoder, seq_lens_decoder)
    return out[0] if isinstance(out, (list, tuple)) else out


def rebuild_padding(
    tmp_out: paddle.Tensor,
    cu_seqlens_q: paddle.Tensor,
    seq_len_this_time: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    batch_id_per_token_output: paddle.Tensor | None = None,
    cu_seqlens_q_output: paddle.Tensor | None = None,
    first_token_out: paddle.Tensor | None = None,
    enable_logprob: bool = False,
) -> paddle.Tensor:
    """Gathers the hidden rows that need logits (SPEC §4.4); FastDeploy's argument order.

    A prefill slot (E_b > 0) yields its last prompt token, row cu_seqlens_q[b] + E_b - 1; a decode
    slot yields its token at each local index i, row cu_seqlens_q[b] + i. Idle slots (L_b == 0),
    slots with E_b == 0 and seq_lens_decoder[b] == 0 (FastDeploy skips them too) and rows with
    batch id -1 are zeros.

    Args:
        tmp_out: [token_num, H] float32/float16/bfloat16, the packed transformer output.
        cu_seqlens_q: [bsz + 1] int32, exclusive prefix sum of seq_len_this_time.
        seq_len_this_time: [bsz] (or [bsz, 1]) int32, L_b.
        seq_lens_decoder: [bsz] (or [bsz, 1]) int32, tokens already in the KV cache.
        seq_lens_encoder: [bsz] (or [bsz, 1]) int32, E_b > 0 on prefill slots.
        batch_id_per_token_output: [capacity] int32 slot of each output row, -1 past T_out.
        cu_seqlens_q_output: [bsz + 1] int32 exclusive prefix sum of the output rows per slot.
            Give both output index tensors or neither.
        first_token_out: [bsz, H], tmp_out's dtype; updated in place when enable_logprob:
            first_token_out[b] <- row cu_seqlens_q[b] + E_b - 2 (the row before the last prompt
            token) for each prefill slot with an output row, zeros when E_b == 1 (no such row this
            step). Other rows are left unchanged.
        enable_logprob: write first_token_out (required then).
    Returns:
        out: [bsz, H] without output indices (row b for slot b), else [capacity, H] (row t for
        slot batch_id_per_token_output[t], local index t - cu_seqlens_q_output[b]).
    Raises:
        ValueError: bad shapes, dtypes or pairs; on CPU also any index that would read out of
        range (a batch id outside [-1, bsz), E_b > L_b, a slot's rows outside tmp_out, an output
        row outside its slot's [cu_seqlens_q_output[b], cu_seqlens_q_output[b + 1]), a decode
        local index >= L_b). On GPU those rows are written as zeros instead: the kernel cannot
        raise without a host sync.

    Example (three slots, H = 1, tmp_out = [[10], [11], [12], [13], [14]]):
        slot 0 decode L=2, slot 1 idle L=0, slot 2 prefill L=E=3:
        cu_seqlens_q [0, 2, 2, 5], seq_len_this_time [2, 0, 3], seq_lens_encoder [0, 0, 3],
        seq_lens_decoder [7, 0, 0].
        No output index -> [[10], [0], [14]].
        seq_lens_output [2, 0, 1], capacity 5: batch_id_per_token_output [0, 0, 2, -1, -1],
        cu_seqlens_q_output [0, 2, 2, 3] -> [[10], [11], [14], [0], [0]].
        enable_logprob -> first_token_out[2] = [13]; rows 0 and 1 unchanged.
    """
    out = _run(
        "rebuild_padding",
        tmp_out,
        cu_seqlens_q,
        seq_len_this_time,
        seq_lens_decoder,
        seq_lens_encoder,
        batch_id_per_token_output,
        cu_seqlens_q_output,
        first_token_out,
        bool(enable_logprob),
    )
    return out[0] if isinstance(out, (list, tuple)) else out


class TopPCandidatesOutput(NamedTuple):
    """top_p_candidates' outputs; unpacks like FastDeploy's three."""

    verify_scores: paddle.Tensor  # [rows, C] float32, best first; 0 on skipped rows / padding
    verify_tokens: paddle.Tensor  # [rows, C] int64; -1 on skipped rows / padding
    actual_candidate_lens: paddle.Tensor  # [rows] int32; 0 on skipped rows


def top_p_candidates(
    probs: paddle.Tensor,
    top_p: paddle.Tensor,
    batch_id_per_token_output: paddle.Tensor,
    candidates_len: int = 5,
    max_seq_len: int = 0,
) -> TopPCandidatesOutput:
    """The top-C candidates of every logit row and how many of them top-p keeps (FastDeploy order).

    Row t belongs to slot b = batch_id_per_token_output[t]. Its candidates are the C entries of
    probs[t] with the largest probabilities, best first, ties to the smaller id; a NaN
    probability ranks as -inf. actual_candidate_lens[t] is the smallest m >= 1 whose running
    float32 sum of the first m scores reaches top_p[b]; when the top-C mass never reaches it
    the length is C (FastDeploy leaves 0, which makes verification reject every draft).

    Args:
        probs: [rows, V] float32 probabilities (rows = output capacity or T_out), V >= 1.
        top_p: [N] (or FastDeploy's [N, 1]) float32 per-slot top-p.
        batch_id_per_token_output: [>= rows] int32 slot of each row, -1 past T_out.
        candidates_len: C, 1 <= C <= 100 (FastDeploy accepts 1-10 and 20-100 in steps of 10;
            every value in between works here).
        max_seq_len: FastDeploy's legacy attribute; unused.
    Returns:
        TopPCandidatesOutput(verify_scores [rows, C] float32, verify_tokens [rows, C] int64,
        actual_candidate_lens [rows] int32). Rows with batch id -1 hold 0 / -1 / 0. When V < C
        the entries past V hold 0 / -1 and the length is at most V.
    Raises:
        ValueError: wrong dtype/shape, candidates_len outside [1, 100]; on CPU also a batch id
            outside [-1, N). On GPU such a row is treated like a -1 row (no host sync).

    Example (C = 2, top_p [0.5, 0.9], batch ids [0, 1, -1]):
        probs [[0.1, 0.6, 0.3], [0.4, 0.2, 0.4], [...]]
        -> verify_tokens [[1, 2], [0, 2], [-1, -1]], verify_scores [[0.6, 0.3], [0.4, 0.4], [0, 0]],
           actual_candidate_lens [1, 2, 0]   (row 1: 0.4 + 0.4 < 0.9, so the length is C = 2).
    """
    for name, value in (("candidates_len", candidates_len), ("max_seq_len", max_seq_len)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"top_p_candidates: {name} must be a host int, got {type(value).__name__}")
    scores, tokens, lens = _run(
        "top_p_candidates", probs, top_p, batch_id_per_token_output, int(candidates_len), int(max_seq_len)
    )
    return TopPCandidatesOutput(verify_scores=scores, verify_tokens=tokens, actual_candidate_lens=lens)


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
        logits: [rows, V] float32, updated in place.
        pre_ids: [N, S] int64 generated history; pre_ids[b, step_idx[b]] is the last token.
        stop_flags: [N] (or [N, 1]) bool.
        seq_lens_this_time: [bsz] (or [bsz, 1]) int32; only its length bsz <= N is used.
        seq_lens_encoder: [bsz] (or [bsz, 1]) int32; > 0 on a prefill step.
        step_idx: [N] (or [N, 1]) int64 tokens generated so far.
        allowed_tokens: [A] int64 ids the constrained row may take (ERNIE: <tool_call>, <response>).
        reasoning_status: [N] (or [N, 1]) int32, updated in place.
        batch_id_per_token_output: [>= rows] int32 slot of each row, -1 past T_out.
        cu_seqlens_q_output: [bsz + 1] int32 exclusive prefix sum of the rows per slot.
        enable_thinking: [N] (or [N, 1]) bool.
        think_end_id, line_break_id: token ids of "</think>" and "\n".
    Raises:
        ValueError: wrong dtype/shape; on CPU also a batch id outside [-1, bsz) (on GPU such a
            row is skipped).

    Example (think_end_id 9, line_break_id 7, allowed [4], V = 6): slot 0 with status 1,
    step_idx 5 and pre_ids[0, 2:6] = [7, 9, 7, 7] moves to 2, and its first row
    [1, 2, 3, 4, 5, 6] becomes [-1e10, -1e10, -1e10, -1e10, 5, -1e10]; its later rows keep
    their logits. On the next call the status moves to 3 and nothing is masked.
    """
    for name, value in (("think_end_id", think_end_id), ("line_break_id", line_break_id)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"reasoning_phase_token_constraint: {name} must be a host int, got {type(value).__name__}")
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


def speculate_update(
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    not_need_stop: paddle.Tensor,
    draft_tokens: paddle.Tensor,
    actual_draft_token_nums: paddle.Tensor,
    accept_tokens: paddle.Tensor,
    accept_num: paddle.Tensor,
    stop_flags: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    is_block_step: paddle.Tensor,
    stop_nums: paddle.Tensor,
    mask_rollback: paddle.Tensor | None = None,
) -> None:
    """Commits one verified step to the per-slot state, in place (FastDeploy argument order).

    Run after verify (and after the host copy of accept_tokens / accept_num / stop_flags),
    before speculate_set_value_by_flags_and_idx. Slot b < bsz, n = accept_num[b]:
    paused (is_block_step) -> untouched; E > 0 (prefill done) -> Dec += E, E = 0; running
    decode -> Dec += n and, when L > 1, actual_draft_token_nums grows by 2 (capped at D - 1) if
    every draft was accepted (n - 1 == actual) else shrinks by 1 (floor 1); n > 0 ->
    draft_tokens[b, 0] = accept_tokens[b, n - 1]. Stopped, paused and padding (b >= bsz)
    slots count as stopped; not_need_stop[0] = (#stopped < stop_nums[0]).

    Args:
        seq_lens_encoder: [N] (or [N, 1]) int32, E_b; updated in place.
        seq_lens_decoder: [N] (or [N, 1]) int32, Dec_b; updated in place.
        not_need_stop: [1] bool on the same device as the other inputs; updated in place
            (never copied to the host here).
        draft_tokens: [N, D] int64; column 0 updated in place.
        actual_draft_token_nums: [N] (or [N, 1]) int32; updated in place.
        accept_tokens: [N, D] int64, this step's emitted tokens.
        accept_num: [N] (or [N, 1]) int32, emitted tokens per slot, 0 <= n <= D.
        stop_flags: [N] (or [N, 1]) bool; its row count N (>= bsz) is the number of slots
            counted for not_need_stop.
        seq_lens_this_time: [bsz] (or [bsz, 1]) int32, L_b of the step just verified (read only).
        is_block_step: [N] (or [N, 1]) bool, paused (preempted) slots.
        stop_nums: [1] int64, the stopped-slot count at which not_need_stop becomes False.
        mask_rollback: optional [N] (or [N, 1]) int32, updated in place: L - n on running
            decode slots (draft KV entries to discard), 0 on prefill and stopped slots.
    Returns:
        None; the in-place arguments hold the result.
    Raises:
        ValueError: wrong dtype/shape/device; on CPU also accept_num outside [0, D] on a live
            unpaused slot (on GPU it is clamped to [0, D]).

    Example (D = 3; slot 0 prefill done, 1 decode with one of two drafts accepted, 2 stopped):
        E [4, 0, 0], Dec [0, 10, 0], L [4, 3, 0], accept_num [1, 2, 0],
        accept_tokens [[7, 0, 0], [21, 22, 0], [0, 0, 0]], actual [2, 2, 2],
        stop_flags [F, F, T], stop_nums [3]
        -> E [0, 0, 0], Dec [4, 12, 0], draft_tokens[:, 0] = [7, 22, unchanged],
           actual [2, 1, 2], not_need_stop [True].
    """
    _run(
        "speculate_update", seq_lens_encoder, seq_lens_decoder, not_need_stop, draft_tokens,
        actual_draft_token_nums, accept_tokens, accept_num, stop_flags, seq_lens_this_time,
        is_block_step, stop_nums, mask_rollback,
    )


def speculate_set_value_by_flags_and_idx(
    pre_ids_all: paddle.Tensor,
    accept_tokens: paddle.Tensor,
    accept_num: paddle.Tensor,
    stop_flags: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    step_idx: paddle.Tensor,
) -> None:
    """Appends this step's accepted tokens to the target history, then clears stopped slots;
    in place (FastDeploy argument order). Run after speculate_update.

    Slot b < bsz, n = accept_num[b]: if n > 0 and the slot holds a sequence (E != 0 or
    Dec != 0), pre_ids_all[b, step_idx[b] - j] = accept_tokens[b, n - 1 - j] for j < n,
    skipping positions < 1 or >= S; this also runs for a slot that stopped in this step, so
    its final tokens reach the history. Then a stopped slot gets accept_num = 0, Dec = 0
    (the engine has its tokens from the host copy made right after verify).

    Args:
        pre_ids_all: [N, S] int64 history (the "pre_ids" buffer); updated in place.
        accept_tokens: [N, D] int64, this step's emitted tokens.
        accept_num: [N] (or [N, 1]) int32, 0 <= n <= D; zeroed in place on stopped slots.
        stop_flags: [N] (or [N, 1]) bool.
        seq_lens_this_time: [bsz] (or [bsz, 1]) int32; only its size is used.
        seq_lens_encoder: [N] (or [N, 1]) int32.
        seq_lens_decoder: [N] (or [N, 1]) int32; zeroed in place on stopped slots.
        step_idx: [N] (or [N, 1]) int64, generated-token count including this step's tokens.
    Returns:
        None; the in-place arguments hold the result.
    Raises:
        ValueError: wrong dtype/shape/device; on CPU also accept_num outside [0, D] (on GPU it
            is clamped to [0, D]).

    Example (S = 6; slot 0 decode, slot 1 stopped this step with 2 tokens, slot 2 idle):
        accept_tokens [[31, 32, 0], [41, 2, 0], [0, 0, 0]], accept_num [2, 2, 0],
        stop_flags [F, T, T], step_idx [5, 3, 0], E [0, 0, 0], Dec [9, 7, 0]
        -> pre_ids_all[0, 4:6] = [31, 32], pre_ids_all[1, 2:4] = [41, 2],
           accept_num [2, 0, 0], Dec [9, 0, 0].
    """
    _run(
        "speculate_set_value_by_flags_and_idx", pre_ids_all, accept_tokens, accept_num, stop_flags,
        seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, step_idx,
    )


VERIFY_STRATEGIES = ("topp", "greedy", "target_match", "rejection")


ACCEPT_POLICIES = ("normal", "accept_all", "reject_all")


def _mode_name(field: str, value, allowed: tuple[str, ...]) -> str:
    """A mode given as a name (any case) or as its index in `allowed`, returned as the name."""
    if isinstance(value, str) and value.lower() in allowed:
        return value.lower()
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= int(value) < len(allowed):
        return allowed[int(value)]
    raise ValueError(f"speculate_verify: {field} = {value!r}, expected one of {allowed} or its index")


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
    """Verifies one step's draft tokens and emits each slot's tokens, in place (SPEC §4.5).

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
        verify_tokens / verify_scores: [rows, C] int64 / float32, top candidates per row, [r, 0] top-1.
        max_dec_len: [N] int64. end_tokens: [E] int64. is_block_step: [N] bool.
        cu_seqlens_q_output: [B + 1] int32, exclusive prefix sum of output rows per slot.
        actual_candidate_len: [rows] int32. actual_draft_token_nums: [N] int32 (unused).
        topp: [N] float32. max_seq_len: unused (FastDeploy legacy).
        verify_window: topp bulk-accept window. enable_topp: topp samples the correction/bonus
            token from the candidates (else top-1). benchmark_mode: reject all drafts.
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
        logits: [T_out or capacity, V] float32, float16 or bfloat16; updated in place.
        penalty_scores, frequency_scores, presence_scores: [N] (or [N, 1]) float32 alpha, beta, gamma.
        temperatures: [N] (or [N, 1]) float32, > 0 for every slot that has a row (CPU raises;
            the CUDA kernel treats <= 0 as 1). Greedy rows should pass 1.
        bad_tokens: [N, W] int64; bad_tokens_len: [N] int64 (clamped to [0, W]).
        cur_len: [N] int64 tokens generated so far (step_idx); min_len: [N] int64.
        eos_token_id: [E] (or [E, 1]) int64.
        seq_lens_this_time: [bsz] int32 (only bsz <= N is used).
        batch_id_per_token_output: [capacity >= logits rows] int32 slot per row, -1 past T_out.
        cu_seqlens_q_output: [bsz + 1] int32 exclusive prefix sum of the rows per slot.
        max_seq_len: legacy FastDeploy attribute, ignored.
        draft_tokens: [ours] optional [N, D] int64 (column 0 = last accepted token, then drafts).
    Returns:
        logits itself (updated in place).
    Example: slot 0 with rows [0, 2) (cu = [0, 2]), cur_len 2, pre_ids[0] = [-1, 7, 7, -1],
    draft_tokens[0] = [7, 9, -1], alpha 1, beta 0.5, gamma 0, temperature 1: row 0 subtracts
    2 * 0.5 from logit 7; row 1 (conditioned on draft 9) also subtracts 0.5 from logit 9.
    """
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


def _host_int(op: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}: {name} must be a host int, got {type(value).__name__}")
    return int(value)


def _host_bool(op: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a host bool, got {type(value).__name__}")
    return bool(value)


def draft_model_preprocess(
    draft_tokens: paddle.Tensor,
    input_ids: paddle.Tensor,
    stop_flags: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    step_idx: paddle.Tensor,
    not_need_stop: paddle.Tensor,
    pre_ids: paddle.Tensor,
    accept_tokens: paddle.Tensor,
    accept_num: paddle.Tensor,
    target_model_seq_lens_encoder: paddle.Tensor,
    target_model_seq_lens_decoder: paddle.Tensor,
    target_model_step_idx: paddle.Tensor,
    target_model_stop_flags: paddle.Tensor,
    max_dec_len: paddle.Tensor,
    target_model_draft_tokens: paddle.Tensor,
    num_model_steps: int,
    is_splitwise_prefill: bool = False,
    target_model_is_block_step: paddle.Tensor | None = None,
    truncate_first_token: bool = True,
) -> None:
    """Derives the draft's state for this round from the target's state after verification, in place.

    Argument order is FastDeploy's era-[C] one (draft side, then target side, then
    num_model_step, is_splitwise_prefill), so a FastDeploy call works unchanged; ours are
    appended: target_model_is_block_step (None: a paused slot must also be stopped, as in
    FastDeploy) and truncate_first_token (FastDeploy [B]'s attribute; [C] always truncates).
    bsz = seq_lens_this_time.shape[0]; per-slot tensors are [bsz] or [bsz, 1]; row buffers [N, *]
    with N >= bsz (rows past bsz are not touched).

    Args (updated in place: the draft side and target_model_draft_tokens):
        draft_tokens: [N, Dd] int64, the draft's input tokens of a decode slot.
        input_ids: [N, S] int64, the draft prompt (the target prompt shifted left by one).
        stop_flags: [bsz] bool, draft slot stopped.
        seq_lens_this_time, seq_lens_encoder, seq_lens_decoder: [bsz] int32, draft L, E, Dec.
        step_idx: [bsz] int64, draft step index.
        not_need_stop: [1] bool on the same device; set to "any draft slot runs".
        pre_ids: [N, Sp] int64, the draft's history (0-based: pre_ids[b, j] = generated token j + 1).
        accept_tokens: [N, Da] int64, tokens verify emitted: accept_tokens[b, :accept_num[b]].
        accept_num: [bsz] int32.
        target_model_seq_lens_encoder: [bsz] int32, unused (FastDeploy's signature).
        target_model_seq_lens_decoder: [bsz] int32, target Dec after verification.
        target_model_step_idx: [bsz] int64, target tokens generated so far (this step's included).
        target_model_stop_flags: [bsz] bool.
        max_dec_len: [bsz] int64.
        target_model_draft_tokens: [N, Dt] int64; columns 1.. are reset to -1.
        num_model_steps: draft substeps per round (>= 1).
        is_splitwise_prefill: PD prefill node ([C]): disables the max_dec_len skip.
        target_model_is_block_step: [bsz] bool or None, target slot paused (preempted).
        truncate_first_token: the draft prompt is the target prompt shifted by one (MTP/EAGLE).
    Returns:
        None; the tensors above are updated in place.
    Raises:
        ValueError: wrong dtype/shape/device, num_model_steps < 1; on CPU also a running decode
            slot with accept_num outside [0, min(Da, Dd)] or a pre_ids position < 0, and a draft
            prefill whose first token would land at input_ids column >= S. On GPU those cannot be
            raised without a host sync; the kernel clamps accept_num and skips out-of-range writes.
        TypeError: num_model_steps not an int, or a flag not a bool.

    Per slot b (target state is after verification; skipped slots get stop = true,
    L = E = Dec = step_idx = 0, and so do paused ones: on resume every draft value is re-derived):
        stopped / paused / step_idx_t + num_model_steps >= max_dec_len -> skipped
        draft E > 0 (the target finished its prefill and emitted its first token t1):
            input_ids[b, E - 1] = t1, pre_ids[b, 0] = t1, L = E, step_idx = step_idx_t - 1
        decode, n = accept_num[b]: Dec = Dec_t - n, step_idx = step_idx_t - n,
            draft_tokens[b, :n] = accept_tokens[b, :n], pre_ids[b, step_idx_t - n + i] = its i-th, L = n
    Example (num_model_steps = 1, Dec_t / step_idx_t are after verification):
        slot 0 just finished a 4-token prefill (draft input_ids [12, 13, 14, -1], E = 4, target
        accept_tokens [21, ..], step_idx_t = 1); slot 1 decode (accept_num 2, accept_tokens
        [31, 32, ..], Dec_t = 10, step_idx_t = 5); slot 2 target stopped
        -> input_ids[0] = [12, 13, 14, 21], L = [4, 2, 0], E = [4, 0, 0], Dec = [*, 8, 0],
           step_idx = [0, 3, 0], draft_tokens[1, :2] = [31, 32], pre_ids[1, 3:5] = [31, 32],
           stop_flags = [F, F, T], not_need_stop = [True].
    """
    op = "draft_model_preprocess"
    _run(
        op, draft_tokens, input_ids, stop_flags, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, step_idx,
        not_need_stop, pre_ids, accept_tokens, accept_num, target_model_seq_lens_encoder,
        target_model_seq_lens_decoder, target_model_step_idx, target_model_stop_flags, max_dec_len,
        target_model_draft_tokens, target_model_is_block_step, _host_int(op, "num_model_steps", num_model_steps),
        _host_bool(op, "is_splitwise_prefill", is_splitwise_prefill),
        _host_bool(op, "truncate_first_token", truncate_first_token),
    )


class EagleHiddenStatesOutput(NamedTuple):
    """eagle_get_hidden_states's outputs; unpacks like FastDeploy's two."""

    out: paddle.Tensor  # [T, H] input's dtype; rows past output_token_num are zero
    output_token_num: paddle.Tensor  # [1] int32 on the input's device, = sum(draft L)


def eagle_get_hidden_states(
    input: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    stop_flags: paddle.Tensor,
    accept_num: paddle.Tensor,
    target_model_seq_lens_this_time: paddle.Tensor,
    target_model_seq_lens_encoder: paddle.Tensor,
    actual_draft_token_num: int,
) -> EagleHiddenStatesOutput:
    """Gathers, per slot, the target hidden rows the draft consumes, packed in slot order (no host sync).

    Argument order is FastDeploy's (its base_model_* are our target_model_*; accept_nums is
    accept_num). Slot b owns the target rows [cu_t[b], cu_t[b] + L_t[b]) (cu_t: exclusive prefix
    sum of target_model_seq_lens_this_time) and keeps their first k_b: 0 if the draft slot is
    stopped (L_b == 0), E_b for a draft prefill, else accept_num[b]. k_b equals the draft's L_b,
    so the output lines up with the draft's ids_remove_padding.

    Args:
        input: [T, H] float32/float16/bfloat16, the target's packed hidden states.
        seq_lens_this_time, seq_lens_encoder: [bsz] int32, draft L and E after draft_model_preprocess.
        seq_lens_decoder: [bsz] int32, stop_flags: [bsz] bool; unused (FastDeploy's signature).
        accept_num: [bsz] int32.
        target_model_seq_lens_this_time: [bsz] int32, the target's L of the step just finished.
        target_model_seq_lens_encoder: [bsz] int32, unused (FastDeploy's signature).
        actual_draft_token_num: int, unused (FastDeploy's signature).
    Returns:
        EagleHiddenStatesOutput(out [T, H] input's dtype, rows past the count zero;
        output_token_num [1] int32 on the device, = sum(k_b)). Sized from the bound T, so no
        count is read on the host; consumers read out[:T_draft] with T_draft from the draft's
        own lengths.
    Raises:
        ValueError: wrong dtype/shape/device; on CPU also a negative length, k_b > L_t[b],
            k_b != L_b, or sum(L_t) > T. On GPU these cannot be raised without a host sync;
            the kernel clamps k_b to L_t[b] and never reads or writes a row >= T.

    Example: target L_t [3, 2, 2], draft L [3, 2, 0], draft E [3, 0, 0], accept_num [1, 2, 1]
        (slot 0 prefill, slot 1 decode that accepted one draft, slot 2 draft stopped)
        -> out rows [h0, h1, h2, h3, h4, 0, 0], output_token_num [5].
    """
    out, count = _run(
        "eagle_get_hidden_states", input, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, stop_flags,
        accept_num, target_model_seq_lens_this_time, target_model_seq_lens_encoder,
        _host_int("eagle_get_hidden_states", "actual_draft_token_num", actual_draft_token_num),
    )
    return EagleHiddenStatesOutput(out=out, output_token_num=count)


def draft_model_update(
    inter_next_tokens: paddle.Tensor,
    draft_tokens: paddle.Tensor,
    pre_ids: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    step_idx: paddle.Tensor,
    cu_seqlens_q_output: paddle.Tensor,
    stop_flags: paddle.Tensor,
    not_need_stop: paddle.Tensor,
    max_dec_len: paddle.Tensor,
    end_ids: paddle.Tensor,
    base_model_draft_tokens: paddle.Tensor,
    max_seq_len: int,
    substep: int,
) -> None:
    """Advances the draft state after MTP sampling substep `substep` and proposes its token.

    In place (returns None). Per slot b: a stopped (or paused) slot proposes -1
    (base_model_draft_tokens[b, substep + 1] = draft_tokens[b, 0] = -1), L = E = 0. A running
    slot takes the token of its last output row, inter_next_tokens[cu_seqlens_q_output[b + 1] - 1];
    prefill (E > 0): Dec += E, E = 0, step_idx += 1; decode: Dec += L, step_idx += L; then
    pre_ids[b, step_idx] = token (skipped outside [0, S)). If step_idx < max_dec_len[b] the token
    is proposed (base_model_draft_tokens[b, substep + 1] = draft_tokens[b, 0] = token, L = 1);
    otherwise the target could never emit it, so -1 is proposed and the slot stops (L = 0).
    A draft EOS does not stop the slot (verification decides stopping). not_need_stop[0] = some
    slot still running, written on the device.

    Args:
        inter_next_tokens: [rows] (or [rows, 1]) int64 draft token per output row.
        draft_tokens: [N, D] int64 draft input tokens (N >= bsz), column 0 written.
        pre_ids: [N, S] int64 draft history.
        seq_lens_this_time, seq_lens_encoder, seq_lens_decoder: [bsz] (or [bsz, 1]) int32.
        step_idx: [bsz] int64. max_dec_len: [bsz] int64. stop_flags: [bsz] bool.
        cu_seqlens_q_output: [bsz + 1] int32, slot b owns rows [cu[b], cu[b + 1]).
        not_need_stop: [1] bool on the same device as the other inputs.
        end_ids: [E] int64, accepted for FastDeploy compatibility, not read.
        base_model_draft_tokens: [N, D_target] int64, the target's draft_tokens.
        max_seq_len: FastDeploy's legacy padded width, ignored.
        substep: 0 <= substep < D_target - 1.
    Raises:
        ValueError: wrong dtype/shape/device, substep out of range; on CPU also a running slot
            without a row in inter_next_tokens (the CUDA kernel makes it propose -1 and stop).

    Example (substep 0; slot 0 decode with L 2, slot 1 stopped, slot 2 prefill with E 4):
        cu_seqlens_q_output [0, 2, 2, 3], inter_next_tokens [70, 71, 90], step_idx [5, 9, 0],
        max_dec_len [100, 100, 100] -> base_model_draft_tokens[:, 1] = [71, -1, 90],
        seq_lens_this_time [1, 0, 1], step_idx [7, 9, 1], not_need_stop [True].
    """
    _run(
        "draft_model_update",
        inter_next_tokens,
        draft_tokens,
        pre_ids,
        seq_lens_this_time,
        seq_lens_encoder,
        seq_lens_decoder,
        step_idx,
        cu_seqlens_q_output,
        stop_flags,
        not_need_stop,
        max_dec_len,
        end_ids,
        base_model_draft_tokens,
        int(max_seq_len),
        int(substep),
    )


def draft_model_postprocess(
    base_model_draft_tokens: paddle.Tensor,
    base_model_seq_lens_this_time: paddle.Tensor,
    base_model_seq_lens_encoder: paddle.Tensor,
    base_model_stop_flags: paddle.Tensor,
) -> None:
    """Sets the target's seq_lens_this_time from the proposer's drafts, in place (returns None).

    Per slot: stopped -> 0; prefill (E > 0) -> untouched; decode -> 1 + the drafts in
    base_model_draft_tokens[b, 1:] before the first -1.

    Args:
        base_model_draft_tokens: [N, D] int64 target draft_tokens (N >= bsz, D >= 1).
        base_model_seq_lens_this_time: [bsz] (or [bsz, 1]) int32, updated in place.
        base_model_seq_lens_encoder: [bsz] int32. base_model_stop_flags: [bsz] bool.
    Raises:
        ValueError: wrong dtype/shape/device; on CPU also a gap in a decode slot's drafts (-1
            followed by a draft) or a decode slot with column 0 = -1. On GPU those cannot raise
            without a host sync: the kernel counts the contiguous prefix only.

    Example: drafts [[7, 8, 9], [5, -1, -1], [3, 4, -1]], L [3, 5, 0], E [0, 5, 0],
        stop [False, False, True] -> L [3, 5, 0].
    """
    _run(
        "draft_model_postprocess",
        base_model_draft_tokens,
        base_model_seq_lens_this_time,
        base_model_seq_lens_encoder,
        base_model_stop_flags,
    )


def batch_invariant_linear(
    x: paddle.Tensor, weight: paddle.Tensor, bias: paddle.Tensor | None = None
) -> paddle.Tensor:
    """x @ weight + bias with a fixed per-output summation order: a row's bits never depend on
    the other rows of the call (how many there are, or where the row sits).

    Same arguments as paddle.nn.functional.linear (weight is [in_features, out_features], the
    layout of paddle.nn.Linear.weight; a checkpoint's [N, K] matrix is transposed once at load).
    Every output is
        acc = +0.0; for k in 0 .. K-1: acc = float32(acc + float32(x[r, k] * weight[k, n]))
        out[r, n] = float32(acc + bias[n])   (or acc without bias)
    i.e. a left-to-right float32 sum of rounded products, never fused or reassociated, on CPU
    and GPU alike (the two agree bit for bit). Speculative decoding needs this to be lossless:
    a BLAS matmul picks its summation order from M, so a token's logits on a 1-row decode step
    and on a (k+1)-row verify step differ in the last bits and near-tie argmaxes flip.

    Args:
        x: [M, K] float32, M >= 0 (M = 0 gives a [0, N] result).
        weight: [K, N] float32.
        bias: [N] float32, or None.
    Returns:
        out: [M, N] float32 on x's device.
    Raises:
        ValueError: a dtype other than float32, x or weight not 2-D, weight.shape[0] != K, bias
            not [N], inputs on different devices, a size over 2**31 - 1. No input value is used
            as an index, so the CPU and GPU ops raise on exactly the same inputs.
    Example: x [[1, 2]], weight [[1, 0, 1], [0, 1, 1]], bias [0, 0, 10] -> [[1, 2, 13]].
    """
    out = _run("batch_invariant_linear", x, weight, bias)
    return out[0] if isinstance(out, (list, tuple)) else out
