"""The one table of ctypes signatures of the extern "C" launchers, read from their declarations in
custom_ops/gpu_ops/kernels/*.h, so a launcher's argument list is written down only in its header.

    launcher("specworker_rebuild_padding_launch")(*args)  # raises on a CUDA error, then syncs
    raw_launcher("specworker_rebuild_padding_launch")     # returns the cudaError_t as int
"""

from __future__ import annotations

import ctypes
import functools
import re

from kernel_harness.build import KERNELS_DIR, kernels_lib

# C parameter type (pointers folded to "*") -> ctypes type.
_CTYPES = {"*": ctypes.c_void_p, "cudaStream_t": ctypes.c_void_p, "int": ctypes.c_int,
           "int64_t": ctypes.c_int64, "float": ctypes.c_float}
_DECL = re.compile(r"\bint\s+(specworker_\w+_launch)\s*\(([^)]*)\)\s*;")


def _ctype(param: str) -> type:
    """The ctypes type of one declared parameter, e.g. "const int32_t* cu_seqlens_q" -> c_void_p."""
    words = param.replace("*", " * ").split()
    key = "*" if "*" in words else words[-2]
    if key not in _CTYPES:
        raise ValueError(f"launcher parameter {param!r}: no ctypes type for {key!r}")
    return _CTYPES[key]


def _read_signatures() -> dict[str, tuple[type, ...]]:
    table = {}
    for header in sorted(KERNELS_DIR.glob("*.h")):
        text = re.sub(r"//[^\n]*", "", header.read_text())
        for name, params in _DECL.findall(text):
            table[name] = tuple(_ctype(" ".join(p.split())) for p in params.split(","))
    return table


SIGNATURES: dict[str, tuple[type, ...]] = _read_signatures()


@functools.cache
def raw_launcher(name: str):
    """The extern "C" launcher `name` with its argtypes set; returns the cudaError_t as int and
    does not synchronize (for timing loops and graph capture)."""
    if name not in SIGNATURES:
        raise KeyError(f"{name} is not declared in {KERNELS_DIR}/*.h")
    fn = getattr(kernels_lib(), name)
    fn.argtypes = list(SIGNATURES[name])
    fn.restype = ctypes.c_int
    return fn


def launcher(name: str):
    """The launcher `name`; a call raises if it returns a CUDA error and waits for the stream."""
    fn = raw_launcher(name)

    def call(*args):
        err = fn(*args)
        if err != 0:
            raise RuntimeError(f"{name} returned cudaError {err}")
        import cupy as cp

        cp.cuda.get_current_stream().synchronize()

    return call
