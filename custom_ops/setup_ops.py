"""Build the specworker custom ops into one Paddle extension: build/ops/specworker_ops.so.

    python custom_ops/setup_ops.py          # build if the sources changed, else do nothing
    python custom_ops/setup_ops.py --force  # always rebuild

A CppExtension from cpu_ops/*.cc when Paddle has no CUDA; a CUDAExtension that adds
gpu_ops/*.cu and gpu_ops/kernels/*.cu when it has. The lists come from the directory
layout (specworker.model_executor.op_build), never from a hand-written list, so a
deleted or added op cannot leave the build stale (review defect #11).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specworker.model_executor import op_build  # noqa: E402


def _needs_build(with_cuda: bool) -> bool:
    manifest = op_build.read_manifest()
    return not (
        op_build.LIBRARY.exists()
        and manifest is not None
        and manifest.get("digest") == op_build.source_digest()
        and manifest.get("with_cuda") == with_cuda
    )


def build(force: bool = False) -> None:
    warnings.filterwarnings("ignore", message="No ccache found")
    import paddle
    from paddle.utils.cpp_extension import CppExtension, CUDAExtension, setup

    with_cuda = bool(paddle.is_compiled_with_cuda())
    if not force and not _needs_build(with_cuda):
        print(f"ops: {op_build.LIBRARY.relative_to(op_build.REPO_ROOT)} is current, skipping build")
        return
    sources = [str(p) for p in op_build.op_sources(with_cuda)]
    include = [str(op_build.OPS_ROOT / "include"), str(op_build.OPS_ROOT / "gpu_ops")]
    cxx = ["-O3", "-std=c++17"]
    if with_cuda:
        try:
            gencode = op_build.cuda_gencode_flags()
        except ValueError as err:
            raise SystemExit(f"ops: {err}") from None
        nvcc = ["-O3", "-std=c++17", f"-D{op_build.CUDA_DEFINE}", *gencode]
        ext = CUDAExtension(sources=sources, include_dirs=include,
                            extra_compile_args={"cxx": cxx + [f"-D{op_build.CUDA_DEFINE}"], "nvcc": nvcc})
    else:
        ext = CppExtension(sources=sources, include_dirs=include, extra_compile_args={"cxx": cxx})
    print(f"ops: building {len(sources)} sources ({'CUDA' if with_cuda else 'CPU'}) ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="specworker_ops_") as tmp:
        setup(
            name=op_build.MODULE_NAME,
            ext_modules=[ext],
            script_args=["-q", "build_ext", "--build-lib", f"{tmp}/lib", "--build-temp", f"{tmp}/obj"],
        )
        built = list(Path(tmp, "lib").rglob(f"{op_build.MODULE_NAME}*.so"))
        if len(built) != 1:
            raise SystemExit(f"ops: expected one {op_build.MODULE_NAME}*.so from the build, found {built}")
        op_build.BUILD_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[0], op_build.LIBRARY)
    manifest = {
        "digest": op_build.source_digest(),
        "with_cuda": with_cuda,
        "paddle": paddle.__version__,
        "sources": [str(Path(s).relative_to(op_build.OPS_ROOT)) for s in sources],
    }
    op_build.MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"ops: built {op_build.LIBRARY.relative_to(op_build.REPO_ROOT)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if the sources are unchanged")
    build(force=parser.parse_args().force)
