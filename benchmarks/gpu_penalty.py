"""GPU benchmark of speculate_get_token_penalty_multi_scores: our CUDA kernel vs a PyTorch composite
of the same math vs a device-to-device copy of the logits (the bandwidth ceiling).

    python benchmarks/gpu_penalty.py                       # V=151936, 256 slots x 4 rows, fp32 + bf16
    python benchmarks/gpu_penalty.py --out /tmp/p.json --iters 100 --runs 7

Needs a CUDA GPU, nvcc, CuPy (the kernels are built by kernel_harness) and PyTorch; no
Paddle. Every configuration first checks that our output equals the PyTorch composite (float32:
bit-exact expected, 1e-6 relative accepted; bfloat16: within 1.6e-2, since our kernel rounds
between phases) and, for a few rows, the numpy reference; a mismatch exits with status 1
before anything is timed. Times are CUDA-event means over --iters launches after --warmup
launches, median over --runs runs; the logits are restored between runs (the op is in place).
The bandwidth fraction is (2 * logits bytes / our time) / (2 * logits bytes / copy time), i.e.
copy time / our time, with the copy measured in the same run on the same buffers.
Targets (printed, recorded in the JSON, not an exit status): >= 60% of copy bandwidth and
>= 2x the PyTorch composite at the main configuration.
"""

from __future__ import annotations

import ctypes
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.bench_cli import (  # noqa: E402
    add_repeat_options, check_comma_list, import_torch_baseline, kernel_bench_parser, print_table, write_report,
)
from benchmarks.timing import torch_event_runs  # noqa: E402

LAUNCHER = "specworker_speculate_get_token_penalty_multi_scores_launch"
DTYPE_CODE = {"float32": 0, "float16": 1, "bfloat16": 2}
MASK = -1e10
TARGET_BANDWIDTH_FRACTION = 0.60
TARGET_SPEEDUP_VS_TORCH = 2.0

# name -> overrides of the main configuration
CONFIGS = {
    "main": {},
    "no_drafts": {"drafts": False},  # FastDeploy mode: every row of a slot shares the history
    "unit_temperature": {"temperature": (1.0, 1.0)},  # greedy rows: no dense pass
    "long_history_zipf": {"hist_len": 4096},  # realistic repetition: fewer distinct ids than the hash admits
    "long_history_uniform": {"hist_len": 4096, "zipf": False},  # > 3072 distinct ids: range fallback
}


def parse_args(argv=None):
    p = kernel_bench_parser(__doc__, "gpu_penalty", iters=50)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--slots", type=int, default=256)
    p.add_argument("--rows-per-slot", type=int, default=4, help="O_b of every slot (k + 1 when all decode)")
    p.add_argument("--hist-len", type=int, default=256, help="mean history length (cur_len) per slot")
    p.add_argument("--max-model-len", type=int, default=8192, help="pre_ids width S")
    p.add_argument("--bad-words", type=int, default=4)
    p.add_argument("--eos", type=int, default=2)
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma list of float32, bfloat16")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma list of {', '.join(CONFIGS)}")
    p.add_argument("--ref-rows", type=int, default=8, help="rows also checked against the numpy reference (0: off)")
    add_repeat_options(p)
    args = p.parse_args(argv)
    for d in args.dtypes.split(","):
        if d not in ("float32", "bfloat16"):
            p.error(f"--dtypes: {d!r} is not supported here (float32, bfloat16; float16 would overflow "
                    "over repeated in-place launches)")
    check_comma_list(p, "--configs", args.configs, CONFIGS)
    return args


# ----------------------------------------------------------------------------- inputs


def make_inputs(torch, cfg: dict, seed: int) -> dict:
    """One all-decode step: N slots x O rows, histories of ~hist_len ids, drafts, masks."""
    dev = cfg.get("device", "cuda")
    g = torch.Generator(device=dev).manual_seed(seed)
    N, O, V, S = cfg["slots"], cfg["rows_per_slot"], cfg["vocab"], cfg["max_model_len"]
    D = O  # draft_tokens [N, k + 1]
    H = cfg["hist_len"]

    def rand(*shape):
        return torch.rand(*shape, generator=g, device=dev)

    def ids(*shape):
        if cfg["zipf"]:  # heavy-tailed: repeats like text
            return (V * rand(*shape) ** 4).long().clamp_(0, V - 1)
        return torch.randint(0, V, shape, generator=g, device=dev)

    cur_len = (H * (0.5 + rand(N))).long().clamp_(0, S - D - 1)
    pre_ids = torch.full((N, S), -1, dtype=torch.long, device=dev)
    hist = ids(N, S - 1)
    pos = torch.arange(1, S, device=dev)
    pre_ids[:, 1:] = torch.where(pos[None, :] <= cur_len[:, None], hist, -1)
    drafts = ids(N, D)
    lo, hi = cfg["temperature"]
    out_lens = torch.full((N,), O, dtype=torch.int32, device=dev)
    cu = torch.zeros(N + 1, dtype=torch.int32, device=dev)
    cu[1:] = torch.cumsum(out_lens, 0)
    rows = N * O
    batch_ids = torch.repeat_interleave(torch.arange(N, device=dev, dtype=torch.int32), O)
    return {
        "pre_ids": pre_ids,
        "logits": (torch.randn(rows, V, generator=g, device=dev) * 4).to(getattr(torch, cfg["dtype"])),
        "penalty_scores": 1.0 + 0.5 * rand(N),
        "frequency_scores": 0.5 * rand(N),
        "presence_scores": 0.5 * rand(N),
        "temperatures": lo + (hi - lo) * rand(N),
        "bad_tokens": torch.randint(0, V, (N, cfg["bad_words"]), generator=g, device=dev),
        "bad_tokens_len": torch.full((N,), cfg["bad_words"], dtype=torch.long, device=dev),
        "cur_len": cur_len,
        "min_len": cur_len + torch.randint(-2, O + 2, (N,), generator=g, device=dev),
        "eos_token_id": torch.randint(0, V, (cfg["eos"],), generator=g, device=dev),
        "seq_lens_this_time": out_lens.clone(),
        "batch_id_per_token_output": batch_ids,
        "cu_seqlens_q_output": cu,
        "draft_tokens": drafts if cfg["drafts"] else None,
    }


# ----------------------------------------------------------------------------- our kernel


def our_launcher(torch, inputs: dict):
    """A no-argument closure launching our kernel on the inputs (in place on inputs['logits'])."""
    from kernel_harness import raw_launcher  # builds every kernel with nvcc (needs CuPy for the arch)

    fn = raw_launcher(LAUNCHER)
    P = ctypes.c_void_p
    x = inputs
    logits = x["logits"]
    drafts = x["draft_tokens"]
    names = ["penalty_scores", "frequency_scores", "presence_scores", "temperatures", "bad_tokens",
             "bad_tokens_len", "cur_len", "min_len", "eos_token_id", "batch_id_per_token_output",
             "cu_seqlens_q_output"]
    for n in names + ["pre_ids"]:
        assert x[n].is_contiguous(), f"{n} must be contiguous"
    dtype = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[logits.dtype]

    def launch():
        err = fn(P(x["pre_ids"].data_ptr()), P(logits.data_ptr()), DTYPE_CODE[dtype],
                 *[P(x[n].data_ptr()) for n in names], P(0 if drafts is None else drafts.data_ptr()),
                 logits.shape[0], logits.shape[1], x["seq_lens_this_time"].shape[0], x["pre_ids"].shape[1],
                 x["bad_tokens"].shape[1], x["eos_token_id"].shape[0], 0 if drafts is None else drafts.shape[1],
                 P(torch.cuda.current_stream().cuda_stream))
        if err != 0:
            raise RuntimeError(f"{LAUNCHER} returned cudaError {err}")

    return launch


# ----------------------------------------------------------------------------- PyTorch composite


def _mask_sparse_(torch, logits, ids, ok):
    """logits[r, ids[r, k]] = MASK where ok[r, k]; duplicates of an id all write the same value."""
    same = ids[:, :, None] == ids[:, None, :]
    hit = (same & ok[:, None, :]).any(-1)
    mask = torch.tensor(MASK, dtype=logits.dtype, device=logits.device)
    logits.scatter_(1, ids, torch.where(hit, mask, logits.gather(1, ids)))


def torch_composite(torch, x: dict):
    """The same math as the op with stock PyTorch ops (vLLM-style: a dense [rows, V + 1] count
    matrix from scatter_add_, penalties with torch.where), in place on x['logits']. float32 math;
    16-bit logits are converted once on the way in and out. No host sync, no data-dependent shapes."""
    logits = x["logits"]
    work = logits if logits.dtype == torch.float32 else logits.float()
    R, V = work.shape
    dev = work.device
    b = x["batch_id_per_token_output"][:R].long()
    valid = b >= 0
    bs = b.clamp(min=0)
    i = torch.arange(R, device=dev) - x["cu_seqlens_q_output"].long()[bs]
    step = x["cur_len"][bs]
    counting = valid & (step >= 0)

    # 1. min length: eos -> MASK
    eos = x["eos_token_id"].reshape(1, -1).expand(R, -1)
    eos_ok = (counting & (step + i < x["min_len"][bs]))[:, None] & (eos >= 0) & (eos < V)
    _mask_sparse_(torch, work, eos.clamp(0, V - 1).contiguous(), eos_ok)

    # 2. dense repeat counts; invalid ids go to the spare column V
    S = x["pre_ids"].shape[1]
    hist = x["pre_ids"][bs][:, 1:]  # [R, S - 1]: positions 1 .. S - 1
    in_window = torch.arange(1, S, device=dev)[None, :] <= step[:, None]
    drafts = x["draft_tokens"]
    if drafts is not None:
        D = drafts.shape[1]
        hist = torch.cat([hist, drafts[bs][:, 1:]], 1)
        in_window = torch.cat([in_window, torch.arange(1, D, device=dev)[None, :] <= i[:, None]], 1)
    ok = in_window & counting[:, None] & (hist >= 0) & (hist < V)
    idx = hist.masked_fill(~ok, V)
    counts = torch.zeros(R, V + 1, dtype=torch.int32, device=dev)
    counts.scatter_add_(1, idx, torch.ones_like(idx, dtype=torch.int32))
    counts = counts[:, :V]

    # 3. penalties where counted, then temperature over the row
    alpha = x["penalty_scores"][bs][:, None]
    pen = torch.where(work < 0, work * alpha, work / alpha)
    pen = pen - counts.to(torch.float32) * x["frequency_scores"][bs][:, None]
    pen = pen - x["presence_scores"][bs][:, None]
    temp = x["temperatures"][bs]
    temp = torch.where(valid & (temp > 0), temp, torch.ones_like(temp))
    torch.div(torch.where(counts > 0, pen, work), temp[:, None], out=work)

    # 4. bad words
    bad = x["bad_tokens"][bs]
    W = bad.shape[1]
    nbad = x["bad_tokens_len"][bs].clamp(max=W)
    bad_ok = valid[:, None] & (torch.arange(W, device=dev)[None, :] < nbad[:, None]) & (bad >= 0) & (bad < V)
    _mask_sparse_(torch, work, bad.clamp(0, V - 1).contiguous(), bad_ok)
    if work is not logits:
        logits.copy_(work)


# ----------------------------------------------------------------------------- checks and timing


def check_outputs(torch, cfg: dict, ours, theirs, inputs_before: dict, ref_rows: int) -> dict:
    """Ours vs the composite (and the numpy reference on a few rows); returns the comparison."""
    a, t = ours.float(), theirs.float()
    finite = torch.isfinite(a) & torch.isfinite(t)
    diff = (a - t).abs()
    rel = diff / t.abs().clamp(min=1e-30)
    result = {
        "bit_exact": bool(torch.equal(ours, theirs)),
        "max_abs_diff": float(diff[finite].max()) if finite.any() else 0.0,
        "max_rel_diff": float(rel[finite].max()) if finite.any() else 0.0,
        "nonfinite_mismatch": int((torch.isfinite(a) != torch.isfinite(t)).sum()),
    }
    tol = dict(rtol=1e-6, atol=0.0) if cfg["dtype"] == "float32" else dict(rtol=1.6e-2, atol=1.6e-2)
    result["tolerance"] = tol
    result["ok"] = bool(torch.allclose(a, t, **tol)) and result["nonfinite_mismatch"] == 0
    if ref_rows > 0:
        from reference.speculate_get_token_penalty_multi_scores import (
            ref_speculate_get_token_penalty_multi_scores,
        )

        R = ours.shape[0]
        rows = np.unique(np.linspace(0, R - 1, ref_rows).astype(np.int64))
        host = {k: (None if v is None else v.cpu().numpy()) for k, v in inputs_before.items() if k != "logits"}
        keep = inputs_before["logits"][rows].float().cpu().numpy()
        logits = np.zeros((R, keep.shape[1]), np.float32)
        logits[rows] = keep
        batch_ids = np.full_like(host["batch_id_per_token_output"], -1)
        batch_ids[rows] = host["batch_id_per_token_output"][rows]
        expected = ref_speculate_get_token_penalty_multi_scores(
            host["pre_ids"], logits, host["penalty_scores"], host["frequency_scores"], host["presence_scores"],
            host["temperatures"], host["bad_tokens"], host["bad_tokens_len"], host["cur_len"], host["min_len"],
            host["eos_token_id"], host["seq_lens_this_time"], batch_ids, host["cu_seqlens_q_output"], 0,
            host["draft_tokens"], nonpositive_temperature="one")[rows]
        got = a[torch.as_tensor(rows, device=a.device)].cpu().numpy()
        ref_ok = bool(np.allclose(got, expected, **tol))
        result["reference_rows"] = int(rows.size)
        result["reference_ok"] = ref_ok
        result["ok"] = result["ok"] and ref_ok
    return result


def time_fn(torch, fn, reset, iters: int, warmup: int, runs: int) -> dict:
    """Mean ms per launch over `iters` launches (CUDA events), median and min over `runs`."""
    per_run = [us / 1e3 for us in torch_event_runs(torch, fn, iters, warmup, runs, reset=reset)]
    return {"median_ms": statistics.median(per_run), "min_ms": min(per_run), "runs_ms": per_run}


def bench_config(torch, name: str, cfg: dict, args) -> dict:
    x = make_inputs(torch, cfg, args.seed)
    pristine = x["logits"].clone()
    snapshot = {k: (None if v is None else v.clone()) for k, v in x.items()}

    def reset():
        x["logits"].copy_(pristine)

    ours = our_launcher(torch, x)
    ours()
    ours_out = x["logits"].clone()
    reset()
    torch_composite(torch, x)
    torch_out = x["logits"].clone()
    check = check_outputs(torch, cfg, ours_out, torch_out, snapshot, args.ref_rows)
    del ours_out, torch_out
    if not check["ok"]:
        raise SystemExit(f"[{name}/{cfg['dtype']}] our kernel differs from the PyTorch composite or the "
                         f"reference: {json.dumps(check)}")

    copy_dst = torch.empty_like(pristine)
    t_copy = time_fn(torch, lambda: copy_dst.copy_(pristine), lambda: None, args.iters, args.warmup, args.runs)
    t_ours = time_fn(torch, ours, reset, args.iters, args.warmup, args.runs)
    t_torch = time_fn(torch, lambda: torch_composite(torch, x), reset, max(args.iters // 5, 3), 2, args.runs)
    del copy_dst
    nbytes = pristine.numel() * pristine.element_size()
    R, V = pristine.shape
    hist = x["cur_len"].float()
    res = {
        "config": name,
        "dtype": cfg["dtype"],
        "rows": R,
        "vocab": V,
        "slots": cfg["slots"],
        "rows_per_slot": cfg["rows_per_slot"],
        "drafts": cfg["drafts"],
        "hist_len_mean": float(hist.mean()),
        "hist_len_max": int(x["cur_len"].max()),
        "distinct_hist_ids_max": max_distinct(torch, x),
        "max_model_len": cfg["max_model_len"],
        "temperature_range": list(cfg["temperature"]),
        "logits_bytes": nbytes,
        "ours": t_ours,
        "torch_composite": t_torch,
        "copy": t_copy,
        "ours_gbps": 2 * nbytes / (t_ours["median_ms"] * 1e-3) / 1e9,
        "copy_gbps": 2 * nbytes / (t_copy["median_ms"] * 1e-3) / 1e9,
        "bandwidth_fraction": t_copy["median_ms"] / t_ours["median_ms"],
        "speedup_vs_torch": t_torch["median_ms"] / t_ours["median_ms"],
        "check": check,
    }
    del x, pristine, snapshot
    torch.cuda.empty_cache()
    return res


def max_distinct(torch, x: dict) -> int:
    """The most distinct in-range history ids of any slot (hash admits 3072)."""
    pre = x["pre_ids"][:, 1:]
    pos = torch.arange(1, x["pre_ids"].shape[1], device=pre.device)
    V = x["logits"].shape[1]
    ok = (pos[None, :] <= x["cur_len"][:, None]) & (pre >= 0) & (pre < V)
    keys = torch.where(ok, pre, -1).sort(1).values
    new = torch.ones_like(keys, dtype=torch.bool)
    new[:, 1:] = keys[:, 1:] != keys[:, :-1]
    return int((new & (keys >= 0)).sum(1).max())


def main(argv=None) -> int:
    args = parse_args(argv)
    torch = import_torch_baseline("gpu_penalty")
    if torch is None:
        return 2
    base = {"vocab": args.vocab, "slots": args.slots, "rows_per_slot": args.rows_per_slot, "hist_len": args.hist_len,
            "max_model_len": args.max_model_len, "bad_words": args.bad_words, "eos": args.eos, "drafts": True,
            "temperature": (0.6, 1.2), "zipf": True}
    results = []
    t0 = time.time()
    for dtype in args.dtypes.split(","):
        for name in args.configs.split(","):
            cfg = {**base, **CONFIGS[name], "dtype": dtype}
            if cfg["hist_len"] * 1.5 + cfg["rows_per_slot"] + 1 >= cfg["max_model_len"]:
                cfg["max_model_len"] = int(cfg["hist_len"] * 1.5) + cfg["rows_per_slot"] + 2
            results.append(bench_config(torch, name, cfg, args))
            r = results[-1]
            print(f"  done {name:22s} {dtype:9s} ours {r['ours']['median_ms']:.3f} ms", flush=True)

    header = (f"{'config':22s} {'dtype':9s} {'rows':>5s} {'hist':>6s} {'ours ms':>8s} {'torch ms':>9s} "
              f"{'copy ms':>8s} {'GB/s':>7s} {'of copy':>8s} {'vs torch':>9s} {'exact':>6s}")
    print_table(header, [
        f"{r['config']:22s} {r['dtype']:9s} {r['rows']:5d} {r['hist_len_mean']:6.0f} "
        f"{r['ours']['median_ms']:8.3f} {r['torch_composite']['median_ms']:9.3f} {r['copy']['median_ms']:8.3f} "
        f"{r['ours_gbps']:7.0f} {100 * r['bandwidth_fraction']:7.1f}% {r['speedup_vs_torch']:8.2f}x "
        f"{'yes' if r['check']['bit_exact'] else 'no':>6s}" for r in results])
    main_rows = [r for r in results if r["config"] == "main" and r["dtype"] == "float32"]
    targets = {}
    if main_rows:
        m = main_rows[0]
        targets = {
            "bandwidth_fraction": {"target": TARGET_BANDWIDTH_FRACTION, "value": m["bandwidth_fraction"],
                                   "met": m["bandwidth_fraction"] >= TARGET_BANDWIDTH_FRACTION},
            "speedup_vs_torch": {"target": TARGET_SPEEDUP_VS_TORCH, "value": m["speedup_vs_torch"],
                                 "met": m["speedup_vs_torch"] >= TARGET_SPEEDUP_VS_TORCH},
        }
        print(f"\nmain float32: {100 * m['bandwidth_fraction']:.1f}% of copy bandwidth (target "
              f">= {100 * TARGET_BANDWIDTH_FRACTION:.0f}%: {'met' if targets['bandwidth_fraction']['met'] else 'MISSED'}), "
              f"{m['speedup_vs_torch']:.2f}x the PyTorch composite (target >= {TARGET_SPEEDUP_VS_TORCH:.0f}x: "
              f"{'met' if targets['speedup_vs_torch']['met'] else 'MISSED'})")
    report = {
        "benchmark": "speculate_get_token_penalty_multi_scores",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cupy": _cupy_version(),
        "python": platform.python_version(),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "wall_s": time.time() - t0,
        "targets": targets,
        "results": results,
    }
    write_report(args.out, report)
    return 0


def _cupy_version():
    try:
        import cupy

        return cupy.__version__
    except ImportError:
        return None


if __name__ == "__main__":
    sys.exit(main())
