"""The issue-9 GPU targets, all measured in ONE run on one machine, as ratios against same-run baselines.

    python3 benchmarks/gpu_targets.py [--out benchmarks/results/gpu_targets.json]

Needs a CUDA GPU, nvcc, CuPy and PyTorch (no Paddle); kernels are built by tests/gpu/harness.py.
Each row reuses the per-op benchmark's workload and output check (gpu_pre_process.py, gpu_penalty.py,
gpu_top_p_candidates.py, gpu_verify.py), so a wrong kernel fails before anything is timed:
  pre_process       B=256, k=3: speculate_pre_process (one launch) as a CUDA-graph replay (device
                    time per step; the step is capturable because nothing syncs) vs the refactor's
                    unfused path with its blocking T_out read (eager: the sync makes it uncapturable).
                    Target: <= 6 us and >= 3x.
  rebuild_padding   H=7168 bf16, 1024 rows: gather vs a device-to-device copy of the same bytes, both
                    as CUDA-graph replays (eager loops of a ctypes launch partly time the host; the
                    eager numbers are in details). Target: >= 80% of copy bandwidth (ratio = copy
                    time / gather time).
  penalty           V=151936, 1024 rows, float32: vs the PyTorch composite (>= 2x) and vs a copy of
                    the logits (>= 60% of copy bandwidth).
  top_p_candidates  V=151936, 1024 rows, C=5: vs torch.topk + cumsum + searchsorted (>= 2x).
  verify            greedy, B=1024, k=5: <= 10 us per launch (CUDA-graph replay; eager in details).
Rows: {name, ours_us, baseline, baseline_us, ratio, target, met}; the per-op details go under "details".
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_cli import kernel_bench_parser, write_report  # noqa: E402
from benchmarks import gpu_penalty, gpu_pre_process, gpu_top_p_candidates, gpu_verify  # noqa: E402
from kernel_harness import kernels_lib, require_gpu_or_exit  # noqa: E402
from kernel_harness import raw_launcher as top_p_launcher  # noqa: E402
from kernel_harness.speculate_verify import launch_args, raw_launcher  # noqa: E402


def row(name, ours_us, baseline, baseline_us, ratio, target, met):
    return {"name": name, "ours_us": ours_us, "baseline": baseline, "baseline_us": baseline_us, "ratio": ratio,
            "target": target, "met": bool(met)}


def pre_process_rows(cp, iters):
    r = gpu_pre_process.bench_pre_process(cp, 256, 3, iters)
    ours, base = r["fused_graph_us"], r["refactor_us"]
    return [row("pre_process B=256 k=3 (fused, graph replay)", ours,
                "refactor unfused path + blocking T_out read (eager)", base, base / ours,
                "<= 6 us and >= 3x", ours <= 6.0 and base / ours >= 3.0)], r


def rebuild_padding_rows(cp):
    r = gpu_pre_process.bench_rebuild_padding(cp)
    return [row("rebuild_padding H=7168 bf16 1024 rows (graph)", r["gather_us"], "device copy of the same bytes",
                r["copy_us"], r["fraction_of_copy"], ">= 0.80 of copy bandwidth", r["fraction_of_copy"] >= 0.80)], r


def penalty_rows(torch):
    args = gpu_penalty.parse_args(["--configs", "main", "--dtypes", "float32"])
    cfg = {"vocab": args.vocab, "slots": args.slots, "rows_per_slot": args.rows_per_slot, "hist_len": args.hist_len,
           "max_model_len": args.max_model_len, "bad_words": args.bad_words, "eos": args.eos, "drafts": True,
           "temperature": (0.6, 1.2), "zipf": True, "dtype": "float32"}
    r = gpu_penalty.bench_config(torch, "main", cfg, args)
    ours, tc, cpy = (r[k]["median_ms"] * 1e3 for k in ("ours", "torch_composite", "copy"))
    return [row("penalty V=151936 1024 rows fp32 vs torch", ours, "PyTorch composite", tc, tc / ours, ">= 2x",
                tc / ours >= 2.0),
            row("penalty V=151936 1024 rows fp32 vs copy", ours, "device copy of the logits", cpy, cpy / ours,
                ">= 0.60 of copy bandwidth", cpy / ours >= 0.60)], r


def top_p_rows(torch, iters):
    fn = top_p_launcher("specworker_top_p_candidates_launch")
    r = gpu_top_p_candidates.bench(torch, fn, 1024, gpu_top_p_candidates.QWEN_VOCAB, 5, iters)
    ours, base = r["ours_us"], r["torch_topk_cumsum_us"]
    return [row("top_p_candidates V=151936 1024 rows C=5", ours, "torch.topk + cumsum + searchsorted", base,
                base / ours, ">= 2x", base / ours >= 2.0)], r


def verify_rows(cp, iters):
    case, dev = gpu_verify.make_case(cp, "greedy", 1024, 5, gpu_verify.STRATEGY_VOCAB["greedy"])
    fn = raw_launcher()
    eager = gpu_verify.time_stream(cp, fn, launch_args(case, dev), iters)
    graph = gpu_verify.time_graph(cp, case, dev, iters)
    ours = graph if graph is not None else eager
    return [row("verify greedy B=1024 k=5 (graph replay)", ours, None, None, None, "<= 10 us", ours <= 10.0)], \
        {"eager_us": eager, "graph_us": graph}


def main() -> int:
    parser = kernel_bench_parser(__doc__, "gpu_targets", iters=2000, iters_help="launches per latency measurement")
    opts = parser.parse_args()
    cp = require_gpu_or_exit()
    import torch

    t0 = time.time()
    kernels_lib()  # build once before timing
    rows, details = [], {}
    for key, fn in (("pre_process", lambda: pre_process_rows(cp, opts.iters)),
                    ("rebuild_padding", lambda: rebuild_padding_rows(cp)),
                    ("penalty", lambda: penalty_rows(torch)),
                    ("top_p_candidates", lambda: top_p_rows(torch, 50)),
                    ("verify", lambda: verify_rows(cp, 500))):
        new_rows, details[key] = fn()
        rows.extend(new_rows)
        cp.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
    header = f"{'target':<46} {'ours us':>9} {'baseline us':>12} {'ratio':>7}  {'target':<26} met"
    print(header)
    print("-" * len(header))
    for r in rows:
        base = "-" if r["baseline_us"] is None else f"{r['baseline_us']:.2f}"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['name']:<46} {r['ours_us']:>9.2f} {base:>12} {ratio:>7}  {r['target']:<26} "
              f"{'yes' if r['met'] else 'NO'}")
    report = {
        "benchmark": "gpu_targets (issue 9), one run",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cupy": cp.__version__,
        "python": platform.python_version(),
        "wall_s": time.time() - t0,
        "rows": rows,
        "details": details,
    }
    write_report(opts.out, report, default=float)
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
