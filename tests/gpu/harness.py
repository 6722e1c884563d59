"""The GPU tests' side of the standalone CUDA harness (kernel_harness builds and launches the
kernels): the skip policy. A test module calls ``cp = require_gpu()`` at import: without CuPy, a
GPU or nvcc the module is skipped with a message that says which one is missing.

No Paddle is imported here, so the same tests run on a GPU machine that has only nvcc and CuPy.
"""

from __future__ import annotations

import pytest

from kernel_harness import gpu_unavailable_reason, kernels_lib, launcher, ptr, raw_launcher, stream

__all__ = ["gpu_unavailable_reason", "kernels_lib", "launcher", "ptr", "raw_launcher", "require_gpu", "stream"]


def require_gpu():
    """Returns the cupy module, or skips the calling test module with the reason."""
    reason = gpu_unavailable_reason()
    if reason is not None:
        pytest.skip(f"GPU kernel tests skipped: {reason}", allow_module_level=True)
    import cupy as cp

    return cp
