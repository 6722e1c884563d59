"""Same bits, old against new builds, beyond the benchmark's shapes: LIBDIR/{REF,NEW}.so on PagedStep cases of
several head layouts and head dims (1, 33 and 80: no 16-byte copies / part-warp combine blocks; 256: two columns a
thread), histories of 1 .. 33 chunks, decode and verify rows, on the default stream (three launches) and on a
stream of its own (sm_90: fused / two / three launches by grid size). Compares out and both caches (torch.equal,
NaN-poisoned out and workspace before each run). Usage: python3 bits.py LIBDIR [REF NEW]"""
import ctypes
import itertools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from kernel_harness.launchers import SIGNATURES  # noqa: E402

import kernel_harness  # noqa: E402

NAME = "specworker_paged_attention_bf16_launch"
libdir = Path(sys.argv[1])
ref_name, new_name = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else ("old", "new")
fns = {}
for v in (ref_name, new_name):
    lib = ctypes.CDLL(str(libdir / f"{v}.so"))
    f = getattr(lib, NAME)
    f.argtypes, f.restype = list(SIGNATURES[NAME]), ctypes.c_int
    fns[v] = f
ws = lib.specworker_paged_attention_bf16_workspace_bytes
ws.argtypes, ws.restype = [ctypes.c_int] * 5, ctypes.c_int64
kernel_harness.raw_launcher = lambda name: fns[ref_name]
import kernel_harness.paged_attention as kpa  # noqa: E402

kpa.bf16_workspace_bytes = lambda *a: int(ws(*a))
import gpu_paged_attention_bf16 as B  # noqa: E402
import torch  # noqa: E402

B.bf16_workspace_bytes = lambda *a: int(ws(*a))
B.raw_launcher = lambda name: fns[ref_name]

LAYOUTS = [(9, 3, 64), (32, 8, 128), (4, 1, 256), (8, 2, 80), (6, 2, 33), (4, 4, 1), (32, 1, 64), (12, 2, 128)]
n = bad = 0
for (heads, kvh, hd), ctx, batch, tokens in itertools.product(LAYOUTS, [128, 640, 2048, 2176, 4224], [1, 5], [1, 4]):
    step = B.PagedStep(torch, heads, kvh, hd, batch, ctx, tokens, seed=n)
    kc0, vc0 = step.key_cache.clone(), step.value_cache.clone()
    for own_stream in (False, True):
        outs = {}
        for v in (ref_name, new_name):
            step.fn = fns[v]
            step.key_cache.copy_(kc0)
            step.value_cache.copy_(vc0)
            step.out.fill_(float("nan"))
            step.workspace.fill_(float("nan"))
            torch.cuda.synchronize()
            s = torch.cuda.Stream() if own_stream else torch.cuda.default_stream()
            with torch.cuda.stream(s):
                step.ours()
            torch.cuda.synchronize()
            outs[v] = (step.out.clone(), step.key_cache.clone(), step.value_cache.clone())
        same = all(torch.equal(x, y) for x, y in zip(outs[ref_name], outs[new_name]))
        finite = bool(torch.isfinite(outs[new_name][0].float()).all())
        n += 1
        if not (same and finite):
            bad += 1
            print(f"DIFF heads {heads}/{kvh} hd {hd} ctx {ctx} B {batch} q {tokens} own_stream {own_stream}: "
                  f"same {same} finite {finite}", flush=True)
    del step
    torch.cuda.empty_cache()
print(f"bits {ref_name} vs {new_name}: {n - bad} of {n} runs identical (out, key_cache, value_cache), "
      f"{torch.cuda.get_device_name(0)}")
