"""Standalone CUDA harness shared by tests/gpu and benchmarks/gpu_*.py: builds the framework-neutral
kernels (custom_ops/gpu_ops/kernels/*.cu) with nvcc and calls their extern "C" launchers through
ctypes on CuPy arrays. No Paddle, no pytest; the skip policy of the tests lives in tests/gpu/harness.py.
"""

from kernel_harness.build import KERNELS_DIR, gpu_unavailable_reason, kernels_lib, ptr, require_gpu_or_exit, stream
from kernel_harness.launchers import SIGNATURES, launcher, raw_launcher

__all__ = ["KERNELS_DIR", "SIGNATURES", "gpu_unavailable_reason", "kernels_lib", "launcher", "ptr",
           "raw_launcher", "require_gpu_or_exit", "stream"]
