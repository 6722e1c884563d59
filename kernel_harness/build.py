"""Compiles every custom_ops/gpu_ops/kernels/*.cu with nvcc into one shared library, cached by a
digest of the kernel sources, and hands out device pointers and the current stream for ctypes."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
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


def _gencode(arch: str) -> str:
    """nvcc's target for the GPU: sm_90 builds for sm_90a, the arch-specific target that has wgmma (the bf16
    linear's Hopper tiles); other GPUs get their own target."""
    num = arch.removeprefix("sm_")
    num = "90a" if num == "90" else num
    return f"-gencode=arch=compute_{num},code=sm_{num}"


@functools.cache
def kernels_lib() -> ctypes.CDLL:
    """Compiles all kernels into one .so (cached by a digest of the sources and flags) and loads it. Each
    source compiles on its own, in parallel; the objects are then linked."""
    sources = sorted(KERNELS_DIR.glob("*.cu"))
    flags = ["-O3", "-std=c++17", "-Xcompiler", "-fPIC", _gencode(_arch()), "-lineinfo"]
    digest = hashlib.sha256(" ".join(flags).encode())
    for p in sorted(KERNELS_DIR.iterdir()):
        if p.is_file():
            digest.update(p.name.encode() + p.read_bytes())
    lib = BUILD_DIR / f"libspecworker_kernels_{_arch()}_{digest.hexdigest()[:16]}.so"
    if not lib.exists():
        objs = BUILD_DIR / f"obj_{digest.hexdigest()[:16]}"
        objs.mkdir(parents=True, exist_ok=True)

        def compile_one(src: Path) -> Path:
            obj = objs / f"{src.stem}.o"
            subprocess.run(["nvcc", *flags, "-c", "-o", str(obj), str(src)], check=True)
            return obj

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            built = list(pool.map(compile_one, sources))
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["nvcc", "-shared", "-o", str(tmp), *map(str, built)], check=True)
        tmp.replace(lib)  # atomic: a concurrent loader never sees a half-written library
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
