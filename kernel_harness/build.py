"""Compiles every custom_ops/gpu_ops/kernels/*.cu with nvcc into one shared library, cached by a
digest of the kernel sources, and hands out device pointers and the current stream for ctypes."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
KERNELS_DIR = REPO_ROOT / "custom_ops" / "gpu_ops" / "kernels"
BUILD_DIR = Path(os.environ.get("SPECWORKER_GPU_BUILD", REPO_ROOT / "tests" / "gpu" / "_build"))


def gpu_unavailable_reason() -> str | None:
    """Why the kernels cannot run here (no CuPy, no GPU, no nvcc), or None when they can."""
    try:
        import cupy as cp
    except ImportError:
        return "CuPy is not installed (GPU kernel tests need CuPy and a CUDA GPU)"
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA GPU is visible"
    except Exception as e:  # CUDA driver missing or broken
        return f"no usable CUDA GPU ({type(e).__name__}: {e})"
    if shutil.which("nvcc") is None:
        return "nvcc is not on PATH (the harness compiles the kernels itself)"
    return None


def _arch() -> str:
    import cupy as cp

    major, minor = cp.cuda.Device().compute_capability[:1], cp.cuda.Device().compute_capability[1:]
    return f"sm_{major}{minor}"


@functools.cache
def kernels_lib() -> ctypes.CDLL:
    """Compiles all kernels into one .so (cached by a digest of the sources) and loads it."""
    sources = sorted(KERNELS_DIR.glob("*.cu"))
    digest = hashlib.sha256()
    for p in sorted(KERNELS_DIR.iterdir()):
        if p.is_file():
            digest.update(p.name.encode() + p.read_bytes())
    arch = _arch()
    lib = BUILD_DIR / f"libspecworker_kernels_{arch}_{digest.hexdigest()[:16]}.so"
    if not lib.exists():
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        cmd = ["nvcc", "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", f"-arch={arch}",
               "-lineinfo", "-o", str(lib), *map(str, sources)]
        subprocess.run(cmd, check=True)
    return ctypes.CDLL(str(lib))


def ptr(a) -> ctypes.c_void_p:
    """Device pointer of a CuPy array, or NULL for None (an omitted optional input)."""
    return ctypes.c_void_p(0 if a is None else a.data.ptr)


def stream() -> ctypes.c_void_p:
    """The current CuPy stream, read at call time (so a graph capture records the launch)."""
    import cupy as cp

    return ctypes.c_void_p(cp.cuda.get_current_stream().ptr)


def require_gpu_or_exit():
    """For the benchmark scripts: the cupy module, or exit with the reason the kernels cannot run."""
    reason = gpu_unavailable_reason()
    if reason is not None:
        raise SystemExit(f"GPU kernel benchmark cannot run: {reason}")
    import cupy as cp

    return cp
