"""batch_invariant_linear on the CPU against paddle.matmul and paddle.nn.functional.linear.

    python benchmarks/cpu_batch_invariant_linear.py [--out benchmarks/results/cpu_batch_invariant_linear.json]
    SPECWORKER_LINEAR_CPU_ISA=avx2 python benchmarks/cpu_batch_invariant_linear.py   # force one path

Shapes are the tiny target model's: the MLP projections at a 64-token prefill ([64, 128] x
[128, 384] and [64, 384] x [384, 128]) and the lm_head on a decode / verify step ([1 or 4, 128] x
[128, 259]). Each time is the best of 7 rounds of back-to-back calls (microseconds per call), on
one thread as the op runs (paddle.matmul here is single-threaded too). A Paddle custom op pays a
fixed dispatch cost per call from Python; "dispatch_floor_us" is our op on [1, 1] x [1, 1], and
"kernel_est_us" = ours - floor estimates the kernel alone. Before timing, each shape is checked
bit for bit against the documented float32 order (reference/batch_invariant_linear.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import paddle

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specworker.model_executor.ops import batch_invariant_linear  # noqa: E402
from reference.batch_invariant_linear import ref_batch_invariant_linear_fp32_order  # noqa: E402

SHAPES = [(64, 128, 384), (64, 384, 128), (4, 128, 259), (1, 128, 259), (256, 128, 384)]


def best_us(fn, calls: int, rounds: int = 7) -> float:
    for _ in range(max(10, calls // 10)):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    paddle.set_device("cpu")
    rng = np.random.default_rng(0)
    one = paddle.ones([1, 1])
    floor = best_us(lambda: batch_invariant_linear(one, one), args.calls)
    rows = []
    for M, K, N in SHAPES:
        x_np = rng.standard_normal((M, K)).astype(np.float32)
        w_np = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
        b_np = rng.standard_normal(N).astype(np.float32)
        x, w, b = paddle.to_tensor(x_np), paddle.to_tensor(w_np), paddle.to_tensor(b_np)
        got = batch_invariant_linear(x, w, b).numpy()
        want = ref_batch_invariant_linear_fp32_order(x_np, w_np, b_np)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"{M}x{K}x{N}: not the documented order"
        ours = best_us(lambda: batch_invariant_linear(x, w, b), args.calls)
        ours_nobias = best_us(lambda: batch_invariant_linear(x, w), args.calls)
        matmul = best_us(lambda: paddle.matmul(x, w), args.calls)
        linear = best_us(lambda: paddle.nn.functional.linear(x, w, b), args.calls)
        row = {"M": M, "K": K, "N": N, "ours_us": ours, "ours_no_bias_us": ours_nobias,
               "paddle_matmul_us": matmul, "paddle_linear_us": linear,
               "ratio_vs_matmul": ours_nobias / matmul, "ratio_vs_linear": ours / linear,
               "kernel_est_us": max(ours_nobias - floor, 0.0),
               "kernel_est_ratio_vs_matmul": max(ours_nobias - floor, 0.0) / matmul}
        rows.append(row)
        print(f"[{M:>3}, {K}] x [{K}, {N}]: ours {ours_nobias:7.1f} us (bias {ours:7.1f})  "
              f"paddle.matmul {matmul:6.1f} us  F.linear {linear:6.1f} us  "
              f"ours/matmul {row['ratio_vs_matmul']:.2f}  kernel est {row['kernel_est_us']:6.1f} us "
              f"({row['kernel_est_ratio_vs_matmul']:.2f}x matmul)", flush=True)
    print(f"dispatch floor (our op on [1, 1] x [1, 1]): {floor:.1f} us")
    result = {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
              "isa_env": os.environ.get("SPECWORKER_LINEAR_CPU_ISA", "auto"), "paddle": paddle.__version__,
              "dispatch_floor_us": floor, "shapes": rows}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
