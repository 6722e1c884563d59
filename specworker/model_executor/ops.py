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

import paddle

from specworker.model_executor import op_build

__all__ = ["OpsNotBuiltError", "load_ops", "get_cu_seqlens", "speculate_get_token_penalty_multi_scores"]


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
