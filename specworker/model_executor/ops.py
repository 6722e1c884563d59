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

__all__ = [
    "OpsNotBuiltError",
    "PaddingOffsetOutput",
    "load_ops",
    "get_cu_seqlens",
    "get_padding_offset",
    "speculate_get_seq_lens_output",
    "draft_model_update",
    "draft_model_postprocess",
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
