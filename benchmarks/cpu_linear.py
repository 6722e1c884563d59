"""batch_invariant_linear on the CPU at SmolLM2-135M's shapes: ours vs paddle.matmul vs this machine's roofline.

    python benchmarks/cpu_linear.py [--out benchmarks/results/cpu_linear.json] [--table]

Shapes (K, N), SmolLM2's: gate|up (576, 3072), a 1728-wide projection (576, 1728; q/k/v fused is 960),
o_proj (576, 576), down (1536, 576) and the lm_head (576, 49152), each at M = 1, 4, 16, 64 rows.
Variants, measured side by side (round-robin over --rounds rounds, more when a round has fewer than 60
calls; each figure is the fast decile of the per-call times, the median is in the JSON):
  ours        the model's path: float32 panels from ops.pack_linear_weight, the op's thread pool (since the
              direct CPU path, ops/_cpu_linear.py: the kernel through ctypes into a paddle.empty output, no
              custom-op dispatch; SPECWORKER_CPU_LINEAR_DIRECT=0 measures the dispatched op)
  ours_bf16   bfloat16 panels (half the bytes; other values than float32, so a separate contract check)
  ours_plain  the [K, N] weight (the op's plain API)
  kernel      the panel kernel called through ctypes, no Paddle dispatch (what the kernel alone costs)
  op          the registered custom op on the same panels, through Paddle's dispatch (the path before the direct one)
  paddle_1t / paddle_2t  paddle.matmul (not batch invariant) with Paddle's CPU math at 1 / 2 threads
Every call reads its weight from DRAM as in a model step: each variant cycles through copies of the
weight that together exceed the last-level cache several times (--target-mib). The roofline of a
call is max(bytes / stream bandwidth, multiply-adds / peak of the vmulps + vaddps mix), both
measured here (benchmarks/cpu_roofline.py) at the op's thread count before the first shape and after
each one, the best of those measurements counting (the compute peak at least threads x one core's);
`mem_roofline` = (bytes / bandwidth) / time. Before timing, each shape is checked bit for bit against the documented order.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import paddle

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import cpu_roofline  # noqa: E402
from specworker.model_executor import ops  # noqa: E402
from specworker.model_executor.ops._cpu_linear import PANELS_F32, kernel_library  # noqa: E402
from specworker.model_executor.ops._extension import _run  # noqa: E402
from reference.batch_invariant_linear import ref_batch_invariant_linear_fp32_order  # noqa: E402

SHAPES = [(576, 1728), (576, 576), (576, 3072), (1536, 576), (576, 49152)]
ROWS = [1, 4, 16, 64]
MIN_SAMPLES = 60  # calls per variant at least (the lm_head has only 3 weight copies per round)


def check_bits(x_np, w_np) -> None:
    """ours (plain, panels) against the float32 order; bfloat16 panels against it on bf16-rounded weights."""
    x, w = paddle.to_tensor(x_np), paddle.to_tensor(w_np)
    want = ref_batch_invariant_linear_fp32_order(x_np, w_np).view(np.uint32)
    for layout in (w, ops.pack_linear_weight(w)):
        assert np.array_equal(ops.batch_invariant_linear(x, layout).numpy().view(np.uint32), want), "f32 order"
    w_bf16 = paddle.cast(paddle.cast(w, "bfloat16"), "float32").numpy()
    want = ref_batch_invariant_linear_fp32_order(x_np, w_bf16).view(np.uint32)
    got = ops.batch_invariant_linear(x, ops.pack_linear_weight(w, "bfloat16")).numpy().view(np.uint32)
    assert np.array_equal(got, want), "bf16 panels: not the float32 order on bf16-rounded weights"


def time_rounds(variants: dict, rounds: int) -> tuple[dict, dict]:
    """Seconds per call of each variant fn(w) over its weight copies, round-robin over `rounds` rounds:
    (fast decile, median) of the per-call times. The fast decile is what a call costs when it has the
    cores (the machine is shared); the median shows how much the load moved it."""
    samples = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (fn, copies) in variants.items():
            fn(copies[0])  # warm the code path (not the weights: copies[0] is read again last)
            for w in copies[1:] + copies[:1]:
                t = time.perf_counter()
                fn(w)
                samples[name].append(time.perf_counter() - t)
    return ({k: float(np.percentile(v, 10)) for k, v in samples.items()},
            {k: float(np.median(v)) for k, v in samples.items()})


def paddle_matmul(x, threads: int):
    def run(w):
        paddle.base.core.set_num_threads(threads)
        return paddle.matmul(x, w)
    return run


def best_limits(samples: list[dict]) -> dict:
    """The highest of each limit over its measurements: the machine's limit when it was least loaded."""
    return {key: {t: max(s[key][t] for s in samples) for t in samples[0][key]} for key in samples[0]}


def add_rooflines(row: dict, limits: dict, threads: int) -> None:
    """row's roofline times and fractions from `limits` (bytes: weights + x + out)."""
    K, N, M, t = row["K"], row["N"], row["M"], {k: v / 1e6 for k, v in row["us"].items()}
    bw = limits["stream_read_GBps"][str(threads)] * 1e9
    # Cores are alike: the compute roof is `threads` x one core's peak when the machine never gave us
    # all cores at once during a peak measurement (bandwidth is measured, it does not scale so).
    peak = max(limits["peak_muladd_GMACps"][str(threads)], threads * limits["peak_muladd_GMACps"]["1"]) * 1e9
    act = 4 * (M * K + M * N)
    t_mem = {"f32": (4 * K * N + act) / bw, "bf16": (2 * K * N + act) / bw}
    t_cmp = M * K * N / peak
    paddle_best = min(t["paddle_1t"], t["paddle_2t"])
    row.update({
        "roofline_us": {k: max(v, t_cmp) * 1e6 for k, v in t_mem.items()},
        "mem_roofline": {"ours": t_mem["f32"] / t["ours"], "kernel": t_mem["f32"] / t["kernel"],
                         "op": t_mem["f32"] / t["op"],
                         "ours_bf16": t_mem["bf16"] / t["ours_bf16"]},
        "roofline": {"ours": max(t_mem["f32"], t_cmp) / t["ours"], "ours_bf16": max(t_mem["bf16"], t_cmp) / t["ours_bf16"]},
        "speed_vs_paddle": {"ours": paddle_best / t["ours"], "ours_bf16": paddle_best / t["ours_bf16"]},
        "ours_GBps": 4 * K * N / t["ours"] / 1e9, "ours_GMACps": M * K * N / t["ours"] / 1e9})


def bench_shape(lib, K: int, N: int, args, rng) -> list[dict]:
    """Every variant at every M for one weight shape (the rooflines are added once the limits are known)."""
    w_np = (rng.standard_normal((K, N)) / math.sqrt(K)).astype(np.float32)
    check_bits(rng.standard_normal((3, K)).astype(np.float32), w_np)
    copies = max(2, math.ceil(args.target_mib * 2**20 / (K * N * 4)))
    plain = [paddle.to_tensor(w_np * np.float32(1 + 1e-3 * i)) for i in range(copies)]
    panels = [ops.pack_linear_weight(w) for w in plain]
    bf16 = [ops.pack_linear_weight(w, "bfloat16") for w in plain]
    rows = []
    for M in ROWS:
        x = paddle.to_tensor(rng.standard_normal((M, K)).astype(np.float32))
        out = np.empty((M, N), dtype=np.float32)

        def kernel(w, x=x, M=M, out=out):
            lib.specworker_batch_invariant_linear_cpu(x.data_ptr(), w.data_ptr(), PANELS_F32, None,
                                                      out.ctypes.data, M, K, N, 0)

        variants = {
            "ours": (lambda w, x=x: ops.batch_invariant_linear(x, w), panels),
            "ours_bf16": (lambda w, x=x: ops.batch_invariant_linear(x, w), bf16),
            "ours_plain": (lambda w, x=x: ops.batch_invariant_linear(x, w), plain),
            "kernel": (kernel, panels),
            "op": (lambda w, x=x: _run("batch_invariant_linear", x, w, None), panels),
            "paddle_1t": (paddle_matmul(x, 1), plain),
            "paddle_2t": (paddle_matmul(x, args.threads), plain),
        }
        t, t_median = time_rounds(variants, max(args.rounds, math.ceil(MIN_SAMPLES / copies)))
        paddle.base.core.set_num_threads(1)
        row = {"K": K, "N": N, "M": M, "weight_copies": copies, "us": {k: v * 1e6 for k, v in t.items()},
               "median_us": {k: v * 1e6 for k, v in t_median.items()}}
        rows.append(row)
        print(f"K={K:4d} N={N:5d} M={M:2d}: " + "  ".join(f"{k} {v:8.1f}" for k, v in row["us"].items()) + " us",
              flush=True)
    return rows


def markdown_table(result: dict) -> str:
    lines = ["| K x N | M | ours us | op (dispatched) us | bf16 us | [K, N] us | paddle.matmul us (1 / 2 threads) "
             "| roofline us | ours / roofline | ours / mem. roofline | op / mem. roofline | bf16 / mem. roofline "
             "| ours vs paddle |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in result["shapes"]:
        u = r["us"]
        lines.append(f"| {r['K']} x {r['N']} | {r['M']} | {u['ours']:.0f} | {u['op']:.0f} | {u['ours_bf16']:.0f} "
                     f"| {u['ours_plain']:.0f} | {u['paddle_1t']:.0f} / {u['paddle_2t']:.0f} | {r['roofline_us']['f32']:.0f} "
                     f"| {r['roofline']['ours']:.2f} | {r['mem_roofline']['ours']:.2f} | {r['mem_roofline']['op']:.2f} "
                     f"| {r['mem_roofline']['ours_bf16']:.2f} "
                     f"| {r['speed_vs_paddle']['ours']:.2f}x |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--target-mib", type=int, default=256, help="weight copies per variant, in MiB")
    parser.add_argument("--table", action="store_true", help="print the README table")
    args = parser.parse_args()
    paddle.set_device("cpu")
    lib = kernel_library()
    threads = args.threads = lib.specworker_linear_cpu_threads()
    rng = np.random.default_rng(0)
    limit_samples, rows = [cpu_roofline.measure(threads)], []
    for K, N in SHAPES:  # the limits again after every shape: the roofline uses the best of them
        rows += bench_shape(lib, K, N, args, rng)
        limit_samples.append(cpu_roofline.measure(threads))
    limits = best_limits(limit_samples)
    print(f"threads {threads}, isa {lib.specworker_linear_cpu_isa().decode()}: "
          + ", ".join(f"{k} {v}" for k, v in limits.items()), flush=True)
    for row in rows:
        add_rooflines(row, limits, threads)
    result = {"host": platform.node(), "cpu": platform.processor() or platform.machine(), "paddle": paddle.__version__,
              "isa": lib.specworker_linear_cpu_isa().decode(), "threads": threads, "limits": limits,
              "limit_samples": limit_samples, "shapes": rows}
    if args.table:
        print(markdown_table(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
