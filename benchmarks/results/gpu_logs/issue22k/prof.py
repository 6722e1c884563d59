"""One shape's launches for ncu: LIBDIR/VARIANT.so, the launcher called 4 times on a stream of its own (as the
benchmark's graphs run it). Usage: python3 prof.py LIBDIR VARIANT MODEL BATCH CTX"""
import ctypes
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from kernel_harness.launchers import SIGNATURES  # noqa: E402

import kernel_harness  # noqa: E402

NAME = "specworker_paged_attention_bf16_launch"
libdir, variant, model, batch, ctx = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
lib = ctypes.CDLL(str(Path(libdir) / f"{variant}.so"))
f = getattr(lib, NAME)
f.argtypes, f.restype = list(SIGNATURES[NAME]), ctypes.c_int
ws = lib.specworker_paged_attention_bf16_workspace_bytes
ws.argtypes, ws.restype = [ctypes.c_int] * 5, ctypes.c_int64
kernel_harness.raw_launcher = lambda name: f
import kernel_harness.paged_attention as kpa  # noqa: E402

kpa.bf16_workspace_bytes = lambda *a: int(ws(*a))
import gpu_paged_attention_bf16 as B  # noqa: E402
import torch  # noqa: E402

B.bf16_workspace_bytes = lambda *a: int(ws(*a))
B.raw_launcher = lambda name: f
heads, kvh, hd = B.MODELS[model]
step = B.PagedStep(torch, heads, kvh, hd, batch, ctx, 1, seed=1)
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    for _ in range(4):
        step.ours()
torch.cuda.synchronize()
print(variant, model, batch, ctx, "ok", flush=True)
