"""Where the custom-op sources live and how a build is recognised as current.

Shared by custom_ops/setup_ops.py (which builds) and ops/_extension.py (which loads), so
the source list is derived from the directory layout in exactly one place.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
OPS_ROOT = REPO_ROOT / "custom_ops"
BUILD_DIR = REPO_ROOT / "build" / "ops"
MODULE_NAME = "specworker_ops"
LIBRARY = BUILD_DIR / f"{MODULE_NAME}.so"
MANIFEST = BUILD_DIR / "manifest.json"
CUDA_DEFINE = "SPECWORKER_WITH_CUDA"

_DIGEST_SUFFIXES = (".cc", ".cu", ".h", ".cuh")


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
