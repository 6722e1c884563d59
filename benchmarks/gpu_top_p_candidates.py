"""top_p_candidates on the GPU: our one-pass kernel against torch.topk + cumsum + searchsorted.

Runs on a GPU machine with nvcc, CuPy and PyTorch (no Paddle): the kernels are built by
tests/gpu/harness.py and launched through ctypes on PyTorch's current stream.
    python3 benchmarks/gpu_top_p_candidates.py [--out benchmarks/results/gpu_top_p_candidates.json]

Workload: probs = softmax(randn) [rows, V] float32, 4 rows per slot, per-slot top_p in
[0.5, 1.0). Baseline: top_p gathered per row, torch.topk(probs, C), cumsum, and the candidate
count as searchsorted(cumsum, top_p) + 1 clamped to C (our [ours] rule). Before timing, our
outputs are checked: scores equal torch's top-k values, ids equal torch's wherever the value is
not tied, lengths equal a sequential float32 recount, and 32 rows equal the numpy reference
exactly. Times are CUDA-event medians after warm-up. Target: >= 2x at V = 151936, 1024 rows, C = 5.
"""

from __future__ import annotations

import ctypes
import platform
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_cli import kernel_bench_parser, write_report  # noqa: E402
from benchmarks.timing import torch_event_runs  # noqa: E402
from kernel_harness import raw_launcher, require_gpu_or_exit as require_kernels  # noqa: E402
from reference.top_p_candidates import ref_top_p_candidates  # noqa: E402

P = ctypes.c_void_p
QWEN_VOCAB = 151936
TARGET = {"vocab": QWEN_VOCAB, "rows": 1024, "C": 5, "min_speedup": 2.0}


def time_events(torch, fn, iters, warmup=10, repeats=5):
    """Median over `repeats` of the mean time per call (us) of `iters` back-to-back calls."""
    return float(np.median(torch_event_runs(torch, fn, iters, warmup, repeats)))


def check(torch, probs, top_p_rows, batch_ids, top_p, C, ours_out):
    """Raises AssertionError when our outputs disagree with torch or the reference."""
    scores, tokens, lens = ours_out
    vals, ids = torch.topk(probs, C + 1, dim=-1)  # one extra to see ties at the cut
    # Only the first lens[t] entries are candidates; the rest are token -1, score 0.
    kept = torch.arange(C, device=lens.device)[None, :] < lens[:, None].long()
    assert torch.equal(scores[kept], vals[:, :C][kept]), "scores differ from torch.topk values"
    assert bool((scores[~kept] == 0).all()) and bool((tokens[~kept] == -1).all()), \
        "entries past actual_candidate_lens are not -1 / 0"
    # torch.topk does not promise an order among equal values; compare ids where not tied.
    tied = torch.zeros_like(vals, dtype=torch.bool)
    tied[:, 1:] |= vals[:, 1:] == vals[:, :-1]
    tied[:, :-1] |= vals[:, :-1] == vals[:, 1:]
    tied, ids = tied[:, :C], ids[:, :C]
    assert torch.equal(tokens[kept & ~tied], ids[kept & ~tied]), "ids differ from torch.topk at untied positions"
    s = vals[:, :C].cpu().numpy()
    p = top_p_rows.cpu().numpy()
    want = np.full(s.shape[0], C, np.int32)
    for t in range(s.shape[0]):  # sequential float32 sums, as the op defines them
        cum = np.float32(0)
        for r in range(C):
            cum = np.float32(cum + s[t, r])
            if cum >= p[t]:
                want[t] = r + 1
                break
    assert np.array_equal(lens.cpu().numpy(), want), "lengths differ from a sequential float32 recount"
    sub = slice(0, 32)
    ref = ref_top_p_candidates(probs[sub].cpu().numpy(), top_p.cpu().numpy(), batch_ids[sub].cpu().numpy(), C)
    for got, exp in zip((scores[sub], tokens[sub], lens[sub]), ref):
        assert np.array_equal(got.cpu().numpy(), exp), "first 32 rows differ from the numpy reference"
    return int(tied.any(dim=1).sum())


def bench(torch, launch, rows, vocab, C, iters):
    gen = torch.Generator(device="cuda").manual_seed(rows * 100 + C)
    probs = torch.softmax(torch.randn(rows, vocab, device="cuda", generator=gen) * 3.0, dim=-1).contiguous()
    num_slots = rows // 4
    top_p = (0.5 + 0.5 * torch.rand(num_slots, device="cuda", generator=gen)).float()
    batch_ids = torch.arange(num_slots, device="cuda", dtype=torch.int32).repeat_interleave(4)
    scores = torch.empty(rows, C, device="cuda", dtype=torch.float32)
    tokens = torch.empty(rows, C, device="cuda", dtype=torch.int64)
    lens = torch.empty(rows, device="cuda", dtype=torch.int32)

    def ours():
        err = launch(P(probs.data_ptr()), P(top_p.data_ptr()), P(batch_ids.data_ptr()), rows, vocab, num_slots, C,
                     P(scores.data_ptr()), P(tokens.data_ptr()), P(lens.data_ptr()),
                     P(torch.cuda.current_stream().cuda_stream))
        if err != 0:
            raise RuntimeError(f"specworker_top_p_candidates_launch returned cudaError {err}")

    def baseline():
        row_top_p = top_p[batch_ids.long()]
        vals, ids = torch.topk(probs, C, dim=-1)
        cum = vals.cumsum(dim=-1)
        n = torch.searchsorted(cum, row_top_p[:, None].contiguous()).squeeze(1) + 1
        return vals, ids, n.clamp_(max=C).int()

    ours()
    torch.cuda.synchronize()
    rows_with_ties = check(torch, probs, top_p[batch_ids.long()], batch_ids, top_p, C, (scores, tokens, lens))
    t_ours = time_events(torch, ours, iters)
    t_base = time_events(torch, baseline, iters)
    gbytes = probs.numel() * 4 / 1e9
    return {"rows": rows, "vocab": vocab, "C": C, "ours_us": t_ours, "torch_topk_cumsum_us": t_base,
            "speedup": t_base / t_ours, "ours_gb_per_s": gbytes / (t_ours * 1e-6),
            "rows_with_tied_top_c": rows_with_ties}


def main():
    parser = kernel_bench_parser(__doc__, "gpu_top_p_candidates", iters=50)
    args = parser.parse_args()
    require_gpu_or_exit()
    import torch

    fn = raw_launcher("specworker_top_p_candidates_launch")
    shapes = [(1024, QWEN_VOCAB, 5), (1024, QWEN_VOCAB, 1), (1024, QWEN_VOCAB, 10), (256, QWEN_VOCAB, 5),
              (1024, 32000, 5), (1024, QWEN_VOCAB, 20)]
    results = [bench(torch, fn, rows, vocab, C, args.iters) for rows, vocab, C in shapes]

    print(f"{'rows':>5} {'vocab':>7} {'C':>3} {'ours us':>9} {'torch us':>9} {'speedup':>8} {'ours GB/s':>9}")
    for r in results:
        print(f"{r['rows']:>5} {r['vocab']:>7} {r['C']:>3} {r['ours_us']:>9.1f} {r['torch_topk_cumsum_us']:>9.1f} "
              f"{r['speedup']:>7.2f}x {r['ours_gb_per_s']:>9.0f}")
    target = next(r for r in results if (r["vocab"], r["rows"], r["C"]) == (TARGET["vocab"], TARGET["rows"], TARGET["C"]))
    met = target["speedup"] >= TARGET["min_speedup"]
    print(f"target {TARGET}: speedup {target['speedup']:.2f}x -> {'met' if met else 'NOT met'}")
    report = {
        "benchmark": "top_p_candidates: one-pass kernel vs torch.topk + cumsum + searchsorted",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "iters": args.iters,
        "results": results,
        "target": {**TARGET, "speedup": target["speedup"], "met": met},
    }
    write_report(args.out, report)


def require_gpu_or_exit():
    require_kernels()
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("PyTorch is needed for the baseline (pip install torch)") from None


if __name__ == "__main__":
    main()
