"""Where the custom-op sources live and how a build is recognised as current.

Shared by custom_ops/setup_ops.py (which builds) and ops/_extension.py (which loads), so
the source list is derived from the directory layout in exactly one place.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
OPS_ROOT = REPO_ROOT / "custom_ops"
BUILD_DIR = REPO_ROOT / "build" / "ops"
MODULE_NAME = "specworker_ops"
LIBRARY = BUILD_DIR / f"{MODULE_NAME}.so"
MANIFEST = BUILD_DIR / "manifest.json"
CUDA_DEFINE = "SPECWORKER_WITH_CUDA"

_DIGEST_SUFFIXES = (".cc", ".cu", ".h", ".cuh")


# GPU targets of the Paddle CUDA build (SPECWORKER_CUDA_ARCHS overrides, e.g. "80 90a"): Paddle's CUDAExtension
# passes no -arch, and nvcc's default target has no bf16 MMA (the bf16 kernels' device code would trap); sm_90a
# adds the wgmma path of batch_invariant_linear_bf16. PTX for compute_90 runs (JIT, mma.sync path) on later GPUs.
DEFAULT_CUDA_ARCHS = ("80", "90a")


def cuda_gencode_flags(archs: str | None = None) -> list[str]:
    """nvcc -gencode flags for the archs (space / comma / semicolon separated; None: $SPECWORKER_CUDA_ARCHS, else
    DEFAULT_CUDA_ARCHS), plus compute_90 PTX. Raises ValueError naming the value when an arch is not digits with
    an optional trailing "a", or is below 80 (the bf16 kernels need sm_80)."""
    text = os.environ.get("SPECWORKER_CUDA_ARCHS") if archs is None else archs
    names = [a for a in re.split(r"[\s,;]+", text.strip()) if a] if text else list(DEFAULT_CUDA_ARCHS)
    for a in names:
        if not re.fullmatch(r"\d+a?", a) or int(a.rstrip("a")) < 80:
            raise ValueError(f"SPECWORKER_CUDA_ARCHS = {text!r}: arch {a!r}; allowed: compute capabilities >= 80 "
                             "written like 80, 86, 90a (space separated)")
    if not names:
        raise ValueError(f"SPECWORKER_CUDA_ARCHS = {text!r}: no arch; allowed: e.g. \"80 90a\"")
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in dict.fromkeys(names)]
    return flags + ["-gencode=arch=compute_90,code=compute_90"]


def cpu_sources(root: Path = OPS_ROOT) -> list[Path]:
    """cpu_ops/<op>.cc (CPU kernel or binding + the op's single registration) and
    cpu_ops/kernels/*.cc (framework-neutral CPU kernels and their thread pool)."""
    return sorted((root / "cpu_ops").glob("*.cc")) + sorted((root / "cpu_ops" / "kernels").glob("*.cc"))


def cuda_sources(root: Path = OPS_ROOT) -> list[Path]:
    """gpu_ops/<op>.cu (Paddle bindings) + gpu_ops/kernels/<op>.cu (framework-neutral)."""
    return sorted((root / "gpu_ops").glob("*.cu")) + sorted((root / "gpu_ops" / "kernels").glob("*.cu"))


def op_sources(with_cuda: bool, root: Path = OPS_ROOT) -> list[Path]:
    return cpu_sources(root) + (cuda_sources(root) if with_cuda else [])


def source_digest(root: Path = OPS_ROOT) -> str:
    """sha256 over every file the build reads (sources and headers) and the build script."""
    files = [p for p in root.rglob("*") if p.is_file() and p.suffix in _DIGEST_SUFFIXES]
    files.append(root / "setup_ops.py")
    h = hashlib.sha256()
    for p in sorted(files):
        h.update(str(p.relative_to(root)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()


def read_manifest() -> dict | None:
    try:
        return json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return None
