"""Wrappers of the index ops: packing (get_padding_offset), output rows (speculate_get_seq_lens_output),
the fused pre_process op (speculate_pre_process), and the logit-row gather
(rebuild_padding)."""

from __future__ import annotations

from typing import NamedTuple
import numbers

import paddle

from specworker.model_executor.ops._extension import _run, op_wrapper


class PaddingOffsetOutput(NamedTuple):
    """get_padding_offset's outputs; unpacks like FastDeploy's four."""

    ids_remove_padding: paddle.Tensor | None  # [token_num_cpu] int64; None if input_ids was None
    batch_id_per_token: paddle.Tensor  # [token_num_cpu] int32, -1 past the packed tokens
    cu_seqlens_q: paddle.Tensor  # [bsz + 1] int32
    cu_seqlens_k: paddle.Tensor  # [bsz + 1] int32, equal to cu_seqlens_q


@op_wrapper
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


@op_wrapper
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


@op_wrapper
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
    """Gathers the hidden rows that need logits (docs/spec.md §4.4); FastDeploy's argument order.

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


class SpeculatePreProcessOutput(NamedTuple):
    """speculate_pre_process's outputs: FastDeploy's seven, in its order, then seq_lens_output."""

    ids_remove_padding: paddle.Tensor  # [token_num_cpu] int64, -1 past T
    batch_id_per_token: paddle.Tensor  # [token_num_cpu] int32, -1 past T
    cu_seqlens_q: paddle.Tensor  # [bsz + 1] int32
    cu_seqlens_k: paddle.Tensor  # [bsz + 1] int32, equal to cu_seqlens_q
    cu_seqlens_q_output: paddle.Tensor  # [bsz + 1] int32, exclusive prefix sum of O_b
    batch_id_per_token_output: paddle.Tensor  # [bsz * D] int32, -1 past T_out
    real_output_token_num: paddle.Tensor  # [1] int32, T_out (= cu_seqlens_q_output[bsz]), on the device
    seq_lens_output: paddle.Tensor  # [bsz] int32, O_b


@op_wrapper
def speculate_pre_process(
    token_num_cpu: int,
    input_ids: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    draft_tokens: paddle.Tensor | None,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
) -> SpeculatePreProcessOutput:
    """pre_process's index tensors in one op (one CUDA launch); FastDeploy's argument order.

    Equal to get_padding_offset(input_ids, L, draft_tokens, E if draft_tokens else None,
    token_num_cpu) for the input side, O = speculate_get_seq_lens_output(L, E, Dec) and
    get_padding_offset(None, O, None, None, bsz * D) for the output side, with D =
    draft_tokens.shape[1] (1 without drafts). No host read: T_out stays on the device.

    Args:
        token_num_cpu: input-side capacity (a host int), >= T = sum(seq_lens_this_time).
        input_ids: [N, S] int64, N >= bsz; prefill slots (and every slot without drafts) read
            input_ids[b, :L_b].
        seq_lens_this_time: [bsz] (or [bsz, 1]) int32, L_b >= 0.
        draft_tokens: [N, D] int64 (decode slots read draft_tokens[b, :L_b]), or None for a
            non-speculative step.
        seq_lens_encoder: [bsz] (or [bsz, 1]) int32, E_b (> 0: prefill; != 0: one logit row).
        seq_lens_decoder: [bsz] (or [bsz, 1]) int32; unused, shape-checked (FastDeploy signature).
    Returns:
        SpeculatePreProcessOutput (see its fields).
    Raises:
        ValueError: wrong dtype/shape; on CPU also L_b < 0, T > token_num_cpu, L_b > D on a decode
            slot, L_b > S on a slot reading input_ids, T_out > bsz * D. On GPU those cannot be
            raised without a host sync; the kernel stays in bounds like the unfused kernels.
        TypeError: token_num_cpu is not an integer.

    Example (slot 0 decodes 3 tokens, slot 1 idle, slot 2 prefills 4; D = 3, token_num_cpu = 7):
        input_ids [[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33]], draft_tokens
        [[7, 8, 9], [-1, -1, -1], [-1, -1, -1]], seq_lens_this_time [3, 0, 4],
        seq_lens_encoder [0, 0, 4]
        -> ids_remove_padding [7, 8, 9, 30, 31, 32, 33], batch_id_per_token [0, 0, 0, 2, 2, 2, 2],
           cu_seqlens_q = cu_seqlens_k [0, 3, 3, 7], seq_lens_output [3, 0, 1],
           cu_seqlens_q_output [0, 3, 3, 4], real_output_token_num [4],
           batch_id_per_token_output [0, 0, 0, 2, -1, -1, -1, -1, -1].
    """
    if isinstance(token_num_cpu, bool) or not isinstance(token_num_cpu, numbers.Integral):
        raise TypeError(
            f"speculate_pre_process: token_num_cpu must be a host int, got {type(token_num_cpu).__name__}")
    if draft_tokens is not None and draft_tokens.ndim == 2 and draft_tokens.shape[1] == 0:
        # Paddle would hand the empty tensor to the op as None (non-speculative), silently.
        raise ValueError("speculate_pre_process: draft_tokens has shape "
                         f"{list(draft_tokens.shape)}, expected [N, k + 1] with k >= 0")
    outs = _run("speculate_pre_process", input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder,
                seq_lens_decoder, int(token_num_cpu))
    return SpeculatePreProcessOutput(*outs)
