"""pre_process (packed input side + output side of one step, one fused op; pre_process_unfused is
the three-op definition it must equal) and the logit-row gather after the forward. One code path for
every device and both modes; no host read of a device value.
"""

from __future__ import annotations

from collections.abc import Mapping

import paddle

from specworker.model_executor import ops
from specworker.model_executor.forward_meta import ForwardMeta


def pre_process(
    *,
    input_ids: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    token_num_cpu: int,
    draft_tokens: paddle.Tensor | None = None,
    layout_version: int = 0,
    step_buffers: Mapping[str, paddle.Tensor] | None = None,
    logit_rows_cpu: int | None = None,
) -> ForwardMeta:
    """Packs the step's tokens and computes the output-side index tensors, in one op.

    Args:
        input_ids: [bsz, S] int64, prompt tokens (prefill slots read input_ids[b, :L_b]).
        seq_lens_this_time: [bsz] int32, L_b (0 for idle/stopped slots).
        seq_lens_encoder: [bsz] int32, E_b (> 0: prefill or prefill chunk this step).
        seq_lens_decoder: [bsz] int32, tokens already in the KV cache.
        token_num_cpu: host int, capacity of the packed input (>= T = sum L_b, from the
            batch's host mirror or a fixed bound; rows past T are -1).
        draft_tokens: [bsz, k + 1] int64 when speculative (decode slots read
            draft_tokens[b, :L_b]: the last accepted token, then the drafts); None otherwise.
        layout_version: the InputBatch layout this meta is valid for.
        step_buffers: the batch's persistent PER_STEP buffers (share_inputs: ids_remove_padding,
            batch_id_per_token, cu_seqlens_q, cu_seqlens_k, seq_lens_output, batch_id_per_token_output,
            cu_seqlens_q_output). When given, the results overwrite them and the
            ForwardMeta refers to them (the first token_num rows of the per-token ones), so every index
            tensor the step reads lives at a fixed address (CUDA-graph capture). None: fresh tensors.
    Returns:
        ForwardMeta from speculate_pre_process (one CUDA launch), field by field equal to
        pre_process_unfused's. Output side: O_b (1 per prefill slot, L_b per decode slot, 0 when
        idle), batch_id_per_token_output [bsz * (k + 1)] and cu_seqlens_q_output. Non-speculative
        batches get the same two tensors with O_b = 1 per running slot, so consumers have one path.

    Example (k = 2): L = [3, 0, 4], E = [0, 0, 4] -> cu_seqlens_q [0, 3, 3, 7];
    O = [3, 0, 1] -> cu_seqlens_q_output [0, 3, 3, 4], batch_id_per_token_output
    [0, 0, 0, 2, -1, -1, -1, -1, -1].
    """
    fused = ops.speculate_pre_process(
        token_num_cpu, input_ids, seq_lens_this_time, draft_tokens, seq_lens_encoder, seq_lens_decoder
    )
    num_draft_tokens = 0 if draft_tokens is None else draft_tokens.shape[1] - 1
    if step_buffers is not None:
        fused = _persist(fused, step_buffers, token_num_cpu)
    return _forward_meta({name: getattr(fused, name) for name in STEP_FIELDS}, seq_lens_this_time, seq_lens_encoder,
                         seq_lens_decoder, token_num_cpu, num_draft_tokens, layout_version, logit_rows_cpu)


PER_TOKEN_FIELDS = ("ids_remove_padding", "batch_id_per_token")  # [token_num] views of [capacity] buffers
STEP_FIELDS = PER_TOKEN_FIELDS + ("cu_seqlens_q", "cu_seqlens_k", "seq_lens_output", "batch_id_per_token_output",
                                  "cu_seqlens_q_output")


def _forward_meta(index: Mapping[str, paddle.Tensor], seq_lens_this_time, seq_lens_encoder, seq_lens_decoder,
                  token_num: int, num_draft_tokens: int, layout_version: int,
                  logit_rows: int | None = None) -> ForwardMeta:
    """ForwardMeta from the STEP_FIELDS index tensors and the step's per-slot lengths."""
    output_capacity = seq_lens_this_time.shape[0] * (num_draft_tokens + 1)
    if logit_rows is not None and logit_rows < 0:
        raise ValueError(f"pre_process: logit_rows_cpu = {logit_rows}; allowed: >= 0 (a bound on T_out)")
    return ForwardMeta(
        **index,
        seq_lens_this_time=seq_lens_this_time,
        seq_lens_encoder=seq_lens_encoder,
        seq_lens_decoder=seq_lens_decoder,
        token_num=token_num,
        output_capacity=output_capacity,
        logit_rows=min(token_num, output_capacity, output_capacity if logit_rows is None else logit_rows),
        num_draft_tokens=num_draft_tokens,
        layout_version=layout_version,
    )


def _persist(fused, buffers: Mapping[str, paddle.Tensor], token_num: int):
    """Copies the op's results into the persistent buffers (overwriting them); returns views of them."""
    views = {}
    for name in STEP_FIELDS:
        buffer, value = buffers[name], getattr(fused, name)
        if name in PER_TOKEN_FIELDS:
            if token_num > buffer.shape[0]:
                raise ValueError(f"pre_process: token_num_cpu = {token_num}; allowed: at most the {name} buffer's "
                                 f"{buffer.shape[0]} rows (scheduler.max_num_batched_tokens)")
            buffer[:token_num] = value
            views[name] = buffer[:token_num]
        else:
            if list(buffer.shape) != list(value.shape):
                raise ValueError(f"pre_process: step buffer {name} is {list(buffer.shape)}, the op's result "
                                 f"{list(value.shape)}")
            paddle.assign(value, output=buffer)
            views[name] = buffer
    return fused._replace(**views)


def pre_process_unfused(
    *,
    input_ids: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    token_num_cpu: int,
    draft_tokens: paddle.Tensor | None = None,
    layout_version: int = 0,
) -> ForwardMeta:
    """pre_process as three ops (docs/spec.md §4.3), kept as the definition the fused op must equal.

    Same arguments and result as pre_process: get_padding_offset (input side),
    speculate_get_seq_lens_output (O_b), then get_padding_offset(None, O, None, None,
    bsz * (k + 1)) for the output side; no host read (the capacity is a bound, not T_out).
    """
    num_draft_tokens = 0 if draft_tokens is None else draft_tokens.shape[1] - 1
    packed = ops.get_padding_offset(
        input_ids,
        seq_lens_this_time,
        draft_tokens,
        None if draft_tokens is None else seq_lens_encoder,
        token_num_cpu,
    )
    seq_lens_output = ops.speculate_get_seq_lens_output(seq_lens_this_time, seq_lens_encoder, seq_lens_decoder)
    output_capacity = seq_lens_this_time.shape[0] * (num_draft_tokens + 1)
    # Index-only call: no token copy, and the capacity is a bound, so T_out is never read on the host.
    output_side = ops.get_padding_offset(None, seq_lens_output, None, None, output_capacity)
    index = {
        "ids_remove_padding": packed.ids_remove_padding,
        "batch_id_per_token": packed.batch_id_per_token,
        "cu_seqlens_q": packed.cu_seqlens_q,
        "cu_seqlens_k": packed.cu_seqlens_k,
        "seq_lens_output": seq_lens_output,
        "batch_id_per_token_output": output_side.batch_id_per_token,
        "cu_seqlens_q_output": output_side.cu_seqlens_q,
    }
    return _forward_meta(index, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, token_num_cpu,
                         num_draft_tokens, layout_version)


def gather_logit_rows(hidden_states: paddle.Tensor, meta: ForwardMeta) -> paddle.Tensor:
    """The hidden rows that need logits: [logit_rows, H], rows past T_out zero (docs/spec.md §4.3).

    logit_rows <= min(token_num, output_capacity) bounds T_out on the host (O_b <= L_b, so T_out <= T; the
    runner's bound is tighter: 1 per prefill slot), so a step whose slots feed fewer tokens than the capacity
    (decode slots with fewer drafts than k, idle slots, prefill chunks) computes the lm_head, the sampler and
    verification over those rows only, not over the padding.

    Args:
        hidden_states: [token_num, H] transformer output over meta.ids_remove_padding.
    """
    return ops.rebuild_padding(
        hidden_states,
        meta.cu_seqlens_q,
        meta.seq_lens_this_time,
        meta.seq_lens_decoder,
        meta.seq_lens_encoder,
        meta.batch_id_per_token_output[:meta.logit_rows],
        meta.cu_seqlens_q_output,
    )
