"""A/B of batch_invariant_linear_bf16 builds (CuPy + ctypes, no harness build): LIBDIR/lin_old.so (git HEAD) and
LIBDIR/lin_new.so (working tree) at benchmarks/gpu_bf16_linear.py's shapes for M >= 256, with cuBLAS (the faster of
cublasGemmEx and torch.matmul) on the same buffers. Per (shape, M): old and new launcher timed REPS times
interleaved (median of 5 runs of back-to-back calls each), the new build's tile 16 (128 x 192) forced, and
torch.equal-style bit checks: new == old (launcher), tile 16 == old, and each row block of M equal to the same rows
of the largest M (batch invariance). Writes OUTDIR/lin_ab.json, prints a table.
Usage: python3 lin_ab.py LIBDIR OUTDIR [--reps 2] [--batch 256,512,1024,4096]"""
import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
from benchmarks.gpu_bf16_linear import OUT_BFLOAT16, SHAPES, cublas_gemm, random_bf16, torch_or_none  # noqa: E402
from benchmarks.timing import stream_ptr, time_median_us  # noqa: E402
from kernel_harness import ptr, require_gpu_or_exit  # noqa: E402

NAME = "specworker_batch_invariant_linear_bf16_tile_launch"
ap = argparse.ArgumentParser()
ap.add_argument("libdir")
ap.add_argument("outdir")
ap.add_argument("--reps", type=int, default=2)
ap.add_argument("--batch", default="256,512,1024,4096")
args = ap.parse_args()
cp = require_gpu_or_exit()
fns = {}
for v in ("old", "new"):
    f = getattr(ctypes.CDLL(str(Path(args.libdir) / f"lin_{v}.so")), NAME)
    f.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 6 + [ctypes.c_void_p]
    f.restype = ctypes.c_int
    fns[v] = f
gemm, torch = cublas_gemm(cp), torch_or_none()
batch = [int(m) for m in args.batch.split(",")]
rows, max_m = [], max(batch)
print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), flush=True)
print(f"{'shape':32s} {'M':>5s} {'cuBLAS':>8s} {'old':>8s} {'new':>8s} {'t16':>8s} {'old sp':>6s} {'new sp':>6s} "
      f"{'new/old':>7s} bits", flush=True)
for name, (K, N) in SHAPES.items():
    x_all, w = random_bf16(cp, (max_m, K), K + N, 1.0), random_bf16(cp, (K, N), K + N + 1, K ** -0.5)
    full = {}
    for M in sorted(batch, reverse=True):
        if "lm_head" in name and M not in (512,):
            continue
        x = x_all[:M]
        outs = {k: cp.full((M, N), 0xFFFF, dtype=cp.uint16) for k in ("old", "new", "t16")}
        ref = cp.empty((M, N), dtype=cp.uint16)

        def call(v, tile, out, mode=-1):
            return fns[v](ptr(x), ptr(w), None, ptr(out), M, K, N, OUT_BFLOAT16, tile, mode, stream_ptr(cp))

        runs = {"old": lambda: call("old", -1, outs["old"]), "new": lambda: call("new", -1, outs["new"]),
                "t16": lambda: call("new", 16, outs["t16"], 0)}
        rcs = {k: f() for k, f in runs.items()}
        if rcs["t16"] != 0:  # no split: mode -1
            runs["t16"] = lambda: call("new", 16, outs["t16"], -1)
            rcs["t16"] = runs["t16"]()
        assert rcs["old"] == 0 and rcs["new"] == 0, rcs
        cp.cuda.get_current_stream().synchronize()
        same = {"new==old": bool((outs["new"] == outs["old"]).all()),
                "t16==old": rcs["t16"] == 0 and bool((outs["t16"] == outs["old"]).all())}
        if M == max_m or not full:
            full = {"out": outs["old"], "M": M}
        same["rows==maxM"] = bool((outs["new"] == full["out"][:M]).all())
        calls = max(1, min(200, int(2e10 / (2 * M * K * N + 1))))
        t = {k: [] for k in runs}
        for _ in range(args.reps):
            for k, f in runs.items():
                if rcs[k] == 0:
                    t[k].append(time_median_us(cp, f, 5, calls))
        cub = time_median_us(cp, lambda: gemm(x, w, ref, M, K, N), 5, calls)
        if torch is not None:
            tx, tw = (torch.empty(a.shape, dtype=torch.bfloat16, device="cuda") for a in (x, w))
            cp.asarray(tx.view(torch.int16))[...] = x.view(cp.int16)
            cp.asarray(tw.view(torch.int16))[...] = w.view(cp.int16)
            tout = torch.empty((M, N), dtype=torch.bfloat16, device="cuda")
            cub = min(cub, time_median_us(cp, lambda: torch.matmul(tx, tw, out=tout), 5, calls))
        med = {k: statistics.mean(v) if v else float("nan") for k, v in t.items()}
        row = {"shape": name, "M": M, "K": K, "N": N, "cublas_us": cub, **{f"{k}_us": med[k] for k in med},
               "samples": t, **same}
        rows.append(row)
        print(f"{name:32s} {M:5d} {cub:8.2f} {med['old']:8.2f} {med['new']:8.2f} {med['t16']:8.2f} "
              f"{cub / med['old']:6.3f} {cub / med['new']:6.3f} {med['new'] / med['old']:7.3f} "
              f"{'yes' if all(same.values()) else same}", flush=True)
out = Path(args.outdir)
out.mkdir(parents=True, exist_ok=True)
(out / "lin_ab.json").write_text(json.dumps(rows, indent=1))
print("all bits same:", all(r["new==old"] and r["t16==old"] and r["rows==maxM"] for r in rows))
