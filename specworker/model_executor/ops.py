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

__all__ = [
    "OpsNotBuiltError",
    "load_ops",
    "get_cu_seqlens",
    "speculate_verify",
    "VERIFY_STRATEGIES",
    "ACCEPT_POLICIES",
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


# speculate_verify's modes; a strategy's index is FastDeploy's VerifyStrategy value (TOPP = 0,
# GREEDY = 1, TARGET_MATCH = 2) plus ours, REJECTION = 3.
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
