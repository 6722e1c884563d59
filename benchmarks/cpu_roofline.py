"""This machine's limits for the CPU linear kernel's roofline: streaming read bandwidth and the peak of
its instruction mix, from small C loops compiled with gcc into a temporary library (ctypes).

    stream_read   sums a 512 MiB float32 buffer (8 independent AVX-512 accumulators: bound by memory)
    peak_muladd   12 independent chains of vmulps + vaddps on registers: the kernel's mix (no FMA)
    peak_fma      12 independent chains of vfmadd231ps: what a BLAS uses, for comparison

Threads are Python threads calling into the library (ctypes releases the GIL); every figure is the
best of many short runs, because the machine is shared and a run only counts when it got the cores.
"""

from __future__ import annotations

import ctypes
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

C_SOURCE = r"""
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
__attribute__((target("avx512f"))) float stream_read(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));      a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32)); a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
    a4 = _mm512_add_ps(a4, _mm512_loadu_ps(p + i + 64)); a5 = _mm512_add_ps(a5, _mm512_loadu_ps(p + i + 80));
    a6 = _mm512_add_ps(a6, _mm512_loadu_ps(p + i + 96)); a7 = _mm512_add_ps(a7, _mm512_loadu_ps(p + i + 112));
  }
  a0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                     _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  return _mm512_reduce_add_ps(a0);
}
#define MA(i, t) "vmulps %%zmm30, %%zmm31, %%zmm" #t "\n\tvaddps %%zmm" #t ", %%zmm" #i ", %%zmm" #i "\n\t"
void peak_muladd(int64_t iters) {  /* 12 x (16 multiplies + 16 adds) per iteration */
  __asm__ volatile("vxorps %%xmm30, %%xmm30, %%xmm30\n\tvxorps %%xmm31, %%xmm31, %%xmm31\n\t1:\n\t"
                   MA(0, 12) MA(1, 13) MA(2, 14) MA(3, 15) MA(4, 16) MA(5, 17)
                   MA(6, 18) MA(7, 19) MA(8, 20) MA(9, 21) MA(10, 22) MA(11, 23)
                   "dec %0\n\tjnz 1b\n\t" : "+r"(iters) :: "memory");
}
#define F(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
void peak_fma(int64_t iters) {  /* 12 x 16 fused multiply-adds per iteration */
  __asm__ volatile("vxorps %%xmm30, %%xmm30, %%xmm30\n\tvxorps %%xmm31, %%xmm31, %%xmm31\n\t1:\n\t"
                   F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11)
                   "dec %0\n\tjnz 1b\n\t" : "+r"(iters) :: "memory");
}
"""
MACS_PER_ITER = 12 * 16


def build_library() -> ctypes.CDLL:
    tmp = Path(tempfile.mkdtemp(prefix="specworker_roofline_"))
    src, lib = tmp / "roofline.c", tmp / "roofline.so"
    src.write_text(C_SOURCE)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    dll = ctypes.CDLL(str(lib))
    dll.stream_read.argtypes, dll.stream_read.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_float
    for f in (dll.peak_muladd, dll.peak_fma):
        f.argtypes, f.restype = [ctypes.c_int64], None
    return dll


def _best_parallel(calls: list[tuple], repeats: int) -> float:
    """Best wall time of running every (fn, *args) in `calls` at once, one Python thread each."""
    best = float("inf")
    for _ in range(repeats):
        threads = [threading.Thread(target=c[0], args=c[1:]) for c in calls]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        best = min(best, time.perf_counter() - t)
    return best


def stream_bandwidth(dll, threads: int, mib: int = 512, repeats: int = 12) -> float:
    """Bytes per second of a streaming read of `mib` MiB split across `threads` threads."""
    n = mib * 1024 * 1024 // 4
    buf = np.ones(n, dtype=np.float32)
    per = n // threads // 128 * 128
    calls = [(dll.stream_read, buf.ctypes.data + i * per * 4, per) for i in range(threads)]
    return per * threads * 4 / _best_parallel(calls, repeats)


def peak_macs(dll, kind: str, threads: int, iters: int = 400_000, repeats: int = 60) -> float:
    """Multiply-adds per second of the register-only loop `kind` ("muladd" or "fma") on `threads` threads."""
    fn = dll.peak_muladd if kind == "muladd" else dll.peak_fma
    return iters * MACS_PER_ITER * threads / _best_parallel([(fn, iters)] * threads, repeats)


def measure(threads: int) -> dict:
    """Every limit at 1 thread and at `threads` threads."""
    dll = build_library()
    counts = sorted({1, threads})
    return {
        "stream_read_GBps": {str(t): stream_bandwidth(dll, t) / 1e9 for t in counts},
        "peak_muladd_GMACps": {str(t): peak_macs(dll, "muladd", t) / 1e9 for t in counts},
        "peak_fma_GMACps": {str(t): peak_macs(dll, "fma", t) / 1e9 for t in counts},
    }
