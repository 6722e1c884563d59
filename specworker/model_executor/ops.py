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

import numpy as np
import paddle

from specworker.model_executor import op_build

__all__ = [
    "EagleHiddenStatesOutput",
    "OpsNotBuiltError",
    "PaddingOffsetOutput",
    "load_ops",
    "draft_model_preprocess",
    "eagle_get_hidden_states",
    "get_cu_seqlens",
    "get_padding_offset",
    "speculate_get_seq_lens_output",
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
