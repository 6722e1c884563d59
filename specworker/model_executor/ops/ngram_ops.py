"""Wrappers of the n-gram ops: ngram_match, the n-gram (prompt lookup) proposer's only op (docs/spec.md §5.7),
and hybrid_mtp_ngram, which extends MTP drafts by n-gram lookup (docs/spec.md §5.8)."""

from __future__ import annotations

import paddle

from specworker.model_executor.ops._extension import _host_int, _run, op_wrapper

MAX_NGRAM_SIZE = 64  # the op's bound on max_ngram_size (the CUDA kernel keeps the suffix in shared memory)


@op_wrapper
def ngram_match(
    input_ids: paddle.Tensor,
    input_ids_len: paddle.Tensor,
    pre_ids: paddle.Tensor,
    step_idx: paddle.Tensor,
    draft_token_num: paddle.Tensor,
    draft_tokens: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    max_dec_len: paddle.Tensor,
    max_ngram_size: int,
    max_draft_tokens: int,
    min_ngram_size: int = 1,
    is_block_step: paddle.Tensor | None = None,
) -> None:
    """Drafts every decode slot's next tokens from its own history, in place (FastDeploy argument order;
    min_ngram_size and is_block_step are ours, appended, defaults as FastDeploy).

    Slot b < bsz: prefill (E > 0) untouched; paused or Dec == 0 -> L = 0; decode: with
    h = input_ids[b, :P] ++ pre_ids[b, 1:G + 1] (P = input_ids_len[b], G = step_idx[b]) and
    budget = min(draft_token_num[b], max_draft_tokens, D - 1, max_dec_len[b] - G - 1), the longest
    suffix of h (n = max_ngram_size down to min_ngram_size) that occurs earlier in h, at its most
    recent occurrence, gives up to budget following tokens -> draft_tokens[b, 1:1 + m], -1 after them,
    L = 1 + m. Column 0 (the last accepted token) is not touched.

    Args:
        input_ids: [N, S_in] int64, the slot's whole prompt in [b, :input_ids_len[b]].
        input_ids_len: [N] (or [N, 1]) int64, prompt length P_b.
        pre_ids: [N, S] int64, generated token j (1-based) at [b, j].
        step_idx: [N] (or [N, 1]) int64, tokens generated so far.
        draft_token_num: [N] (or [N, 1]) int32, the adaptive draft budget (actual_draft_token_nums).
        draft_tokens: [N, D] int64; columns 1.. updated in place.
        seq_lens_this_time: [bsz] (or [bsz, 1]) int32, updated in place; bsz <= N.
        seq_lens_encoder, seq_lens_decoder: [N] (or [N, 1]) int32.
        max_dec_len: [N] (or [N, 1]) int64.
        max_ngram_size: longest n-gram tried, min_ngram_size <= max_ngram_size <= MAX_NGRAM_SIZE.
        max_draft_tokens: cap on drafts per slot (>= 0; the proposer passes k).
        min_ngram_size: shortest n-gram tried (>= 1).
        is_block_step: optional [N] (or [N, 1]) bool, paused slots get L = 0.
    Returns:
        None; draft_tokens and seq_lens_this_time hold the result.
    Raises:
        TypeError: an attribute is not a host int.
        ValueError: wrong dtype/shape/device or attribute range; on CPU also a decode slot whose
            input_ids_len is outside [0, S_in] or step_idx outside [0, S - 1] (the CUDA kernel clamps).

    Example (D = 4, max_ngram_size 3, max_draft_tokens 3; slot 0 decode, slot 1 stopped, slot 2
    prefill): prompts [5, 6, 7, 8, 5, 6], [..], [..]; generated [7], -, -; Dec [7, 0, 0],
    E [0, 0, 5] -> h0 = [5, 6, 7, 8, 5, 6, 7], suffix [5, 6, 7] occurred at 0:
        draft_tokens[0, 1:] = [8, 5, 6], seq_lens_this_time [4, 0, 5 (unchanged)].
    """
    op = "ngram_match"
    _run(
        op, input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens, seq_lens_this_time,
        seq_lens_encoder, seq_lens_decoder, max_dec_len, is_block_step,
        _host_int(op, "max_ngram_size", max_ngram_size), _host_int(op, "max_draft_tokens", max_draft_tokens),
        _host_int(op, "min_ngram_size", min_ngram_size),
    )


@op_wrapper
def hybrid_mtp_ngram(
    input_ids: paddle.Tensor,
    input_ids_len: paddle.Tensor,
    pre_ids: paddle.Tensor,
    step_idx: paddle.Tensor,
    draft_token_num: paddle.Tensor,
    draft_tokens: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    max_dec_len: paddle.Tensor,
    max_ngram_size: int,
    min_ngram_size: int,
    max_draft_tokens: int,
    num_model_steps: int,
    seq_lens_encoder: paddle.Tensor | None = None,
) -> None:
    """Extends the MTP drafts of every decode slot with n-gram lookup drafts, in place, after
    draft_model_postprocess (FastDeploy argument order; num_model_steps and seq_lens_encoder are ours,
    appended).

    Slot b < bsz, s = num_model_steps: only a slot with E <= 0 (seq_lens_encoder omitted: every slot),
    Dec != 0 and L == 1 + s (a complete MTP chain) is extended; every other slot is untouched. With
    h = input_ids[b, :P] ++ pre_ids[b, 1:G + 1] ++ draft_tokens[b, 1:1 + s] and
    budget = min(draft_token_num[b], max_draft_tokens, D - 1, max_dec_len[b] - G - 1) drafts in all:
    when budget > s, the tokens after the most recent earlier occurrence of the longest suffix of h
    (n = max_ngram_size down to min_ngram_size), at most budget - s of them, go to
    draft_tokens[b, 1 + s:1 + s + m]; then -1 after the drafts and L = 1 + s + m. The MTP drafts
    (columns 1..s) and column 0 are never changed.

    Args:
        input_ids: [N, S_in] int64, the slot's whole prompt in [b, :input_ids_len[b]].
        input_ids_len: [N] (or [N, 1]) int64, prompt length P_b.
        pre_ids: [N, S] int64, generated token j (1-based) at [b, j].
        step_idx: [N] (or [N, 1]) int64, tokens generated so far.
        draft_token_num: [N] (or [N, 1]) int32, the adaptive draft budget (actual_draft_token_nums).
        draft_tokens: [N, D] int64, MTP drafts in columns 1..s; columns s + 1.. updated in place.
        seq_lens_this_time: [bsz] (or [bsz, 1]) int32, 1 + MTP drafts; updated in place; bsz <= N.
        seq_lens_decoder: [N] (or [N, 1]) int32.
        max_dec_len: [N] (or [N, 1]) int64.
        max_ngram_size: longest n-gram tried, min_ngram_size <= max_ngram_size <= MAX_NGRAM_SIZE.
        min_ngram_size: shortest n-gram tried (>= 1).
        max_draft_tokens: cap on drafts per slot, MTP drafts included (>= 0; the proposer passes k).
        num_model_steps: s, the MTP drafts of a complete chain, 0 <= s <= D - 1.
        seq_lens_encoder: optional [N] (or [N, 1]) int32; slots with E > 0 (prefill) are untouched.
    Returns:
        None; draft_tokens and seq_lens_this_time hold the result.
    Raises:
        TypeError: an attribute is not a host int.
        ValueError: wrong dtype/shape/device or attribute range; on CPU also an extended slot whose
            input_ids_len is outside [0, S_in] or step_idx outside [0, S - 1] (the CUDA kernel clamps).

    Example (D = 5, s = 2, max_ngram_size 3, max_draft_tokens 4, budget 4; slot 0 decode, slot 1
    stopped (L 0), slot 2 decode whose MTP chain was cut short (L 1)): prompt of slot 0 [1, 2, 3, 4],
    generated [1], MTP drafts [2, 3] -> h0 = [1, 2, 3, 4, 1, 2, 3], suffix [1, 2, 3] occurred at 0:
        draft_tokens[0, 1:] = [2, 3, 4, 1], seq_lens_this_time [5, 0 (unchanged), 1 (unchanged)].
    """
    op = "hybrid_mtp_ngram"
    _run(
        op, input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens, seq_lens_this_time,
        seq_lens_decoder, max_dec_len, seq_lens_encoder,
        _host_int(op, "max_ngram_size", max_ngram_size), _host_int(op, "min_ngram_size", min_ngram_size),
        _host_int(op, "max_draft_tokens", max_draft_tokens), _host_int(op, "num_model_steps", num_model_steps),
    )
