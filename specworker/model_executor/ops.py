"""Typed Python wrappers of the specworker custom ops; the only importer of the compiled extension.

Every wrapper accepts CPU or GPU tensors; the C++ op dispatches on place, so no Python code
branches on the platform. The extension is loaded lazily on the first op call: importing this
module never fails, calling an op with a missing or stale build raises OpsNotBuiltError,
which says how to build.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import NamedTuple

import paddle

from specworker.model_executor import op_build

__all__ = [
    "OpsNotBuiltError",
    "TopPCandidatesOutput",
    "load_ops",
    "get_cu_seqlens",
    "reasoning_phase_token_constraint",
    "top_p_candidates",
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
