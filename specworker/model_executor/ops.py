"""Typed Python wrappers of the specworker custom ops; the only importer of the compiled extension.

Every wrapper accepts CPU or GPU tensors; the C++ op dispatches on place, so no Python code
branches on the platform. The extension is loaded lazily on the first op call: importing this
module never fails, calling an op with a missing or stale build raises OpsNotBuiltError,
which says how to build.
"""

from __future__ import annotations

import functools
import os

import paddle

from specworker.model_executor import op_build

__all__ = ["OpsNotBuiltError", "load_ops", "get_cu_seqlens", "rebuild_padding"]


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
    """Gathers the hidden rows that need logits (SPEC §4.4); FastDeploy's argument order.

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
