"""A/B and launch-path sweep of paged_attention bf16 on benchmarks/gpu_paged_attention_bf16.py's 32 shapes, on a GPU
machine (PyTorch; no harness build needed): LIBDIR/old.so (git HEAD) against LIBDIR/new.so (working tree), both
built by build_ab.sh with the SW_FORCE hook. Per shape: SDPA (best of gqa / expanded), old and new with the
launcher's own choice (timed old, new, old, new), torch.equal(old, new); with --sweep, new under each forced
(path, splits), each output checked bit-equal to new's own. Writes OUTDIR/ab.json, prints a table.
Usage: python3 ab.py LIBDIR OUTDIR [--sweep decode|all] [--shapes decode|all]"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_paged_attention_bf16 as B  # noqa: E402
from kernel_harness import SIGNATURES  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("libdir")
ap.add_argument("outdir")
ap.add_argument("--sweep", default="none", choices=["none", "decode", "all"])
ap.add_argument("--shapes", default="all", choices=["decode", "all"])
args = ap.parse_args()
out = Path(args.outdir)
out.mkdir(parents=True, exist_ok=True)
import torch  # noqa: E402

NAME = "specworker_paged_attention_bf16_launch"
fns = {}
for v in ("old", "new"):
    lib = ctypes.CDLL(str(Path(args.libdir) / f"{v}.so"))
    f = getattr(lib, NAME)
    f.argtypes = list(SIGNATURES[NAME])
    f.restype = ctypes.c_int
    fns[v] = f
_ws = lib.specworker_paged_attention_bf16_workspace_bytes
_ws.argtypes, _ws.restype = [ctypes.c_int] * 5, ctypes.c_int64
B.bf16_workspace_bytes = lambda *a: int(_ws(*a))
B.raw_launcher = lambda name: fns["new"]


def force(cfg):
    if cfg is None:
        os.environ.pop("SW_FORCE", None)
    else:
        os.environ["SW_FORCE"] = f"{cfg[0]}:{cfg[1]}"


def configs(ctx):
    nc = ctx // 128
    sp = [s for s in (1, 2, 3, 4, 6, 8, 12, 16) if s <= nc]
    return [(p, s) for p in (1, 2, 3) for s in sp]


rows = []
t_start = time.time()
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
                force(None)
                outs, t = {}, {"old": [], "new": []}
                for v in ("old", "new"):
                    step.fn = fns[v]
                    step.ours()
                    torch.cuda.synchronize()
                    outs[v] = step.out.clone()
                for v in ("old", "new", "old", "new"):
                    step.fn = fns[v]
                    t[v].append(B.graph_us(torch, step.ours))
                same = bool(torch.equal(outs["old"], outs["new"]))
                row = dict(model=model, ctx=ctx, batch=batch, tokens=tokens, sdpa=best, old=t["old"], new=t["new"],
                           same_bits=same, sweep={})
                if args.sweep == "all" or (args.sweep == "decode" and tokens == 1):
                    step.fn = fns["new"]
                    for cfg in configs(ctx):
                        force(cfg)
                        try:
                            step.out.fill_(float("nan"))
                            step.ours()
                            torch.cuda.synchronize()
                            eq = bool(torch.equal(step.out, outs["new"]))
                            row["sweep"][f"{cfg[0]}:{cfg[1]}"] = (B.graph_us(torch, step.ours, runs=3), eq)
                        except Exception as e:
                            row["sweep"][f"{cfg[0]}:{cfg[1]}"] = (None, str(e)[:60])
                    force(None)
                rows.append(row)
                o, nw = statistics.mean(t["old"]), statistics.mean(t["new"])
                line = (f"{model[:6]} c{ctx:4d} B{batch:3d} q{tokens} sdpa {best:7.2f} old {o:7.2f} ({best / o:.2f}) "
                        f"new {nw:7.2f} ({best / nw:.2f}) spread {max(t['old']) - min(t['old']):.2f}/"
                        f"{max(t['new']) - min(t['new']):.2f} same {same}")
                if row["sweep"]:
                    top = sorted((tt, k, e) for k, (tt, e) in row["sweep"].items() if tt)[:4]
                    bad = [k for k, (tt, e) in row["sweep"].items() if e is not True]
                    line += " | " + " ".join(f"{k}={tt:.2f}" for tt, k, e in top) + (f" NOTEQ {bad}" if bad else "")
                print(line, flush=True)
                del step
                torch.cuda.empty_cache()
(out / "ab.json").write_text(json.dumps(dict(device=torch.cuda.get_device_name(0), rows=rows), indent=1))
for key in ("old", "new"):
    dec = [r["sdpa"] / statistics.mean(r[key]) for r in rows if r["tokens"] == 1]
    ver = [r["sdpa"] / statistics.mean(r[key]) for r in rows if r["tokens"] == 4]
    print(f"{key}: decode >=0.7 {sum(x >= 0.7 for x in dec)}/{len(dec)} min {min(dec):.3f} geo "
          f"{statistics.geometric_mean(dec):.3f}" + (f" | verify min {min(ver):.2f} geo {statistics.geometric_mean(ver):.3f}" if ver else ""))
print("all same bits old/new:", all(r["same_bits"] for r in rows), "sweep all equal:",
      all(e is True for r in rows for (_, e) in r["sweep"].values()), f"{time.time() - t_start:.0f}s")
