"""A/B of paged_attention bf16 builds on benchmarks/gpu_paged_attention_bf16.py's shapes (PyTorch; no harness build):
LIBDIR/<variant>.so for each variant (the first is the reference). Per shape: SDPA (best of gqa / expanded), each
variant timed REPS times interleaved, torch.equal of every variant's output and caches with the first's (the step
run once from the same starting caches). Writes OUTDIR/ab.json, prints a table.
Usage: python3 ab.py LIBDIR OUTDIR [--variants old,new] [--shapes decode|all] [--reps 2]"""
import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from kernel_harness.launchers import SIGNATURES  # noqa: E402

import kernel_harness  # noqa: E402

NAME = "specworker_paged_attention_bf16_launch"
ap = argparse.ArgumentParser()
ap.add_argument("libdir")
ap.add_argument("outdir")
ap.add_argument("--variants", default="old,new")
ap.add_argument("--shapes", default="all", choices=["decode", "all"])
ap.add_argument("--reps", type=int, default=2)
args = ap.parse_args()
VARIANTS = tuple(args.variants.split(","))
fns = {}
for v in VARIANTS:
    lib = ctypes.CDLL(str(Path(args.libdir) / f"{v}.so"))
    f = getattr(lib, NAME)
    f.argtypes = list(SIGNATURES[NAME])
    f.restype = ctypes.c_int
    fns[v] = f
_ws = lib.specworker_paged_attention_bf16_workspace_bytes
_ws.argtypes, _ws.restype = [ctypes.c_int] * 5, ctypes.c_int64
kernel_harness.raw_launcher = lambda name: fns[VARIANTS[0]]  # before the benchmark module imports it
import kernel_harness.paged_attention as kpa  # noqa: E402

kpa.bf16_workspace_bytes = lambda *a: int(_ws(*a))
import gpu_paged_attention_bf16 as B  # noqa: E402

B.bf16_workspace_bytes = lambda *a: int(_ws(*a))
B.raw_launcher = lambda name: fns[VARIANTS[0]]
import torch  # noqa: E402

out = Path(args.outdir)
out.mkdir(parents=True, exist_ok=True)
rows = []
t_start = time.time()
ref = VARIANTS[0]
for model in B.MODELS:
    for ctx in B.CONTEXT:
        for batch in B.BATCH:
            for tokens in (1, 4):
                if args.shapes == "decode" and tokens != 1:
                    continue
                heads, kvh, hd = B.MODELS[model]
                step = B.PagedStep(torch, heads, kvh, hd, batch, ctx, tokens, seed=batch * 7 + ctx + tokens)
                sd = {}
                for n, fn in B.sdpa_variants(torch, step).items():
                    try:
                        sd[n] = B.graph_us(torch, fn)
                    except Exception:
                        pass
                best = min(sd.values())
                kc0, vc0 = step.key_cache.clone(), step.value_cache.clone()
                outs, t = {}, {v: [] for v in VARIANTS}
                for v in VARIANTS:
                    step.fn = fns[v]
                    step.key_cache.copy_(kc0)
                    step.value_cache.copy_(vc0)
                    step.out.fill_(float("nan"))
                    step.workspace.fill_(float("nan"))
                    step.ours()
                    torch.cuda.synchronize()
                    outs[v] = (step.out.clone(), step.key_cache.clone(), step.value_cache.clone())
                for _ in range(args.reps):
                    for v in VARIANTS:
                        step.fn = fns[v]
                        t[v].append(B.graph_us(torch, step.ours))
                same = {v: all(bool(torch.equal(x, y)) for x, y in zip(outs[ref], outs[v])) for v in VARIANTS[1:]}
                row = dict(model=model, ctx=ctx, batch=batch, tokens=tokens, sdpa=best, same_bits_as_ref=same,
                           **{v: t[v] for v in VARIANTS})
                rows.append(row)
                m = {v: statistics.mean(t[v]) for v in VARIANTS}
                print(f"{model[:6]} c{ctx:4d} B{batch:3d} q{tokens} sdpa {best:7.2f} | "
                      + " ".join(f"{v} {m[v]:7.2f} ({best / m[v]:.2f})" for v in VARIANTS)
                      + " | " + " ".join(f"{v}/{ref} {m[v] / m[ref]:.3f}" for v in VARIANTS[1:])
                      + f" same {all(same.values())}", flush=True)
                del step
                torch.cuda.empty_cache()
(out / "ab.json").write_text(json.dumps(dict(device=torch.cuda.get_device_name(0), rows=rows), indent=1))
for key in VARIANTS:
    dec = [r["sdpa"] / statistics.mean(r[key]) for r in rows if r["tokens"] == 1]
    ver = [r["sdpa"] / statistics.mean(r[key]) for r in rows if r["tokens"] == 4]
    print(f"{key}: decode >=0.7 {sum(x >= 0.7 for x in dec)}/{len(dec)} min {min(dec):.3f} geo "
          f"{statistics.geometric_mean(dec):.3f}" + (f" | verify min {min(ver):.2f} geo {statistics.geometric_mean(ver):.3f}" if ver else ""))
print("all same bits as", ref, ":", all(all(r["same_bits_as_ref"].values()) for r in rows), f"{time.time() - t_start:.0f}s",
      torch.cuda.get_device_name(0))
