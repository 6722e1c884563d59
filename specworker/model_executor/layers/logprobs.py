"""Logprobs of the emitted tokens, on the device: per (slot, output position), the log-softmax of the processed
logit row at the emitted token and the row's top-W (id, logprob) pairs. It reads the rows the Sampler left
(penalties, bad words, min-tokens eos mask, reasoning constraint, temperature) and copies nothing to the host.
"""

from __future__ import annotations

import dataclasses

import paddle

from specworker.model_executor.layers.elementwise import rowwise

__all__ = ["LogprobsTensors", "compute_logprobs", "log_softmax_rows"]


@dataclasses.dataclass(slots=True, kw_only=True)
class LogprobsTensors:
    """Row j of slot b is the target's distribution for emitted token j (accept_tokens[b, j]); entries with
    j >= accept_num[b] are meaningless (the host drops them)."""

    token_logprobs: paddle.Tensor  # [N, D] float32: logprob of accept_tokens[b, j]
    top_ids: paddle.Tensor  # [N, D, W] int64: the W most likely ids of the row, most likely first
    top_logprobs: paddle.Tensor  # [N, D, W] float32: their logprobs (non-increasing)


def log_softmax_rows(logits: paddle.Tensor) -> paddle.Tensor:
    """(logits - max) - log(sum(exp(logits - max))) per row: [R, V] float32 -> [R, V] float32.

    exp and log go through rowwise(), so a row's bits do not depend on how many rows share the call (Paddle's
    CPU kernels round a SIMD body and a scalar tail differently); max, sub and the row sum are per row.
    """
    shifted = logits - paddle.max(logits, axis=-1, keepdim=True)  # [R, V], <= 0
    total = paddle.sum(rowwise(paddle.exp, shifted), axis=-1, keepdim=True)  # [R, 1], >= 1
    return shifted - rowwise(paddle.log, total)


def compute_logprobs(logits: paddle.Tensor, cu_seqlens_q_output: paddle.Tensor, accept_tokens: paddle.Tensor,
                     width: int) -> LogprobsTensors:
    """The logprobs of every emitted token and the top-`width` alternatives of its row.

    Args:
        logits: [R, V] float32 processed logit rows (SamplerOutput.logits), R = N * D, slot b's rows from
            cu_seqlens_q_output[b].
        cu_seqlens_q_output: [N + 1] int32 exclusive prefix sum of the slots' output rows.
        accept_tokens: [N, D] int64 emitted tokens (-1 past accept_num).
        width: W, the number of alternatives per row (host int >= 0); clipped to V.
    Returns:
        LogprobsTensors with [N, D] / [N, D, W] fields.
    Example: cu_seqlens_q_output [0, 1, 1, 3] (slot 0 a prefill, slot 1 idle, slot 2 two rows), D = 3:
        (0, 0) reads row 0, (2, 0) and (2, 1) rows 1 and 2; every other (b, j) reads some clipped row and
        is dropped by the host.
    """
    rows, vocab = logits.shape
    num_slots, depth = accept_tokens.shape
    width = min(width, vocab)
    logprobs = log_softmax_rows(logits)  # [R, V]
    start = cu_seqlens_q_output[:num_slots].astype("int64").unsqueeze(-1)  # [N, 1]
    row_idx = paddle.clip(start + paddle.arange(depth, dtype="int64").unsqueeze(0), max=rows - 1)  # [N, D]
    flat_rows = row_idx.reshape([-1])  # [N * D]
    token = paddle.clip(accept_tokens, min=0, max=vocab - 1).reshape([-1])
    token_logprobs = paddle.gather(logprobs.reshape([-1]), flat_rows * vocab + token).reshape([num_slots, depth])
    if width == 0:
        top_ids = paddle.zeros([num_slots, depth, 0], dtype="int64")
        return LogprobsTensors(token_logprobs=token_logprobs, top_ids=top_ids,
                               top_logprobs=top_ids.astype("float32"))
    # Ranked by the logits themselves (rounding in the shift could tie two distinct logits).
    _, top_ids = paddle.topk(logits, width, axis=-1)  # [R, W]
    top_logprobs = paddle.take_along_axis(logprobs, top_ids, axis=-1)  # [R, W]
    shape = [num_slots, depth, width]
    return LogprobsTensors(token_logprobs=token_logprobs, top_ids=paddle.gather(top_ids, flat_rows).reshape(shape),
                           top_logprobs=paddle.gather(top_logprobs, flat_rows).reshape(shape))
