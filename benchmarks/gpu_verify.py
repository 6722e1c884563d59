"""GPU benchmark of the speculate_verify launcher (CuPy + the standalone kernel library; no Paddle).

    python benchmarks/gpu_verify.py [--iters 500] [--out benchmarks/results/gpu_verify.json]

For every strategy (greedy; rejection over V = 32000), bsz in {1, 64, 256, 1024} and k in
{1, 3, 5}: all slots decode k drafts that agree with the target ~80% of the time. Times the
launcher with CUDA events over many back-to-back launches on one stream and, when CuPy can
capture, as a CUDA graph of the same launches replayed. The op works in place; max_dec_len is
out of reach and no token is an end token, so every launch does the same work. Prints a table
and writes JSON. Target (later): greedy, bsz 1024, k 5 <= 10 us per launch.
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_cli import kernel_bench_parser, write_report  # noqa: E402
from kernel_harness import gpu_unavailable_reason, kernels_lib  # noqa: E402
from kernel_harness.speculate_verify import launch_args, raw_launcher, to_device  # noqa: E402

BATCH_SIZES = (1, 64, 256, 1024)
DRAFT_LENS = (1, 3, 5)
STRATEGY_VOCAB = {"greedy": 32000, "rejection": 32000}
TARGET_US = 10.0  # greedy, bsz 1024, k 5
NUM_CANDIDATES = 5


def make_case(cp, strategy: str, bsz: int, k: int, vocab: int, seed: int = 0) -> tuple[dict, dict]:
    """(host case for launch_args, device arrays). Probabilities are generated on the GPU."""
    rng = np.random.default_rng(seed)
    D, rows = k + 1, bsz * (k + 1)
    top1 = rng.integers(0, vocab, size=rows).astype(np.int64)
    draft_tokens = np.zeros((bsz, D), np.int64)
    agree = rng.random((bsz, k)) < 0.8
    noise = rng.integers(0, vocab, size=(bsz, k))
    draft_tokens[:, 1:] = np.where(agree, top1.reshape(bsz, D)[:, :k], noise)
    verify_tokens = rng.integers(0, vocab, size=(rows, NUM_CANDIDATES)).astype(np.int64)
    verify_tokens[:, 0] = top1
    case = dict(
        sampled_token_ids=top1.copy(),
        accept_tokens=np.zeros((bsz, D), np.int64),
        accept_num=np.zeros(bsz, np.int32),
        step_idx=np.zeros(bsz, np.int64),
        stop_flags=np.zeros(bsz, bool),
        seq_lens_encoder=np.zeros(bsz, np.int32),
        draft_tokens=draft_tokens,
        seq_lens_this_time=np.full(bsz, D, np.int32),
        verify_tokens=verify_tokens,
        verify_scores=np.tile(np.linspace(0.5, 0.1, NUM_CANDIDATES, dtype=np.float32), (rows, 1)),
        max_dec_len=np.full(bsz, 2**62, np.int64),
        end_tokens=np.array([-5], np.int64),
        is_block_step=np.zeros(bsz, bool),
        cu_seqlens_q_output=(np.arange(bsz + 1) * D).astype(np.int32),
        actual_candidate_len=np.full(rows, 2, np.int32),
        topp=np.full(bsz, 0.9, np.float32),
        target_probs=None,
        draft_probs=None,
        infer_seed=np.arange(bsz, dtype=np.int64),
        reasoning_status=None,
        verify_window=2,
        enable_topp=True,
        verify_strategy=strategy,
        accept_policy="normal",
    )
    dev = to_device(cp, case)
    if strategy == "rejection":
        gen = cp.random.default_rng(seed)
        logits = gen.standard_normal((rows, vocab), dtype=cp.float32) * 2
        logits[cp.arange(rows), cp.asarray(top1)] += 8  # a peaked target, so drafts often pass
        p = cp.exp(logits - logits.max(axis=1, keepdims=True))
        dev["target_probs"] = (p / p.sum(axis=1, keepdims=True)).astype(cp.float32)
        q = dev["target_probs"].reshape(bsz, D, vocab)[:, :k] * 0.7 + 0.3 / vocab
        dev["draft_probs"] = cp.ascontiguousarray(q, dtype=cp.float32)
        case["target_probs"] = np.empty((0, vocab), np.float32)  # launch_args reads V from its shape
    return case, dev


def time_stream(cp, fn, args, iters: int) -> float:
    """Microseconds per launch, back to back on the current stream."""
    for _ in range(10):
        fn(*args)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(iters):
        fn(*args)
    stop.record()
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1000.0 / iters


def time_graph(cp, case, dev, iters: int) -> float | None:
    """Microseconds per launch when `iters` launches are captured in one CUDA graph and replayed;
    None when this CuPy cannot capture."""
    fn = raw_launcher()
    stream = cp.cuda.Stream(non_blocking=True)
    try:
        with stream:
            args = launch_args(case, dev)  # the stream argument is the capturing stream
            stream.begin_capture()
            for _ in range(iters):
                fn(*args)
            graph = stream.end_capture()
            graph.launch(stream)
            stream.synchronize()
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
    except (AttributeError, RuntimeError, cp.cuda.runtime.CUDARuntimeError) as e:
        print(f"graph capture unavailable: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    return cp.cuda.get_elapsed_time(start, stop) * 1000.0 / iters


def main() -> int:
    parser = kernel_bench_parser(__doc__, "gpu_verify", iters=500, iters_help="launches per measurement")
    parser.add_argument("--no-graph", action="store_true", help="skip the CUDA-graph replay timing")
    opts = parser.parse_args()
    reason = gpu_unavailable_reason()
    if reason is not None:
        print(f"gpu_verify: cannot run: {reason}", file=sys.stderr)
        return 2
    import cupy as cp

    kernels_lib()  # build once before timing
    fn = raw_launcher()
    graph_ok = not opts.no_graph
    results = []
    print(f"{'strategy':<10} {'bsz':>5} {'k':>2} {'V':>6} {'us/launch':>10} {'us/launch graph':>16} {'mean accept':>12}")
    for strategy, vocab in STRATEGY_VOCAB.items():
        for bsz in BATCH_SIZES:
            for k in DRAFT_LENS:
                case, dev = make_case(cp, strategy, bsz, k, vocab)
                args = launch_args(case, dev)
                err = fn(*args)
                if err != 0:
                    raise RuntimeError(f"launch failed with cudaError {err} ({strategy}, bsz={bsz}, k={k})")
                cp.cuda.get_current_stream().synchronize()
                mean_accept = float(cp.asnumpy(dev["accept_num"]).mean())
                us = time_stream(cp, fn, args, opts.iters)
                us_graph = time_graph(cp, case, dev, opts.iters) if graph_ok else None
                graph_ok = graph_ok and us_graph is not None
                results.append(dict(strategy=strategy, bsz=bsz, k=k, vocab=vocab if strategy == "rejection" else None,
                                    us_per_launch=us, us_per_launch_graph=us_graph, mean_accept_num=mean_accept,
                                    iters=opts.iters))
                graph_txt = f"{us_graph:16.2f}" if us_graph is not None else f"{'-':>16}"
                v_txt = str(vocab) if strategy == "rejection" else "-"
                print(f"{strategy:<10} {bsz:>5} {k:>2} {v_txt:>6} {us:10.2f} {graph_txt} {mean_accept:12.2f}")
                del dev
    target = next(r for r in results if r["strategy"] == "greedy" and r["bsz"] == 1024 and r["k"] == 5)
    best = min(x for x in (target["us_per_launch"], target["us_per_launch_graph"]) if x is not None)
    verdict = "meets" if best <= TARGET_US else "misses"
    print(f"target: greedy bsz 1024 k 5 = {best:.2f} us per launch, {verdict} the {TARGET_US:.0f} us target")
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    report = dict(
        benchmark="gpu_verify",
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        device=props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
        cuda_runtime=cp.cuda.runtime.runtimeGetVersion(),
        target=dict(case="greedy bsz=1024 k=5", us=TARGET_US, best_us=best, met=best <= TARGET_US),
        results=results,
    )
    write_report(opts.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
