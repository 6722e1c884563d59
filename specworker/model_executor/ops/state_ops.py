"""Wrappers of the state-update and MTP bridge ops (target update, draft pre/post-processing)."""

from __future__ import annotations

from typing import NamedTuple

import paddle

from specworker.model_executor.ops._extension import _host_bool, _host_int, _run, op_wrapper


@op_wrapper
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
    stop_nums: paddle.Tensor | None = None,
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
            None (FastDeploy's form without it): N, the value FastDeploy always fills it with
            (not_need_stop = some slot still runs); made on the device, no host sync.
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
    if stop_nums is None:
        stop_nums = paddle.full_like(not_need_stop.reshape([-1])[:1], stop_flags.shape[0], dtype="int64")
    _run(
        "speculate_update", seq_lens_encoder, seq_lens_decoder, not_need_stop, draft_tokens,
        actual_draft_token_nums, accept_tokens, accept_num, stop_flags, seq_lens_this_time,
        is_block_step, stop_nums, mask_rollback,
    )


# Inputs the C++ op requires but the wrapper fills when None (FastDeploy forms; tests/ops/test_op_arguments.py).
speculate_update.filled_when_none = ("stop_nums",)


@op_wrapper
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


@op_wrapper
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


def cu_with_total(starts: paddle.Tensor, total: paddle.Tensor) -> paddle.Tensor:
    """FastDeploy's [bsz] cu_seqlens_q_output (each slot's first output row) as our [bsz + 1]
    prefix sum: `total` ([1], the output row count) appended, on the device (no host sync)."""
    return paddle.concat([starts.astype("int32"), total.reshape([1]).astype("int32")])


class EagleHiddenStatesOutput(NamedTuple):
    """eagle_get_hidden_states's outputs; unpacks like FastDeploy's two."""

    out: paddle.Tensor  # [T, H] input's dtype; rows past output_token_num are zero
    output_token_num: paddle.Tensor  # [1] int32 on the input's device, = sum(draft L)


@op_wrapper
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
            An integer stop_flags (FastDeploy's tests pass int32) is cast to bool on the device.
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
    if stop_flags.dtype in (paddle.int32, paddle.int64):
        stop_flags = paddle.cast(stop_flags, "bool")
    out, count = _run(
        "eagle_get_hidden_states", input, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, stop_flags,
        accept_num, target_model_seq_lens_this_time, target_model_seq_lens_encoder,
        _host_int("eagle_get_hidden_states", "actual_draft_token_num", actual_draft_token_num),
    )
    return EagleHiddenStatesOutput(out=out, output_token_num=count)


@op_wrapper
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
        inter_next_tokens: [rows] (or [rows, 1]) int64 draft token per output row; FastDeploy's
            2-D padded buffer [n, m] (m > 1) is read flattened, row r = element r.
        draft_tokens: [N, D] int64 draft input tokens (N >= bsz), column 0 written.
        pre_ids: [N, S] int64 draft history.
        seq_lens_this_time, seq_lens_encoder, seq_lens_decoder: [bsz] (or [bsz, 1]) int32.
        step_idx: [bsz] int64. max_dec_len: [bsz] int64. stop_flags: [bsz] bool.
        cu_seqlens_q_output: [bsz + 1] int32, slot b owns rows [cu[b], cu[b + 1]). FastDeploy's
            [bsz] form (slot starts only) is completed on the device with the last slot's row
            count (1 for a prefill, else L), as speculate_get_seq_lens_output counts rows.
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
    if inter_next_tokens.ndim == 2 and inter_next_tokens.shape[1] != 1:
        inter_next_tokens = inter_next_tokens.reshape([-1])
    bsz = seq_lens_this_time.shape[0]
    if cu_seqlens_q_output.ndim == 1 and cu_seqlens_q_output.shape[0] == bsz and bsz > 0:
        last_len = seq_lens_this_time.reshape([-1])[bsz - 1:bsz]
        last_rows = paddle.where(seq_lens_encoder.reshape([-1])[bsz - 1:bsz] > 0, paddle.ones_like(last_len),
                                 last_len.clip(min=0))
        cu_seqlens_q_output = cu_with_total(cu_seqlens_q_output, cu_seqlens_q_output[bsz - 1:] + last_rows)
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


@op_wrapper
def draft_model_postprocess(
    base_model_draft_tokens: paddle.Tensor,
    base_model_seq_lens_this_time: paddle.Tensor,
    base_model_seq_lens_encoder: paddle.Tensor,
    base_model_stop_flags: paddle.Tensor,
    base_model_is_block_step: paddle.Tensor | None = None,
) -> None:
    """Sets the target's seq_lens_this_time from the proposer's drafts, in place (returns None).

    Per slot: stopped or paused -> 0; prefill (E > 0) -> untouched; decode -> 1 + the drafts in
    base_model_draft_tokens[b, 1:] before the first -1.

    Args:
        base_model_draft_tokens: [N, D] int64 target draft_tokens (N >= bsz, D >= 1).
        base_model_seq_lens_this_time: [bsz] (or [bsz, 1]) int32, updated in place.
        base_model_seq_lens_encoder: [bsz] int32. base_model_stop_flags: [bsz] bool.
        base_model_is_block_step: [ours] optional [bsz] bool, the target's paused (preempted)
            slots; pass it whenever a slot can be paused without its stop flag (as verify,
            speculate_update and draft_model_preprocess allow), so such a slot keeps L = 0.
            None: FastDeploy's op, where a paused slot must also be stopped.
    Raises:
        ValueError: wrong dtype/shape/device; on CPU also a gap in a decode slot's drafts (-1
            followed by a draft) or a decode slot with column 0 = -1. On GPU those cannot raise
            without a host sync: the kernel counts the contiguous prefix only.

    Example: drafts [[7, 8, 9], [5, -1, -1], [3, 4, -1]], L [3, 5, 0], E [0, 5, 0],
        stop [False, False, True] -> L [3, 5, 0]; with base_model_is_block_step
        [True, False, False] -> L [0, 5, 0].
    """
    _run(
        "draft_model_postprocess",
        base_model_draft_tokens,
        base_model_seq_lens_this_time,
        base_model_seq_lens_encoder,
        base_model_stop_flags,
        base_model_is_block_step,
    )
