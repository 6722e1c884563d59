"""Loads the compiled extension (the only importer of build/ops/specworker_ops.so) and runs its ops.

The library is loaded lazily on the first op call; a missing or stale build raises
OpsNotBuiltError, which says how to build.
"""

from __future__ import annotations

import functools
import numbers
import os
import warnings

import numpy as np
import paddle

from specworker.model_executor import op_build


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


def _host_int(op: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{op}: {name} must be a host int, got {type(value).__name__}")
    return int(value)


def _host_bool(op: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a host bool, got {type(value).__name__}")
    return bool(value)
