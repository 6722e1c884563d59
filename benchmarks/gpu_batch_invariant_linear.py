"""batch_invariant_linear on the GPU against cuBLAS (cupy.matmul), and whether cuBLAS is batch
invariant on the same inputs.

Runs on a GPU machine with nvcc + CuPy (no Paddle): the kernels are built by kernel_harness.
    python3 benchmarks/gpu_batch_invariant_linear.py [--out benchmarks/results/gpu_batch_invariant_linear.json]

Per shape: our kernel is checked bit for bit against the documented float32 order (first rows),
then timed back to back with CUDA events and as a CUDA-graph replay; cupy.matmul (cuBLAS, TF32
off) is timed the same way. "cublas_row_diff" is max |row 0 computed at M = 1 - row 0 at M|
for cuBLAS (ours is 0 by construction and checked).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_cli import device_row, kernel_bench_parser, write_report  # noqa: E402
from benchmarks.timing import stream_ptr, time_events, time_graph  # noqa: E402
from kernel_harness import ptr, raw_launcher, require_gpu_or_exit  # noqa: E402
from reference.batch_invariant_linear import ref_batch_invariant_linear_fp32_order  # noqa: E402

# tiny model: decode / verify lm_head, prefill MLP; then a 7B-sized projection for scale.
SHAPES = [(1, 128, 259), (4, 128, 259), (64, 128, 384), (64, 384, 128), (2048, 128, 384), (4096, 4096, 4096)]


def bench(cp, launch, M, K, N, iters):
    rng = np.random.default_rng(M + K + N)
    x_np = rng.standard_normal((M, K)).astype(np.float32)
    w_np = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    x, w = cp.asarray(x_np), cp.asarray(w_np)
    out = cp.empty((M, N), dtype=cp.float32)
    row0 = cp.empty((1, N), dtype=cp.float32)

    def ours():
        err = launch(ptr(x), ptr(w), None, ptr(out), M, K, N, stream_ptr(cp))
        if err != 0:
            raise RuntimeError(f"specworker_batch_invariant_linear_launch returned cudaError {err}")

    ours()
    err = launch(ptr(x), ptr(w), None, ptr(row0), 1, K, N, stream_ptr(cp))
    assert err == 0, f"launch returned cudaError {err}"
    got = cp.asnumpy(out)
    check_rows = min(M, 64)
    want = ref_batch_invariant_linear_fp32_order(x_np[:check_rows], w_np)
    assert np.array_equal(got[:check_rows].view(np.uint32), want.view(np.uint32)), "not the documented order"
    assert np.array_equal(got[:1].view(np.uint32), cp.asnumpy(row0).view(np.uint32)), "row 0 differs at M = 1"

    def cublas():
        cp.matmul(x, w, out=out)

    cublas_diff = float(cp.abs(cp.matmul(x[:1], w) - cp.matmul(x, w)[:1]).max())
    t_ours, t_cublas = time_events(cp, ours, iters), time_events(cp, cublas, iters)
    try:
        t_cublas_graph = time_graph(cp, cublas, iters)
    except Exception as e:  # cuBLAS may refuse capture (workspace); report instead of failing
        t_cublas_graph = f"capture failed: {type(e).__name__}: {e}"
    return {"M": M, "K": K, "N": N, "ours_us": t_ours, "ours_graph_us": time_graph(cp, ours, iters),
            "cublas_us": t_cublas, "cublas_graph_us": t_cublas_graph,
            "ratio_vs_cublas": t_ours / t_cublas, "ours_gflops": 2 * M * K * N / (t_ours * 1e3),
            "cublas_row_diff": cublas_diff}


def main():
    parser = kernel_bench_parser(__doc__, "gpu_batch_invariant_linear", iters=200)
    args = parser.parse_args()
    cp = require_gpu_or_exit()
    launch = raw_launcher("specworker_batch_invariant_linear_launch")
    rows = []
    for M, K, N in SHAPES:
        row = bench(cp, launch, M, K, N, args.iters if M * K * N < 1e9 else 20)
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {**device_row(cp), "batch_invariant_linear": rows}
    write_report(args.out, result)


if __name__ == "__main__":
    main()
