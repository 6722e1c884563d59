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

__all__ = ["OpsNotBuiltError", "load_ops", "get_cu_seqlens"]


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
